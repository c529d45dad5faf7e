"""Where a study's noise comes from, what an engine process costs, and the cheapest design.

A compare's unit is a pair of engine processes, each averaging ``r`` repetitions. The log
t/s of repetition j of process i is  level_i + e_ij : a per-process level (between-process
variance σ²_b: placement, frequency, memory layout of that process) and repetition noise
(σ²_w). A process mean then has variance σ²_b + σ²_w / r and costs c_p + r·c_r seconds
(c_p: start, model load and warm-up; c_r: one repetition). Minimising cost for a given
variance gives the classic allocation of a two-stage design (Cochran, *Sampling
Techniques*, 3rd ed., §10.6):

    r* = sqrt(c_p · σ²_w / (c_r · σ²_b))

so when the noise is a per-process level (σ²_b large), repetitions buy little and processes
should be short. σ²_w is the pooled within-process variance; σ²_b the variance of process
means within an arm and cell minus σ²_w / r̄ (one-way random-effects ANOVA, method of
moments), pooled over arms and cells by degrees of freedom.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from tokensleuth.analysis.cold import cold_leading
from tokensleuth.core.workloads import cell_of
from tokensleuth.store import Store

R_MIN, R_MAX = 2, 20  # two repetitions keep a within estimate and stall detection; 20 bounds a trial


@dataclass(frozen=True, slots=True)
class Noise:
    """Variance components of log t/s (as CVs) and the cost of a process and a repetition."""

    between_cv: float  # sqrt(σ²_b): the per-process level's spread
    within_cv: float  # sqrt(σ²_w): one repetition's spread inside a process
    process_s: float  # c_p: seconds per process outside its timed repetitions
    rep_s: float  # c_r: seconds per repetition
    processes: int
    repetitions: int

    def __post_init__(self) -> None:
        if min(self.between_cv, self.within_cv, self.process_s, self.rep_s) < 0:
            raise ValueError("variance components and costs are never negative")

    def best_reps(self) -> int:
        """r* (Cochran), rounded and bounded to [R_MIN, R_MAX]."""
        if self.rep_s <= 0 or self.within_cv == 0:
            return R_MIN
        if self.between_cv == 0:
            return R_MAX
        r = math.sqrt(self.process_s * self.within_cv ** 2 / (self.rep_s * self.between_cv ** 2))
        return int(min(R_MAX, max(R_MIN, round(r))))

    def sentence(self) -> str:
        return (f"noise here: {self.between_cv:.1%} between processes, {self.within_cv:.1%} within; a process "
                f"costs {self.process_s:.2f} s + {self.rep_s:.3f} s per repetition; cheapest -r here: "
                f"{self.best_reps()} ({self.processes} processes, {self.repetitions} repetitions)")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Noise:
        return cls(float(d["between_cv"]), float(d["within_cv"]), float(d["process_s"]), float(d["rep_s"]),
                   int(d["processes"]), int(d["repetitions"]))

    def to_json(self) -> dict[str, Any]:
        return {"between_cv": self.between_cv, "within_cv": self.within_cv, "process_s": self.process_s,
                "rep_s": self.rep_s, "processes": self.processes, "repetitions": self.repetitions,
                "best_reps": self.best_reps()}


@dataclass(frozen=True, slots=True)
class Process:
    """One engine process: its arm x cell group, the log t/s of its repetitions, its wall
    time and the time its repetitions took."""

    group: tuple[str, str, int]
    log_tps: tuple[float, ...]
    span_s: float | None
    reps_s: float


def components(procs: list[Process]) -> Noise | None:
    """Method-of-moments variance components (None until some group has two processes with
    two repetitions each)."""
    ss_w, df_w = 0.0, 0
    for p in procs:
        if len(p.log_tps) >= 2:
            a = np.asarray(p.log_tps)
            ss_w += float(((a - a.mean()) ** 2).sum())
            df_w += len(a) - 1
    if df_w == 0:
        return None
    var_w = ss_w / df_w
    groups: dict[tuple[str, str, int], list[Process]] = defaultdict(list)
    for p in procs:
        if p.log_tps:
            groups[p.group].append(p)
    num, den = 0.0, 0
    for ps in groups.values():
        if len(ps) < 2:
            continue
        means = np.asarray([np.mean(p.log_tps) for p in ps])
        rbar = float(np.mean([len(p.log_tps) for p in ps]))
        num += max(float(means.var(ddof=1)) - var_w / rbar, 0.0) * (len(ps) - 1)
        den += len(ps) - 1
    if den == 0:
        return None
    spans = [p.span_s - p.reps_s for p in procs if p.span_s is not None]
    reps = sum(len(p.log_tps) for p in procs)
    rep_s = sum(p.reps_s for p in procs) / reps if reps else 0.0
    return Noise(math.sqrt(num / den), math.sqrt(var_w), max(float(np.median(spans)), 0.0) if spans else 0.0,
                 rep_s, len(procs), reps)


def estimate(store: Store, study_id: str) -> Noise | None:
    """The components of a study's finished trials (one Process per trial and test)."""
    rows = store.reads.done_samples(study_id)
    logs: dict[tuple[int, int], list[float]] = defaultdict(list)
    reps_s: dict[tuple[int, int], float] = defaultdict(float)
    info: dict[tuple[int, int], tuple[tuple[str, str, int], float | None]] = {}
    for r in rows:
        key = (int(r["trial"]), int(r["test_idx"]))
        logs[key].append(math.log(float(r["tokens_per_s"])))
        reps_s[key] += int(r["duration_ns"]) / 1e9
        span = (int(r["t1_ns"]) - int(r["t0_ns"])) / 1e9 if r["t0_ns"] is not None and r["t1_ns"] is not None else None
        # a group is one cell: arm x model x workload (a compare's trials are each one workload,
        # all at test_idx 0: grouped by test_idx alone, pp2048 and tg32 levels were one group's
        # "between-process" spread) x the test inside the trial (bench runs several per trial)
        # (a trial that ran several workloads: each test is its own workload's)
        w, idx = cell_of(str(r["workload"] or ""), str(r["test"]), int(r["test_idx"]))
        info[key] = ((str(r["arm"]), f"{r['model']}\x00{w}", idx), span)
    # a process that ran several tests: each test's span leaves out the others' repetitions, so
    # what is left beside its own is the process's cost (load, warm-up) once
    in_trial: dict[int, float] = defaultdict(float)
    for (trial, _idx), secs in reps_s.items():
        in_trial[trial] += secs
    for k, (group, whole) in list(info.items()):
        if whole is not None:
            info[k] = (group, whole - (in_trial[k[0]] - reps_s[k]))
    # cold leading repetitions (cold_leading, one count per cell over every arm) are
    # left out here as in each trial's t/s: they are neither process level nor repetition noise
    by_cell: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for k, (group, _span) in info.items():
        by_cell[(group[1], group[2])].append(k)
    cold = {cell: cold_leading([logs[k] for k in keys]).count for cell, keys in by_cell.items()}
    procs = []
    for k, v in logs.items():
        group, span = info[k]
        c = min(cold[(group[1], group[2])], len(v) - 1)
        procs.append(Process(group, tuple(v[c:]), span, reps_s[k] * (len(v) - c) / len(v)))
    return components(procs)
