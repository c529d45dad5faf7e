"""The concurrency sweep on a server study's page: one point per concurrency of one workload,
output tokens/s of all streams against the ITL p50, by the rule sweep_figure states."""

from __future__ import annotations

from tokensleuth.analysis.results import Cell
from tokensleuth.studies.bench import sweep_figure


def _cell(test: str, tps: list[float], itl: list[float]) -> Cell:
    return Cell("engine", "/m/tiny.gguf", test, 0, {}, tokens_per_s=tps, kept_tokens_per_s=tps,
                ttft_ms=[10.0] * len(tps), itl_ms=itl)


def test_one_point_per_concurrency_with_the_output_share_of_the_rate() -> None:
    cells = [_cell("pp512+tg128", [640.0, 640.0], [5.0, 6.0, 7.0]),
             _cell("pp512+tg128xc4", [1600.0, 1600.0], [9.0, 10.0, 11.0]),
             _cell("tg64", [100.0], [10.0]),  # one concurrency only: no sweep of its own
             _cell("pp512", [900.0], [])]  # no tokens generated: no latency between tokens
    fig = sweep_figure(cells)
    assert fig is not None and fig.svg.startswith("<svg")
    assert fig.rows == (("tiny pp512+tg128", "1", "6.00", "128.0"), ("tiny pp512+tg128", "4", "10.00", "320.0"))


def test_no_sweep_without_two_concurrencies() -> None:
    assert sweep_figure([_cell("tg64", [100.0], [10.0]), _cell("tg64xc2", [150.0], [])]) is None
