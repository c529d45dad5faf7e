"""What the code decides on samples stored from the lent H200 (bench/gpu/first_run.sh, Qwen3-30B-A3B
Q8_0, CUDA, -ngl 99 -fa 1 -ub 2048): the rules applied to real processes at the users' scale."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tokensleuth.analysis.results import load_cells
from tokensleuth.drivers.verdicts import causes, diagnose
from tokensleuth.store import Store

GOLDEN = Path(__file__).parent / "golden" / "h200"


def stored(tmp_path: Path, name: str) -> Store:
    dst = tmp_path / name
    shutil.copy(GOLDEN / name, dst)
    dst.chmod(0o644)
    return Store(dst)


def test_bench_in_one_process_leaves_the_cold_first_repetition_out(tmp_path: Path) -> None:
    """bench's defaults (-r 5) and -r 10: every cell's first repetition (6.5-10.5% slow) is found
    inside its one process, and the figure is the mean of the rest."""
    with stored(tmp_path, "first_run_h200.sqlite") as s:
        studies = [r[0] for r in s.db.execute("SELECT id FROM studies WHERE kind='bench'")]
        assert len(studies) == 2
        for sid in studies:
            for c in load_cells(s, sid):
                assert c.cold is not None and c.cold.count == 1, (sid, c.test, c.cold)
                assert c.kept_tokens_per_s == pytest.approx(c.tokens_per_s[1:])
                assert np.mean(c.kept_tokens_per_s) > np.mean(c.tokens_per_s)


def test_a_full_offload_is_diagnosed_on_the_gpu_not_the_threads(tmp_path: Path) -> None:
    """16 engine threads on 16 CPUs, every layer on the GPU: threads are not named."""
    with stored(tmp_path, "first_run_h200.sqlite") as s:
        for (sid,) in s.db.execute("SELECT id FROM studies"):
            procs = diagnose.load_procs(s, sid)
            assert procs and {p.where for p in procs} == {"gpu"} and {p.threads for p in procs} == {16}
            codes = causes.classify(procs, cpus=16).codes()
            assert "threads" not in codes and "gpu" in codes


def test_in_process_windows_at_tg32_are_not_short(tmp_path: Path) -> None:
    """The in-process A/A at tg32 (116-128 ms repetitions): its 60 windows are within 0.2 ms of
    the engine's own durations, and no cell carries the short-window flag."""
    with stored(tmp_path, "inprocess_windows_h200.sqlite") as s:
        (sid,) = [r[0] for r in s.db.execute("SELECT id FROM studies WHERE kind='compare'")]
        cells = load_cells(s, sid)
        assert cells and all("short-window" not in c.resources()["flags"] for c in cells)
        assert max(e for c in cells for e in c.edge_errors) < 0.01
