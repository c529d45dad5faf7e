"""A running trial's sampled readings, committed as they come."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path


class LiveTimeline:
    """Commits a running trial's sampled readings every ``every_s`` seconds.

    Called from the sampler thread with the timeline so far; it writes the rows not yet
    written through a connection of its own (an SQLite connection belongs to the thread
    that opened it; WAL lets it write beside the runner's). The trial's final commit
    inserts the same rows with INSERT OR IGNORE, so nothing is stored twice. What this
    buys: a machine that freezes mid-trial leaves the trial's last readings in the store.
    """

    def __init__(self, path: Path, trial_id: int, every_s: float = 2.0) -> None:
        self.path = path
        self.trial_id = trial_id
        self.every_s = every_s
        self._written = 0
        self._last = time.monotonic()
        self._db: sqlite3.Connection | None = None

    def __call__(self, timeline: Sequence[tuple[int, dict[str, float]]]) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s or len(timeline) <= self._written:
            return
        self._last = now
        if self._db is None:
            # made in the sampler thread, closed by the runner once the sampler has stopped
            self._db = sqlite3.connect(self.path, timeout=1.0, check_same_thread=False)
        rows = timeline[self._written:]
        with self._db:
            self._db.executemany("INSERT OR IGNORE INTO timeline(trial_id, t_ns, values_json) VALUES (?,?,?)",
                                 [(self.trial_id, t, json.dumps(v)) for t, v in rows])
        self._written += len(rows)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
