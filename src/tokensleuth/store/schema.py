"""The store's schema: numbered migrations from an empty file to SCHEMA_VERSION."""

from __future__ import annotations

SCHEMA_VERSION = 4
# PRAGMA application_id of a tokensleuth store ("tksl"); set from schema 2 on.
APPLICATION_ID = 1953198956
# The tables a store of any schema version has: a database without them is another program's.
CORE_TABLES = frozenset({"studies", "arms", "trials", "results", "samples"})

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
        status      TEXT NOT NULL,          -- planned|running|done|failed|crashed|timeout|garbage
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
    # 2: the study lease (one runner per study) and the boot a running trial started under.
    """
    CREATE TABLE leases (
        study_id    TEXT PRIMARY KEY REFERENCES studies(id),
        pid         INTEGER NOT NULL,
        pid_start   INTEGER,                -- /proc/PID/stat start time: a reused pid differs
        boot_id     TEXT NOT NULL,          -- /proc/sys/kernel/random/boot_id of the holder
        host        TEXT NOT NULL,
        since       REAL NOT NULL           -- wall clock, epoch seconds
    );
    ALTER TABLE trials ADD COLUMN boot_id TEXT;
    PRAGMA application_id = 1953198956
    """,
    # 3: engine kinds. An arm names the engine that ran it; a sample is one timed unit of
    # any engine (a llama-bench repetition, or a request to a server) with its own token
    # counts, its client-side timestamps and, for a streamed request, its time to first
    # token and inter-token latencies. llama-bench samples get their counts from their result.
    """
    ALTER TABLE arms ADD COLUMN kind TEXT NOT NULL DEFAULT 'llama-bench';
    ALTER TABLE samples ADD COLUMN n_prompt INTEGER;
    ALTER TABLE samples ADD COLUMN n_gen INTEGER;
    ALTER TABLE samples ADD COLUMN start_ns INTEGER;
    ALTER TABLE samples ADD COLUMN end_ns INTEGER;
    ALTER TABLE samples ADD COLUMN ttft_ns INTEGER;
    ALTER TABLE samples ADD COLUMN metrics_json TEXT;
    UPDATE samples SET n_prompt = (SELECT r.n_prompt FROM results r WHERE r.id = samples.result_id),
                       n_gen = (SELECT r.n_gen FROM results r WHERE r.id = samples.result_id)
    """,
    # 4: the fleet. A trial handed to a worker machine names it (NULL: run by the driver
    # itself); one that never came back is known by it on --resume.
    """
    ALTER TABLE trials ADD COLUMN node TEXT
    """,
]
