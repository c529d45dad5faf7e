"""decompose studies: a patch series measured one patch at a time."""

from __future__ import annotations

from typing import Any

from tokensleuth.report.figures import Figure, decompose_figures
from tokensleuth.report.markdown import render_decompose
from tokensleuth.store import Store
from tokensleuth.studies import KindBase, stored_result


class DecomposeKind(KindBase):
    name = "decompose"

    def describe(self, spec: dict[str, Any]) -> str:
        return f"{str(spec.get('base', ''))[:10]} + {len(spec.get('patches') or [])} patches"

    def render(self, result: dict[str, Any]) -> str:
        """The driver's result as Markdown (the command's output and `report`'s)."""
        return render_decompose(result)

    def to_json(self, result: dict[str, Any]) -> dict[str, Any]:
        """The driver's result as the DESIGN.md JSON object (--json, and `report --json`)."""
        return dict(result, schema_version=1)

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        obj = stored_result(store, study_id, self.name)
        return self.render(obj), self.to_json(obj)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return decompose_figures(obj)


KIND = DecomposeKind()
