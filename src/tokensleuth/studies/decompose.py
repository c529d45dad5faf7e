"""decompose studies: a patch series measured one patch at a time."""

from __future__ import annotations

from typing import Any

from tokensleuth.errors import UserError
from tokensleuth.report.markdown import render_decompose
from tokensleuth.store import Store


class DecomposeKind:
    name = "decompose"

    def describe(self, spec: dict[str, Any]) -> str:
        return f"{str(spec.get('base', ''))[:10]} + {len(spec.get('patches') or [])} patches"

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        obj = store.get_state(study_id, "result")
        if obj is None:
            raise UserError(f"decompose {study_id} has not finished — resume it with the same command and --resume")
        return render_decompose(obj), dict(obj, schema_version=1)


KIND = DecomposeKind()
