"""The concurrency sweep on a server study's page: one point per concurrency of one workload,
output tokens/s of all streams against the ITL p50, by the rule sweep_figure states."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokensleuth.studies.bench import sweep_figure


def _result(test: str, tps: float, itl_p50: float | None) -> dict[str, Any]:
    """One result of a bench study's JSON (studies.bench.bench_json)."""
    lat = {"ttft_ms": {"p50": 10.0}, "itl_ms": {"p50": itl_p50} if itl_p50 is not None else None}
    return {"model": "/m/tiny.gguf", "model_type": None, "workload": test, "tokens_per_s": {"mean": tps, "sd": 0.0},
            "latency": lat}


def test_one_point_per_concurrency_with_the_output_share_of_the_rate() -> None:
    results = [_result("pp512+tg128", 640.0, 6.0),
               _result("pp512+tg128xc4", 1600.0, 10.0),
               _result("tg64", 100.0, 10.0),  # one concurrency only: no sweep of its own
               _result("pp512", 900.0, None)]  # no tokens generated: no latency between tokens
    fig = sweep_figure(results)
    assert fig is not None and fig.svg.startswith("<svg")
    assert fig.rows == (("tiny pp512+tg128", "1", "6.00", "128.0"), ("tiny pp512+tg128", "4", "10.00", "320.0"))


def test_no_sweep_without_two_concurrencies() -> None:
    assert sweep_figure([_result("tg64", 100.0, 10.0), _result("tg64xc2", 150.0, None)]) is None


def test_the_roofline_of_c_streams_reads_the_weights_once_a_step(dense_model: Path, moe_model: Path,
                                                                  tmp_path: Path) -> None:
    """At xcC one decode step makes C tokens and reads a dense model's weights once: the bandwidth is
    bytes x t/s / C. A MoE's C tokens route to experts that may or may not overlap: withheld."""
    from tokensleuth.core.records import ResultRow, SampleRow, TrialOutcome
    from tokensleuth.models.info import model_info
    from tokensleuth.pages.explain import roofline_section
    from tokensleuth.store import Store

    def row(i: int, test: str, tps: float) -> ResultRow:
        return ResultRow(i, test, 0, 16, 0, tps, 0.0, {}, tuple(SampleRow(r, int(16e9 / tps), 16) for r in range(3)))

    with Store(tmp_path / "s.db") as store:
        now = 1.0
        trials = [(str(m), TrialOutcome("done", 0, "", "", now, now, 0, 1, {},
                                        (row(0, "tg16", 400.0), row(1, "tg16xc4", 1000.0))))
                  for m in (dense_model, moe_model)]
        sid = store.writes.import_study("bench", {"n": 1}, "h", ("engine", "bin:x", {"backends": ["CPU"]}), trials)
        got = roofline_section(store, sid, {}, cpu_peak_gbs=20.0)
    assert got is not None
    text = got[1]
    b = model_info(dense_model).bytes_per_token
    assert f"tg16: {b / 1e6:.1f} MB of weights per token x 400.0 t/s = {b * 400 / 1e9:.1f} GB/s" in text
    assert f"tg16xc4: {b / 1e6:.1f} MB of weights a step x 1000.0 t/s / 4 streams = {b * 1000 / 4 / 1e9:.1f} GB/s" in text
    assert f"{moe_model.stem} tg16xc4: withheld" in text
