"""JSON exports (DESIGN.md contracts), each carrying ``schema_version``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokensleuth.results import Cell
from tokensleuth.stats import summarize

JSON_SCHEMA_VERSION = 1


def bench_json(cells: Sequence[Cell], study_id: str, engine: dict[str, Any]) -> dict[str, Any]:
    results = []
    for c in cells:
        tps: dict[str, float | None]
        if c.tokens_per_s:
            s = summarize(c.tokens_per_s)
            tps = {"mean": s.mean, "sd": s.sd}
        else:
            tps = {"mean": c.avg_ts, "sd": c.stddev_ts}
        results.append({
            "model": c.model,
            "model_type": c.meta.get("model_type"),
            "workload": c.test,
            "params": {k: v for k, v in c.meta.items() if k not in ("model_type",)},
            "tokens_per_s": tps,
            "samples": list(c.tokens_per_s),
            "resources": c.resources(),
        })
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "study": study_id,
        "engine": {
            "source": engine.get("source"),
            "commit": engine.get("commit"),
            "build_number": engine.get("build_number"),
            "backends": list(engine.get("backends") or []),
            "cmake_flags": list(engine.get("cmake_flags") or []),
            "compiler": engine.get("compiler"),
        },
        "results": results,
    }


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """Write atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    tmp.replace(path)
