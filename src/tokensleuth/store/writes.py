"""A Store's writes: studies and their planned trials, trials marked running, handed back and
finished with their samples, imports, the live timeline's writer; and the engine time this
process has measured (:func:`engine_ns`)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from tokensleuth.core.records import (
    STUDY_STATUSES,
    UNFINISHED,
    PlannedTrial,
    StudyHandle,
    TrialOutcome,
)
from tokensleuth.store.database import Database
from tokensleuth.store.timeline import LiveTimeline

_engine = [0]  # ns of engine time this process has measured, every store and thread together
_engine_lock = threading.Lock()


def engine_ns() -> int:
    """The engine time (ns) of every trial this process has measured: stored ones
    (:meth:`Writes.finish_trials`) and those a driver keeps in its own state (a scan's levels,
    :func:`count_engine`). A long study's cost is the difference between two readings."""
    return _engine[0]


def count_engine(out: TrialOutcome) -> None:
    """Add a finished trial's engine time (its process's start to end) to :func:`engine_ns`."""
    if out.t0_ns is not None and out.t1_ns is not None:
        with _engine_lock:
            _engine[0] += max(0, out.t1_ns - out.t0_ns)


class Writes:
    """A Store's writes, each in a transaction of its own; ``boot_id``: this machine's boot, which
    a trial marked running is started under (a later boot then knows it was lost)."""

    def __init__(self, database: Database, boot_id: str) -> None:
        self.database = database
        self.boot_id = boot_id

    # -- studies ---------------------------------------------------------------

    def create_study(
        self,
        kind: str,
        spec: dict[str, Any],
        spec_hash: str,
        arms: Sequence[tuple[str, str, dict[str, Any], Sequence[str], dict[str, str]]],
        plan: Sequence[PlannedTrial],
    ) -> str:
        """Create a study with its arms and planned trials in one transaction."""
        with self.database.tx() as db:
            return _create_study(db, kind, spec, spec_hash, arms, plan)

    def begin_study(
        self,
        kind: str,
        spec: dict[str, Any],
        spec_hash: str,
        *,
        resume: bool,
        arms: Sequence[tuple[str, str, dict[str, Any], Sequence[str], dict[str, str]]] = (),
        plan: Sequence[PlannedTrial] = (),
    ) -> StudyHandle:
        """Find the study to run for this spec, or create it (with ``arms`` and ``plan``).

        ``resume``: the latest study of this exact spec, if there is one — unfinished
        (``resumed``) or finished (``finished``: the caller reads its stored results) —
        else a new one (a run killed before its study existed simply starts). Without
        ``resume`` a new study is always created. Find and create are one transaction,
        so two processes resuming at once find the same study (and its lease).
        """
        with self.database.tx() as db:
            if resume:
                row = db.execute(
                    "SELECT id, status FROM studies WHERE kind=? AND spec_hash=?"
                    " ORDER BY created_at DESC, rowid DESC LIMIT 1",
                    (kind, spec_hash),
                ).fetchone()
                if row is not None:
                    status = str(row["status"])
                    return StudyHandle(str(row["id"]), status in UNFINISHED,
                                       status not in UNFINISHED, status)
            sid = _create_study(db, kind, spec, spec_hash, arms, plan)
            return StudyHandle(sid, False, False, "running")

    def add_trials(self, study_id: str, plan: Sequence[PlannedTrial]) -> None:
        """Append planned trials (a later round of a sequential study)."""
        with self.database.tx() as db:
            row = db.execute(
                "SELECT COALESCE(MAX(seq), -1) FROM trials WHERE study_id=?", (study_id,)
            ).fetchone()
            _insert_plan(db, study_id, plan, start_seq=int(row[0]) + 1)

    def finish_study(self, study_id: str, status: str = "done") -> None:
        if status not in STUDY_STATUSES:
            raise ValueError(f"not a study status: {status!r}")
        with self.database.tx() as db:
            db.execute(
                "UPDATE studies SET status=?, finished_at=? WHERE id=?",
                (status, time.time(), study_id),
            )

    def set_arm_engine(self, study_id: str, name: str, engine: dict[str, Any]) -> None:
        with self.database.tx() as db:
            db.execute(
                "UPDATE arms SET engine_json=? WHERE study_id=? AND name=?",
                (json.dumps(engine), study_id, name),
            )

    # -- trials ----------------------------------------------------------------

    def mark_running(self, trial_id: int, node: str | None = None) -> None:
        """Mark a planned trial running under this boot (a later boot then knows it was lost)."""
        self.mark_running_many([trial_id], node)

    def mark_running_many(self, trial_ids: Sequence[int], node: str | None = None) -> None:
        """Mark planned trials running, in one transaction; ``node``: the worker they are handed to."""
        with self.database.tx() as db:
            db.executemany(
                "UPDATE trials SET status='running', started_at=?, boot_id=?, node=? WHERE id=? AND status='planned'",
                [(time.time(), self.boot_id, node, t) for t in trial_ids],
            )

    def hand_back(self, trial_ids: Sequence[int], code: str, detail: str) -> None:
        """Trials whose worker was lost: back to planned, with the loss recorded (one transaction).

        Nothing they measured was stored (a worker's samples reach the store only with its
        finished outcome), so running them again counts nothing twice.
        """
        with self.database.tx() as db:
            for t in trial_ids:
                db.execute("INSERT INTO warnings(trial_id, code, detail) VALUES (?,?,?)", (t, code, detail))
                db.execute("DELETE FROM timeline WHERE trial_id=?", (t,))
                db.execute("UPDATE trials SET status='planned', started_at=NULL, boot_id=NULL, node=NULL"
                           " WHERE id=? AND status='running'", (t,))

    def live_timeline(self, trial_id: int, every_s: float = 2.0) -> LiveTimeline:
        """A writer that commits a running trial's readings as the sampler takes them."""
        return LiveTimeline(self.database.path, trial_id, every_s)

    def finish_trial(self, trial_id: int, out: TrialOutcome) -> None:
        """Store a finished trial and all its samples in one transaction."""
        self.finish_trials([(trial_id, out)])

    def finish_trials(self, done: Sequence[tuple[int, TrialOutcome]]) -> None:
        """Store finished trials (a pair from one worker) and their samples in one transaction."""
        with self.database.tx() as db:
            for trial_id, out in done:
                cur = db.execute(
                    "UPDATE trials SET status=?, exit_code=?, message=?, stderr_tail=?, started_at=?,"
                    " ended_at=?, t0_ns=?, t1_ns=?, env_json=? WHERE id=? AND status='running'",
                    (out.status, out.exit_code, out.message, out.stderr_tail, out.started_at,
                     out.ended_at, out.t0_ns, out.t1_ns, json.dumps(out.env), trial_id),
                )
                if cur.rowcount != 1:
                    # Someone else finished it (or it was never started): storing again would
                    # count its samples twice.
                    raise RuntimeError(f"trial {trial_id} is not running; refusing to store it twice")
                _insert_outcome_rows(db, trial_id, out)
        for _, out in done:  # (once stored: a trial whose transaction failed is measured again)
            count_engine(out)

    def import_trial(
        self, study_id: str, arm: str, model: str, out: TrialOutcome
    ) -> None:
        """Store an already-finished trial (from ``import``) in one transaction."""
        with self.database.tx() as db:
            _insert_finished_trial(db, study_id, arm, model, out)

    def import_study(
        self,
        kind: str,
        spec: dict[str, Any],
        spec_hash: str,
        arm: tuple[str, str, dict[str, Any]],
        trials: Sequence[tuple[str, TrialOutcome]],
    ) -> str:
        """Store a finished study of finished trials (``import``): all of it or, on any error, nothing.

        ``arm`` is (name, source, engine); ``trials`` are (model, outcome). One
        transaction, so a failure half-way (or a kill) never leaves a study
        ``running`` or a file half-imported.
        """
        study_id = uuid.uuid4().hex[:10]
        now = time.time()
        name, source, engine = arm
        with self.database.tx() as db:
            db.execute(
                "INSERT INTO studies(id, kind, spec_hash, spec_json, status, created_at, finished_at)"
                " VALUES (?,?,?,?,'done',?,?)",
                (study_id, kind, spec_hash, json.dumps(spec, sort_keys=True), now, now),
            )
            db.execute(
                "INSERT INTO arms(study_id, name, source, engine_json, flags_json, env_json)"
                " VALUES (?,?,?,?,'[]','{}')",
                (study_id, name, source, json.dumps(engine)),
            )
            for model, out in trials:
                _insert_finished_trial(db, study_id, name, model, out)
        return study_id


