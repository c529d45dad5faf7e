"""The level rounds (one trial per cell of every sampled build, forward then backward) and the step
fit over them, block by block."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import EngineError
from tokensleuth.drivers.hunts.scan.plan import round_order
from tokensleuth.drivers.hunts.scan.resolve import noise_line, noise_of
from tokensleuth.drivers.hunts.scan.state import LEVELS, NOISE, Scan
from tokensleuth.drivers.hunts.scan.steps import FitStep, fit_steps
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.store import count_engine

if TYPE_CHECKING:
    from tokensleuth.core.records import TrialOutcome


def measure_levels(scan: Scan, rounds: int) -> None:
    """Rounds over every sampled point of the block not yet measured that often (one trial
    per cell), on this lane's machine: a level carries its machine's label, and levels of
    different machines are never put in one sequence (:func:`step_fit`)."""
    from tokensleuth.core.workloads import JOINED, canonical
    from tokensleuth.engines import engine_for
    from tokensleuth.engines.base import ArmRuntime

    engine = engine_for(scan.spec.get("kind", DEFAULT_KIND))
    have = stored_levels(scan)
    for r in range(rounds):
        stored = all((scan.cands[i].label, r, m, w) in have for i in scan.block_points()
                     for m in scan.spec["models"] for w in scan.spec["workloads"])
        for i in round_order(scan.block_points(), r):
            c = scan.cands[i]
            for m in scan.spec["models"]:
                # one process for all of the model's workloads where one can run them (as the
                # compares do: compare.joins_workloads), else one per workload
                for ws in level_trials(scan):
                    want = [w for w in ws if (c.label, r, m, w) not in have]
                    if not want or scan.over_budget():
                        continue
                    b = scan.judge.builds.get(c.source)
                    if b is None:
                        continue
                    arm = ArmRuntime("level", Path(b.bin_dir), tuple(scan.judge.flags_of(c.source)), {})
                    name = JOINED.join(ws)
                    argv = engine.argv_for(ws)
                    assert argv is not None
                    if scan.judge.executor is None:
                        out = engine.run_trial(arm, m, name, argv, timeout_s=scan.spec["timeout_s"],
                                               probe=None, host_env={}).outcome
                    else:
                        out = remote_level(scan, arm, m, name, argv)
                    count_engine(out)  # (a level is kept in the scan's state, not as a stored trial)
                    got = {canonical(x.test) if len(ws) > 1 else ws[0]: float(x.avg_ts)
                           for x in (out.results if out.status == "done" else []) if x.avg_ts}
                    levels = [{"label": c.label, "round": r, "model": m, "workload": w, "ts": got.get(w),
                               **({"node": scan.node_label} if scan.node_label is not None else {})}
                              for w in want]
                    scan.update(LEVELS, [], lambda xs: [*xs, *levels])  # (all of one process at once)
                    have.update((c.label, r, m, w) for w in want)
        scan.log(f"  levels{scan.on()}: round {r + 1}/{rounds} over {len(scan.block_points())} builds"
                 + (" (measured before)" if stored else ""))


def stored_levels(scan: Scan) -> set[tuple[str, int, str, str]]:
    """(label, round, model, workload) of each level stored from this lane's machine."""
    return {(x["label"], x["round"], x["model"], x["workload"]) for x in scan.get(LEVELS, [])
            if x.get("node") == scan.node_label}


def measured_points(scan: Scan, rounds: int) -> set[int]:
    """The block's points whose every level round is stored from this lane's machine: the
    level rounds need no build of them (a comparison that needs one builds it then)."""
    have = stored_levels(scan)
    return {i for i in scan.block_points()
            if all((scan.cands[i].label, r, m, w) in have for r in range(rounds)
                   for m in scan.spec["models"] for w in scan.spec["workloads"])}


def level_trials(scan: Scan) -> list[list[str]]:
    """The workloads each level trial of a model runs: all in one, or one each."""
    from tokensleuth.engines import engine_for

    ws = list(scan.spec["workloads"])
    one = len(ws) > 1 and engine_for(scan.spec.get("kind", DEFAULT_KIND)).argv_for(ws) is not None
    return [ws] if one else [[w] for w in ws]


def remote_level(scan: Scan, arm: Any, model: str, workload: str, argv: Sequence[str]) -> TrialOutcome:
    """One level trial on this lane's machine (its build made there first)."""
    from tokensleuth.executors import Done
    from tokensleuth.trials.runner import TrialJob

    assert scan.judge.executor is not None
    job = TrialJob(-1, 0, "level", model, workload, tuple(argv))
    for got in scan.judge.executor.run([(job,)], {"level": arm}, timeout_s=scan.spec["timeout_s"],
                                       interval_s=0.2, handout=lambda unit, node: None, live=None):
        if isinstance(got, Done):
            return got.outcomes[0]
    raise EngineError(f"a level trial on {scan.node_label} came back with nothing")  # pragma: no cover


def step_fit(scan: Scan) -> dict[tuple[str, str], list[FitStep]]:
    """The step fit per cell, block by block (each block's levels from its own machine);
    each step's ``after`` an index into :meth:`points`."""
    levels = scan.get(LEVELS, [])
    pts = scan.points()
    out: dict[tuple[str, str], list[FitStep]] = {}
    for lo, hi, node in scan.blocks():
        sub = [i for i in pts if lo <= i <= hi]
        for m in scan.spec["models"]:
            for w in scan.spec["workloads"]:
                seq = [[x["ts"] for x in levels if x["label"] == scan.cands[i].label and x["model"] == m
                        and x["workload"] == w and x["ts"] and x.get("node") == node] for i in sub]
                keep = [s for s in seq if s]
                steps = fit_steps(keep, scan.spec["band"]) if len(keep) == len(seq) else []
                out.setdefault((m, w), []).extend(
                    replace(s, after=pts.index(sub[s.after])) for s in steps)
    return out


def cell_levels(scan: Scan) -> dict[tuple[str, str], list[list[float]]]:
    """Each cell's rounds of t/s per sampled point (each point's from its block's machine)."""
    levels = scan.get(LEVELS, [])
    pts = scan.points()
    out: dict[tuple[str, str], list[list[float]]] = {}
    for lo, hi, node in scan.blocks():
        for m in scan.spec["models"]:
            for w in scan.spec["workloads"]:
                out.setdefault((m, w), []).extend(
                    [x["ts"] for x in levels if x["label"] == scan.cands[i].label and x["model"] == m
                     and x["workload"] == w and x["ts"] and x.get("node") == node] for i in pts if lo <= i <= hi)
    return out


def settle_band(scan: Scan) -> dict[str, Any]:
    """After the first level rounds: the noise they measured, the band it resolves and the band
    the verdicts use (``resolve.noise_of``), stored once and said; ``scan.spec["band"]`` becomes
    that band. A resumed scan keeps the stored choice (its verdicts were judged at it) unless
    whether the band was given changed."""
    asked, given = float(scan.spec.get("band_asked", scan.spec["band"])), bool(scan.spec.get("band_given", True))
    stored = scan.get(NOISE, None)
    if stored and stored.get("band_asked") == asked and stored.get("band_given") == given \
            and stored.get("pair_sd") is not None:
        noise = dict(stored)
    else:
        noise = noise_of(cell_levels(scan), asked, given, int(scan.spec["max_pairs"]))
        scan.put(NOISE, noise)
    scan.spec["band_asked"] = asked
    scan.spec["band"] = noise["band"]
    scan.log("  " + noise_line(noise))
    return noise
