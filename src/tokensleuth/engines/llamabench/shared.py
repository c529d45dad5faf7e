"""Both arms of a pair in one llama-bench process: A, B, B, A on one load of the model.

Two llama-bench arms of one build and environment that differ in one *context* setting
(``-ub``, ``--poll``, ``-t``, …) need no process each: llama-bench keeps the model loaded
across test instances whose model settings are equal, so ``-ub 2048,512,512,2048`` runs A, B,
B, A on one load, each instance with its own warm-up. The process-level noise (where the
weights landed, the clocks, the page cache) is then common to both arms of the pair and
cancels in its ratio; A, B, B, A also cancels a drift inside the process. Every pair is its
own process, so an effect that varies between processes is still replicated.

Measured on the H200 with the Qwen3-30B-A3B shape (Q8_0, -ngl 99 -fa 1; bench/pairing_sim.py
on bench/results/h200-pairing): the spread of a pair's log ratio fell from 1.19% to 0.36% at
tg32 and from 1.71% to 1.17% at pp2048, a pair cost 7.6 s instead of 12.1 s (9.1 instead of
13.4), and the engine seconds per correct verdict at ±2% were 0.32× (tg32) and 0.41× (pp2048)
of separate processes, and the flag A/Bs' ratios agreed between the designs for ``-ub`` and
``--poll``. Only those two (:data:`PROVEN`) share a process by default: whether another
setting's change carries over from one instance to the next inside a process (a KV cache type,
a thread pool) has not been measured. ``in_process`` asks for any context setting, and for two
identical arms (an A/A, the setting's one value listed four times).

A unit shares a process when the driver allowed it (``ArmRuntime.options["share"]``) and
:func:`shared_unit` finds the two trials fit; :func:`split` turns the process's outcome back
into one outcome per trial, each with its arm's two instances (repetitions interleaved:
instance 1's first, instance 2's first, instance 1's second, …, so each instance's cold
first repetition leads the trial and is left out like any cold repetition).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tokensleuth.core.records import ResultRow, TrialOutcome, WindowRow
from tokensleuth.engines.base import INSTANCES, ArmRuntime


class TrialJob(Protocol):
    """What is read of a planned trial (the runner's TrialJob: engines do not import the runner)."""

    @property
    def arm(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def workload(self) -> str: ...
    @property
    def argv(self) -> tuple[str, ...]: ...
    @property
    def pair(self) -> int: ...

# llama-bench's context settings: an instance's own, so a change of one keeps the model loaded
CONTEXT_FLAGS = frozenset({
    "-t", "--threads", "--poll", "-b", "--batch-size", "-ub", "--ubatch-size", "-fa", "--flash-attn",
    "-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "-C", "--cpu-mask", "--cpu-strict",
    "-nkvo", "--no-kv-offload",
})
# settings whose A/B ratio was measured the same in one process as in a process per trial
PROVEN = frozenset({"-ub", "--ubatch-size", "--poll"})
LOAD_LOG_FLAG = "-v"  # global to the process: on for both when either trial asked for the load log


@dataclass(frozen=True, slots=True)
class Shared:
    """A pair that runs as one process: the trials, the process's arm and argv, the order."""

    jobs: tuple[TrialJob, TrialJob]  # in the pair's order: jobs[0]'s arm runs first and last
    arm: ArmRuntime  # the first arm with the differing setting given as a list
    argv: tuple[str, ...]  # the workload's flags (both trials have the same)
    flag: str
    values: tuple[str, str]  # the setting of jobs[0]'s arm, of jobs[1]'s

    def split(self, out: TrialOutcome) -> tuple[TrialOutcome, TrialOutcome]:
        return split(self, out)


def differing_setting(a: ArmRuntime, b: ArmRuntime, in_process: bool = False) -> tuple[str, str, str] | None:
    """(flag, a's value, b's value) when the arms can share a process, else None: the same
    build, engine kind and environment, flags alike but for the value of one context setting
    (a list of values would multiply llama-bench's instances, so none may hold a comma), one of
    :data:`PROVEN` unless ``in_process``; with ``in_process``, identical arms too (an A/A: the
    first context setting they name, its value in both)."""
    if (a.kind != b.kind or a.bin_dir is None or a.bin_dir != b.bin_dir or dict(a.env) != dict(b.env)
            or a.endpoint or b.endpoint or len(a.flags) != len(b.flags)):
        return None
    if any("," in f for f in (*a.flags, *b.flags)):
        return None
    diff = [i for i, (x, y) in enumerate(zip(a.flags, b.flags, strict=True)) if x != y]
    if not diff and in_process:
        at = next((i for i, f in enumerate(a.flags[:-1]) if f in CONTEXT_FLAGS
                   and not a.flags[i + 1].startswith("-") and a.flags.count(f) == 1), None)
        return None if at is None else (a.flags[at], a.flags[at + 1], a.flags[at + 1])
    if len(diff) != 1 or diff[0] == 0:
        return None
    i = diff[0]
    flag = a.flags[i - 1]
    if flag not in (CONTEXT_FLAGS if in_process else PROVEN) or a.flags[i].startswith("-") or b.flags[i].startswith("-"):
        return None
    return flag, a.flags[i], b.flags[i]


def shared_unit(arms: Mapping[str, ArmRuntime], unit: Sequence[TrialJob]) -> Shared | None:
    """The unit as one process, when it is a pair whose arms may and can share one."""
    if len(unit) != 2:
        return None
    j0, j1 = unit
    a, b = arms[j0.arm], arms[j1.arm]
    if not (a.options.get("share") and b.options.get("share")) or j0.arm == j1.arm:
        return None
    if (j0.model, j0.workload, j0.pair) != (j1.model, j1.workload, j1.pair):
        return None
    bare = [tuple(x for x in j.argv if x != LOAD_LOG_FLAG) for j in (j0, j1)]
    if bare[0] != bare[1]:
        return None
    d = differing_setting(a, b, bool(a.options.get("in_process")))
    if d is None:
        return None
    flag, va, vb = d
    i = a.flags.index(flag) + 1 if a.flags.count(flag) == 1 else None
    if i is None:
        return None
    listed = ",".join((va, vb, vb, va))
    flags = (*a.flags[:i], listed, *a.flags[i + 1:])
    argv = bare[0] + ((LOAD_LOG_FLAG,) if any(LOAD_LOG_FLAG in j.argv for j in (j0, j1)) else ())
    return Shared((j0, j1), dataclasses.replace(a, flags=flags), argv, flag, (va, vb))


def split(s: Shared, out: TrialOutcome) -> tuple[TrialOutcome, TrialOutcome]:
    """The process's outcome as one outcome per trial (see the module docstring). The process's
    time is halved between them (its engine seconds are counted once); a process that did not
    end well, or reported other than four instances, is each trial's outcome."""
    order = (0, 1, 1, 0)  # which of s.jobs ran each instance
    mid = (out.t0_ns + out.t1_ns) // 2
    mid_at = (out.started_at + out.ended_at) / 2
    spans = ((out.t0_ns, mid, out.started_at, mid_at), (mid, out.t1_ns, mid_at, out.ended_at))
    env = dict(out.env, shared_process={"order": [s.jobs[k].arm for k in order], "flag": s.flag,
                                        "values": list(s.values)})
    base = [dataclasses.replace(out, t0_ns=t0, t1_ns=t1, started_at=sa, ended_at=ea, env=env)
            for t0, t1, sa, ea in spans]
    if out.status != "done":
        return base[0], base[1]
    if len(out.results) != len(order):
        bad = dataclasses.replace(out, status="garbage", results=(), windows=(), env=env,
                                  message=f"engine printed {len(out.results)} results for {len(order)} instances")
        return (dataclasses.replace(bad, t0_ns=spans[0][0], t1_ns=spans[0][1]),
                dataclasses.replace(bad, t0_ns=spans[1][0], t1_ns=spans[1][1]))
    got = []
    for k in (0, 1):
        at = [i for i, who in enumerate(order) if who == k]
        rows = [out.results[i] for i in at]
        samples = []
        for rep in range(max(len(r.samples) for r in rows)):
            for j, r in enumerate(rows):
                if rep < len(r.samples):
                    samples.append(dataclasses.replace(r.samples[rep], rep=INSTANCES * rep + j))
        ts = [smp.tokens / (smp.duration_ns / 1e9) for smp in samples]
        first = rows[0]
        result = ResultRow(0, first.test, first.n_prompt, first.n_gen, first.n_depth, statistics.fmean(ts),
                           statistics.stdev(ts) if len(ts) > 1 else 0.0, first.raw, tuple(samples))
        windows = [WindowRow(0, INSTANCES * w.rep + at.index(w.test_idx), w.start_ns, w.end_ns, w.cpu_ms, w.counters)
                   for w in out.windows if w.test_idx in at]
        windows.sort(key=lambda w: w.rep)
        got.append(dataclasses.replace(base[k], results=(result,), windows=tuple(windows)))
    return got[0], got[1]


class LlamaBenchSharing:
    """llama-bench's :class:`~tokensleuth.engines.base.Sharing`: the functions above."""

    def differing_setting(self, a: ArmRuntime, b: ArmRuntime,
                          in_process: bool = False) -> tuple[str, str, str] | None:
        return differing_setting(a, b, in_process)

    def shared_unit(self, arms: Mapping[str, ArmRuntime], unit: Sequence[TrialJob]) -> Shared | None:
        return shared_unit(arms, unit)


SHARING = LlamaBenchSharing()
