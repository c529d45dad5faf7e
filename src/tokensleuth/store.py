"""The study store: SQLite in WAL mode, one transaction per finished trial.

Every sample is committed together with the status change of its trial, so a
trial is either wholly stored (``done``) or not at all; a trial found ``running``
on open belonged to a killed process and is put back to ``planned``. That is
the whole resume story: rerunning a study executes the trials still planned.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokensleuth.errors import UserError

SCHEMA_VERSION = 1

# Numbered migrations: MIGRATIONS[i] takes a database from version i to i+1.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE studies (
        id          TEXT PRIMARY KEY,
        kind        TEXT NOT NULL,          -- bench | compare | import | bisect | decompose
        spec_hash   TEXT NOT NULL,
        spec_json   TEXT NOT NULL,
        status      TEXT NOT NULL,          -- running | done | failed
        created_at  REAL NOT NULL,
        finished_at REAL
    );
    CREATE TABLE arms (
        id          INTEGER PRIMARY KEY,
        study_id    TEXT NOT NULL REFERENCES studies(id),
        name        TEXT NOT NULL,
        source      TEXT NOT NULL,
        engine_json TEXT NOT NULL,          -- commit, build_number, flags, compiler, backends
        flags_json  TEXT NOT NULL,          -- engine argv additions of this arm
        env_json    TEXT NOT NULL,          -- environment variables of this arm
        UNIQUE (study_id, name)
    );
    CREATE TABLE trials (
        id          INTEGER PRIMARY KEY,
        study_id    TEXT NOT NULL REFERENCES studies(id),
        arm_id      INTEGER NOT NULL REFERENCES arms(id),
        seq         INTEGER NOT NULL,       -- position in the plan
        pair        INTEGER NOT NULL DEFAULT -1,  -- compare: pair index within its cell
        model       TEXT NOT NULL,
        workload    TEXT NOT NULL,          -- '' = all of the arm's llama-bench tests
        argv_json   TEXT NOT NULL,
        status      TEXT NOT NULL,          -- planned|running|done|failed|crashed|timeout
        exit_code   INTEGER,
        message     TEXT,
        stderr_tail TEXT,
        started_at  REAL,                   -- wall clock, epoch seconds
        ended_at    REAL,
        t0_ns       INTEGER,                -- monotonic clock at spawn
        t1_ns       INTEGER,                -- monotonic clock at exit
        env_json    TEXT,                   -- host, governor, versions at run time
        UNIQUE (study_id, seq)
    );
    CREATE TABLE results (
        id          INTEGER PRIMARY KEY,
        trial_id    INTEGER NOT NULL REFERENCES trials(id),
        test_idx    INTEGER NOT NULL,
        test        TEXT NOT NULL,          -- llama-bench name: pp512, tg128, pp512@d4096
        n_prompt    INTEGER NOT NULL,
        n_gen       INTEGER NOT NULL,
        n_depth     INTEGER NOT NULL,
        avg_ts      REAL,
        stddev_ts   REAL,
        raw_json    TEXT NOT NULL,
        UNIQUE (trial_id, test_idx)
    );
    CREATE TABLE samples (
        id          INTEGER PRIMARY KEY,
        result_id   INTEGER NOT NULL REFERENCES results(id),
        rep         INTEGER NOT NULL,
        duration_ns INTEGER NOT NULL,
        tokens      INTEGER NOT NULL,
        tokens_per_s REAL NOT NULL,
        UNIQUE (result_id, rep)
    );
    CREATE TABLE windows (
        id          INTEGER PRIMARY KEY,
        trial_id    INTEGER NOT NULL REFERENCES trials(id),
        test_idx    INTEGER NOT NULL,
        rep         INTEGER NOT NULL,
        start_ns    INTEGER NOT NULL,       -- monotonic clock, same as trials.t0_ns
        end_ns      INTEGER NOT NULL,
        cpu_ms      REAL,                   -- engine process-tree CPU time in the window
        counters_json TEXT,                 -- other counter deltas (energy J) over the window
        UNIQUE (trial_id, test_idx, rep)
    );
    CREATE TABLE timeline (
        trial_id    INTEGER NOT NULL REFERENCES trials(id),
        t_ns        INTEGER NOT NULL,       -- monotonic clock, same as trials.t0_ns
        values_json TEXT NOT NULL,          -- sampled power W, clocks MHz, busy %, memory MB
        PRIMARY KEY (trial_id, t_ns)
    );
    CREATE TABLE warnings (
        trial_id    INTEGER NOT NULL REFERENCES trials(id),
        code        TEXT NOT NULL,
        detail      TEXT NOT NULL
    );
    CREATE TABLE state (
        study_id    TEXT NOT NULL REFERENCES studies(id),
        key         TEXT NOT NULL,
        value_json  TEXT NOT NULL,
        PRIMARY KEY (study_id, key)
    );
    CREATE INDEX trials_study ON trials(study_id, status);
    CREATE INDEX results_trial ON results(trial_id);
    """,
]

