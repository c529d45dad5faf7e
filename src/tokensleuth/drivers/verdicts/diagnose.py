"""Why a verdict stayed open: the noise's likely cause, read from the study's own trials, and
the cheapest fix, measured by a short probe rather than guessed.

A comparison ends ``unresolved`` when its pairs' log ratios spread too much for the band.
Each engine process is one draw of a per-process level plus repetition noise (see
:mod:`tokensleuth.analysis.noise`); which of those dominates, and what shape the levels take, says
why:

- **busy-process**: the confounder check saw another process use a core beside the engine;
- **threads**: as many engine threads as CPUs it may use — a preempted thread stalls the
  others at each barrier, so whole processes land in a slow mode; named only where the work
  runs on the CPU (``where_work_runs``): on a full GPU offload the threads mostly wait on the
  GPU, and the finding is **gpu** (what the GPU's busy share says) instead;
- **stall**: repetitions that took far longer than their process's fastest;
- **drift**: the level moves with time over the study (clock, temperature, a growing load);
- **bimodal**: process levels in two clusters (some processes in a slow mode), measured by
  Ashman's D of the best two-way split (D > 2 separates two normal modes; asked here: beyond
  what one normal mode reaches by chance at that many processes, and at least 4, since a split
  of a uniform drift reaches 3.5);
- **cold**: the first repetition of most processes is slower than the rest;
- **between** / **within**: which variance component dominates, when nothing above explains it.

``causes.classify`` is pure (tested on synthetic trial tables); :func:`diagnose` reads a study
from the store, runs the threads probe when the engine had every CPU (a short A/A study of its
own, stored, never mixed into the diagnosed study's samples) and returns the prescription
with the command to rerun.
"""

from __future__ import annotations

import math
import os
import shlex
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokensleuth.analysis import stats
from tokensleuth.analysis.cold import cold_leading
from tokensleuth.analysis.confounders import busy_names
from tokensleuth.core.errors import UserError
from tokensleuth.core.workloads import cell_of
from tokensleuth.drivers.requests import DriverOptions, Say
from tokensleuth.drivers.verdicts.causes import (
    Diagnosis,
    Proc,
    classify,
    process_groups,
    variance_components,
    where_work_runs,
)
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store, stored_json

PROBE_PAIRS = 3  # the threads probe: 3 pairs = 6 processes
WIDEST_BAND = 0.10  # a wider band than this is no advice: it hides the changes users look for
DIAGNOSIS_STATE = "diagnosis"  # the diagnosis of a study that ended unresolved (to_json)

# what bisect and decompose are handed to say why a comparison stayed open: (its study id, its
# builds by arm name) -> Prescription.to_json(), or None when every cell was decided
Diagnoser = Callable[[str, Mapping[str, EngineBuild]], "dict[str, Any] | None"]


# -- reading a study ------------------------------------------------------------------


def allowed_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_procs(store: Store, study_id: str) -> list[Proc]:
    """One :class:`Proc` per finished trial and test of the study."""
    rows = store.reads.done_samples(study_id)
    warn: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for w in store.reads.warnings(study_id):
        warn[int(w["trial_id"])].append((str(w["code"]), str(w["detail"])))
    logs: dict[tuple[int, int], list[float]] = defaultdict(list)
    meta: dict[tuple[int, int], tuple[str, str, float, int | None]] = {}
    where: dict[tuple[int, int], str] = {}
    layers: dict[str, int | None] = {}
    for r in rows:
        key = (int(r["trial"]), int(r["test_idx"]))
        logs[key].append(math.log(float(r["tokens_per_s"])))
        if key not in meta:
            try:
                raw = stored_json(r, "raw_json")
            except ValueError:
                raw = {}
            raw = raw if isinstance(raw, dict) else {}
            threads = raw.get("n_threads")
            name, idx = cell_of(str(r["workload"] or ""), str(r["test"]), int(r["test_idx"]))
            meta[key] = (str(r["arm"]), f"{r['model']}\x00{name}\x00{idx}",
                         float(r["started_at"] or 0.0), int(threads) if isinstance(threads, int) else None)
            if str(r["model"]) not in layers:
                layers[str(r["model"])] = _layers(str(r["model"]))
            where[key] = where_work_runs(raw, layers[str(r["model"])])
    # cold leading repetitions are left out of the verdict's statistic (cold.cold_leading): so here
    by_cell: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for key in logs:
        by_cell[meta[key][1]].append(key)
    for keys in by_cell.values():
        c = cold_leading([logs[k] for k in keys]).count
        for k in keys:
            logs[k] = logs[k][min(c, len(logs[k]) - 1):]
    out = []
    for key, v in logs.items():
        arm, cell, t0, threads = meta[key]
        ws = warn.get(key[0], [])
        names = tuple(n for code, detail in ws if code == "busy-process" for n in busy_names(detail))
        out.append(Proc(arm, cell, t0, tuple(v), threads, names, sum(1 for code, _ in ws if code == "stall"),
                        where[key], _gpu_busy(store, *key) if where[key] != "cpu" else None))
    return out


