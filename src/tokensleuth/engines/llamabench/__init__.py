"""llama-bench: one trial as one process, its flag checks, and :data:`ENGINE`.

The llama-bench wing: its flag language lives here and in this package's modules — ``output``
(the pure parser of its output, whose names this package gives too), ``argv`` (a trial's flags
from workload names, repetitions, threads), ``params`` (its reported settings: diff, pin),
``settings`` (what the memory guard reads from its flags), ``import_`` and ``sql`` (reading its
existing output files). The core asks :data:`ENGINE`, never these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import EngineError, UserError, show
from tokensleuth.core.records import ResultRow, TrialOutcome
from tokensleuth.engines.base import ArmRuntime, EngineRun, JoinedFlags, Settings, Sharing
from tokensleuth.engines.llamabench import argv as bench_argv
from tokensleuth.engines.llamabench import params
from tokensleuth.engines.llamabench import settings as load_settings
from tokensleuth.engines.llamabench.output import (
    INT64_MAX,
    MalformedOutput,
    Progress,
    check_text,
    extract_windows,
    is_edge,
    loads_json,
    parse_json,
    parse_jsonl,
    parse_progress,
    result_row,
    summary_row,
    timed_part,
)
from tokensleuth.engines.llamabench.shared import SHARING
from tokensleuth.engines.placement import LoadSettings
from tokensleuth.engines.proc import Probe, ProcResult, process_fault, run_process

if TYPE_CHECKING:
    from tokensleuth.sources.build import EngineBuild

# the wing's face: its own names, and its output parser's (output.py)
__all__ = [
    "ENGINE", "ENGINE_LOAD_LOG_FLAG", "INT64_MAX", "OWNED_FLAGS", "LlamaBench",
    "LlamaBenchSettings", "MalformedOutput", "Progress", "check_bench_flags", "check_flags",
    "check_flags_in_source", "check_text", "extract_windows", "is_edge", "known_flags",
    "loads_json", "outcome_from", "parse_json", "parse_jsonl", "parse_progress", "pin_to",
    "probe", "probe_settings", "result_row", "run_trial", "summary_row", "timed_part",
]

# Flags tokensleuth sets itself; a user passing them would break parsing.
OWNED_FLAGS = {"-o", "--output", "-oe", "--output-err", "--progress", "-m", "--model"}


def run_trial(
    bench_bin: Path,
    model: str,
    flags: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    probe: Probe | None = None,
    wrap: Sequence[str] = (),
) -> ProcResult:
    """Run llama-bench once (under ``wrap``, a command that runs it); never raises for engine
    faults (see :func:`outcome_from`)."""
    argv = [*wrap, str(bench_bin), "-m", model, *flags, "-o", "jsonl", "--progress"]
    return run_process(argv, env=env, timeout_s=timeout_s, probe=probe, edges=is_edge)


def outcome_from(res: ProcResult, host_env: dict[str, Any], env: Mapping[str, str]) -> TrialOutcome:
    """Classify a finished llama-bench process into a stored trial outcome."""
    tail = res.tail("err")
    environment = dict(host_env, argv=list(res.argv), engine_env=dict(env))
    results: list[ResultRow] = []
    parse_error = ""
    try:
        results = [result_row(i, o) for i, o in enumerate(parse_jsonl(res.text("out")))]
    except MalformedOutput as exc:
        parse_error = str(exc)
    if (fault := process_fault(res)) is not None:
        status, message = fault
    elif parse_error:
        status, message = "garbage", f"engine printed malformed output: {parse_error}"
        results = []
    elif not results:
        status, message = "failed", "engine printed no results"
    else:
        status, message = "done", ""
    if ENGINE_LOAD_LOG_FLAG in res.argv[1:]:  # the load log is on: where the weights and buffers went
        from tokensleuth.engines.placement import parse_load_log

        err = res.text("err")
        p = parse_load_log(err)
        environment["placement"] = p.to_json() if p.model_mib else {
            "error": (err.strip().splitlines() or ["no log"])[-1][:300]}
    windows = timed_part(extract_windows(res), results) if status == "done" else []
    if status == "done":
        expected = sum(len(r.samples) for r in results)
        if len(windows) != expected:
            # Without a window per sample, resources cannot be attributed; keep the
            # samples (they are llama-bench's own timings) but say so.
            message = f"progress lines gave {len(windows)} windows for {expected} samples"
    return TrialOutcome(
        status=status,
        exit_code=res.returncode,
        message=message,
        stderr_tail=tail,
        started_at=res.started_at,
        ended_at=res.ended_at,
        t0_ns=res.t0_ns,
        t1_ns=res.t1_ns,
        env=environment,
        results=tuple(results),
        windows=tuple(windows),
    )


def known_flags(help_text: str) -> set[str]:
    """Flag names that a llama-bench ``--help`` lists."""
    flags: set[str] = set()
    for line in help_text.splitlines():
        s = line.strip()
        if not s.startswith("-"):
            continue
        head = re.split(r"\s{2,}|<", s)[0]
        flags.update(re.findall(r"(?<![\w-])-{1,2}[A-Za-z][\w-]*", head))
    return flags


def check_flags(flags: Sequence[str], help_text: str) -> None:
    """Refuse flags this llama-bench does not know, or that tokensleuth owns."""
    known = known_flags(help_text)
    for tok in flags:
        if not tok.startswith("-") or re.fullmatch(r"-\d[\d.,]*", tok):
            continue  # a value (negative numbers included)
        name = tok.split("=", 1)[0]
        if name in OWNED_FLAGS:
            raise UserError(f"llama-bench flag {name} is set by tokensleuth — remove it")
        if known and name not in known:
            raise UserError(
                f"llama-bench does not know the flag {name} — see `llama-bench --help` for its flags"
            )


def probe_settings(bench_bin: Path, model: str, flags: Sequence[str], timeout_s: float) -> dict[str, Any]:
    """The settings this llama-bench runs ``flags`` with, from one tiny run (8 prompt tokens)."""
    res = run_trial(bench_bin, model, [*flags, "-p", "8", "-n", "0", "-r", "1"], timeout_s=timeout_s)
    try:
        rows = parse_jsonl(res.text("out"))
    except MalformedOutput as exc:
        raise EngineError(f"cannot read the settings of {bench_bin}: {exc}") from exc
    if res.returncode != 0 or not rows:
        raise EngineError(f"cannot read the settings of {bench_bin}: it exited with {res.returncode} "
                          f"({res.tail('err').strip()[-200:]})")
    return params.settings(rows[0])


def probe(build: Any, model: str, flags: Sequence[str], timeout_s: float) -> dict[str, Any]:
    """The settings ``build``'s llama-bench runs ``flags`` with (probe_settings of its binary)."""
    return probe_settings(params.bench(build), model, flags, timeout_s)


