"""llama-bench's own settings: differences nobody asked for are named, and can be pinned."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import GOLDEN, tokensleuth_bin
from tokensleuth.engines import llamabench_params as params
from tokensleuth.sources.build import EngineBuild

HELP = (GOLDEN / "llama-bench-help-b11434.txt").read_text()
# how b9432's llama-bench listed the two settings its successor changed
OLD_HELP = ("  -ngl, --n-gpu-layers <n>                  (default: 99)\n"
            "  -fa, --flash-attn <0|1>                   (default: 0)\n")


def test_the_b9437_default_change_is_named_and_pinned_in_each_versions_syntax() -> None:
    b9432 = {"n_threads": 2, "n_gpu_layers": 99, "flash_attn": False, "n_batch": 2048}
    b9437 = {"n_threads": 2, "n_gpu_layers": -1, "flash_attn": -1, "n_batch": 2048, "load_mode": "auto"}
    d = params.diff(b9432, b9437, set())
    assert [x.label() for x in d] == ["n_gpu_layers: 99 → -1", "flash_attn: false → auto"]
    flags, cannot = params.pin_flags(b9432, b9437, HELP, set())
    assert flags == ["-ngl", "99", "-fa", "off"] and cannot == []
    # the other way round: an old version cannot be told "auto"
    flags, cannot = params.pin_flags(b9437, b9432, OLD_HELP, set())
    assert flags == ["-ngl", "-1"] and cannot == ["flash_attn=auto (this version does not accept it)"]
    # flash_attn spelled three ways across versions is one setting
    assert params.diff({"flash_attn": True}, {"flash_attn": 1}, set()) == []
    assert params.diff({"flash_attn": "on"}, {"flash_attn": True}, set()) == []


def test_asked_for_differences_are_not_pinned() -> None:
    asked = params.flag_fields(["-t", "1", "-r", "3"])
    assert asked == {"n_threads"}
    d = params.diff({"n_threads": 2}, {"n_threads": 1}, asked)
    assert d[0].requested
    assert params.pin_flags({"n_threads": 2}, {"n_threads": 1}, HELP, asked) == ([], [])
    assert params.accepted_values(HELP, "-fa") == ["on", "off", "auto"]
    assert params.accepted_values(HELP, "--no-such") == []
    assert params.accepted_values(HELP, "-ngl") is None


def _changed_default(d: Path, real: Path) -> Path:
    """A llama-bench whose default thread count changed to 1 (as a newer release might)."""
    d.mkdir()
    w = d / "llama-bench"
    w.write_text(f'#!/bin/bash\ncase " $* " in *" -t "*) exec {real} "$@";; esac\nexec {real} "$@" -t 1\n')
    w.chmod(0o755)
    return d


def test_compare_names_an_unasked_setting_change_and_pin_params_removes_it(
        engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    new = _changed_default(tmp_path / "new", Path(engine.bin_dir) / "llama-bench")
    base_args = [tokensleuth_bin(), "compare", "--arm", f"base=bin:{engine.bin_dir}", "--arm", f"new=bin:{new}",
                 "-m", str(dense_model), "-w", "tg16", "--max-pairs", "5", "--band", "5%"]
    out = tmp_path / "c.json"
    p = subprocess.run([*base_args, "--json", str(out), "--", "-r", "2"],
                       env=cli_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    c = json.loads(out.read_text())["comparisons"][0]
    threads = c["param_diffs"][0]["baseline"]  # llama-bench's default: this machine's cores
    assert threads != 1
    assert c["param_diffs"] == [{"field": "n_threads", "baseline": threads, "candidate": 1, "requested": False}]
    assert (f"Not asked for: new's llama-bench ran with other settings than base's (n_threads: {threads} → 1)"
            in p.stdout)
    assert "--pin-params" in p.stdout
    out2 = tmp_path / "c2.json"
    p = subprocess.run([*base_args, "--pin-params", "--json", str(out2), "--", "-r", "2"],
                       env=cli_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"pinned new to base's settings: -t {threads}" in p.stderr
    j = json.loads(out2.read_text())
    assert j["arms"]["new"]["flags"] == ["-t", str(threads)]
    assert j["comparisons"][0]["param_diffs"] == []
    assert "Not asked for" not in p.stdout
