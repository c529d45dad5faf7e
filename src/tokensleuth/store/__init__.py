"""The study store: SQLite in WAL mode, one transaction per finished trial.

Every sample is committed together with the status change of its trial, so a
trial is either wholly stored (``done``) or not at all. One process at a time runs
a study: it holds the study's lease (pid, boot id, host). A trial found ``running``
when the lease is taken belonged to a holder that died: it is put back to
``planned``, and when it was started under another boot (the machine froze or
rebooted) it is first recorded as ``machine-lost``. That is the whole resume story:
rerunning a study executes the trials still planned.

The package: the records in tokensleuth.core.records (plain data, no store), the schema and its
migrations (schema.py), what a store file may be and its faults (files.py), the live timeline
(timeline.py); and the Store (lifecycle.py), which holds its parts: the open file with its
schema check, migrations and transactions (database.py), the study leases and their holders
(leases.py), the queries (reads.py), the writes (writes.py) and each study's own state
(state.py).

SQLite's own errors (full disk, read-only or damaged file) become one-line
UserError/EngineError in one place, :func:`store_errors`.

Floor 1: imports core only.
"""


from __future__ import annotations

import json
from typing import Any

from tokensleuth.core.records import (
    HANDED_OUT,
    MACHINE_LOST,
    NODE_LOST,
    STUDY_STATUSES,
    TRIAL_STATUSES,
    UNFINISHED,
    ArmRow,
    Lease,
    LostTrial,
    PlannedTrial,
    ResultRow,
    SampleRow,
    StudyHandle,
    StudyRow,
    TrialOutcome,
    WindowRow,
)
from tokensleuth.store.files import store_errors, translate
from tokensleuth.store.leases import Holder, this_process
from tokensleuth.store.lifecycle import Store
from tokensleuth.store.schema import APPLICATION_ID, CORE_TABLES, MIGRATIONS, SCHEMA_VERSION
from tokensleuth.store.timeline import LiveTimeline
from tokensleuth.store.writes import count_engine, engine_ns

FLOOR = 1  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)

# what `from tokensleuth.store import …` gives (the records also come from tokensleuth.core.records)
__all__ = [
    "APPLICATION_ID", "ArmRow", "StudyRow", "CORE_TABLES", "HANDED_OUT", "MACHINE_LOST", "MIGRATIONS", "NODE_LOST", "SCHEMA_VERSION",
    "STUDY_STATUSES", "TRIAL_STATUSES", "UNFINISHED", "Holder", "Lease", "LiveTimeline", "LostTrial",
    "PlannedTrial", "ResultRow", "SampleRow", "Store", "StudyHandle", "TrialOutcome", "WindowRow", "count_engine",
    "engine_ns", "store_errors", "this_process", "translate",
]


def stored_json(row: Any, column: str, empty: str | None = None) -> Any:
    """A JSON column of a row the store returned, decoded (``empty``: the JSON to read where the
    column is NULL or empty; without it such a column raises, as the text itself would)."""
    text = row[column]
    return json.loads((text or empty) if empty is not None else text)
