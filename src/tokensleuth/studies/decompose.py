"""decompose studies: a patch series measured one patch at a time."""

from __future__ import annotations

from typing import Any

from tokensleuth.report.markdown import render_decompose
from tokensleuth.store import Store
from tokensleuth.studies import stored_result


class DecomposeKind:
    name = "decompose"

    def describe(self, spec: dict[str, Any]) -> str:
        return f"{str(spec.get('base', ''))[:10]} + {len(spec.get('patches') or [])} patches"

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        obj = stored_result(store, study_id, self.name)
        return render_decompose(obj), dict(obj, schema_version=1)


KIND = DecomposeKind()
