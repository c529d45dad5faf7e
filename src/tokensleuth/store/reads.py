"""A Store's queries: studies, arms, trials, results, samples, windows, timelines and warnings,
read back."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.core.records import UNFINISHED, ArmRow, StudyRow
from tokensleuth.store.database import Database


def _study(r: sqlite3.Row) -> StudyRow:
    return StudyRow(**{f: r[f] for f in StudyRow.__slots__ if f in r.keys()})


class Reads:
    """A Store's queries, on the connection of its open file."""

    def __init__(self, database: Database) -> None:
        self.db = database.db
        self.path = database.path

    # -- studies ---------------------------------------------------------------

    def find_resumable(self, kind: str, spec_hash: str) -> str | None:
        """The latest unfinished (running or interrupted) study of this spec."""
        row = self.db.execute(
            "SELECT id FROM studies WHERE kind=? AND spec_hash=? AND status IN (?, ?)"
            " ORDER BY created_at DESC, rowid DESC LIMIT 1",
            (kind, spec_hash, *UNFINISHED),
        ).fetchone()
        return None if row is None else str(row["id"])

    def find_study(self, kind: str, spec_hash: str) -> str | None:
        row = self.db.execute(
            "SELECT id FROM studies WHERE kind=? AND spec_hash=?"
            " ORDER BY created_at DESC, rowid DESC LIMIT 1",
            (kind, spec_hash),
        ).fetchone()
        return None if row is None else str(row["id"])

    def study(self, study_id: str) -> StudyRow:
        """The study whose id is, or starts with, ``study_id`` (taken literally)."""
        if not study_id:
            raise UserError("the study id is empty — list the studies with `tokensleuth studies`")
        rows = self.db.execute(
            "SELECT * FROM studies WHERE substr(id, 1, ?) = ?", (len(study_id), study_id)
        ).fetchall()
        if not rows:
            raise UserError(f"no study {study_id!r} in {self.path} — list them with `tokensleuth studies`")
        if len(rows) > 1:
            raise UserError(f"study id {study_id!r} is ambiguous — give more characters")
        return _study(rows[0])

    def studies(self) -> list[StudyRow]:
        return [_study(r) for r in self.db.execute(
            "SELECT s.*, (SELECT COUNT(*) FROM trials t WHERE t.study_id=s.id) AS n_trials,"
            " (SELECT COUNT(*) FROM trials t WHERE t.study_id=s.id AND t.status='done') AS n_done"
            " FROM studies s ORDER BY created_at"
        ).fetchall()]

    def arms(self, study_id: str) -> list[ArmRow]:
        return [ArmRow(*(r[f] for f in ArmRow.__slots__)) for r in self.db.execute(
            "SELECT * FROM arms WHERE study_id=? ORDER BY id", (study_id,)
        ).fetchall()]

    def engines(self, study_id: str) -> dict[str, dict[str, Any]]:
        """Each arm's engine (its build's manifest), decoded, by arm name."""
        return {a.name: a.engine for a in self.arms(study_id)}

    def build(self, key: str) -> dict[str, Any] | None:
        """The manifest an arm of some stored study ran with, for the build of this key (the
        latest), or None: what a stored answer is read with before that build is made here."""
        row = self.db.execute(
            "SELECT engine_json FROM arms WHERE json_extract(engine_json, '$.key') = ? ORDER BY id DESC LIMIT 1",
            (key,),
        ).fetchone()
        return None if row is None else dict(json.loads(row["engine_json"]))

    # -- trials ----------------------------------------------------------------

    def planned(self, study_id: str) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT t.*, a.name AS arm FROM trials t JOIN arms a ON a.id=t.arm_id"
            " WHERE t.study_id=? AND t.status='planned' ORDER BY t.seq",
            (study_id,),
        ).fetchall()

    def trials(self, study_id: str) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT t.*, a.name AS arm FROM trials t JOIN arms a ON a.id=t.arm_id"
            " WHERE t.study_id=? ORDER BY t.seq",
            (study_id,),
        ).fetchall()

    def last_argv(self, study_id: str) -> list[str] | None:
        """The argv of the study's most recently planned trial (None: no trial planned)."""
        row = self.db.execute("SELECT argv_json FROM trials WHERE study_id=? ORDER BY seq DESC LIMIT 1",
                              (study_id,)).fetchone()
        return None if row is None else list(json.loads(row["argv_json"]))

    # -- reading back ------------------------------------------------------------

    def results(self, study_id: str) -> list[sqlite3.Row]:
        """One row per (trial, test) of the study's finished trials."""
        return self.db.execute(
            "SELECT r.*, t.id AS trial_id, t.seq, t.model, t.workload, a.name AS arm, t.env_json"
            " FROM results r JOIN trials t ON t.id=r.trial_id JOIN arms a ON a.id=t.arm_id"
            " WHERE t.study_id=? AND t.status='done' ORDER BY t.seq, r.test_idx",
            (study_id,),
        ).fetchall()

    def samples(self, result_id: int) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT * FROM samples WHERE result_id=? ORDER BY rep", (result_id,)
        ).fetchall()

    def windows(self, trial_id: int) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT * FROM windows WHERE trial_id=? ORDER BY test_idx, rep", (trial_id,)
        ).fetchall()

    def trial_stats(self, study_id: str) -> list[sqlite3.Row]:
        """Per finished trial and test: mean t/s, sample count, CPU ms and tokens in windows."""
        return self.db.execute(
            "SELECT t.id AS trial_id, t.seq, t.pair, t.model, t.workload, t.t0_ns, t.t1_ns,"
            " a.name AS arm, r.test, r.test_idx,"
            " AVG(s.tokens_per_s) AS mean_ts, COUNT(s.id) AS n,"
            " (SELECT SUM(w.cpu_ms) FROM windows w WHERE w.trial_id=t.id AND w.test_idx=r.test_idx) AS cpu_ms,"
            " SUM(s.tokens) AS tokens"
            " FROM trials t JOIN arms a ON a.id=t.arm_id JOIN results r ON r.trial_id=t.id"
            " JOIN samples s ON s.result_id=r.id"
            " WHERE t.study_id=? AND t.status='done' GROUP BY r.id ORDER BY t.seq, r.test_idx",
            (study_id,),
        ).fetchall()

    def done_samples(self, study_id: str) -> list[sqlite3.Row]:
        """Every timed repetition (t/s > 0) of the study's finished trials, in trial, test and
        repetition order, with its trial's arm, cell and clock and its result's test and raw row."""
        return self.db.execute(
            "SELECT t.id AS trial, a.name AS arm, t.model, t.workload, t.started_at, t.t0_ns, t.t1_ns,"
            " r.test, r.test_idx, r.raw_json, s.tokens_per_s, s.duration_ns"
            " FROM trials t JOIN arms a ON a.id=t.arm_id JOIN results r ON r.trial_id=t.id"
            " JOIN samples s ON s.result_id=r.id WHERE t.study_id=? AND t.status='done' AND s.tokens_per_s > 0"
            " ORDER BY t.id, r.test_idx, s.rep",
            (study_id,)).fetchall()

    def activity(self, study_id: str) -> tuple[list[Any], int, list[Any]]:
        """What moves while a study runs: its trials' (count, last end, done count), its warnings'
        count, and its state's (count, sizes) — a page is rendered again when any of them moved."""
        trials = self.db.execute("SELECT COUNT(*), MAX(ended_at), SUM(status='done') FROM trials WHERE study_id=?",
                                 (study_id,)).fetchone()
        warnings = self.db.execute("SELECT COUNT(*) FROM warnings w JOIN trials t ON t.id=w.trial_id"
                                   " WHERE t.study_id=?", (study_id,)).fetchone()[0]
        state = self.db.execute("SELECT COUNT(*), GROUP_CONCAT(length(value_json)) FROM state WHERE study_id=?",
                                (study_id,)).fetchone()
        return list(trials), int(warnings), list(state)

    def engine_seconds(self, study_id: str) -> float:
        row = self.db.execute(
            "SELECT COALESCE(SUM(t1_ns - t0_ns), 0) FROM trials WHERE study_id=? AND t1_ns IS NOT NULL",
            (study_id,),
        ).fetchone()
        return float(row[0]) / 1e9

    def timeline(self, trial_id: int) -> list[tuple[int, dict[str, float]]]:
        return [(int(r["t_ns"]), json.loads(r["values_json"])) for r in self.db.execute(
            "SELECT t_ns, values_json FROM timeline WHERE trial_id=? ORDER BY t_ns", (trial_id,))]

    def warnings(self, study_id: str) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT w.*, a.name AS arm, t.model, t.workload FROM warnings w"
            " JOIN trials t ON t.id=w.trial_id JOIN arms a ON a.id=t.arm_id WHERE t.study_id=?"
            " ORDER BY t.seq", (study_id,)).fetchall()
