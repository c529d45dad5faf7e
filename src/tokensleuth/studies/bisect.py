"""bisect studies: the first slower commit, or why there is none yet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokensleuth.report.markdown import render_bisect
from tokensleuth.report.figures import Figure, bisect_figures
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

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        spec = json.loads(store.study(study_id)["spec_json"])
        return bisect_figures(obj, float(spec.get("band", 0.01)), [label_of(str(c)) for c in spec.get("candidates") or []])


def label_of(source: str) -> str:
    """A candidate's step label from its source (bisect.git/pypi/bin_candidates name them so)."""
    if source.startswith("git:"):
        return source.rsplit("@", 1)[-1][:10]
    if source.startswith("pypi:"):
        return source.split("==", 1)[-1]
    return Path(source.removeprefix("bin:")).name


KIND = BisectKind()
