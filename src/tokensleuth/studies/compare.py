"""compare studies: paired verdicts per model x workload."""

from __future__ import annotations

from typing import Any

from tokensleuth.compare import render_stored_compare
from tokensleuth.report.figures import Figure, compare_figures
from tokensleuth.store import Store


class CompareKind:
    name = "compare"

    def describe(self, spec: dict[str, Any]) -> str:
        return ", ".join(str(a.get("name")) for a in spec.get("arms", []))

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        return render_stored_compare(store, study_id)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return compare_figures(store, study_id)


KIND = CompareKind()
