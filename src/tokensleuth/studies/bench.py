"""bench (and import) studies: llama-bench tables of every arm's samples."""

from __future__ import annotations

import json
from typing import Any

from tokensleuth.analysis.results import load_cells
from tokensleuth.report.figures import Figure, bench_figures
from tokensleuth.report.jsonout import bench_json
from tokensleuth.report.markdown import render_bench
from tokensleuth.store import Store
from tokensleuth.studies import KindBase


class BenchKind(KindBase):
    name = "bench"
    history = True
    bandwidth = True

    def describe(self, spec: dict[str, Any]) -> str:
        return str(spec.get("engine") or spec.get("file") or "")

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        cells = load_cells(store, study_id)
        engine_json = json.loads(store.arms(study_id)[0]["engine_json"])
        return render_bench(cells, study_id, engine_json), bench_json(cells, study_id, engine_json)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return bench_figures(store, study_id)


class ImportKind(BenchKind):
    """An imported llama-bench output: its tables and history; no build of ours to explain."""

    name = "import"
    bandwidth = False


KIND = BenchKind()
IMPORT = ImportKind()
