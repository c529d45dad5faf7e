"""bisect studies: the first slower commit, or why there is none yet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokensleuth.report.figures import Figure, bisect_figures
from tokensleuth.report.markdown import render_bisect
from tokensleuth.store import Store
from tokensleuth.studies import KindBase, stored_result


class BisectKind(KindBase):
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

    def headline(self, obj: dict[str, Any], md: str) -> str:
        if obj.get("summary"):
            return str(obj["summary"])
        if obj.get("first_bad"):
            return f"first bad: {obj['first_bad']}"
        return str(obj.get("reason") or obj.get("status") or "")

    def source_changes(self, obj: dict[str, Any]) -> dict[str, Any]:
        return dict(obj.get("changes") or {})  # the bisect stored them when it ended

    def culprit(self, obj: dict[str, Any]) -> tuple[str, str]:
        diff = str(self.source_changes(obj).get("diff") or "")
        if obj.get("first_bad"):
            c = obj.get("culprit") or {}
            return f"{c.get('sha') or obj['first_bad']}" + (f" — {c['subject']}" if c.get("subject") else ""), diff
        if obj.get("culprit_range"):
            return "between " + ", ".join(map(str, obj["culprit_range"])), diff
        return "n/a (not bisected)", diff


def label_of(source: str) -> str:
    """A candidate's step label from its source (bisect.git/pypi/bin_candidates name them so)."""
    if source.startswith("git:"):
        return source.rsplit("@", 1)[-1][:10]
    if source.startswith("pypi:"):
        return source.split("==", 1)[-1]
    return Path(source.removeprefix("bin:")).name


KIND = BisectKind()
