"""Import existing llama-bench outputs (JSON, JSONL, SQL) into the store.

Every format is read as data by a pure parser (the SQL too: it is never run), each
result is checked like live engine output, and the whole file is stored in one
transaction: a file is imported entirely or, with one error line, not at all.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import UserError, show
from tokensleuth.core.records import ResultRow, TrialOutcome, spec_hash
from tokensleuth.engines.llamabench.output import (
    MalformedOutput,
    parse_json,
    parse_jsonl,
    result_row,
    summary_row,
)
from tokensleuth.engines.llamabench.sql import parse_sql

if TYPE_CHECKING:
    from tokensleuth.store import Store

FORMATS_HINT = "import reads llama-bench -o json, -o jsonl or -o sql output"
# A file that starts with an SQL statement is read as SQL, so that a statement other
# than llama-bench's two is named in the error rather than called an unknown format.
SQL_START = re.compile(r"(?i)(CREATE|INSERT|ATTACH|DETACH|DROP|SELECT|PRAGMA|BEGIN|DELETE|UPDATE|ALTER|WITH"
                       r"|REPLACE|VACUUM)\b")


def _detect(text: str) -> str:
    head = text.lstrip().lstrip("\ufeff").lstrip()
    if head.startswith("["):
        return "json"
    if head.startswith("{"):
        return "jsonl"
    if SQL_START.match(head):
        return "sql"
    raise UserError(f"unknown file format — {FORMATS_HINT}")


def sniff(path: Path) -> bool:
    """Whether the file starts as llama-bench's -o json, jsonl or sql output does."""
    try:
        with path.open("rb") as f:
            head = f.read(4096).decode("utf-8", "replace")
        _detect(head)
    except (OSError, UserError):
        return False
    return True


def parse_bench_file(text: str) -> tuple[str, list[dict[str, Any]]]:
    """Detect the format of a llama-bench output and return its result objects."""
    fmt = _detect(text)
    body = text.lstrip().lstrip("\ufeff")
    try:
        if fmt == "json":
            return fmt, parse_json(body)
        if fmt == "jsonl":
            return fmt, parse_jsonl(body, need_samples=False)
        return fmt, parse_sql(body)
    except MalformedOutput as exc:
        hint = {"json": "check that the run finished and the file is llama-bench -o json output",
                "jsonl": "is this llama-bench -o jsonl output?",
                "sql": "is this llama-bench -o sql output? (only its CREATE TABLE and INSERT "
                       "statements are read, never run)"}[fmt]
        raise UserError(f"the file is not valid llama-bench {fmt.upper()}: {exc} — {hint}") from None


def _row(idx: int, obj: dict[str, Any]) -> ResultRow:
    # JSON formats carry each repetition; SQL (and JSON before samples_ns existed)
    # carries llama-bench's mean and sd only.
    return result_row(idx, obj) if "samples_ns" in obj else summary_row(idx, obj)


def _shown_path(path: Path) -> str:
    """The path as text the store can hold (a non-UTF-8 name would not encode)."""
    return os.fsencode(path).decode("utf-8", "replace")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def import_file(store: Store, path: Path) -> tuple[str, int]:
    """Store one llama-bench output file as an ``import`` study; return (id, results)."""
    shown = _shown_path(path)
    if path.is_dir():
        raise UserError(f"{show(shown)} is a folder — give the path of a llama-bench output file")
    if not path.is_file():
        raise UserError(f"{show(shown)} does not exist — give the path of a llama-bench output file")
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise UserError(f"cannot read {show(shown)} ({exc.strerror}) — check the path and its permissions") from None
    fmt, objs = parse_bench_file(text)
    if not objs:
        raise UserError(f"{show(shown)} holds no llama-bench results — {FORMATS_HINT}")
    rows = []
    for i, obj in enumerate(objs):
        try:
            rows.append(_row(i, obj))
        except MalformedOutput as exc:
            raise UserError(f"result {i + 1} of {show(shown)} is not a llama-bench result: {exc} — "
                            f"{FORMATS_HINT}") from None
    by_model: dict[str, list[ResultRow]] = {}
    for r in rows:
        by_model.setdefault(_text(r.raw.get("model_filename")) or "unknown", []).append(r)
    first = objs[0]
    build = first.get("build_number")
    backends = _text(first.get("backends")) or ""
    name = Path(shown).name
    engine: dict[str, Any] = {
        "source": f"import:{name}", "commit": _text(first.get("build_commit")),
        "build_number": build if isinstance(build, int) and not isinstance(build, bool) else None,
        "backends": [b for b in backends.split(",") if b]}
    spec = {"file": _shown_path(path.resolve()), "format": fmt, "n": len(rows)}
    now = time.time()
    trials = []
    for model, rs in by_model.items():
        rs = [ResultRow(i, r.test, r.n_prompt, r.n_gen, r.n_depth, r.avg_ts, r.stddev_ts, r.raw, r.samples)
              for i, r in enumerate(rs)]
        trials.append((model, TrialOutcome("done", 0, f"imported from {name} ({fmt})", "", now, now, 0, 0,
                                           {"imported_from": spec["file"]}, tuple(rs), ())))
    study = store.writes.import_study("import", spec, spec_hash(spec), ("imported", engine["source"], engine), trials)
    return study, len(rows)