def _layers(model: str) -> int | None:
    """The model's layer count from its GGUF header, None when it cannot be read (moved, remote)."""
    from pathlib import Path

    from tokensleuth.models.info import model_info

    try:
        return model_info(Path(model)).n_layer or None
    except (OSError, UserError, ValueError):
        return None


BUSY_SAMPLES = 5  # a window gives a GPU busy share only when it spans this many sampling intervals


def _gpu_busy(store: Store, trial_id: int, test_idx: int) -> float | None:
    """The GPUs' mean busy % over the timeline samples inside one process's timed windows of a
    test, from windows of at least BUSY_SAMPLES sampling intervals only: NVML's utilization is the
    share of a trailing period (up to a second) a kernel ran, so in a window of a few hundred ms it
    reads the load or the idle gap before it (40% busy in doctor's tg32 windows of 120 ms on an H200,
    where bench's longer windows read 89-97%)."""
    from tokensleuth.monitor.sampler import DEFAULT_INTERVAL_S

    least = BUSY_SAMPLES * DEFAULT_INTERVAL_S * 1e9
    spans = [(int(w["start_ns"]), int(w["end_ns"])) for w in store.reads.windows(trial_id)
             if int(w["test_idx"]) == test_idx and int(w["end_ns"]) - int(w["start_ns"]) >= least]
    if not spans:
        return None
    seen = []
    for t, row in store.reads.timeline(trial_id):
        if any(a <= t <= b for a, b in spans):
            seen += [float(v) for k, v in row.items() if k.startswith("gpu") and k.endswith("_busy_pct")]
    return float(np.mean(seen)) if seen else None


# -- the probe and the prescription ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Probe:
    """An A/A study at another thread count: its per-process spread and the pairs it projects."""

    study: str
    threads: int
    processes: int
    process_cv: float  # one process mean's spread: sqrt(σ²_b + σ²_w / r)
    pairs: int | None  # pairs for the band at that spread (None: over 10,000)

    def to_json(self) -> dict[str, Any]:
        return {"study": self.study, "threads": self.threads, "processes": self.processes,
                "process_cv": self.process_cv, "pairs": self.pairs}


def pairs_at(process_cv: float, band: float, limit: int = 10_000) -> int | None:
    """Pairs for a 99% interval of a ratio near 1 to fit in ±band, when each process mean
    spreads ``process_cv`` (a pair's log ratio then spreads √2 times that)."""
    return stats.pairs_needed(math.sqrt(2) * process_cv, (band,), limit)[band]


def with_threads(kind: str, flags: Sequence[str], threads: int) -> list[str]:
    """``flags`` with ``kind``'s thread count set to ``threads`` (Engine.with_threads; only a kind
    with a thread flag is probed)."""
    out = engine_for(kind).with_threads(flags, threads)
    if out is None:
        raise UserError(f"{kind} has no thread count to set")
    return out


