"""Op figures from the per-op profiler's rows (engines/profiler.py): per engine, model and
workload, and the diff of two builds.

Per engine x model x workload:

* an op's **nodes per token** (a property of the graph: the same in every repetition) and its
  **ms per token**, with a 99% interval over the processes (each process's mean over its
  repetitions: the process is the unit of replication, as in compare — repetitions of one
  process share its load, its memory layout and its clocks, and treating 2 processes × 3
  repetitions as 6 samples called a fusion change on the 30B shape that a rerun did not see);
* the **node sum** against llama-bench's own ms/token of the same build and model (one
  llama-bench process beside the profiles): the ratio says how much of the real time the
  per-node timing sees, and what it adds (on a GPU each node is synchronised);
* **time outside the graph**: the workload's wall time less its node times (a busy wait in
  the decode call, host work between graphs).

Between two engines, the **diff**: per op signature, the change of ms per token with a
Welch interval at 99% over the processes for the whole table (Bonferroni over the
signatures), called a change only beyond the interval *and* beyond ``band`` of the
baseline's total ms/token, and ``unresolved`` where an engine has fewer than 2 processes (no
interval: never read as the same); ops that appear or vanish; node counts that changed.

The kernel trace's figures are analysis/kernels.py's. Floor 2: imports core and stats.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy import stats as sps

from tokensleuth.analysis.stats import change_verdict, welch
from tokensleuth.core.records import JSON_SCHEMA_VERSION

CONFIDENCE = 0.99


def _interval(xs: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, math.nan, math.nan
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    h = float(sps.t.ppf(0.5 + confidence / 2, len(xs) - 1)) * sd / math.sqrt(len(xs))
    return m, m - h, m + h


@dataclass(frozen=True)
class Profile:
    """One engine's profile of one model and workload: every repetition of every process.

    ``procs``: the process of each repetition (where none is given, each repetition is a
    process of its own)."""

    engine: str
    model: str
    workload: str
    reps: tuple[dict[str, Any], ...]
    procs: tuple[int, ...] = ()

    def key(self) -> tuple[str, str, str]:
        return (self.engine, self.model, self.workload)

    def by_process(self, xs: Sequence[float]) -> list[float]:
        """Per-repetition values -> one mean per process, in process order."""
        procs = self.procs or tuple(range(len(xs)))
        acc: dict[int, list[float]] = defaultdict(list)
        for p, x in zip(procs, xs, strict=True):
            acc[p].append(x)
        return [sum(v) / len(v) for _, v in sorted(acc.items())]

    def per_rep(self) -> dict[tuple[str, str], list[float]]:
        """(op, signature) -> ms per token in each repetition (0 where it did not run)."""
        out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * len(self.reps))
        for i, r in enumerate(self.reps):
            for op, sig, _nodes, ns in r["ops"]:
                out[(op, sig)][i] += ns / 1e6 / r["tokens"]
        return dict(out)

    def nodes(self) -> dict[tuple[str, str], float]:
        """(op, signature) -> nodes per token (the most any repetition had)."""
        out: dict[tuple[str, str], float] = defaultdict(float)
        for r in self.reps:
            for op, sig, nodes, _ns in r["ops"]:
                out[(op, sig)] = max(out[(op, sig)], nodes / r["tokens"])
        return dict(out)

    def graph_ms(self) -> list[float]:
        return [r["graph_ns"] / 1e6 / r["tokens"] for r in self.reps]

    def outside_ms(self) -> list[float]:
        return [max(0.0, (r["wall_ns"] - r["graph_ns"]) / 1e6 / r["tokens"]) for r in self.reps]

    def ops(self) -> list[dict[str, Any]]:
        nodes = self.nodes()
        total = sum(self.graph_ms()) / len(self.reps)
        out = []
        for (op, sig), xs in self.per_rep().items():
            m, lo, hi = _interval(self.by_process(xs))
            out.append({"engine": self.engine, "model": self.model, "workload": self.workload, "op": op,
                        "signature": sig, "nodes_per_token": nodes[(op, sig)], "ms_per_token": m,
                        "ci": [lo, hi], "share": m / total if total else None})
        return sorted(out, key=lambda o: -o["ms_per_token"])


def diff(a: Profile, b: Profile, band: float = 0.02) -> dict[str, Any]:
    """What changed from ``a`` to ``b``: per op signature, sorted by the size of the change."""
    pa, pb = a.per_rep(), b.per_rep()
    na, nb = a.nodes(), b.nodes()
    keys = sorted(set(pa) | set(pb))
    conf = 1 - (1 - CONFIDENCE) / max(1, len(keys))  # the table's, not each row's
    total = sum(a.graph_ms()) / len(a.reps)
    practical = band * total
    rows: list[dict[str, Any]] = []
    for k in keys:
        xa = pa.get(k, [0.0] * len(a.reps))
        xb = pb.get(k, [0.0] * len(b.reps))
        d, lo, hi = welch(a.by_process(xa), b.by_process(xb), conf)
        dn = nb.get(k, 0.0) - na.get(k, 0.0)
        verdict = change_verdict(d, lo, hi, practical, appeared=k not in pa, vanished=k not in pb)
        rows.append({"model": a.model, "workload": a.workload, "op": k[0], "signature": k[1],
                     "ms_per_token": [sum(xa) / len(xa), sum(xb) / len(xb)], "delta_ms_per_token": d,
                     "ci": [lo, hi], "delta_nodes_per_token": dn, "verdict": verdict})
    rows.sort(key=lambda r: -abs(r["delta_ms_per_token"]))
    d_out, lo_out, hi_out = welch(a.by_process(a.outside_ms()), b.by_process(b.outside_ms()), CONFIDENCE)
    d_all, lo_all, hi_all = welch(a.by_process([g + o for g, o in zip(a.graph_ms(), a.outside_ms(), strict=True)]),
                                   b.by_process([g + o for g, o in zip(b.graph_ms(), b.outside_ms(), strict=True)]),
                                   CONFIDENCE)
    return {"model": a.model, "workload": a.workload, "engines": [a.engine, b.engine], "rows": rows,
            "total_ms_per_token": [total, sum(b.graph_ms()) / len(b.reps)],
            "delta_total_ms_per_token": d_all, "delta_total_ci": [lo_all, hi_all],
            "outside_ms_per_token": [sum(a.outside_ms()) / len(a.reps), sum(b.outside_ms()) / len(b.reps)],
            "delta_outside_ms_per_token": d_out, "delta_outside_ci": [lo_out, hi_out],
            "outside_changed": lo_out > practical or hi_out < -practical, "band": band}


def profiles(runs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], Profile]:
    """(engine, model, workload) -> its Profile, from the stored runs."""
    acc: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    procs: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for run in runs:
        key = (str(run["engine"]), str(run["model"]), str(run["workload"]))
        acc[key] += list(run["rows"])
        procs[key] += [int(run["process"])] * len(run["rows"])
    return {k: Profile(*k, tuple(v), tuple(procs[k])) for k, v in acc.items()}


def analyze(spec: Mapping[str, Any], runs: Sequence[Mapping[str, Any]],
            bench: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The profile study's JSON: ops of every engine, the diffs against the first engine, and
    the node sum against llama-bench."""
    got = profiles(runs)
    engines = list(spec["engines"])
    ops: list[dict[str, Any]] = []
    ratios: dict[str, dict[str, float | None]] = defaultdict(dict)
    walls: dict[str, dict[str, float | None]] = defaultdict(dict)
    bench_ms = {(str(b["engine"]), str(b["model"]), str(b["workload"])): b.get("ms_per_token") for b in bench}
    for key, p in got.items():
        ops += p.ops()
        real = bench_ms.get(key)
        graph = sum(p.graph_ms()) / len(p.reps)
        label = key[2] if len(spec["models"]) == 1 else f"{Path(key[1]).stem} {key[2]}"
        ratios[key[0]][label] = graph / real if real else None
        wall = graph + sum(p.outside_ms()) / len(p.reps)  # the node times and the time between them
        walls[key[0]][label] = wall / real if real else None
    diffs = []
    for e in engines[1:]:
        for m in spec["models"]:
            for w in spec["workloads"]:
                a, b = got.get((engines[0], m, w)), got.get((e, m, w))
                if a is not None and b is not None:
                    diffs.append(diff(a, b, float(spec.get("band", 0.02))))
    flat: list[dict[str, Any]] = [dict(r, engines=d["engines"]) for d in diffs for r in d["rows"]]
    flat.sort(key=lambda r: -abs(r["delta_ms_per_token"]))
    return {"schema_version": JSON_SCHEMA_VERSION, "engines": engines, "ops": ops, "diff": flat, "diffs": diffs,
            "node_sum_ratio": dict(ratios), "wall_ratio": dict(walls), "synchronised": bool(spec.get("synchronised")),
            "groups": bool(spec.get("groups")), "env": dict(spec.get("env") or {})}
