"""JSON exports (DESIGN.md contracts), each carrying ``schema_version``."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokensleuth.analysis.results import Cell
from tokensleuth.analysis.stats import summarize
from tokensleuth.core.errors import UserError
from tokensleuth.core.paths import write_atomic

JSON_SCHEMA_VERSION = 1


def bench_json(cells: Sequence[Cell], study_id: str, engine: dict[str, Any]) -> dict[str, Any]:
    results = []
    for c in cells:
        tps: dict[str, float | None]
        if c.kept_tokens_per_s:  # stalled repetitions left out, as in the table; "samples" keeps them
            s = summarize(c.kept_tokens_per_s)
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
            # leading repetitions left out of every trial's t/s and resources (stats.cold_leading)
            "cold_repetitions": {"per_trial": c.cold.count if c.cold else 0,
                                 "ratio": c.cold.ratio if c.cold else None,
                                 "processes": c.cold.processes if c.cold else len(c.trial_means)},
            "resources": c.resources(),
            **({"latency": lat} if (lat := c.latency()) is not None else {}),
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


def check_json_target(path: Path, option: str = "--json") -> None:
    """Refuse a ``--json`` path that cannot be written, before any engine time is spent.

    A path that exists must be writable and not a directory; a new file needs its
    nearest existing folder to be a writable directory (missing folders are made).
    """
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UserError(f"cannot use {option} {path}: {exc.strerror or exc} — give another path") from None
    if st is not None:
        if path.is_dir():
            raise UserError(f"{option} {path} is a directory — give a file path, e.g. {path / ('report.html' if option == '--html' else 'result.json')}")
        if path.exists() and not os.access(path, os.W_OK):
            raise UserError(f"{option} {path} is not writable — give another path or change its permissions")
        return
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UserError(f"{option} {path}: {folder} is not a directory — give a path inside a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: cannot create files in {folder} — give a writable path")


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """Write ``obj`` to ``path`` (paths.write_atomic: a regular file whole or not at all).
    Write errors are OSError, for the caller to report."""
    write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")
