"""llama-bench: argv, output parsing (pure), and one trial = one process.

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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokensleuth.engines.proc import Probe, ProcResult, run_process
from tokensleuth.monitor.attribute import counter_deltas
from tokensleuth.errors import UserError
from tokensleuth.store import ResultRow, SampleRow, TrialOutcome, WindowRow

# Flags tokensleuth sets itself; a user passing them would break parsing.
OWNED_FLAGS = {"-o", "--output", "-oe", "--output-err", "--progress", "-m", "--model"}

PROGRESS_RE = re.compile(
    r"^llama-bench: benchmark (?P<test>\d+)/(?P<ntests>\d+): "
    r"(?P<what>starting|warmup prompt run|warmup generation run"
    r"|depth run (?P<drep>\d+)/\d+(?: \(cached\))?"
    r"|prompt run (?P<prep>\d+)/\d+|generation run (?P<grep>\d+)/\d+)\s*$"
)


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
    if what == "starting":
        return Progress(test, "starting", 0)
    if what.startswith("warmup"):
        return Progress(test, "warmup", 0)
    if m.group("drep"):
        return Progress(test, "depth", int(m.group("drep")))
    if m.group("prep"):
        return Progress(test, "prompt", int(m.group("prep")))
    return Progress(test, "gen", int(m.group("grep")))


def bench_test_name(n_prompt: int, n_gen: int, n_depth: int) -> str:
    """llama-bench's name for a test: pp512, tg128, pp512+tg128, with @d4096 when deep."""
    if n_prompt and n_gen:
        name = f"pp{n_prompt}+tg{n_gen}"
    elif n_prompt:
        name = f"pp{n_prompt}"
    else:
        name = f"tg{n_gen}"
    return f"{name}@d{n_depth}" if n_depth else name


def parse_workload(name: str) -> tuple[int, int, int]:
    """``pp512`` / ``tg128`` / ``pp2048@d4096`` / ``pp512+tg128`` -> (n_prompt, n_gen, n_depth)."""
    m = re.fullmatch(r"(?:pp(\d+))?(?:\+)?(?:tg(\d+))?(?:@d(\d+))?", name.strip().replace(" ", ""))
    if not m or not (m.group(1) or m.group(2)) or (name.count("+") and not (m.group(1) and m.group(2))):
        raise UserError(
            f"unknown workload {name!r} — use llama-bench's names: pp512, tg128, pp512+tg128, pp2048@d4096"
        )
    return int(m.group(1) or 0), int(m.group(2) or 0), int(m.group(3) or 0)


def workload_flags(name: str) -> list[str]:
    """llama-bench flags that run exactly this one workload."""
    n_prompt, n_gen, n_depth = parse_workload(name)
    if n_prompt and n_gen:
        flags = ["-p", "0", "-n", "0", "-pg", f"{n_prompt},{n_gen}"]
    else:
        flags = ["-p", str(n_prompt), "-n", str(n_gen)]
    return flags + ["-d", str(n_depth)]


def parse_jsonl(text: str) -> list[dict[str, Any]]:
    """Parse llama-bench ``-o jsonl`` output: one object per test, nothing else."""
    out: list[dict[str, Any]] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MalformedOutput(f"stdout line {i} is not JSON: {line[:80]!r}") from exc
        if not isinstance(obj, dict) or "samples_ns" not in obj:
            raise MalformedOutput(f"stdout line {i} is not a llama-bench result (no samples_ns)")
        out.append(obj)
    return out


def result_row(idx: int, obj: Mapping[str, Any]) -> ResultRow:
    """One llama-bench JSON result -> a stored result with its samples."""
    n_prompt = int(obj.get("n_prompt", 0))
    n_gen = int(obj.get("n_gen", 0))
    n_depth = int(obj.get("n_depth", 0))
    tokens = n_prompt + n_gen  # llama-bench's t/s counts prompt and generated tokens
    samples_ns = [int(s) for s in obj.get("samples_ns") or []]
    if tokens <= 0:
        raise MalformedOutput("result has neither prompt nor generated tokens")
    if any(s <= 0 for s in samples_ns):
        raise MalformedOutput("result has a non-positive sample duration")
    return ResultRow(
        test_idx=idx,
        test=bench_test_name(n_prompt, n_gen, n_depth),
        n_prompt=n_prompt,
        n_gen=n_gen,
        n_depth=n_depth,
        avg_ts=_float(obj.get("avg_ts")),
        stddev_ts=_float(obj.get("stddev_ts")),
        raw=dict(obj),
        samples=tuple(SampleRow(i, s, tokens) for i, s in enumerate(samples_ns)),
    )


def _float(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def extract_windows(res: ProcResult) -> list[WindowRow]:
    """Timed windows of every repetition from the stamped progress and result lines.

    A window opens at the first "prompt run i" / "generation run i" line of a
    repetition and closes at the next line that is not part of the same
    repetition (next repetition, next test, or the test's JSON result line).
    """
    events: list[tuple[int, str, int, int, Any]] = []  # (t_ns, kind, test, rep, probe)
    n_results = 0
    for ln in res.lines:
        if ln.stream == "err":
            p = parse_progress(ln.text)
            if p is not None:
                events.append((ln.t_ns, p.kind, p.test, p.rep, ln.probe))
        elif ln.text.strip().startswith("{"):
            n_results += 1
            events.append((ln.t_ns, "result", n_results, 0, ln.probe))
    windows: list[WindowRow] = []
    open_: tuple[int, int, int, Any] | None = None  # (test, rep, start, probe)
    for t_ns, kind, test, rep, probe in events:
        if open_ is not None:
            o_test, o_rep, o_start, o_probe = open_
            same_rep = kind == "gen" and test == o_test and rep == o_rep
            if not same_rep:
                deltas = counter_deltas(o_probe, probe) if o_probe and probe else {}
                cpu_ms = deltas.pop("cpu_ms", None)
                windows.append(WindowRow(o_test - 1, o_rep - 1, o_start, t_ns, cpu_ms, deltas))
                open_ = None
        if open_ is None and kind in ("prompt", "gen"):
            open_ = (test, rep, t_ns, probe)
    return windows


def run_trial(
    bench_bin: Path,
    model: str,
    flags: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    probe: Probe | None = None,
) -> ProcResult:
    """Run llama-bench once; never raises for engine faults (see :func:`outcome_from`)."""
    argv = [str(bench_bin), "-m", model, *flags, "-o", "jsonl", "--progress"]
    return run_process(argv, env=env, timeout_s=timeout_s, probe=probe)


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
    if res.spawn_error:
        status, message = "failed", res.spawn_error
    elif res.timed_out:
        status, message = "timeout", "engine ran past its timeout and was killed (watchdog)"
    elif res.returncode is not None and res.returncode < 0:
        status = "crashed"
        try:
            import signal as _signal

            sig = _signal.Signals(-res.returncode).name
        except ValueError:
            sig = str(-res.returncode)
        message = f"engine crashed: killed by {sig}"
    elif res.returncode != 0:
        status, message = "failed", f"engine exited with code {res.returncode}"
    elif parse_error:
        status, message = "failed", f"engine printed malformed output: {parse_error}"
        results = []
    elif not results:
        status, message = "failed", "engine printed no results"
    else:
        status, message = "done", ""
    windows = extract_windows(res) if status == "done" else []
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
