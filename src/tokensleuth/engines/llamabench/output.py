"""llama-bench's output read: pure functions from its text to records, no process, no I/O.

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
from typing import Any

from tokensleuth.core.errors import show
from tokensleuth.core.records import ResultRow, SampleRow, WindowRow
from tokensleuth.core.workloads import (  # llama-bench's workload names, the core's since every kind uses them
    INT32_MAX,
    bench_test_name,
)
from tokensleuth.engines.proc import ProcResult
from tokensleuth.monitor.attribute import counter_deltas

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
