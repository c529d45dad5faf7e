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
interval: never read as the same); ops that appear or vanish; node counts that changed. And the
**shares** of the measured difference (the profiler's wall time per token, graph and outside
it): the graph's nodes, the time outside the graph and each changed op, with 95% bootstrap
intervals over the processes; none where that difference is not beyond its interval or the band.

The kernel trace's figures are analysis/kernels.py's. Floor 2: imports core and stats.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokensleuth.analysis.stats import bootstrap_share, change_verdict, t_quantile, welch
from tokensleuth.core.records import JSON_SCHEMA_VERSION

CONFIDENCE = 0.99


def _interval(xs: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, math.nan, math.nan
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    h = t_quantile(0.5 + confidence / 2, len(xs) - 1) * sd / math.sqrt(len(xs))
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
    out = {"model": a.model, "workload": a.workload, "engines": [a.engine, b.engine], "rows": rows,
           "total_ms_per_token": [total, sum(b.graph_ms()) / len(b.reps)],
           "delta_total_ms_per_token": d_all, "delta_total_ci": [lo_all, hi_all],
           "outside_ms_per_token": [sum(a.outside_ms()) / len(a.reps), sum(b.outside_ms()) / len(b.reps)],
           "delta_outside_ms_per_token": d_out, "delta_outside_ci": [lo_out, hi_out],
           "outside_changed": lo_out > practical or hi_out < -practical, "band": band}
    out.update(shares(a, b, rows, band))
    out["sentence"] = sentence(out)
    return out


def shares(a: Profile, b: Profile, rows: Sequence[dict[str, Any]], band: float) -> dict[str, Any]:
    """How much of the profiler's measured difference (its wall ms/token: the graph's nodes and the
    time outside the graph, one value per process; the interval delta_total's, 99%) lies in the
    graph and how much outside it, and each changed op's part, with 95% bootstrap intervals over
    the processes (as the kernel trace's shares, analysis/kernels.py); or why none is given
    (fewer than two processes a side, no difference beyond its interval, or one within the band: a
    share of noise says nothing). Each share is a process's part over its own whole: one draw of
    processes serves both (``bootstrap_share(paired=True)``)."""
    wall_a = a.by_process([g + o for g, o in zip(a.graph_ms(), a.outside_ms(), strict=True)])
    wall_b = b.by_process([g + o for g, o in zip(b.graph_ms(), b.outside_ms(), strict=True)])
    d, lo, hi = welch(wall_a, wall_b, CONFIDENCE)  # delta_total's interval
    practical = band * sum(wall_a) / len(wall_a)
    out: dict[str, Any] = {"measured": {"delta_ms_per_token": d, "ci": [None if math.isnan(lo) else lo,
                                                                        None if math.isnan(hi) else hi],
                                        "within_band": abs(d) <= practical},
                           "measured_by": "the profiler's processes: the graph and the time outside it"}
    if math.isnan(lo):
        out["shares_withheld"] = ("fewer than 2 profiler processes of an engine: the measured difference has no "
                                  "interval, so no share of it is given — profile with --processes 3 or more")
        return out
    if not (lo > 0 or hi < 0):
        out["shares_withheld"] = (f"the profiler measured no difference beyond its interval ({d:+.3g} ms/token, 99% "
                                  f"CI [{lo:+.3g}, {hi:+.3g}]): no share of it is given")
        return out
    if abs(d) <= practical:
        out["shares_withheld"] = (f"the profiler measured {d:+.3g} ms/token, beyond its interval but within the "
                                  f"±{band:.0%} band: no share of it is given")
        return out
    den = (wall_a, wall_b)

    def part(xa: Sequence[float], xb: Sequence[float]) -> dict[str, Any]:
        pa, pb = a.by_process(xa), b.by_process(xb)
        s_lo, s_hi = bootstrap_share((pa, pb), den, paired=True)
        return {"share": (sum(pb) / len(pb) - sum(pa) / len(pa)) / d, "ci": [s_lo, s_hi]}

    out["graph_share"] = part(a.graph_ms(), b.graph_ms())
    out["outside_share"] = part(a.outside_ms(), b.outside_ms())
    pa, pb = a.per_rep(), b.per_rep()
    out["op_shares"] = [
        {"op": r["op"], "signature": r["signature"],
         **part(pa.get((r["op"], r["signature"]), [0.0] * len(a.reps)),
                pb.get((r["op"], r["signature"]), [0.0] * len(b.reps)))}
        for r in rows if r["verdict"] not in ("same", "unresolved")]
    return out


def _pct(x: dict[str, Any]) -> str:
    lo, hi = x["ci"]
    return f"{x['share']:.0%}" + ("" if lo is None or hi is None or math.isnan(lo) else f" [{lo:.0%}, {hi:.0%}]")


def sentence(d: dict[str, Any]) -> str:
    """One line from the figures: how much of the profiler's measured difference the graph's nodes
    and the time outside the graph account for (95% intervals over processes), and each changed
    op's part; or why no share is given."""
    m = d["measured"]
    if d.get("shares_withheld"):
        return f"No shares: {d['shares_withheld']}."
    ops = "".join(f"; {o['op']} {o['signature']} {_pct(o)}" for o in d.get("op_shares", []))
    return (f"Of the measured difference of {m['delta_ms_per_token']:+.3g} ms/token ({d['measured_by']}), the graph's nodes "
            f"account for {_pct(d['graph_share'])} and the time outside the graph for {_pct(d['outside_share'])}"
            f"{ops}.")


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