def pin_to(base: Mapping[str, Any], build: Any, model: str, flags: Sequence[str], asked: set[str],
           timeout_s: float) -> tuple[list[str], list[str]]:
    """The flags that give ``build``'s llama-bench the settings ``base`` (another build's, as
    probe_settings read them) where they differ and were not ``asked`` for, and the settings
    that cannot be pinned (no flag in this version): what --pin-params does, for compare and for
    bisect and decompose alike."""
    b = params.bench(build)
    return params.pin_flags(base, probe_settings(b, model, flags, timeout_s), params.help_text(b), asked)


class LlamaBenchSettings:
    """llama-bench's settings as the core asks for them (engines.base.Settings): the pure parts
    in engines.llamabench.params, the probe that runs this engine here."""

    FIELDS = params.FIELDS
    settings = staticmethod(params.settings)
    flag_fields = staticmethod(params.flag_fields)
    diff = staticmethod(params.diff)
    show = staticmethod(params.show)
    pin_line = staticmethod(params.pin_line)
    probe = staticmethod(probe)
    pin_to = staticmethod(pin_to)


ENGINE_LOAD_LOG_FLAG = "-v"  # llama-bench's verbose output: the load log, before the first test


class LlamaBench:
    """The llama-bench engine kind: one process per trial, its repetitions timed by itself."""

    kind = "llama-bench"
    targets = ("llama-bench",)
    attaches = False
    builds = True
    reps_per_process = True
    shares_process = True
    sharing: Sharing | None = SHARING  # a pair one context setting apart in one process (its shared module)
    load_log_flag: str | None = ENGINE_LOAD_LOG_FLAG
    default_workloads: tuple[str, ...] = ()  # llama-bench's own (-p 512 -n 128)
    settings: Settings | None = LlamaBenchSettings()  # it reports its settings in every result
    default_repetitions: int | None = bench_argv.DEFAULT_REPETITIONS
    workload_flags = bench_argv.WORKLOAD_FLAGS  # -p/-n/-d/-pg: tokensleuth names the tests
    profiles = True  # the profiler takes llama-bench's flags and its -p/-n/-r
    argv_for = staticmethod(bench_argv.argv_for)

    def check_served(self, endpoint: str, models: Sequence[str]) -> None:
        return None  # llama-bench attaches to no server

    def check_source_flags(self, source: str, flags: Sequence[str]) -> None:
        check_flags_in_source(source, list(flags))  # the options its own source parses

    def check_build_flags(self, build: EngineBuild, flags: Sequence[str], help_cache: dict[str, str]) -> None:
        check_bench_flags(build, list(flags), help_cache)  # its --help knows them
    repetitions = staticmethod(bench_argv.repetitions)
    sets_repetitions = staticmethod(bench_argv.sets_repetitions)
    flag_tests = staticmethod(bench_argv.flag_tests)
    @staticmethod
    def guard(flags: Sequence[str], tests: Sequence[tuple[int, int, int]]) -> LoadSettings | None:
        """The memory guard's settings from the flags (-ngl, -ot, -ub, …), once every value the wing
        reads is one llama-bench takes (doctor and `model fit` said "fits" for `-d -1`)."""
        bench_argv.check_repetitions(flags)
        bench_argv.check_flag_values(flags)
        return load_settings.settings_from_flags(flags, tests)
    with_threads = staticmethod(bench_argv.with_threads)
    sets_threads = staticmethod(bench_argv.sets_threads)
    check_one_test = staticmethod(bench_argv.check_one_test)  # -t 1,2 is two tests in one trial

    def join_flags(self, common: Sequence[str], own: Sequence[str]) -> JoinedFlags:
        argv, overrides = bench_argv.join_flags(common, own)  # -t 1 over the common -t 2: passed once
        return JoinedFlags(tuple(argv), tuple(overrides))

    def check(self, arm: ArmRuntime, workloads: Sequence[str]) -> None:
        bench_argv.check_repetitions(arm.flags)
        bench_argv.check_flag_values(arm.flags)
        for f in arm.flags:
            if f.split("=", 1)[0] in OWNED_FLAGS:
                raise UserError(f"llama-bench flag {f.split('=', 1)[0]} is set by tokensleuth — remove it")
        for w in workloads:
            if re.search(r"xc[0-9]+$", w):  # concurrent streams (tokensleuth.core.workloads)
                raise UserError(f"arm {arm.name}: llama-bench runs one stream; workload {show(w)} needs a server "
                                "— give the arm --kind llama-server")

    def run_trial(self, arm: ArmRuntime, model: str, workload: str, argv: Sequence[str], *,
                  timeout_s: float | None, probe: Probe | None, host_env: dict[str, Any]) -> EngineRun:
        assert arm.bin_dir is not None
        res = run_trial(arm.bin_dir / "llama-bench", model, [*arm.flags, *argv], env=arm.env,
                        timeout_s=timeout_s, probe=probe, wrap=arm.wrap)
        return EngineRun(outcome_from(res, host_env, arm.env), res.pid,
                         tuple((ln.t_ns, ln.text) for ln in res.lines if ln.stream == "err"))


def check_bench_flags(build: EngineBuild, flags: list[str], help_cache: dict[str, str] | None = None) -> None:
    """Refuse flags the build's llama-bench does not know. ``help_cache`` keeps each build's
    --help text (not its verdict), so every arm's flags are checked against it."""
    from tokensleuth.sources.build import bench_help

    cache = {} if help_cache is None else help_cache
    if build.bin_dir not in cache:
        cache[build.bin_dir] = bench_help(build.binary("llama-bench"))
    check_flags(flags, cache[build.bin_dir])


def check_flags_in_source(source: str, flags: list[str]) -> None:
    """Refuse, before a build, flags that the source's llama-bench does not know: the options its
    own source parses (``arg == "-x"``) stand in for the --help that only a build can print.
    Nothing is refused where the source cannot be read (a bin: folder, another layout)."""
    from tokensleuth.sources.build import bench_source

    text = bench_source(source)
    if text is None or not flags:
        return
    known = sorted(set(re.findall(r'arg\s*==\s*"(-{1,2}[A-Za-z][\w-]*)"', text)))
    if len(known) >= 10:  # (a file that parses its options some other way says too little)
        check_flags(flags, "\n".join(known))


ENGINE = LlamaBench()