TRIAL_STATUSES = ("planned", "running", "done", "failed", "crashed", "timeout")


@dataclass(frozen=True, slots=True)
class SampleRow:
    rep: int
    duration_ns: int
    tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens * 1e9 / self.duration_ns


@dataclass(frozen=True, slots=True)
class WindowRow:
    test_idx: int
    rep: int
    start_ns: int
    end_ns: int
    cpu_ms: float | None = None
    counters: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResultRow:
    test_idx: int
    test: str
    n_prompt: int
    n_gen: int
    n_depth: int
    avg_ts: float | None
    stddev_ts: float | None
    raw: dict[str, Any]
    samples: tuple[SampleRow, ...]


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """Everything a finished trial leaves behind; written in one transaction."""

    status: str
    exit_code: int | None
    message: str
    stderr_tail: str
    started_at: float
    ended_at: float
    t0_ns: int
    t1_ns: int
    env: dict[str, Any]
    results: tuple[ResultRow, ...] = ()
    windows: tuple[WindowRow, ...] = ()
    timeline: tuple[tuple[int, dict[str, float]], ...] = ()
    warnings: tuple[tuple[str, str], ...] = ()  # (code, detail)

    def __post_init__(self) -> None:
        if self.status not in TRIAL_STATUSES or self.status in ("planned", "running"):
            raise ValueError(f"not a final trial status: {self.status!r}")
        if self.t1_ns < self.t0_ns:
            raise ValueError("trial ends before it starts")


@dataclass(frozen=True, slots=True)
class PlannedTrial:
    arm: str
    model: str
    workload: str
    argv: tuple[str, ...]
    pair: int = -1