def rerun_command(argv: Sequence[str], threads: int | None = None, resume: bool = False,
                  max_pairs: int | None = None, kind: str = DEFAULT_KIND) -> str:
    """The command line to run next: the same command with ``threads`` set after ``--`` (the
    engine's thread flag, ``kind``: the arms'; a new study: what is measured changes), or with
    ``--resume`` (the study goes on) and ``--max-pairs`` set (tokensleuth's own option: before
    ``--``, replacing the one given)."""
    own, engine = (list(argv[:argv.index("--")]), list(argv[argv.index("--") + 1:])) if "--" in argv else (
        list(argv), [])
    if threads is not None and "--study" in own:
        put = ", ".join(f'"{f}"' for f in with_threads(kind, [], threads))
        return f"put {put} in the study file's common_flags and run it as a new study"
    if threads is not None:
        engine = with_threads(kind, engine, threads)
        own = [a for a in own if a != "--resume"]
    elif resume and "--resume" not in own:
        own.append("--resume")
    if max_pairs is not None:
        kept: list[str] = []
        skip = False
        for i, a in enumerate(own):
            if skip:
                skip = False
            elif a == "--max-pairs" and i + 1 < len(own):
                skip = True
            elif not a.startswith("--max-pairs="):
                kept.append(a)
        own = [*kept, "--max-pairs", str(max_pairs)]
    return shlex.join(["tokensleuth", *own, *(["--", *engine] if engine else [])])


def run_probe(store: Store, build: EngineBuild, model: str, workload: str, flags: Sequence[str],
              threads: int, band: float, timeout_s: float = 600, kind: str = DEFAULT_KIND) -> Probe:
    """The engine against itself at ``threads``, PROBE_PAIRS pairs, as a study of its own
    (resumed, not repeated, when the same probe was stored before)."""
    from tokensleuth.drivers.verdicts.pairs import run_compare
    from tokensleuth.trials.spec import build_compare_spec

    probe_env = {"TOKENSLEUTH_MEASUREMENT": "threads-probe"}
    spec = build_compare_spec({
        "arms": [{"name": "a", "source": build.source, "env": probe_env},
                 {"name": "b", "source": build.source, "env": probe_env}],
        "models": [model], "workloads": [workload], "min_pairs": PROBE_PAIRS, "max_pairs": PROBE_PAIRS,
        "band": 0.001, "common_flags": with_threads(kind, flags, threads), "timeout_s": timeout_s}, "probe")
    sid, _ = run_compare(store, spec, {"a": build, "b": build}, resume=True, create=True)
    procs = load_procs(store, sid)
    between, within, rbar = variance_components(process_groups(procs))
    cv = math.sqrt(between ** 2 + within ** 2 / max(rbar, 1))
    return Probe(sid, threads, len(procs), cv, pairs_at(cv, band))


@dataclass(slots=True)
class Prescription:
    diagnosis: Diagnosis
    band: float
    pairs_now: int | None  # pairs the study's own spread projects for the band
    probe: Probe | None = None
    lines: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**self.diagnosis.to_json(), "band": self.band, "pairs_now": self.pairs_now,
                "probe": self.probe.to_json() if self.probe else None, "advice": self.lines}

    def text(self) -> str:
        return "\n".join(["Why unresolved:", *(f"  - {line}" for line in self.lines)])


def _pairs_text(n: int | None) -> str:
    return "more than 10,000 pairs" if n is None else f"about {n} pairs"