def _create_study(
    db: sqlite3.Connection,
    kind: str,
    spec: dict[str, Any],
    spec_hash: str,
    arms: Sequence[tuple[str, str, dict[str, Any], Sequence[str], dict[str, str]]],
    plan: Sequence[PlannedTrial],
) -> str:
    study_id = uuid.uuid4().hex[:10]
    db.execute(
        "INSERT INTO studies(id, kind, spec_hash, spec_json, status, created_at)"
        " VALUES (?,?,?,?,?,?)",
        (study_id, kind, spec_hash, json.dumps(spec, sort_keys=True), "running", time.time()),
    )
    for name, source, engine, flags, env in arms:
        db.execute(
            "INSERT INTO arms(study_id, name, source, engine_json, flags_json, env_json, kind)"
            " VALUES (?,?,?,?,?,?,?)",
            (study_id, name, source, json.dumps(engine), json.dumps(list(flags)),
             json.dumps(env), str(engine.get("engine_kind") or "llama-bench")),  # (engines.base.DEFAULT_KIND: the store sits below engines)
        )
    _insert_plan(db, study_id, plan, start_seq=0)
    return study_id


def _insert_plan(
    db: sqlite3.Connection, study_id: str, plan: Sequence[PlannedTrial], start_seq: int
) -> None:
    arm_ids = {
        r["name"]: r["id"]
        for r in db.execute("SELECT id, name FROM arms WHERE study_id=?", (study_id,))
    }
    for i, t in enumerate(plan):
        db.execute(
            "INSERT INTO trials(study_id, arm_id, seq, pair, model, workload, argv_json, status)"
            " VALUES (?,?,?,?,?,?,?, 'planned')",
            (study_id, arm_ids[t.arm], start_seq + i, t.pair, t.model, t.workload,
             json.dumps(list(t.argv))),
        )


