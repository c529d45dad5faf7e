"""Why a verdict stayed open, read from its processes: a busy neighbour, stalls, two process levels,
cold first repetitions, or noise between processes or within them (the classification; diagnose.py
reads the store and prescribes)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from tokensleuth.analysis.stats import line_fit

DRIFT_R2, DRIFT_P = 0.3, 0.001  # the level against time: explained share and significance
BUSY_SHARE = 0.2  # a busy neighbour beside at least this share of the processes


STALL_SHARE = 0.1  # stalled repetitions in at least this share of the processes


ASHMAN_D = 4.0  # two process levels: the best split's separation (see the module doc)


COLD_SHARE = 0.7  # the first repetition below the rest in at least this share of processes


@dataclass(frozen=True, slots=True)
class Proc:
    """One engine process of a cell: when it started, its repetitions' log t/s, the engine
    threads it ran, the other processes seen busy beside it and its stalled repetitions."""

    arm: str
    cell: str
    t0: float
    log_tps: tuple[float, ...]
    threads: int | None = None
    busy: tuple[str, ...] = ()
    stalled: int = 0
    where: str = "cpu"  # where the work ran (where_work_runs): cpu | split | gpu
    gpu_busy: float | None = None  # the GPUs' mean busy % inside its timed windows, when sampled


GPU_BACKENDS = ("CUDA", "ROCM", "HIP", "VULKAN", "METAL", "SYCL", "MUSA", "CANN", "OPENCL")


def where_work_runs(raw: Mapping[str, Any], n_layer: int | None = None) -> str:
    """Where a llama-bench process's work ran, from its own JSON row: ``gpu`` when a GPU backend
    took every layer (``n_gpu_layers`` -1, at least the model's layers, or 99 and over when those
    are unknown) and no expert stayed on the CPU (``n_cpu_moe`` 0); ``split`` when a GPU backend
    took some; ``cpu`` otherwise."""
    backends = str(raw.get("backends") or "").upper()
    if not any(b in backends for b in GPU_BACKENDS):
        return "cpu"
    try:
        ngl = int(raw.get("n_gpu_layers", -1))
        moe = int(raw.get("n_cpu_moe") or 0)
    except (TypeError, ValueError):
        return "split"
    full = ngl < 0 or ngl >= (n_layer + 1 if n_layer else 99)
    return "gpu" if full and moe == 0 else "split" if ngl != 0 else "cpu"


@dataclass(frozen=True, slots=True)
class Finding:
    code: str  # busy-process | threads | gpu | stall | drift | bimodal | cold | between | within
    seen: str  # what the trials show, one clause


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The findings, most likely cause first, with the variance components they rest on."""

    findings: tuple[Finding, ...]
    between_cv: float
    within_cv: float
    reps: float  # mean repetitions per process
    processes: int
    threads: int | None
    cpus: int
    busy: tuple[str, ...] = ()

    @property
    def cause(self) -> str:
        return self.findings[0].code if self.findings else "none"

    def codes(self) -> list[str]:
        return [f.code for f in self.findings]

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "findings": [{"code": f.code, "seen": f.seen} for f in self.findings],
                "between_cv": self.between_cv, "within_cv": self.within_cv, "reps": self.reps,
                "processes": self.processes, "threads": self.threads, "cpus": self.cpus, "busy": list(self.busy)}


def process_groups(procs: Sequence[Proc]) -> dict[tuple[str, str], list[Proc]]:
    g: dict[tuple[str, str], list[Proc]] = defaultdict(list)
    for p in procs:
        if p.log_tps:
            g[(p.arm, p.cell)].append(p)
    return g


def variance_components(groups: Mapping[tuple[str, str], list[Proc]]) -> tuple[float, float, float]:
    """(between CV, within CV, mean repetitions per process): noise.components' one-way random
    effects, each arm x cell a group (zeros until a group has two processes)."""
    from tokensleuth.analysis import noise

    n = noise.components([noise.Process((arm, cell, 0), p.log_tps, None, 0.0)
                          for (arm, cell), ps in groups.items() for p in ps])
    if n is None:
        return 0.0, 0.0, 1.0
    return n.between_cv, n.within_cv, n.repetitions / max(n.processes, 1)


def _measured(groups: Mapping[tuple[str, str], list[Proc]]) -> bool:
    """Whether the spreads between and within processes are measured: some arm x cell has two
    processes of two repetitions each (else variance_components' zeros would read as "agree within 0.0%")."""
    return any(sum(len(p.log_tps) >= 2 for p in ps) >= 2 for ps in groups.values())


def _residuals(groups: Mapping[tuple[str, str], list[Proc]]) -> tuple[np.ndarray, np.ndarray]:
    """Each process's (start, level) less its cell's mean start and median level: levels of every
    arm and cell on one scale (the median stays in the main mode when some processes are slow)."""
    ts: list[float] = []
    ys: list[float] = []
    for ps in groups.values():
        if len(ps) < 2:
            continue
        t = np.asarray([p.t0 for p in ps])
        y = np.asarray([float(np.mean(p.log_tps)) for p in ps])
        ts += list(t - t.mean())
        ys += list(y - float(np.median(y)))
    return np.asarray(ts), np.asarray(ys)