def prescribe(d: Diagnosis, band: float, pairs_now: int | None, max_pairs: int, argv: Sequence[str] | None,
              probe: Probe | None, can_resume: bool = True, kind: str = DEFAULT_KIND) -> Prescription:
    """The diagnosis in words, then the cheapest measured fix with the command to run it."""
    rx = Prescription(d, band, pairs_now, probe)
    lines = rx.lines
    lines.append("; ".join(f.seen for f in d.findings) or "no cause stands out in the trials")
    lines.append(f"at this noise ±{band:.1%} takes {_pairs_text(pairs_now)}")
    now_cv = math.sqrt(d.between_cv ** 2 + d.within_cv ** 2 / max(d.reps, 1))
    if probe is not None:
        # measured to help: fewer pairs for the band, or (both past counting) a clearly smaller spread
        helps = (probe.pairs < pairs_now if probe.pairs is not None and pairs_now is not None else
                 probe.pairs is not None or probe.process_cv < 0.7 * now_cv)
        what = (f"one thread fewer ({' '.join(with_threads(kind, [], probe.threads))}) measured {probe.process_cv:.1%} between processes in a "
                f"{probe.processes}-process probe — {_pairs_text(probe.pairs)} for ±{band:.1%}")
        if helps:
            cmd = rerun_command(argv, threads=probe.threads, kind=kind) if argv else ""
            lines.append(what + (f"; rerun as a new study (the flags change): {cmd}" if cmd else ""))
        else:
            lines.append(what + " — no better, so not suggested")
    if "busy-process" in d.codes():
        lines.append(f"stop {', '.join(d.busy)} or measure on a quieter machine")
    if pairs_now is not None and pairs_now > max_pairs and can_resume and argv:
        lines.append(f"or keep measuring: {rerun_command(argv, resume=True, max_pairs=pairs_now)}")
    # what the pair budget can decide at this spread: a wider band, when one within reason does
    if d.processes:
        half = stats.t_quantile(0.995, max(max_pairs - 1, 1)) * math.sqrt(2) * now_cv / math.sqrt(max_pairs)
        if band < half <= WIDEST_BAND:
            lines.append(f"or accept a wider band: ±{half:.1%} is decidable in {max_pairs} pairs here "
                         f"(differences smaller than that then read as `same`)")
    return rx


def diagnose(store: Store, study_id: str, builds: Mapping[str, EngineBuild], *, probe: bool = True,
             argv: Sequence[str] | None = None, log: Callable[[str], None] | None = None,
             cpus: int | None = None) -> Prescription | None:
    """The diagnosis and prescription of a study with an unresolved comparison (None when
    every comparison has a verdict); stored under DIAGNOSIS_STATE."""
    from tokensleuth.drivers.verdicts.comparisons import analyze, stored_spec

    spec = stored_spec(store, study_id)
    comps = [c for c in analyze(store, study_id, spec) if c.verdict == "unresolved" and c.estimate is not None]
    if not comps:
        return None
    worst = max(comps, key=lambda c: stats.pairs_for_same(c.estimate, spec.band) or 10 ** 9)  # type: ignore[arg-type]
    assert worst.estimate is not None
    pairs_now = stats.pairs_for_same(worst.estimate, spec.band)
    cpus = cpus or allowed_cpus()
    d = classify(load_procs(store, study_id), cpus)
    found = None
    base = next(a for a in spec.arms if a.name == worst.baseline)
    build = builds.get(base.name)
    # arms that set their own thread counts compare them: one thread fewer for all is no fix then
    arms_set_threads = any(engine_for(a.kind).sets_threads(a.flags) for a in spec.arms)
    fewer = engine_for(base.kind).with_threads([], d.threads - 1) if d.threads is not None else None
    if (probe and "threads" in d.codes() and d.threads is not None and build is not None
            and fewer is not None and not arms_set_threads):  # (a kind with no thread flag: None)
        if log:
            log(f"probe: {2 * PROBE_PAIRS} processes of {worst.workload} at {' '.join(fewer)} "
                "(--no-probe skips it)")
        found = run_probe(store, build, worst.model, worst.workload, spec.flags_of(base),
                          d.threads - 1, spec.band, spec.timeout_s, kind=base.kind)
    rx = prescribe(d, spec.band, pairs_now, spec.max_pairs, argv, found, kind=base.kind)
    store.state.put(study_id, DIAGNOSIS_STATE, rx.to_json())
    return rx


def diagnoser(store: Store, request: DriverOptions, probe: bool, say: Say) -> Diagnoser:
    """A driver's diagnose hook: why a comparison stayed open, with the threads probe where
    ``probe`` (it runs here: not when a fleet's machines measured)."""
    def why(study_id: str, builds: Mapping[str, EngineBuild]) -> dict[str, Any] | None:
        rx = diagnose(store, study_id, builds, probe=probe, argv=request.argv, log=say.line)
        return rx.to_json() if rx else None

    return why
