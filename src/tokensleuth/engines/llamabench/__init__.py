"""llama-bench: argv, output parsing (pure), and one trial = one process.

The llama-bench wing: its flag language lives here and in this package's modules — ``argv``
(a trial's flags from workload names, repetitions, threads), ``params`` (its reported
settings: diff, pin), ``settings`` (what the memory guard reads from its flags), ``import_``
and ``sql`` (reading its existing output files). The core asks :data:`ENGINE`, never these.

tokensleuth adds ``-o jsonl --progress``: results come as one JSON object per
test on stdout, and progress lines on stderr mark when each timed repetition
starts. In llama-bench the timer ``t_start`` is taken just before the
"prompt run i/N" (or "generation run i/N") line is printed and stopped just
before the next "depth run"/"prompt run"/"starting" line or, for the last
repetition of a test, before its JSON line is flushed to stdout; so the arrival
times of those lines bracket each sample's wall-clock window.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import EngineError, UserError, show
from tokensleuth.core.records import ResultRow, SampleRow, TrialOutcome, WindowRow
from tokensleuth.core.workloads import (  # llama-bench's workload names, the core's since every kind uses them
    INT32_MAX,
    bench_test_name,
)
from tokensleuth.engines.base import ArmRuntime, EngineRun, JoinedFlags, Settings, Sharing
from tokensleuth.engines.llamabench import argv as bench_argv
from tokensleuth.engines.llamabench import params
from tokensleuth.engines.llamabench import settings as load_settings
from tokensleuth.engines.llamabench.shared import SHARING
from tokensleuth.engines.placement import LoadSettings
from tokensleuth.engines.proc import Probe, ProcResult, process_fault, run_process
from tokensleuth.monitor.attribute import counter_deltas

if TYPE_CHECKING:
    from tokensleuth.sources.build import EngineBuild

# Flags tokensleuth sets itself; a user passing them would break parsing.
OWNED_FLAGS = {"-o", "--output", "-oe", "--output-err", "--progress", "-m", "--model"}

# Counts are bounded to 9 digits: llama-bench prints C ints, and an unbounded \d+
# would hand int() a number too long to convert (Python refuses > 4300 digits).
PROGRESS_RE = re.compile(
    r"^llama-bench: benchmark (?P<test>\d{1,9})/(?P<ntests>\d{1,9}): "
    r"(?P<what>starting|warmup prompt run|warmup generation run"
    r"|depth run (?P<drep>\d{1,9})/\d{1,9}(?: \(cached\))?"
    r"|prompt run (?P<prep>\d{1,9})/\d{1,9}|generation run (?P<grep>\d{1,9})/\d{1,9})\s*$"
)

# What the store can hold: SQLite integers are signed 64-bit.
INT64_MAX = 2**63 - 1
# llama-bench's JSON is two levels deep; anything much deeper is not its output.
MAX_JSON_DEPTH = 16


class MalformedOutput(ValueError):
    """The engine printed something that is not llama-bench's JSONL."""


@dataclass(frozen=True, slots=True)
class Progress:
    test: int  # 1-based, as llama-bench prints it
    kind: str  # starting | warmup | depth | prompt | gen
    rep: int  # 1-based repetition, 0 when not applicable


def parse_progress(line: str) -> Progress | None:
    """Parse one stderr line; None when it is not a progress line."""
    m = PROGRESS_RE.match(line.strip())
    if not m:
        return None
    what = m.group("what")
    test = int(m.group("test"))
    rep = int(m.group("drep") or m.group("prep") or m.group("grep") or 1)
    if test < 1 or rep < 1:
        return None  # llama-bench counts tests and repetitions from 1: not its line
    if what == "starting":
        return Progress(test, "starting", 0)
    if what.startswith("warmup"):
        return Progress(test, "warmup", 0)
    if m.group("drep"):
        return Progress(test, "depth", int(m.group("drep")))
    if m.group("prep"):
        return Progress(test, "prompt", int(m.group("prep")))
    return Progress(test, "gen", int(m.group("grep")))



# -- strict JSON ---------------------------------------------------------------------
# llama-bench prints plain JSON. Anything the store cannot hold, or that Python's json
# would turn into something odd (inf for 1e400, NaN, a 5000-digit int, a lone UTF-16
# surrogate that SQLite refuses to encode), is malformed output, found while parsing.


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > 19 or abs(int(text)) > INT64_MAX:
        raise MalformedOutput(f"integer {show(text, 24)} does not fit in 64 bits")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise MalformedOutput(f"number {show(text, 24)} is out of range")
    return value


def _json_constant(name: str) -> Any:
    raise MalformedOutput(f"{name} is not a number llama-bench prints")


