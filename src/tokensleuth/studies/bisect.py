"""bisect studies: the first slower commit, or why there is none yet."""

from __future__ import annotations

from typing import Any

from tokensleuth.report.markdown import render_bisect
from tokensleuth.store import Store
from tokensleuth.studies import stored_result


class BisectKind:
    name = "bisect"

    def describe(self, spec: dict[str, Any]) -> str:
        cands = spec.get("candidates") or []
        return f"{cands[0]} .. {cands[-1]}" if cands else ""

    def render(self, result: dict[str, Any]) -> str:
        """The driver's result as Markdown (the command's output and `report`'s)."""
        return render_bisect(result)

    def to_json(self, result: dict[str, Any]) -> dict[str, Any]:
        """The driver's result as the DESIGN.md JSON object (--json, and `report --json`)."""
        return dict(result, schema_version=1)

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        obj = stored_result(store, study_id, self.name)
        return self.render(obj), self.to_json(obj)


KIND = BisectKind()