def ashman_split(levels: np.ndarray, min_share: float = 0.15) -> tuple[float, int, float]:
    """The best two-way split of sorted levels: (Ashman's D, size of the lower cluster, gap of means)."""
    y = np.sort(np.asarray(levels, dtype=float))
    n = len(y)
    k_min = max(2, math.ceil(min_share * n))
    if n < 2 * k_min:
        return 0.0, 0, 0.0
    c1, c2 = np.cumsum(y), np.cumsum(y * y)
    k = np.arange(k_min, n - k_min + 1)  # the lower cluster's size
    m_lo, m_hi = c1[k - 1] / k, (c1[-1] - c1[k - 1]) / (n - k)
    v_lo = (c2[k - 1] - k * m_lo ** 2) / (k - 1)
    v_hi = ((c2[-1] - c2[k - 1]) - (n - k) * m_hi ** 2) / (n - k - 1)
    s = np.sqrt(np.maximum((v_lo + v_hi) / 2, 1e-30))
    d = (m_hi - m_lo) / s  # = √2·gap / √(σ²_lo + σ²_hi)
    i = int(np.argmax(d))
    return float(d[i]), int(k[i]), float(m_hi[i] - m_lo[i])


@lru_cache(maxsize=64)
def ashman_null(n: int, q: float = 0.995, sims: int = 400) -> float:
    """The ``q`` quantile of the best split's D for ``n`` levels from one normal mode
    (simulated, seeded by ``n``): small samples split well by chance (n=10 reaches 6)."""
    rng = np.random.default_rng(n)
    return max(ASHMAN_D, float(np.quantile([ashman_split(rng.normal(size=n))[0] for _ in range(sims)], q)))


def classify(procs: Sequence[Proc], cpus: int) -> Diagnosis:
    """The noise's likely causes from a study's processes, most likely first (pure)."""
    groups = process_groups(procs)
    live = [p for ps in groups.values() for p in ps]
    between, within, rbar = variance_components(groups)
    threads = max((p.threads for p in live if p.threads is not None), default=None)
    found: list[Finding] = []
    n = len(live)
    names: dict[str, int] = defaultdict(int)
    for p in live:
        for name in set(p.busy):
            names[name] += 1
    busy = tuple(sorted((k for k, v in names.items() if v >= BUSY_SHARE * n), key=lambda k: -names[k]))
    if busy and n:
        found.append(Finding("busy-process", f"{', '.join(busy)} used a core beside "
                                             f"{max(names[b] for b in busy)} of {n} engine processes"))
    offloaded = bool(live) and all(p.where == "gpu" for p in live)
    if threads is not None and cpus >= 2 and threads >= cpus and not offloaded:
        found.append(Finding("threads", f"{threads} engine threads on {cpus} CPUs: a preempted thread stalls the "
                                        "others at every barrier"))
    busy_gpu = [p.gpu_busy for p in live if p.gpu_busy is not None]
    if offloaded:
        share = float(np.median(busy_gpu)) if busy_gpu else None
        found.append(Finding("gpu", "every layer ran on the GPU" + (
            f" ({share:.0f}% busy in the median process)" if share is not None else "")
            + ": the CPU threads mostly wait on it" + (
            ", and the GPU idles between its kernels" if share is not None and share < 80 else "")))
    stalled = sum(1 for p in live if p.stalled)
    if n and stalled >= max(1, STALL_SHARE * n):
        found.append(Finding("stall", f"stalled repetitions in {stalled} of {n} processes"))
    ts, ys = _residuals(groups)
    drifting = False
    if len(ys) >= 6 and float(np.ptp(ts)) > 0 and float(np.ptp(ys)) > 0:
        slope, r, p_value = line_fit(ts, ys)
        r2 = r ** 2
        if r2 >= DRIFT_R2 and p_value < DRIFT_P:
            drifting = True
            moved = math.expm1(slope * float(np.ptp(ts)))
            found.append(Finding("drift", f"the level moved {moved:+.1%} from the study's first process to its last "
                                          f"(r²={r2:.2f})"))
    if not drifting and len(ys) >= 6:
        d, k, gap = ashman_split(ys)
        if d >= ashman_null(len(ys)):
            found.append(Finding("bimodal", f"processes ran at two levels {math.expm1(gap):.0%} apart "
                                            f"({k} of {len(ys)} in the slow one)"))
    firsts = [p.log_tps[0] - float(np.mean(p.log_tps[1:])) for p in live if len(p.log_tps) >= 3]
    if len(firsts) >= 4:
        below = sum(1 for x in firsts if x < 0)
        med = float(np.median(firsts))
        if below >= COLD_SHARE * len(firsts) and -med > max(2 * within, 0.02):
            found.append(Finding("cold", f"the first repetition of {below} of {len(firsts)} processes ran "
                                         f"{-math.expm1(med):.0%} below the rest"))
    measured = _measured(groups)
    if not measured:
        pass  # no arm x cell has two processes of two repetitions: neither spread is measured
    elif between ** 2 >= within ** 2 / max(rbar, 1):
        found.append(Finding("between", f"processes differ by {between:.1%} while repetitions agree within "
                                        f"{within:.1%}" if between >= within else
                                        f"processes differ by {between:.1%} (repetitions inside one spread "
                                        f"{within:.1%}, averaged over {rbar:g})"))
    elif measured:
        found.append(Finding("within", f"repetitions inside a process spread {within:.1%} while processes "
                                       f"agree within {between:.1%}"))
    return Diagnosis(tuple(found), between, within, rbar, n, threads, cpus, busy)
