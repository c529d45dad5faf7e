"""Import existing llama-bench outputs (JSON, JSONL, SQL) into the store."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from tokensleuth.engines.llamabench import MalformedOutput, result_row
from tokensleuth.errors import UserError
from tokensleuth.spec import spec_hash
from tokensleuth.store import ResultRow, Store, TrialOutcome


def parse_bench_file(text: str) -> tuple[str, list[dict[str, Any]]]:
    """Detect the format of a llama-bench output and return its result objects."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise UserError(f"the file looks like llama-bench JSON but is not valid JSON ({exc}) — "
                            "check that the run finished") from exc
        return "json", [d for d in data if isinstance(d, dict)]
    if stripped.startswith("{"):
        out = []
        for i, line in enumerate(stripped.splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise UserError(f"line {i} is not JSON — is this llama-bench -o jsonl output?") from exc
        return "jsonl", out
    if "INSERT INTO" in text.upper() or "CREATE TABLE" in text.upper():
        # llama-bench -o sql prints SQLite statements; run them in a private memory DB.
        mem = sqlite3.connect(":memory:")
        try:
            mem.executescript(text)
            tables = [r[0] for r in mem.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            if not tables:
                raise UserError("the SQL creates no table — is this llama-bench -o sql output?")
            mem.row_factory = sqlite3.Row
            rows = [dict(r) for r in mem.execute(f"SELECT * FROM {tables[0]}")]
        except sqlite3.Error as exc:
            raise UserError(f"cannot read the SQL ({exc}) — is this llama-bench -o sql output?") from exc
        finally:
            mem.close()
        return "sql", rows
    raise UserError("unknown file format — import reads llama-bench -o json, -o jsonl or -o sql output")


def _row(idx: int, obj: dict[str, Any]) -> ResultRow:
    if obj.get("samples_ns"):
        return result_row(idx, obj)
    # SQL output has no per-repetition samples: keep llama-bench's mean and sd.
    from tokensleuth.engines.llamabench import bench_test_name

    n_p, n_g, n_d = (int(obj.get(k) or 0) for k in ("n_prompt", "n_gen", "n_depth"))
    return ResultRow(idx, bench_test_name(n_p, n_g, n_d), n_p, n_g, n_d,
                     float(obj["avg_ts"]) if obj.get("avg_ts") not in (None, "") else None,
                     float(obj["stddev_ts"]) if obj.get("stddev_ts") not in (None, "") else None,
                     obj, ())


def import_file(store: Store, path: Path) -> tuple[str, int]:
    """Store one llama-bench output file as an ``import`` study; return (id, results)."""
    if not path.is_file():
        raise UserError(f"{path} does not exist — give the path of a llama-bench output file")
    fmt, objs = parse_bench_file(path.read_text(errors="replace"))
    if not objs:
        raise UserError(f"{path} holds no llama-bench results")
    try:
        rows = [_row(i, o) for i, o in enumerate(objs)]
    except (MalformedOutput, KeyError, ValueError) as exc:
        raise UserError(f"{path}: a result is not in llama-bench's format ({exc})") from exc
    by_model: dict[str, list[ResultRow]] = {}
    for r in rows:
        by_model.setdefault(str(r.raw.get("model_filename") or "unknown"), []).append(r)
    first = objs[0]
    engine: dict[str, Any] = {"source": f"import:{path.name}", "commit": first.get("build_commit"),
              "build_number": int(first["build_number"]) if str(first.get("build_number", "")).isdigit() else None,
              "backends": [b for b in str(first.get("backends") or "").split(",") if b]}
    spec = {"file": str(path.resolve()), "format": fmt, "n": len(rows)}
    study = store.create_study("import", spec, spec_hash(spec),
                               [("imported", engine["source"], engine, (), {})], [])
    now = time.time()
    for model, rs in by_model.items():
        rs = [ResultRow(i, r.test, r.n_prompt, r.n_gen, r.n_depth, r.avg_ts, r.stddev_ts, r.raw, r.samples)
              for i, r in enumerate(rs)]
        out = TrialOutcome("done", 0, f"imported from {path.name} ({fmt})", "", now, now, 0, 0,
                           {"imported_from": str(path)}, tuple(rs), ())
        store.import_trial(study, "imported", model, out)
    store.finish_study(study)
    return study, len(rows)
