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

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        obj = stored_result(store, study_id, self.name)
        return render_bisect(obj), dict(obj, schema_version=1)


KIND = BisectKind()
