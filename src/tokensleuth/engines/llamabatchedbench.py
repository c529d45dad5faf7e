"""The llama-batched-bench engine kind: prompt and generation throughput at several
parallel sequence counts, from llama.cpp's own batched benchmark (built from the same
source as llama-bench).

One process runs every (prompt, generation, parallel) combination of its ``-npp``,
``-ntg`` and ``-npl`` lists once and prints a JSON line per combination
(``--output-format jsonl``). Each line is two results, named in tokensleuth's workload
grammar: ``ppPxcN`` (the prompt phase of N sequences: P tokens each, or P shared with
``-pps``) and ``tgGxcN`` (G generated tokens per sequence, N sequences a step); ``xc1``
is left out, so one sequence reads ``pp128`` and ``tg32``. A trial planned for one
workload runs just that combination and keeps its result; a trial with no workload
(``bench`` without ``-w``) keeps all of them. There are no repetitions inside a process:
a sample is a process, so a compare pairs processes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import UserError, show
from tokensleuth.core.records import ResultRow, SampleRow, TrialOutcome
from tokensleuth.core.workloads import parse
from tokensleuth.engines import exitdrain
from tokensleuth.engines.base import ArmRuntime, EngineRun, NoFlags, Settings
from tokensleuth.engines.proc import Probe, ProcResult, process_fault, run_process

BINARY = "llama-batched-bench"
# flags tokensleuth sets itself for a planned workload (the arm may not set them too)
WORKLOAD_FLAGS = ("-npp", "-ntg", "-npl")


def _name(kind: str, n: int, parallel: int) -> str:
    return f"{kind}{n}" + (f"xc{parallel}" if parallel > 1 else "")


def results_of(rows: Sequence[Mapping[str, Any]], keep: str | None = None) -> list[ResultRow]:
    """Each JSON line as its pp and tg results (``keep``: only the result of that name)."""
    out: list[ResultRow] = []
    for row in rows:
        pp, tg, pl = int(row["pp"]), int(row["tg"]), int(row["pl"])
        shared = bool(row.get("is_pp_shared"))
        phases = (("pp", pp, pp if shared else pl * pp, float(row["t_pp"]), pp, 0),
                  ("tg", tg, pl * tg, float(row["t_tg"]), 0, tg))
        for kind, n, tokens, seconds, n_prompt, n_gen in phases:
            name = _name(kind, n, pl)
            if n <= 0 or tokens <= 0 or (keep is not None and name != keep):
                continue
            if not math.isfinite(seconds) or seconds <= 0:
                raise ValueError(f"{name}: a phase of {seconds!r} s")
            ts = tokens / seconds
            sample = SampleRow(rep=0, duration_ns=max(1, round(seconds * 1e9)), tokens=tokens,
                               n_prompt=n_prompt * (1 if shared else pl), n_gen=n_gen * pl)
            out.append(ResultRow(test_idx=len(out), test=name, n_prompt=n_prompt, n_gen=n_gen, n_depth=0,
                                 avg_ts=ts, stddev_ts=0.0, raw=dict(row), samples=(sample,)))
    return out


def parse_jsonl(text: str) -> list[dict[str, Any]]:
    """The result lines of ``--output-format jsonl`` (the log lines around them are skipped)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("{"):
            obj = json.loads(line)
            if not isinstance(obj, dict) or not {"pp", "tg", "pl", "t_pp", "t_tg"} <= obj.keys():
                raise ValueError(f"not a batched-bench result: {line[:120]}")
            rows.append(obj)
    return rows


def workload_argv(workload: str) -> list[str]:
    """The flags that run exactly ``workload`` (one phase of N parallel sequences)."""
    w = parse(workload)
    if w.n_prompt:  # the prompt phase; one generated token makes the line complete
        return ["-npp", str(w.n_prompt), "-ntg", "1", "-npl", str(w.concurrency)]
    return ["-npp", "1", "-ntg", str(w.n_gen), "-npl", str(w.concurrency)]


