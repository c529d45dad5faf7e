"""In-process pairing at 30B scale: the design table of issue 20 item 9, from real processes.

Reads the processes bench/device_pairing.sh collected on the H200 (bench/pairing.py; default
bench/results/h200-pairing/pairing.jsonl: the Qwen3-30B-A3B shape, Q8_0, -ngl 99 -fa 1) and,
for each design, workload and arm pair:

* **today**: one process per arm and pair, every one of 3 repetitions counted;
* **cold out**: the same processes, 4 repetitions run and the cold leading ones that
  cold_leading finds left out (the tool's design since item 2);
* **in-process**: one process per pair running A, B, B, A (B, A, A, B every other pair) on one
  load, cold leading repetitions of each instance left out as above.

It prints the spread of the per-pair log ratio, its split into between- and within-process
parts, the engine seconds a pair costs, and then runs the tool's own sequential procedure
(first round of 5 pairs, doubling to 40, the 99% paired interval, the futility stop: the
functions of tokensleuth.analysis.stats that compare uses) on thousands of simulated studies drawn from
the measured spread (normal, and resampled from the real per-pair ratios): A/A false alarms,
detection of a 3% slowdown (--effect), engine seconds per correct verdict at a ±2% band (--band). The real
processes are also replayed as back-to-back sequential studies, and each flag A/B's ratio is
given by both designs (in-process pairing must not change the answer).

    .venv/bin/python bench/pairing_sim.py [PAIRING.jsonl] [--studies 4000] [--band 0.02] [--effect 0.03]
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokensleuth.analysis import stats
from tokensleuth.analysis.cold import cold_leading

ROOT = Path(__file__).resolve().parent.parent
FIRST, MAX = 5, 40  # compare's defaults: --min-pairs 5, --max-pairs 40


@dataclass
class Pairs:
    """One design's pairs for one (label, workload): the per-pair log ratio and its cost."""

    d: np.ndarray  # log(candidate / baseline) per pair
    cost: np.ndarray  # engine seconds per pair
    within: float  # pooled within-instance sd of log t/s (kept repetitions)
    cold: int  # leading repetitions left out per instance


def tokens(w: str) -> int:
    return int(w[2:])


def rep_logs(row: dict[str, Any], n_tok: int) -> list[float]:
    return [math.log(n_tok / (ns / 1e9)) for ns in row["samples_ns"]]


def trial_ts(logs: list[float]) -> float:
    """A trial's statistic as the tool computes it: the mean t/s of its kept repetitions."""
    return float(np.mean(np.exp(logs)))


def pairs_for(procs: list[dict[str, Any]], design: str) -> Pairs:
    w = procs[0]["workload"]
    n_tok = tokens(w)
    instances = [rep_logs(r, n_tok) for p in procs for r in p["rows"]]
    cold = 0 if design == "today" else cold_leading(instances).count
    d, cost, resid = [], [], []
    if design == "inprocess":
        for p in procs:
            by: dict[str, list[float]] = defaultdict(list)
            for arm, row in zip(p["order"], p["rows"], strict=True):
                logs = rep_logs(row, n_tok)[cold:]
                by[arm] += logs
                resid += list(np.asarray(logs) - np.mean(logs))
            d.append(math.log(trial_ts(by["b"]) / trial_ts(by["a"])))
            cost.append(p["wall_s"])
    else:
        per: dict[int, dict[str, tuple[float, float]]] = defaultdict(dict)
        for p in procs:
            logs = rep_logs(p["rows"][0], n_tok)
            wall = p["wall_s"]
            if design == "today":  # 3 repetitions, all counted: the 4th did not run
                logs, wall = logs[:3], wall - p["rows"][0]["samples_ns"][3] / 1e9
            else:
                logs = logs[cold:]
            resid += list(np.asarray(logs) - np.mean(logs))
            per[p["pair"]][p["order"][0]] = (trial_ts(logs), wall)
        for pair in sorted(per):
            if len(per[pair]) == 2:
                d.append(math.log(per[pair]["b"][0] / per[pair]["a"][0]))
                cost.append(per[pair]["a"][1] + per[pair]["b"][1])
    n_inst = sum(len(p["rows"]) for p in procs)
    dof = max(1, len(resid) - n_inst)
    return Pairs(np.asarray(d), np.asarray(cost), float(math.sqrt(np.sum(np.square(resid)) / dof)), cold)


def sequential(draw: np.ndarray, band: float) -> tuple[str, int]:
    """compare's sequential procedure on one study's stream of per-pair log ratios."""
    n = 0
    while True:
        target = stats.next_pair_target(n, FIRST, MAX)
        if target is None:
            break
        n = target
        est = stats.ratio_interval([1.0] * n, np.exp(draw[:n]).tolist())
        v = stats.verdict(est, band)
        if v != "unresolved":
            return v, n
        if not stats.can_still_decide(est, band, MAX):
            break
    return "unresolved", n


