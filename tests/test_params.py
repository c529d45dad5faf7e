"""llama-bench's own settings: differences nobody asked for are named, and can be pinned."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import GOLDEN, tokensleuth_bin
from tokensleuth.engines.llamabench import params
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
    # the other way round: an old version cannot be told "auto" (-fa), nor -1 (-ngl: its ranges
    # are digits only; its help shows no negative default)
    flags, cannot = params.pin_flags(b9437, b9432, OLD_HELP, set())
    assert flags == [] and cannot == ["n_gpu_layers=-1 (this version does not accept it)",
                                      "flash_attn=auto (this version does not accept it)"]
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
    """A llama-bench whose default micro-batch changed from 512 to 256 (as a newer release might).
    (Not the thread count: its default is this machine's cores, and two threads on a 2-core
    machine beside another process stall on the spin barrier; every arm here runs at -t 1.)"""
    d.mkdir()
    w = d / "llama-bench"
    w.write_text(f'#!/bin/bash\ncase " $* " in *" -ub "*) exec {real} "$@";; esac\nexec {real} "$@" -ub 256\n')
    w.chmod(0o755)
    return d


def test_compare_names_an_unasked_setting_change_and_pin_params_removes_it(
        engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    new = _changed_default(tmp_path / "new", Path(engine.bin_dir) / "llama-bench")
    base_args = [tokensleuth_bin(), "compare", "--arm", f"base=bin:{engine.bin_dir}", "--arm", f"new=bin:{new}",
                 "-m", str(dense_model), "-w", "tg16", "--max-pairs", "5", "--band", "5%"]
    out = tmp_path / "c.json"
    p = subprocess.run([*base_args, "--json", str(out), "--", "-r", "2", "-t", "1"],
                       env=cli_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    c = json.loads(out.read_text())["comparisons"][0]
    assert c["param_diffs"] == [{"field": "n_ubatch", "baseline": 512, "candidate": 256, "requested": False}]
    assert "Not asked for: new's llama-bench ran with other settings than base's (n_ubatch: 512 → 256)" in p.stdout
    assert "--pin-params" in p.stdout
    out2 = tmp_path / "c2.json"
    p = subprocess.run([*base_args, "--pin-params", "--json", str(out2), "--", "-r", "2", "-t", "1"],
                       env=cli_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "pinned new to base's settings: -ub 512" in p.stderr
    j = json.loads(out2.read_text())
    assert j["arms"]["new"]["flags"] == ["-ub", "512"]
    assert j["comparisons"][0]["param_diffs"] == []
    assert "Not asked for" not in p.stdout


# -- the settings map against golden --help and settings of releases across the history -------
# (bench/golden_help.py builds each release and writes them)

HELPS = GOLDEN / "help"
RELEASES = sorted(p.name.removesuffix(".settings.json") for p in HELPS.glob("*.settings.json"))
# what a result row reports besides the run's settings: the build, the model, the test, the timings
NOT_SETTINGS = {"build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
                "model_size", "model_n_params", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns",
                "avg_ts", "stddev_ts", "samples_ns", "samples_ts"}


def _release(name: str) -> tuple[dict[str, object], str]:
    doc = json.loads((HELPS / f"{name}.settings.json").read_text())
    return doc["row"], (HELPS / f"{name}.txt").read_text()


def test_the_goldens_span_the_history() -> None:
    numbers = sorted(int(r[1:]) for r in RELEASES if r.startswith("b"))
    assert len(numbers) >= 5 and numbers[0] < 9500 and numbers[-1] >= 11434, RELEASES
    assert any(r.startswith("llama-cpp-python-") for r in RELEASES), RELEASES


@pytest.mark.parametrize("name", RELEASES)
def test_every_setting_a_release_reports_is_in_the_map_with_a_flag_it_accepts(name: str) -> None:
    row, help_ = _release(name)
    unknown = set(row) - NOT_SETTINGS - set(params.SETTINGS) - set(params.UNPINNABLE)
    assert not unknown, f"{name} reports settings the map does not know: {sorted(unknown)}"
    for field in set(row) & set(params.SETTINGS):
        assert any(params.accepted_values(help_, f) != [] for f in params.SETTINGS[field]), (
            f"{name}: none of {params.SETTINGS[field]} (for {field}) is in its --help")


@pytest.mark.parametrize("base,cand", [(a, b) for a in RELEASES for b in RELEASES if a != b])
def test_pinning_any_release_to_any_other_passes_only_flags_and_values_its_help_lists(base: str, cand: str) -> None:
    from tokensleuth.engines.llamabench import known_flags

    b_row, _ = _release(base)
    c_row, c_help = _release(cand)
    b_set, c_set = params.settings(b_row), params.settings(c_row)
    flags, cannot = params.pin_flags(b_set, c_set, c_help, set())
    pairs = list(zip(flags[::2], flags[1::2], strict=True))
    for flag, value in pairs:
        assert flag in known_flags(c_help), (flag, cand)
        choices = params.accepted_values(c_help, flag)
        assert choices is None or value in choices, (flag, value, choices)
    # every difference is either pinned or named as one this version cannot be given
    named = {c.split("=")[0].split(" ")[0] for c in cannot}
    pinned = params.flag_fields(flags)
    for d in params.diff(b_set, c_set, set()):
        assert d.field in pinned or d.field in named, (d, flags, cannot)


def test_the_mmap_setting_renamed_to_load_mode_is_pinned_both_ways() -> None:
    old, old_help = _release("b9093")
    new, new_help = _release("b11434")
    assert "use_mmap" in old and "load_mode" not in old and "load_mode" in new and "use_mmap" not in new
    assert params.pin_flags(params.settings(old), params.settings(new), new_help, set()) == (
        ["-ngl", "99", "-fa", "off", "-lm", "mmap"], [])
    flags, cannot = params.pin_flags(params.settings(new), params.settings(old), old_help, set())
    assert "-mmp" not in flags and "load_mode=auto (this version does not accept it)" in cannot
    # b9093 refuses `-ngl -1` ("invalid range format", seen on the real engine): never passed
    assert "-1" not in flags and "n_gpu_layers=-1 (this version does not accept it)" in cannot
    no_mmap = dict(params.settings(new), load_mode="none")
    assert params.pin_flags(no_mmap, params.settings(old), old_help, set())[0][-2:] == ["-mmp", "0"]
    assert params.flag_fields(["-mmp", "0"]) == {"use_mmap", "load_mode"}  # asked for, in either name


def test_bisect_pin_params_gives_each_candidate_the_good_sides_settings(
        engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], db: Path, tmp_path: Path) -> None:
    """--pin-params in a bisect (the Judge's pinning, the same code as compare's): the candidates
    whose default changed run with the good side's value, the others with nothing added."""
    import sqlite3

    real = Path(engine.bin_dir) / "llama-bench"
    dirs = []
    for i, changed in enumerate((False, False, True, True)):
        d = tmp_path / f"r{i}"
        if changed:
            _changed_default(d, real)
        else:
            d.mkdir()
            (d / "llama-bench").write_text(f'#!/bin/bash\nexec {real} "$@"\n')
            (d / "llama-bench").chmod(0o755)
        dirs.append(d)
    p = subprocess.run([tokensleuth_bin(), "bisect", *[a for d in dirs for a in ("--bin", str(d))], "-m",
                        str(dense_model), "-w", "tg16", "--band", "50%", "--max-pairs", "5", "--pin-params",
                        "--", "-r", "1", "-t", "1"], env=cli_env, capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 1), p.stderr[-2000:]  # the verdicts are the machine's; the pinning is the code's
    # the endpoints always run (r3 against r0); which steps follow is the machine's verdicts'
    pinned = re.findall(r"pinned \S+(r\d) to \S+r0's settings: (.*)", p.stderr)
    assert ("r3", "-ub 512") in pinned
    for who, what in pinned:
        assert what == ("-ub 512" if who in ("r2", "r3") else "nothing differed"), (who, what)
    con = sqlite3.connect(db)  # each compare study's arms, with the flags they ran with
    flags = {src: json.loads(f) for src, f in con.execute("SELECT source, flags_json FROM arms")}
    assert flags and all(f == (["-ub", "512"] if src.endswith(("r2", "r3")) else []) for src, f in flags.items()
                         if src.startswith("bin:")), flags