def check_text(text: str) -> None:
    """Refuse strings the store and the terminal cannot carry: NUL, lone surrogates."""
    if "\x00" in text:
        raise MalformedOutput(f"a string holds a NUL character: {show(text, 40)}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedOutput(f"a string holds a lone UTF-16 surrogate: {show(text, 40)}") from None


def _check_tree(value: Any, depth: int) -> None:
    if depth > MAX_JSON_DEPTH:
        raise MalformedOutput(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, str):
        check_text(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            check_text(k)
            _check_tree(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_tree(v, depth + 1)


def loads_json(text: str) -> Any:
    """``json.loads`` for llama-bench output; MalformedOutput for anything it would not print."""
    try:
        value = json.loads(text, parse_int=_json_int, parse_float=_json_float,
                           parse_constant=_json_constant)
    except json.JSONDecodeError as exc:
        raise MalformedOutput(f"not JSON ({exc.msg}: line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise MalformedOutput("JSON nested too deeply") from None
    _check_tree(value, 0)
    return value


def parse_json(text: str) -> list[dict[str, Any]]:
    """Parse llama-bench ``-o json`` output: one array of result objects."""
    data = loads_json(text)
    if not isinstance(data, list):
        raise MalformedOutput("not a JSON array of results")
    for i, obj in enumerate(data, 1):
        if not isinstance(obj, dict):
            raise MalformedOutput(f"array element {i} is {_kind(obj)}, not a result object")
    return data


def parse_jsonl(text: str, *, need_samples: bool = True) -> list[dict[str, Any]]:
    """Parse llama-bench ``-o jsonl`` output: one object per test, nothing else."""
    out: list[dict[str, Any]] = []
    # split on "\n" only: str.splitlines would also break a JSON string at U+2028 or \x1c
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = loads_json(line)
        except MalformedOutput as exc:
            raise MalformedOutput(f"line {i}: {exc}") from None
        if not isinstance(obj, dict):
            raise MalformedOutput(f"line {i} is {_kind(obj)}, not a llama-bench result object")
        if need_samples and "samples_ns" not in obj:
            raise MalformedOutput(f"line {i} is not a llama-bench result (no samples_ns)")
        out.append(obj)
    return out


# -- results -------------------------------------------------------------------------


def _kind(value: Any) -> str:
    return {type(None): "null", bool: "a boolean", str: "a string", list: "a list",
            dict: "an object", float: "a float", int: "an integer"}.get(type(value), type(value).__name__)


def _int_field(obj: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """A count llama-bench prints as a C int: 0 <= value < 2^31."""
    if key not in obj and default is not None:
        return default
    value = obj.get(key)
    if value is None:
        raise MalformedOutput(f"result has no {key}" if key not in obj else f"{key} is null")
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedOutput(f"{key} is {_kind(value)}, not an integer")
    if not 0 <= value <= INT32_MAX:
        raise MalformedOutput(f"{key} = {value} is out of range (0 to 2^31-1)")
    return value


def _float_field(obj: Mapping[str, Any], key: str) -> float | None:
    """An optional number (llama-bench's avg_ts, stddev_ts): None when absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedOutput(f"{key} is {_kind(value)}, not a number")
    out = float(value)
    if not math.isfinite(out) or out < 0:
        raise MalformedOutput(f"{key} = {value} is not a finite non-negative number")
    return out


def _counts(obj: Mapping[str, Any]) -> tuple[int, int, int]:
    # n_depth is absent in builds older than -d (2025): those tests ran at depth 0.
    n_prompt, n_gen = _int_field(obj, "n_prompt"), _int_field(obj, "n_gen")
    n_depth = _int_field(obj, "n_depth", default=0)
    if n_prompt + n_gen <= 0:
        raise MalformedOutput("result has neither prompt nor generated tokens")
    return n_prompt, n_gen, n_depth


def result_row(idx: int, obj: Mapping[str, Any]) -> ResultRow:
    """One llama-bench JSON result -> a stored result with its samples.

    Every field the store or the statistics use is checked for type and range, so
    that any engine output is either a result or :class:`MalformedOutput`.
    """
    n_prompt, n_gen, n_depth = _counts(obj)
    tokens = n_prompt + n_gen  # llama-bench's t/s counts prompt and generated tokens
    raw_ns = obj.get("samples_ns")
    if not isinstance(raw_ns, list):
        raise MalformedOutput(f"samples_ns is {_kind(raw_ns)}, not a list of durations")
    if not raw_ns:
        raise MalformedOutput("samples_ns is empty: the result has no repetitions")
    samples_ns: list[int] = []
    for s in raw_ns:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 < s <= INT64_MAX:
            raise MalformedOutput(f"samples_ns holds {show(repr(s), 30)}, not a positive duration in ns")
        samples_ns.append(s)
    samples_ts = obj.get("samples_ts")
    if samples_ts is not None and (not isinstance(samples_ts, list) or len(samples_ts) != len(samples_ns)):
        raise MalformedOutput("samples_ts and samples_ns do not have one entry per repetition each")
    return ResultRow(
        test_idx=idx,
        test=bench_test_name(n_prompt, n_gen, n_depth),
        n_prompt=n_prompt,
        n_gen=n_gen,
        n_depth=n_depth,
        avg_ts=_float_field(obj, "avg_ts"),
        stddev_ts=_float_field(obj, "stddev_ts"),
        raw=dict(obj),
        samples=tuple(SampleRow(i, s, tokens) for i, s in enumerate(samples_ns)),
    )


def summary_row(idx: int, obj: Mapping[str, Any]) -> ResultRow:
    """A llama-bench result without per-repetition samples (``-o sql``, old JSON): its mean and sd."""
    n_prompt, n_gen, n_depth = _counts(obj)
    avg_ts = _float_field(obj, "avg_ts")
    if not avg_ts:
        raise MalformedOutput("result has neither samples_ns nor a positive avg_ts")
    return ResultRow(idx, bench_test_name(n_prompt, n_gen, n_depth), n_prompt, n_gen, n_depth,
                     avg_ts, _float_field(obj, "stddev_ts"), dict(obj), ())


def is_edge(stream: str, text: str) -> bool:
    """Whether the counters are read at this line: a line that opens a timed window (prompt or
    generation run), a depth run (it closes the repetition before it) or a JSON result line.

    The load log of ``-v`` and the rest of the engine's log are stamped and kept, never probed:
    a probe at each of those lines put the reader seconds behind. Neither are the "starting" and
    warm-up lines: they come a few ms before a repetition's first line, which a probe still under
    way at them would stamp late (12 ms of a 49 ms tg64 repetition with a 5 ms probe).
    """
    if stream == "err":
        if not text.startswith("llama-bench: benchmark "):
            return False
        p = parse_progress(text)
        return p is not None and p.kind in ("prompt", "gen", "depth")
    return text.lstrip().startswith("{")


def extract_windows(res: ProcResult) -> list[WindowRow]:
    """Timed windows of every repetition from the stamped progress and result lines.

    A window opens at the first "prompt run i" / "generation run i" line of a
    repetition and closes at the next progress line that is not part of the same
    repetition (next repetition) or, for a test's last repetition, at that test's
    JSON result line on stdout (stamped after the window opened). The two streams are
    read by two threads: stdout's line is matched to its test by its place in stdout,
    never by the order of the two streams' stamps. A window that nothing closes (the
    process ended) is closed at the process's end, without counters (nothing read them).
    """
    progress: list[tuple[int, str, int, int, Any]] = []  # (t_ns, kind, test, rep, probe), stderr order
    results: dict[int, tuple[int, Any]] = {}  # test (1-based) -> (t_ns, probe) of its JSON line
    for ln in res.lines:
        if ln.stream == "err":
            p = parse_progress(ln.text)
            if p is not None:
                progress.append((ln.t_ns, p.kind, p.test, p.rep, ln.probe))
        elif ln.text.strip().startswith("{"):
            results[len(results) + 1] = (ln.t_ns, ln.probe)
    progress.sort(key=lambda e: e[0])
    windows: list[WindowRow] = []
    i = 0
    while i < len(progress):
        t_ns, kind, test, rep, probe = progress[i]
        if kind not in ("prompt", "gen"):
            i += 1
            continue
        j = i + 1
        while j < len(progress) and progress[j][1] == "gen" and progress[j][2] == test and progress[j][3] == rep:
            j += 1  # a pp+tg repetition: its generation line is part of it
        last = j == len(progress)
        close: tuple[int, Any] = (res.t1_ns, None) if last else (progress[j][0], progress[j][4])
        if last or progress[j][2] != test:  # the test's last repetition: its JSON line closes it
            # (even stamped after the next test's first line: the two streams' readers wake apart,
            # and a window that came out long is cut to the engine's own duration by timed_part)
            own = results.get(test)
            if own is not None and t_ns <= own[0]:
                close = own
        end_ns, end_probe = close
        deltas = counter_deltas(probe, end_probe) if probe and end_probe else {}
        cpu_ms = deltas.pop("cpu_ms", None)
        windows.append(WindowRow(test - 1, rep - 1, t_ns, end_ns, cpu_ms, deltas))
        i = j
    return windows


def timed_part(windows: Sequence[WindowRow], results: Sequence[ResultRow]) -> list[WindowRow]:
    """Each window cut to the repetition llama-bench timed, its counters in proportion.

    A window closes at the next line llama-bench prints, and between the end of a timed
    repetition and that line lies untimed work: the next repetition's memory clear, which
    at depth 4096 on the 30B shape took 60 ms after a 130 ms repetition (H200). The window
    keeps its start (stamped just after llama-bench's own clock starts) and the engine's
    own duration; CPU time and energy read at its edges are taken at the window's mean
    rate over that duration, and ``untimed_ms`` says how much was cut. A window shorter
    than the repetition is left as it is (late edges: the short-window check names it).
    """
    own = {(r.test_idx, smp.rep): smp.duration_ns for r in results for smp in r.samples}
    out = []
    for w in windows:
        d, span = own.get((w.test_idx, w.rep)), w.end_ns - w.start_ns
        if d is None or d <= 0 or span <= d:
            out.append(w)
            continue
        f = d / span
        out.append(WindowRow(w.test_idx, w.rep, w.start_ns, w.start_ns + d,
                             None if w.cpu_ms is None else w.cpu_ms * f,
                             {**{k: v * f for k, v in w.counters.items()}, "untimed_ms": (span - d) / 1e6}))
    return out


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
