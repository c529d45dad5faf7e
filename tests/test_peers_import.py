"""Import of llama-benchy's result files: each run keeps the TTFTs of its own requests. The
files in tests/fixtures/benchy were written by llama-benchy 0.4.0's own code (make.py there),
request r of run i having its first token 100 ms * (r + 1) + 10 ms * i + 1 ms * concurrency
after it was sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokensleuth.analysis.results import load_cells
from tokensleuth.engines import peers
from tokensleuth.store import Store

BENCHY = Path(__file__).resolve().parent / "fixtures" / "benchy"


def _ttft(run: int, request: int, conc: int) -> float:
    return 100.0 * (request + 1) + 10.0 * run + conc


def test_each_run_keeps_its_own_requests_ttfts_at_concurrency_4() -> None:
    _, _, _, rows, notes = peers._benchy(BENCHY / "c1_c4.json")
    by = {r.test: r for r in rows}
    assert set(by) == {"pp64+tg8", "pp64+tg8xc4"}
    for name, conc in (("pp64+tg8", 1), ("pp64+tg8xc4", 4)):
        samples = by[name].samples
        assert len(samples) == 2
        for run, s in enumerate(samples):
            want = [_ttft(run, r, conc) for r in range(conc)]
            assert s.metrics["ttft_ms_all"] == pytest.approx(want), (name, run)
            assert s.ttft_ns == pytest.approx(min(want) * 1e6, abs=1)  # the run's first, as tokensleuth's own
    assert notes == []


def test_every_ttft_in_the_file_is_kept_once(tmp_path: Path) -> None:
    f = BENCHY / "c1_c4.json"
    written = {b["concurrency"]: b["e2e_ttft"]["values"] for b in json.loads(f.read_text())["benchmarks"]}
    with Store(tmp_path / "s.db") as s:
        study, n = peers.import_file(s, f)
        cells = {c.test: c for c in load_cells(s, study)}
    assert n == 2
    assert sorted(cells["pp64+tg8xc4"].ttft_ms) == pytest.approx(sorted(written[4]))
    assert sorted(cells["pp64+tg8"].ttft_ms) == pytest.approx(sorted(written[1]))


def test_a_failed_request_leaves_the_runs_ttfts_untold_and_says_so() -> None:
    # one request of the first run failed: 7 TTFTs for 2 runs of 4, and nothing says whose they are
    _, _, _, rows, notes = peers._benchy(BENCHY / "c4_failed.json")
    (row,) = rows
    assert len(row.samples) == 2  # the rates are kept
    assert all(s.metrics["ttft_ms_all"] == [] and s.ttft_ns is None for s in row.samples)
    assert len(notes) == 1 and "7 TTFTs for 2 runs of 4 requests" in notes[0] and "which run" in notes[0]
    assert row.raw["llama_benchy"]["e2e_ttft"]["mean"] > 0  # llama-benchy's own mean stays


def test_runs_are_told_apart_only_when_the_counts_say_so() -> None:
    b = {"e2e_ttft": {"values": [1.0, 2.0, 3.0, 4.0]}, "pp_throughput": {"values": [9.0, 9.0]}}
    assert peers._benchy_ttfts(b, 2, 2) == [[1.0, 2.0], [3.0, 4.0]]
    assert peers._benchy_ttfts(b, 2, 1) is None  # more TTFTs than one run's requests
    assert peers._benchy_ttfts(dict(b, pp_throughput={"values": [9.0, 9.0, 9.0]}), 2, 2) is None  # a run gave no rate
    assert peers._benchy_ttfts(dict(b, pp_throughput=None), 2, 2) is None
    assert peers._benchy_ttfts({"e2e_ttft": {"values": [1.0, 2.0]}}, 1, 2) == [[1.0], [2.0]]
    assert peers._benchy_ttfts({"e2e_ttft": {"values": [1.0, 2.0]}}, 1, 1) is None