class Store:
    """A connection to the study store. Caller-owned; close it (or use ``with``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > 0:
            with open(path, "rb") as fh:
                if fh.read(16) != b"SQLite format 3\x00":
                    raise UserError(
                        f"{path} is not a tokensleuth database — pass another --db path"
                    )
        try:
            self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise UserError(f"cannot open the store {path}: {exc} — pass another --db path") from exc
        self.db.row_factory = sqlite3.Row
        self._migrate()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _migrate(self) -> None:
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise UserError(
                f"{self.path} has store schema {version}, newer than this tokensleuth "
                f"understands ({SCHEMA_VERSION}) — upgrade tokensleuth or pass another --db"
            )
        for v in range(version, SCHEMA_VERSION):
            with self.tx() as db:
                for stmt in MIGRATIONS[v].split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute(f"PRAGMA user_version={v + 1}")

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
        study_id = uuid.uuid4().hex[:10]
        with self.tx() as db:
            db.execute(
                "INSERT INTO studies(id, kind, spec_hash, spec_json, status, created_at)"
                " VALUES (?,?,?,?,?,?)",
                (study_id, kind, spec_hash, json.dumps(spec, sort_keys=True), "running", time.time()),
            )
            for name, source, engine, flags, env in arms:
                db.execute(
                    "INSERT INTO arms(study_id, name, source, engine_json, flags_json, env_json)"
                    " VALUES (?,?,?,?,?,?)",
                    (study_id, name, source, json.dumps(engine), json.dumps(list(flags)),
                     json.dumps(env)),
                )
            self._insert_plan(db, study_id, plan, start_seq=0)
        return study_id

    def add_trials(self, study_id: str, plan: Sequence[PlannedTrial]) -> None:
        """Append planned trials (a later round of a sequential study)."""
        with self.tx() as db:
            row = db.execute(
                "SELECT COALESCE(MAX(seq), -1) FROM trials WHERE study_id=?", (study_id,)
            ).fetchone()
            self._insert_plan(db, study_id, plan, start_seq=int(row[0]) + 1)

    @staticmethod
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

    def find_resumable(self, kind: str, spec_hash: str) -> str | None:
        row = self.db.execute(
            "SELECT id FROM studies WHERE kind=? AND spec_hash=? AND status='running'"
            " ORDER BY created_at DESC LIMIT 1",
            (kind, spec_hash),
        ).fetchone()
        return None if row is None else str(row["id"])

    def find_study(self, kind: str, spec_hash: str) -> str | None:
        row = self.db.execute(
            "SELECT id FROM studies WHERE kind=? AND spec_hash=? ORDER BY created_at DESC LIMIT 1",
            (kind, spec_hash),
        ).fetchone()
        return None if row is None else str(row["id"])

    def recover(self, study_id: str) -> int:
        """Put trials left ``running`` by a killed process back to ``planned``."""
        with self.tx() as db:
            cur = db.execute(
                "UPDATE trials SET status='planned', started_at=NULL WHERE study_id=? AND status='running'",
                (study_id,),
            )
            return cur.rowcount

    def finish_study(self, study_id: str, status: str = "done") -> None:
        with self.tx() as db:
            db.execute(
                "UPDATE studies SET status=?, finished_at=? WHERE id=?",
                (status, time.time(), study_id),
            )

    def study(self, study_id: str) -> sqlite3.Row:
        rows = self.db.execute(
            "SELECT * FROM studies WHERE id LIKE ? || '%'", (study_id,)
        ).fetchall()
        if not rows:
            raise UserError(f"no study {study_id!r} in {self.path} — list them with `tokensleuth studies`")
        if len(rows) > 1:
            raise UserError(f"study id {study_id!r} is ambiguous — give more characters")
        row: sqlite3.Row = rows[0]
        return row

    def studies(self) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT s.*, (SELECT COUNT(*) FROM trials t WHERE t.study_id=s.id) AS n_trials,"
            " (SELECT COUNT(*) FROM trials t WHERE t.study_id=s.id AND t.status='done') AS n_done"
            " FROM studies s ORDER BY created_at"
        ).fetchall()

    def arms(self, study_id: str) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT * FROM arms WHERE study_id=? ORDER BY id", (study_id,)
        ).fetchall()

    def set_arm_engine(self, study_id: str, name: str, engine: dict[str, Any]) -> None:
        with self.tx() as db:
            db.execute(
                "UPDATE arms SET engine_json=? WHERE study_id=? AND name=?",
                (json.dumps(engine), study_id, name),
            )

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

    def mark_running(self, trial_id: int) -> None:
        with self.tx() as db:
            db.execute(
                "UPDATE trials SET status='running', started_at=? WHERE id=? AND status='planned'",
                (time.time(), trial_id),
            )

    def finish_trial(self, trial_id: int, out: TrialOutcome) -> None:
        """Store a finished trial and all its samples in one transaction."""
        with self.tx() as db:
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
            for r in out.results:
                rid = db.execute(
                    "INSERT INTO results(trial_id, test_idx, test, n_prompt, n_gen, n_depth,"
                    " avg_ts, stddev_ts, raw_json) VALUES (?,?,?,?,?,?,?,?,?)",
                    (trial_id, r.test_idx, r.test, r.n_prompt, r.n_gen, r.n_depth, r.avg_ts,
                     r.stddev_ts, json.dumps(r.raw)),
                ).lastrowid
                db.executemany(
                    "INSERT INTO samples(result_id, rep, duration_ns, tokens, tokens_per_s)"
                    " VALUES (?,?,?,?,?)",
                    [(rid, s.rep, s.duration_ns, s.tokens, s.tokens_per_s) for s in r.samples],
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

    def import_trial(
        self, study_id: str, arm: str, model: str, out: TrialOutcome
    ) -> None:
        """Store an already-finished trial (from ``import``) in one transaction."""
        with self.tx() as db:
            self._insert_finished_trial(db, study_id, arm, model, out)

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
        with self.tx() as db:
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
                self._insert_finished_trial(db, study_id, name, model, out)
        return study_id

    @staticmethod
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
        for r in out.results:
            rid = db.execute(
                "INSERT INTO results(trial_id, test_idx, test, n_prompt, n_gen, n_depth,"
                " avg_ts, stddev_ts, raw_json) VALUES (?,?,?,?,?,?,?,?,?)",
                (trial_id, r.test_idx, r.test, r.n_prompt, r.n_gen, r.n_depth, r.avg_ts,
                 r.stddev_ts, json.dumps(r.raw)),
            ).lastrowid
            db.executemany(
                "INSERT INTO samples(result_id, rep, duration_ns, tokens, tokens_per_s) VALUES (?,?,?,?,?)",
                [(rid, s.rep, s.duration_ns, s.tokens, s.tokens_per_s) for s in r.samples],
            )
        # Imports carry no windows, timeline or warnings today; store them if a caller has any.
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

    def put_state(self, study_id: str, key: str, value: Any) -> None:
        with self.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO state(study_id, key, value_json) VALUES (?,?,?)",
                (study_id, key, json.dumps(value)),
            )

    def get_state(self, study_id: str, key: str, default: Any = None) -> Any:
        row = self.db.execute(
            "SELECT value_json FROM state WHERE study_id=? AND key=?", (study_id, key)
        ).fetchone()
        return default if row is None else json.loads(row["value_json"])