def simulate(d: np.ndarray, cost: float, mu: float, band: float, studies: int, rng: np.random.Generator,
             resample: bool) -> dict[str, float]:
    sd = float(np.std(d, ddof=1))
    centred = d - d.mean()
    out: dict[str, int] = defaultdict(int)
    pairs = 0
    for _ in range(studies):
        draw = (rng.choice(centred, MAX) if resample else rng.normal(0, sd, MAX)) + mu
        v, n = sequential(draw, band)
        out[v] += 1
        pairs += n
    want = "same" if mu == 0 else "slower"  # (mu is outside the band)
    right = out[want] / studies
    return {"right": right, "wrong": (studies - out[want] - out["unresolved"]) / studies,
            "unresolved": out["unresolved"] / studies, "pairs": pairs / studies,
            "engine_s": pairs / studies * cost,
            "per_right": pairs / studies * cost / right if right else math.inf}


def replay(d: np.ndarray, band: float) -> list[tuple[str, int]]:
    """The real pairs, in the order they ran, as back-to-back sequential studies (a study the
    pairs left cannot finish is not counted)."""
    out: list[tuple[str, int]] = []
    i = 0
    while True:
        v, n = _replay_short(d[i:], band)
        if v == "unfinished":
            return out
        out.append((v, n))
        i += n


def _replay_short(rest: np.ndarray, band: float) -> tuple[str, int]:
    n = 0
    while True:
        target = stats.next_pair_target(n, FIRST, MAX)
        if target is None or target > len(rest):
            return "unfinished", target or n
        n = target
        est = stats.ratio_interval([1.0] * n, np.exp(rest[:n]).tolist())
        v = stats.verdict(est, band)
        if v != "unresolved" or not stats.can_still_decide(est, band, MAX):
            return v, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default=str(ROOT / "bench/results/h200-pairing/pairing.jsonl"))
    ap.add_argument("--studies", type=int, default=4000)
    ap.add_argument("--band", type=float, default=0.02)
    ap.add_argument("--effect", type=float, default=0.03, help="the slowdown to detect (outside the band)")
    a = ap.parse_args()
    procs = [json.loads(ln) for ln in Path(a.path).read_text().splitlines() if ln.strip()]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for p in procs:
        groups[(p["label"], p["workload"], p["design"])].append(p)
    rng = np.random.default_rng(20)
    print(f"band ±{a.band:.0%}, {a.studies} simulated studies per row, first round {FIRST} pairs, cap {MAX}; "
          "sd: of the per-pair log ratio; within: of one repetition's log t/s")
    print(f"{'arms':8s} {'cell':7s} {'design':10s} {'pairs':>5s} {'cold':>4s} {'ratio':>7s} {'sd %':>6s} "
          f"{'within %':>8s} {'s/pair':>6s} | {'A/A same':>8s} {'false':>6s} {'pairs':>5s} {'s/right':>7s} | "
          f"{f'{a.effect:.0%} found':>8s} {'wrong':>6s} {'pairs':>5s} {'s/right':>7s} | boot same/found | real studies")
    for (label, w, design), ps in sorted(groups.items()):
        designs = ["inprocess"] if design == "inprocess" else ["today", "cold out"]
        for name in designs:
            pr = pairs_for(ps, "today" if name == "today" else design)
            if len(pr.d) < 3:
                continue
            cost = float(pr.cost.mean())
            aa = simulate(pr.d, cost, 0.0, a.band, a.studies, rng, False)
            det = simulate(pr.d, cost, math.log(1 - a.effect), a.band, a.studies, rng, False)
            aa_b = simulate(pr.d, cost, 0.0, a.band, a.studies // 4, rng, True)
            det_b = simulate(pr.d, cost, math.log(1 - a.effect), a.band, a.studies // 4, rng, True)
            real = replay(pr.d, a.band)
            ratio = math.exp(pr.d.mean())
            print(f"{label:8s} {w:7s} {name:10s} {len(pr.d):5d} {pr.cold:4d} {ratio:7.4f} "
                  f"{100 * np.std(pr.d, ddof=1):6.2f} {100 * pr.within:8.2f} {cost:6.1f} | "
                  f"{aa['right']:8.1%} {aa['wrong']:6.1%} {aa['pairs']:5.1f} {aa['per_right']:7.0f} | "
                  f"{det['right']:8.1%} {det['wrong']:6.1%} {det['pairs']:5.1f} {det['per_right']:7.0f} | "
                  f"{aa_b['right']:5.1%}/{det_b['right']:5.1%} | "
                  + (", ".join(f"{v}@{n}" for v, n in real) or "-"))


if __name__ == "__main__":
    main()
