"""The llama-batched-bench engine kind (one module plus its registry line): its parser on
golden lines, and the real tool under `bench` and `compare`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import tokensleuth_bin
from tokensleuth.engines import KINDS, engine_for
from tokensleuth.engines.llamabatchedbench import parse_jsonl, results_of, workload_argv
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import EngineBuild

# two lines as b11434's llama-batched-bench --output-format jsonl prints them
GOLDEN = """main: n_kv_max = 4096, n_batch = 2048, n_ubatch = 512, flash_attn = -1
{"n_kv_max": 4096, "n_batch": 2048, "n_ubatch": 512, "flash_attn": -1, "is_pp_shared": 0, "n_gpu_layers": -1, "n_threads": 1, "n_threads_batch": 1, "pp": 128, "tg": 32, "pl": 1, "n_kv": 160, "t_pp": 0.012000, "speed_pp": 10666.666992, "t_tg": 0.020000, "speed_tg": 1600.000000, "t": 0.032000, "speed": 5000.000000}
{"n_kv_max": 4096, "n_batch": 2048, "n_ubatch": 512, "flash_attn": -1, "is_pp_shared": 0, "n_gpu_layers": -1, "n_threads": 1, "n_threads_batch": 1, "pp": 128, "tg": 32, "pl": 4, "n_kv": 640, "t_pp": 0.040000, "speed_pp": 12800.000000, "t_tg": 0.050000, "speed_tg": 2560.000000, "t": 0.090000, "speed": 7111.111328}
"""


def test_each_line_is_a_prompt_and_a_generation_result_named_in_the_workload_grammar() -> None:
    rows = parse_jsonl(GOLDEN)
    got = results_of(rows)
    assert [r.test for r in got] == ["pp128", "tg32", "pp128xc4", "tg32xc4"]
    # the rate is the tool's own: tokens of all sequences over the phase's time
    assert [round(r.avg_ts or 0, 3) for r in got] == [round(128 / 0.012, 3), 1600.0, 12800.0, 2560.0]
    assert [(s.tokens, s.duration_ns) for r in got for s in r.samples] == [
        (128, 12_000_000), (32, 20_000_000), (512, 40_000_000), (128, 50_000_000)]
    assert [r.test for r in results_of(rows, keep="tg32xc4")] == ["tg32xc4"]


def test_a_shared_prompt_counts_once() -> None:
    row = dict(parse_jsonl(GOLDEN)[1], is_pp_shared=1)
    (pp, _tg) = results_of([row])
    assert pp.samples[0].tokens == 128 and pp.avg_ts == pytest.approx(128 / 0.04)


def test_a_planned_workload_runs_just_that_phase() -> None:
    assert workload_argv("tg32xc4") == ["-npp", "1", "-ntg", "32", "-npl", "4"]
    assert workload_argv("pp256") == ["-npp", "256", "-ntg", "1", "-npl", "1"]


@pytest.mark.parametrize("line", ['{"pp": 1}', '{"pp": 8, "tg": 4, "pl": 1, "t_pp": 0.0, "t_tg": 0.1}', "{nope"])
def test_malformed_lines_are_refused(line: str) -> None:
    with pytest.raises(ValueError):
        results_of(parse_jsonl(line))


def test_the_kind_is_registered_and_says_what_it_can_do() -> None:
    e = engine_for("llama-batched-bench")
    assert KINDS["llama-batched-bench"] == "llamabatchedbench"
    assert e.targets == ("llama-batched-bench",) and e.builds and not e.reps_per_process and e.settings is None


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tokensleuth_bin(), *args], env=env, capture_output=True, text=True, timeout=900)


def test_bench_runs_the_real_tool_and_stores_every_combination(engine: EngineBuild, dense_model: Path,
                                                               cli_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    p = _run(["bench", "--kind", "llama-batched-bench", "--model", str(dense_model), "--json", str(out),
              "--", "-npp", "128", "-ntg", "32", "-npl", "1,2,4", "-t", "1"], cli_env)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    tests = [r["workload"] for r in doc["results"]]
    assert tests == ["pp128", "tg32", "pp128xc2", "tg32xc2", "pp128xc4", "tg32xc4"]
    assert all(r["tokens_per_s"]["mean"] > 0 for r in doc["results"])
    assert "tg32xc4" in p.stdout


def test_bench_refuses_a_workload_it_cannot_measure(engine: EngineBuild, dense_model: Path,
                                                    cli_env: dict[str, str]) -> None:
    p = _run(["bench", "--kind", "llama-batched-bench", "--model", str(dense_model), "-w", "tg32@d512"], cli_env)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "ppN or tgN" in p.stderr, p.stderr


def test_compare_between_two_builds_finds_the_planted_wait(engine: EngineBuild, dense_model: Path,
                                                          cli_env: dict[str, str], tmp_path: Path) -> None:
    """The default engine against the planted build (a 5 ms busy wait per decode call) at 2
    parallel sequences, one thread: slower, whatever else runs on the machine."""
    from tests.planted import planted_engine

    src, _ = planted_engine()
    out = tmp_path / "c.json"
    p = _run(["compare", "--json", str(out), "--arm", f"base={DEFAULT_ENGINE}", "--arm", f"spin={src}",
              "--env", "spin:TOKENSLEUTH_SPIN_US=5000", "--kind", "base=llama-batched-bench",
              "--kind", "spin=llama-batched-bench", "--model", str(dense_model), "-w", "tg32xc2",
              "--max-pairs", "10", "--", "-t", "1"], cli_env)
    assert p.returncode == 0, p.stderr
    (c,) = json.loads(out.read_text())["comparisons"]
    assert (c["workload"], c["candidate"], c["verdict"]) == ("tg32xc2", "spin", "slower"), c
    # 160 ms of waits on a run of tens of ms. (Not the interval's far end: the sequential test stops
    # as soon as the interval clears the band, so its width is the machine's noise — 5 pairs on a
    # loaded 2-core machine gave [0.38, 0.97] around 0.60 with a 2 ms wait.)
    assert c["ratio"] < 0.9