def _insert_finished_trial(
    db: sqlite3.Connection, study_id: str, arm: str, model: str, out: TrialOutcome
) -> None:
    """Append a finished trial with its results and samples, inside the caller's transaction."""
    seq = int(db.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM trials WHERE study_id=?",
                         (study_id,)).fetchone()[0])
    trial_id = db.execute(
        "INSERT INTO trials(study_id, arm_id, seq, model, workload, argv_json, status, exit_code,"
        " message, stderr_tail, started_at, ended_at, t0_ns, t1_ns, env_json)"
        " SELECT ?, id, ?, ?, '', '[]', ?,?,?,?,?,?,?,?,? FROM arms WHERE study_id=? AND name=?",
        (study_id, seq, model, out.status, out.exit_code, out.message, out.stderr_tail,
         out.started_at, out.ended_at, out.t0_ns, out.t1_ns, json.dumps(out.env), study_id, arm),
    ).lastrowid
    if trial_id is None or db.execute("SELECT changes()").fetchone()[0] != 1:
        raise ValueError(f"study {study_id} has no arm {arm!r}")
    _insert_outcome_rows(db, trial_id, out)


def _insert_outcome_rows(db: sqlite3.Connection, trial_id: int, out: TrialOutcome) -> None:
    """A finished trial's results, samples, windows, timeline and warnings (caller's transaction).

    The timeline goes in with INSERT OR IGNORE: rows committed while the trial ran
    (LiveTimeline) are already there.
    """
    for r in out.results:
        rid = db.execute(
            "INSERT INTO results(trial_id, test_idx, test, n_prompt, n_gen, n_depth,"
            " avg_ts, stddev_ts, raw_json) VALUES (?,?,?,?,?,?,?,?,?)",
            (trial_id, r.test_idx, r.test, r.n_prompt, r.n_gen, r.n_depth, r.avg_ts,
             r.stddev_ts, json.dumps(r.raw)),
        ).lastrowid
        db.executemany(
            "INSERT INTO samples(result_id, rep, duration_ns, tokens, tokens_per_s, n_prompt, n_gen,"
            " start_ns, end_ns, ttft_ns, metrics_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [(rid, s.rep, s.duration_ns, s.tokens, s.tokens_per_s,
              r.n_prompt if s.n_prompt is None else s.n_prompt, r.n_gen if s.n_gen is None else s.n_gen,
              s.start_ns, s.end_ns, s.ttft_ns, json.dumps(s.metrics) if s.metrics else None)
             for s in r.samples],
        )
    db.executemany(
        "INSERT INTO windows(trial_id, test_idx, rep, start_ns, end_ns, cpu_ms, counters_json)"
        " VALUES (?,?,?,?,?,?,?)",
        [(trial_id, w.test_idx, w.rep, w.start_ns, w.end_ns, w.cpu_ms,
          json.dumps(w.counters) if w.counters else None) for w in out.windows],
    )
    db.executemany(
        "INSERT OR IGNORE INTO timeline(trial_id, t_ns, values_json) VALUES (?,?,?)",
        [(trial_id, t, json.dumps(v)) for t, v in out.timeline],
    )
    db.executemany(
        "INSERT INTO warnings(trial_id, code, detail) VALUES (?,?,?)",
        [(trial_id, c, d) for c, d in out.warnings],
    )
