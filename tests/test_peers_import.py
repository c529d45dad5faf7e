"""Import of the peers' result files. llama-benchy's: each run keeps the TTFTs of its own
requests; c1_c4.json and c4_failed.json in tests/fixtures/benchy were written by llama-benchy
0.4.0's own code (make.py there), request r of run i having its first token 100 ms * (r + 1)
+ 10 ms * i + 1 ms * concurrency after it was sent. Real runs, no server needed here:
AIPerf 0.13.0's artifacts (tests/fixtures/aiperf/c1, c4) and llama-benchy's real_c1_c4.json,
made against a real llama-server by tests/fixtures/aiperf/make.py, each imported and held
against the numbers inside it."""

from __future__ import annotations

import json
import statistics
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


# -- real runs: files that AIPerf 0.13.0 and llama-benchy 0.4.0 wrote against a real llama-server
# (tests/fixtures/aiperf/make.py), each read back and held against the numbers inside it ---------

AIPERF = Path(__file__).resolve().parent / "fixtures" / "aiperf"


def _in_flight(spans: list[tuple[int, int]]) -> int:
    """The most requests open at one instant, from their (start, end) times."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize(("conc", "name"), [(1, "pp64+tg16"), (4, "pp64+tg16xc4")])
def test_a_real_aiperf_run_is_imported_with_its_own_figures(tmp_path: Path, conc: int, name: str) -> None:
    folder = AIPERF / f"c{conc}"
    summary = json.loads((folder / "profile_export_aiperf.json").read_text())
    records = [json.loads(line) for line in (folder / "profile_export.jsonl").read_text().splitlines() if line]
    timed = [r for r in records if r["metadata"]["benchmark_phase"] == "profiling" and "error" not in r]
    assert len(timed) == summary["request_count"]["avg"]
    with Store(tmp_path / "s.db") as s:
        study, n = peers.import_file(s, folder)
        (cell,) = load_cells(s, study)
    _, raw, _, (row,), notes = peers._aiperf(folder)
    assert n == 1 and cell.test == row.test == name and notes == []

    # the concurrency: recorded as the run's setting, and seen in the requests' own times
    assert raw["concurrency"] == conc
    assert _in_flight([(r["metadata"]["request_start_ns"], r["metadata"]["request_end_ns"]) for r in timed]) == conc

    # each request's TTFT, and every inter-chunk interval, as the file has them
    ttft = [r["metrics"]["time_to_first_token"]["value"] for r in timed]
    assert sorted(cell.ttft_ms) == pytest.approx(sorted(ttft), abs=1e-4)
    chunks = [x for r in timed for x in r["metrics"]["inter_chunk_latency"]["value"]]
    assert sorted(cell.itl_ms) == pytest.approx(sorted(chunks), abs=1e-4)
    lat = cell.latency()
    assert lat is not None
    for ours, theirs in (("ttft_ms", "time_to_first_token"), ("itl_ms", "inter_chunk_latency")):
        for p in ("p50", "p90", "p99"):
            assert lat[ours][p] == pytest.approx(summary[theirs][p], abs=1e-4), (ours, p)

    # AIPerf's inter-token latency is one mean per request, (latency - TTFT) / (n - 1), n the
    # server's count; the one-stream decode rate the import keeps is 1 / that
    itl = []
    for r in timed:
        m = r["metrics"]
        n_out = m["usage_completion_tokens"]["value"]
        assert n_out == 16
        itl.append((m["request_latency"]["value"] - m["time_to_first_token"]["value"]) / (n_out - 1))
        assert m["inter_token_latency"]["value"] == pytest.approx(itl[-1], rel=1e-9)
    assert sorted(cell.client_tg_ts) == pytest.approx(sorted(1000 / x for x in itl), rel=1e-9)
    assert statistics.fmean(cell.client_tg_ts) == pytest.approx(summary["output_token_throughput_per_user"]["avg"],
                                                                rel=1e-6)
    # a sample's rate: the request's output tokens over its whole latency
    assert sorted(s.tokens_per_s for s in row.samples) == pytest.approx(
        sorted(16 / (r["metrics"]["request_latency"]["value"] / 1e3) for r in timed), rel=1e-6)


def test_a_real_llama_benchy_run_is_imported_with_its_own_figures(tmp_path: Path) -> None:
    f = BENCHY / "real_c1_c4.json"
    tests = {b["concurrency"]: b for b in json.loads(f.read_text())["benchmarks"]}
    assert set(tests) == {1, 4}
    with Store(tmp_path / "s.db") as s:
        study, n = peers.import_file(s, f)
        cells = {c.test: c for c in load_cells(s, study)}
    _, _, _, rows, notes = peers._benchy(f)
    assert n == 2 and notes == []
    for conc, row in ((1, rows[0]), (4, rows[1])):
        b = tests[conc]
        assert row.test == ("pp64+tg16" if conc == 1 else "pp64+tg16xc4") and row.raw["concurrency"] == conc
        runs = len(b["tg_throughput"]["values"])
        assert runs == 2 and len(row.samples) == runs
        # a run's rate is llama-benchy's tg_throughput: its requests' tokens after the first over the time
        # from the first token of any of them to the last
        assert [s.tokens_per_s for s in row.samples] == pytest.approx(b["tg_throughput"]["values"], rel=1e-6)
        assert all(s.tokens == 15 * conc for s in row.samples)
        # each run keeps its own requests' TTFTs: the file's list, in blocks of the concurrency
        ttft = b["e2e_ttft"]["values"]
        assert len(ttft) == runs * conc
        for i, sample in enumerate(row.samples):
            assert sample.metrics["ttft_ms_all"] == pytest.approx(ttft[i * conc:(i + 1) * conc])
        assert sorted(cells[row.test].ttft_ms) == pytest.approx(sorted(ttft))
    # at one stream the run's rate and the request's are one figure, and the import keeps it as the decode rate
    one = tests[1]
    assert one["tg_throughput"]["values"] == one["tg_req_throughput"]["values"]
    assert cells["pp64+tg16"].client_tg_ts == pytest.approx(one["tg_req_throughput"]["values"])
    # at four, the run's rate counts 4 streams at once: above one request's own rate
    four = tests[4]
    assert statistics.fmean(four["tg_throughput"]["values"]) > statistics.fmean(four["tg_req_throughput"]["values"])
