"""Import of llama-bench's own outputs (json, jsonl, sql) from a real run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import GOLDEN
from tokensleuth.importer import import_file, parse_bench_file
from tokensleuth.results import load_cells
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store


@pytest.mark.parametrize("fmt", ["json", "jsonl", "sql"])
def test_import_real_outputs(fmt: str, engine: EngineBuild, dense_model: Path, tmp_path: Path) -> None:
    out = subprocess.run([str(Path(engine.bin_dir) / "llama-bench"), "-m", str(dense_model), "-p", "32",
                          "-n", "8", "-r", "3", "-o", fmt], capture_output=True, text=True, check=True)
    f = tmp_path / f"run.{fmt}"
    f.write_text(out.stdout)
    with Store(tmp_path / "s.db") as s:
        study, n = import_file(s, f)
        assert n == 2
        cells = {c.test: c for c in load_cells(s, study)}
        assert set(cells) == {"pp32", "tg8"}
        if fmt == "sql":
            # SQL carries llama-bench's mean and sd only
            assert cells["tg8"].avg_ts is not None and cells["tg8"].avg_ts > 0
            assert cells["tg8"].tokens_per_s == []
        else:
            objs = [json.loads(ln) for ln in out.stdout.splitlines()] if fmt == "jsonl" else json.loads(out.stdout)
            tg = next(o for o in objs if o["n_gen"] == 8)
            assert cells["tg8"].tokens_per_s == pytest.approx(tg["samples_ts"], abs=0.01)  # llama-bench prints t/s with 2 decimals
        assert [r["kind"] for r in s.studies()] == ["import"]


def test_golden_formats_detected() -> None:
    assert parse_bench_file((GOLDEN / "b11434.json").read_text())[0] == "json"
    assert parse_bench_file((GOLDEN / "b11434-jsonl.stdout").read_text())[0] == "jsonl"
    fmt, rows = parse_bench_file((GOLDEN / "b11434.sql").read_text())
    assert fmt == "sql" and len(rows) == 2 and rows[0]["build_number"] == 11434