def outcome_from(res: ProcResult, host_env: dict[str, Any], env: Mapping[str, str],
                 keep: str | None) -> TrialOutcome:
    environment = dict(host_env, argv=list(res.argv), engine_env=dict(env))
    results: list[ResultRow] = []
    parse_error = ""
    try:
        results = results_of(parse_jsonl(res.text("out")), keep)
    except (ValueError, KeyError, TypeError) as exc:
        parse_error = str(exc)[:300]
    if (fault := process_fault(res)) is not None:
        status, message = fault
    elif parse_error:
        status, message, results = "garbage", f"engine printed malformed output: {parse_error}", []
    elif not results:
        status, message = "failed", "engine printed no results (is the context -c large enough for -npp/-ntg/-npl?)"
    else:
        status, message = "done", ""
    return TrialOutcome(status=status, exit_code=res.returncode, message=message, stderr_tail=res.tail("err"),
                        started_at=res.started_at, ended_at=res.ended_at, t0_ns=res.t0_ns, t1_ns=res.t1_ns,
                        env=environment, results=tuple(results))


class LlamaBatchedBench(NoFlags):
    """llama-batched-bench: throughput of N parallel sequences, one process per trial."""

    kind = "llama-batched-bench"
    targets = (BINARY,)
    attaches = False
    builds = True
    reps_per_process = False  # it has no -r: a sample is a process
    shares_process = False
    load_log_flag: str | None = None
    default_workloads: tuple[str, ...] = ()  # its own -npp/-ntg/-npl
    settings: Settings | None = None
    default_repetitions: int | None = None  # a sample is a process
    workload_flags = frozenset(WORKLOAD_FLAGS)
    profiles = False  # the profiler takes llama-bench's flags

    def argv_for(self, workloads: Sequence[str], repetitions: int | None = None) -> list[str] | None:
        """One workload's -npp/-ntg/-npl (none: its own lists); several do not share a process."""
        if len(workloads) > 1:
            return None
        return workload_argv(workloads[0]) if workloads else []

    def repetitions(self, flags: Sequence[str]) -> int | None:
        return None  # it has no -r

    def sets_repetitions(self, flags: Sequence[str]) -> bool:
        return False

    def flag_tests(self, flags: Sequence[str]) -> list[tuple[int, int, int]]:
        return []  # its flags are not llama-bench's (no memory guard)

    def check(self, arm: ArmRuntime, workloads: Sequence[str]) -> None:
        for w in workloads:
            p = parse(w)
            if p.n_depth or (p.n_prompt and p.n_gen):
                raise UserError(f"arm {arm.name}: {BINARY} measures a prompt or a generation phase at depth 0; "
                                f"workload {show(w)} is neither — give ppN or tgN (xcK for K sequences)")
        given = [f for f in arm.flags if f.split("=", 1)[0] in WORKLOAD_FLAGS]
        if workloads and given:
            raise UserError(f"arm {arm.name}: flag {given[0]} conflicts with --workload — give the tests with "
                            "--workload only")
        if arm.bin_dir is not None and not (arm.bin_dir / BINARY).exists():
            raise UserError(f"arm {arm.name}: {arm.bin_dir} has no {BINARY} — build it (engine build "
                            f"--target {BINARY}) or give a bin: folder that holds it")

    def run_trial(self, arm: ArmRuntime, model: str, workload: str, argv: Sequence[str], *,
                  timeout_s: float | None, probe: Probe | None, host_env: dict[str, Any]) -> EngineRun:
        assert arm.bin_dir is not None
        # argv: the workload's own -npp/-ntg/-npl (argv_for), planned from its name
        cmd = [str(Path(arm.bin_dir) / BINARY), "-m", model, *arm.flags, *argv, "--output-format", "jsonl"]
        # its result lines go through llama.cpp's logger thread: held at exit until written
        res = run_process(cmd, env=exitdrain.env(arm.env), timeout_s=timeout_s, probe=probe)
        keep = parse(workload).name if workload else None
        return EngineRun(outcome_from(res, host_env, arm.env, keep), res.pid)


ENGINE = LlamaBatchedBench()
