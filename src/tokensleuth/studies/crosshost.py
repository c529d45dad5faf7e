"""crosshost studies: one compare per machine of a fleet, in one table."""

from __future__ import annotations

from typing import Any

from tokensleuth.crosshost import render_crosshost
from tokensleuth.report.figures import Figure
from tokensleuth.store import Store


class CrossHostKind:
    name = "crosshost"

    def describe(self, spec: dict[str, Any]) -> str:
        return "on " + ", ".join(str(h) for h in spec.get("hosts", []))

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        return render_crosshost(store, study_id)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return []  # each machine's compare page has its figures


KIND = CrossHostKind()
