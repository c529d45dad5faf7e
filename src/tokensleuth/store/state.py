"""A study's own state in a Store: values a driver keeps between runs (a bisect's steps, a
scan's levels), JSON by key."""

from __future__ import annotations

import json
from typing import Any

from tokensleuth.store.database import Database


class StudyState:
    """A Store's key-value state of each study."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def get(self, study_id: str, key: str, default: Any = None) -> Any:
        row = self.database.db.execute(
            "SELECT value_json FROM state WHERE study_id=? AND key=?", (study_id, key)
        ).fetchone()
        return default if row is None else json.loads(row["value_json"])

    def put(self, study_id: str, key: str, value: Any) -> None:
        with self.database.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO state(study_id, key, value_json) VALUES (?,?,?)",
                (study_id, key, json.dumps(value)),
            )
