"""Compare studies read back: the comparisons a study's stored trials give, and their sentences.

Pure reads of the store: no driver, no renderer. The driver (:mod:`tokensleuth.drivers.verdicts.pairs`) writes
trials and asks this module which cells are still open; ``report`` and the study kind
(:mod:`tokensleuth.studies.compare`) render what it returns.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokensleuth.analysis import noise, stats
from tokensleuth.analysis.cold import Cold
from tokensleuth.analysis.confounders import busy_names
from tokensleuth.analysis.results import load_cells
from tokensleuth.core.workloads import cell_of, trial_workloads
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import DEFAULT_KIND, ParamDiff, per_instance
from tokensleuth.store import Store, stored_json
from tokensleuth.trials.spec import CompareSpec


@dataclass(slots=True)
class Comparison:
    """One candidate vs the baseline on one (model, workload)."""

    model: str
    workload: str
    baseline: str
    candidate: str
    pairs: int
    base_ts: list[float]
    cand_ts: list[float]
    estimate: stats.RatioEstimate | None
    verdict: str
    cpu_estimate: stats.RatioEstimate | None = None
    cpu_verdict: str = "unresolved"
    base_res: dict[str, Any] = field(default_factory=dict)
    cand_res: dict[str, Any] = field(default_factory=dict)
    # llama-bench's own settings that differ between the arms' runs (requested or not)
    param_diffs: list[ParamDiff] = field(default_factory=list)
    # server arms: TTFT / inter-token latency percentiles (results.Cell.latency)
    base_latency: dict[str, Any] | None = None
    cand_latency: dict[str, Any] | None = None
    # leading repetitions every trial of this cell left out (cold.cold_leading), None when none
    cold: Cold | None = None
    shared: bool = False  # each pair ran in one engine process (Engine.sharing), not one per trial
    joined: bool = False  # each trial ran every workload of its model in one process (compare.joins_workloads)
    # pairs whose trials carried a confounder the monitor saw (CONFOUNDERS), by code, and the
    # interval of the other pairs alone (None when none carried one)
    confounded: dict[str, int] = field(default_factory=dict)
    clean: stats.RatioEstimate | None = None
    steered: bool = False  # the all-pairs and clean-pairs intervals answer differently: a decision waits
    clean_verdict: str | None = None  # what the clean pairs alone answer (None: too few of them)

    def confounder_note(self) -> str:
        """What the confounded pairs did to this cell's answer, one sentence ("" when none)."""
        if not self.confounded:
            return ""
        what = ", ".join(f"{code} in {n} pair{'s' if n != 1 else ''}" for code, n in self.confounded.items())
        clean = (f"{self.clean.ratio:.4f} [{self.clean.lo:.4f}, {self.clean.hi:.4f}]" if self.clean
                 else "nothing (too few pairs)")
        head = f"{self.workload}: {what}; the other pairs alone give {clean}"
        if self.steered and self.clean is None:  # (withheld: no interval of its own to answer with)
            return head + ", no answer of their own, so no decision is taken on this cell until more pairs settle it"
        if self.steered:
            return head + " — it answers otherwise, so no decision is taken on this cell until more pairs settle it"
        if self.clean_verdict is None:
            return head + f", no answer of their own; all pairs answer {self.verdict}"
        if self.clean_verdict == self.verdict:
            return head + f", the same answer ({self.verdict})"
        return (head + f", which answers {self.clean_verdict} where all pairs answer {self.verdict}: that verdict "
                "rests on the pairs the confounder touched")

    def warnings(self) -> list[str]:
        """Confounders visible only across arms: GPU clocks that drifted > 5% between them, and
        pairs a confounder touched on one side only (with what the other pairs alone give)."""
        out = []
        b, c = self.base_res.get("gpu_clock_mhz"), self.cand_res.get("gpu_clock_mhz")
        if b and c and abs(c - b) / b > 0.05:
            out.append(f"gpu-clock-drift: mean GPU clock {b:.0f} MHz ({self.baseline}) vs {c:.0f} MHz "
                       f"({self.candidate}) — lock clocks or let the GPU cool between runs")
        if self.confounded:
            out.append(f"confounded pairs ({Path(self.model).stem}): {self.confounder_note()}")
        return out

    def to_json(self) -> dict[str, Any]:
        """The cell as the JSON contract shows it (docs/architecture.md#contracts)."""
        e = self.estimate
        ce = self.cpu_estimate
        return {
            "model": self.model,
            "workload": self.workload,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "ratio": e.ratio if e else None,
            "ci": [e.lo, e.hi] if e else None,
            "confidence": e.confidence if e else None,
            "method": e.method if e else None,
            "verdict": self.verdict,
            "pairs": self.pairs,
            "tokens_per_s": {
                "baseline": _mean_sd(self.base_ts),
                "candidate": _mean_sd(self.cand_ts),
            },
            "resources": {"baseline": self.base_res, "candidate": self.cand_res},
            "param_diffs": [d.to_json() for d in self.param_diffs],
            "warnings": self.warnings(),
            # pairs one of whose trials carried a confounder (comparisons.guard), and what the others say
            **({"confounded": {"pairs": self.confounded,
                               "clean_ci": [self.clean.lo, self.clean.hi] if self.clean else None,
                               "steered": self.steered, "clean_verdict": self.clean_verdict,
                                             "note": self.confounder_note()}} if self.confounded else {}),
            "resource_verdicts": {
                "cpu_ms_per_token": {
                    "ratio": ce.ratio if ce else None,
                    "ci": [ce.lo, ce.hi] if ce else None,
                    # the ratio is CPU ms/token candidate/baseline: above the band is "costlier"
                    "verdict": self.cpu_verdict,
                }
            },
            # leading repetitions left out of every trial's t/s: how many and how slow they ran
            "cold_repetitions": {"per_trial": self.cold.count if self.cold else 0,
                                 "ratio": self.cold.ratio if self.cold else None,
                                 **({"per_instance": per_instance(self.cold.count if self.cold else 0)}
                                    if self.shared else {})},
            # each pair in one process (Engine.sharing), or each trial all of its model's workloads;
            # absent: a process per trial and workload, as ever
            **({"design": SHARED_DESIGN} if self.shared else {"design": JOINED_DESIGN} if self.joined else {}),
            # server arms only: client-side TTFT / inter-token latency (None for a llama-bench arm)
            **({"latency": {"baseline": self.base_latency, "candidate": self.cand_latency}}
               if self.base_latency or self.cand_latency else {}),
        }


def _mean_sd(v: list[float]) -> dict[str, float | None]:
    if not v:
        return {"mean": None, "sd": None}
    s = stats.summarize(v)
    return {"mean": s.mean, "sd": s.sd}


def analyze(store: Store, study_id: str, spec: CompareSpec) -> list[Comparison]:
    """Pure read of the store into comparisons (one per candidate x model x workload)."""
    # (model, workload, arm) -> pair -> (mean t/s, cpu_ms, tokens)
    per: dict[tuple[str, str, str], dict[int, tuple[float, float | None, int]]] = defaultdict(dict)
    loaded = load_cells(store, study_id)
    # The per-trial statistic: mean t/s over the repetitions that did not stall, and the CPU
    # attributed to their timed durations (stats.trial_tokens_per_s, results.load_cells).
    trial_ts = {(tid, c.test, c.test_idx): v for c in loaded for tid, v in c.trial_means.items()}
    trial_cpu = {(tid, c.test, c.test_idx): v for c in loaded for tid, v in c.trial_cpu.items()}
    for r in store.reads.trial_stats(study_id):
        w, idx = cell_of(str(r["workload"]), str(r["test"]), int(r["test_idx"]))  # a joined trial: each test its own
        key = (int(r["trial_id"]), str(r["test"]), idx)
        # a trial load_cells read but gave no CPU (every window withheld, or none read CPU) has none;
        # the stored sum stands only for results without samples (imported ones)
        cpu_ms, tokens = trial_cpu.get(key, (None, int(r["tokens"])) if key in trial_ts
                                       else (r["cpu_ms"], int(r["tokens"])))
        per[(r["model"], w, r["arm"])][int(r["pair"])] = (
            trial_ts.get(key, float(r["mean_ts"])), cpu_ms, tokens)
    base = spec.baseline_name()
    cells = {(c.arm, c.model, c.test): c for c in loaded}
    flagged = confounded_trials(store, study_id)

    def res(arm: str, model: str, w: str) -> dict[str, Any]:
        c = cells.get((arm, model, w))
        return c.resources() if c else {}

    def lat(arm: str, model: str, w: str) -> dict[str, Any] | None:
        c = cells.get((arm, model, w))
        return c.latency() if c else None

    reported = arm_settings(store, study_id)
    arm_flags = {a.name: a.flags for a in spec.arms}
    design = store.reads.study(study_id).spec.get("design")
    shared, joined = design == SHARED_DESIGN, design == JOINED_DESIGN

    kinds = {a.name: a.kind for a in spec.arms}

    def diffs(cand: str) -> list[ParamDiff]:
        params = engine_for(kinds[base]).settings
        if base not in reported or cand not in reported or params is None:
            return []
        asked = params.flag_fields(arm_flags[base]) | params.flag_fields(arm_flags[cand])
        return params.diff(reported[base], reported[cand], asked)

    out = []
    for model in spec.models:
        for w in spec.workloads:
            b = per.get((model, w, base), {})
            for cand in spec.candidates():
                c = per.get((model, w, cand), {})
                pairs = sorted(set(b) & set(c))  # a pair with a failed member is dropped whole
                bt = [b[p][0] for p in pairs]
                ct = [c[p][0] for p in pairs]
                est = stats.ratio_interval(bt, ct) if len(pairs) >= 2 else None
                verdict = stats.verdict(est, spec.band)
                cpu_pairs = [p for p in pairs if b[p][1] is not None and c[p][1] is not None
                             and b[p][2] and c[p][2]]
                cpu_est = None
                cpu_verdict = "unresolved"
                if len(cpu_pairs) >= 2:
                    bc = [b[p][1] / b[p][2] for p in cpu_pairs]  # type: ignore[operator]
                    cc = [c[p][1] / c[p][2] for p in cpu_pairs]  # type: ignore[operator]
                    if min(bc) > 0 and min(cc) > 0:
                        cpu_est = stats.ratio_interval(bc, cc)
                        # more CPU per token is worse: name it like a throughput verdict
                        v = stats.verdict(cpu_est, spec.band)
                        cpu_verdict = {"faster": "costlier", "slower": "cheaper"}.get(v, v)
                comp = Comparison(
                    model, w, base, cand, len(pairs), bt, ct, est, verdict, cpu_est, cpu_verdict,
                    res(base, model, w), res(cand, model, w), diffs(cand), lat(base, model, w),
                    lat(cand, model, w), getattr(cells.get((base, model, w)), "cold", None), shared, joined)
                # a pair is confounded when a confounder touched one of its trials and not the other:
                # a load on both (a busy CI host all along) is noise the interval already holds
                hit = {p: codes for p in pairs
                       if (codes := flagged.get((model, w, base, p), set()) ^ flagged.get((model, w, cand, p), set()))}
                if hit:
                    guard(comp, hit, [p for p in pairs if p not in hit], b, c, spec)
                out.append(comp)
    return out


# Confounders the monitor detects beside a trial: a pair whose two trials differ in them is
# "confounded" (one arm ran beside a busy neighbour or stalled, the other did not). A stall is
# read off the durations themselves, so a change that makes the engine stall would hide behind
# it if its pairs were simply left out (see guard).
CONFOUNDERS = ("busy-process", "stall")


def confounded_trials(store: Store, study_id: str) -> dict[tuple[str, str, str, int], set[str]]:
    """(model, workload, arm, pair) -> the CONFOUNDERS its trial's warnings name: ``stall``, and
    ``busy-process:NAME`` for each busy neighbour by name (a neighbour busy beside both trials of a
    pair, the suite's other worker say, cancels; another llama-bench beside one does not)."""
    out: dict[tuple[str, str, str, int], set[str]] = defaultdict(set)
    found = [w for w in store.reads.warnings(study_id) if w["code"] in CONFOUNDERS]
    if not found:
        return out
    pair = {int(t["id"]): t["pair"] for t in store.reads.trials(study_id)}
    for wrn in found:
        p = pair.get(int(wrn["trial_id"]))
        if p is None or int(p) < 0:
            continue
        code = str(wrn["code"])
        keys = ({f"{code}:{n}" for n in busy_names(str(wrn["detail"]))} or {code}) if code == "busy-process" else {code}
        for w in trial_workloads(str(wrn["workload"] or "")):
            out[(str(wrn["model"]), w, str(wrn["arm"]), int(p))] |= keys
    return out


def guard(comp: Comparison, hit: Mapping[int, set[str]], clean: Sequence[int],
          b: Mapping[int, tuple[float, Any, Any]], c: Mapping[int, tuple[float, Any, Any]],
          spec: CompareSpec) -> None:
    """A verdict a detected confounder could have steered: in the pairs ``hit``, one trial
    carried a confounder its partner did not.

    The interval of the clean pairs alone is kept beside the cell. Where the spec asks decisions
    to wait (``confounders = "wait"``: bisect, decompose and scan through their judge), the
    interval the cell answers with is the hull of the all-pairs and the clean-pairs intervals:
    an answer holds only when both give it. Leaving the confounded pairs out alone would hide a
    change that itself makes the engine stall; keeping them alone lets a busy neighbour decide.
    Where the two differ the cell stays open, so the judge measures more pairs (up to its budget)
    and the answer waits, saying why, rather than being taken on the confounded pairs.
    """
    counts: dict[str, int] = defaultdict(int)
    for keys in hit.values():
        for code in {k.split(":", 1)[0] for k in keys}:
            counts[code] += 1
    comp.confounded = dict(sorted(counts.items()))
    comp.clean = (stats.ratio_interval([b[p][0] for p in clean], [c[p][0] for p in clean])
                  if len(clean) >= 2 else None)
    comp.clean_verdict = stats.verdict(comp.clean, spec.band) if comp.clean is not None else None
    if spec.confounders != "wait" or comp.estimate is None:
        return
    full = comp.estimate
    if comp.clean is None:  # the untouched pairs say nothing yet: no interval answers
        comp.steered, comp.estimate, comp.verdict = True, None, "unresolved"
        return
    hull = stats.RatioEstimate(full.pairs, full.ratio, min(full.lo, comp.clean.lo), max(full.hi, comp.clean.hi),
                               full.confidence,
                               f"{full.method}, widened to hold the interval of the pairs no confounder touched")
    comp.steered = (stats.verdict(hull, spec.band) != comp.verdict
                    or (spec.edge is not None and stats.side(hull, spec.edge) != stats.side(full, spec.edge)))
    comp.estimate = hull
    comp.verdict = stats.verdict(hull, spec.band)


SHARED_DESIGN = "one process per pair (A,B,B,A)"
JOINED_DESIGN = "one process per trial runs every workload of its model"


# what run_compare adds to a spec for the study's identity: the builds, a per-host study's
# machine, the design (a pair in one process), each arm's argv (only where an arm overrode a
# common flag: CompareSpec.joined), the study a re-run measures again (drivers/verdicts/rerun.py)
ARGV = "arm_argv"
RERUN_OF = "rerun_of"
IDENTITY_EXTRAS = ("build_keys", "host", "design", ARGV, RERUN_OF)


def stored_spec(store: Store, study_id: str) -> CompareSpec:
    """The spec a compare study was run with, as stored (without what only its identity holds)."""
    return spec_of(store.reads.study(study_id).spec)


def spec_of(spec_json: Mapping[str, Any]) -> CompareSpec:
    """A stored compare spec without what only its identity holds (IDENTITY_EXTRAS)."""
    return CompareSpec.model_validate({k: v for k, v in spec_json.items() if k not in IDENTITY_EXTRAS})


PLACEMENT_STATE = "placement"  # {arm: {model: Placement.to_json() or {"error": …}}}


NOISE_STATE = "noise"  # noise.Noise.to_json() of the finished study


def arm_settings(store: Store, study_id: str) -> dict[str, dict[str, Any]]:
    """Each arm's llama-bench settings as its first finished run reported them."""
    out: dict[str, dict[str, Any]] = {}
    kinds = {str(a["name"]): str(a["kind"]) for a in store.reads.arms(study_id)}
    for r in store.reads.results(study_id):
        params = engine_for(kinds.get(str(r["arm"]), DEFAULT_KIND)).settings
        if r["arm"] not in out and params is not None:
            try:
                out[r["arm"]] = params.settings(stored_json(r, "raw_json"))
            except (ValueError, TypeError, AttributeError):
                continue  # an imported row without an object: nothing to diff
    return out


OUTPUTS_STATE = "output_checks"  # a compare's output checks ([ArmOutputCheck.to_json()]), when it ran them


def noise_of(store: Store, study_id: str) -> tuple[str, dict[str, Any]] | None:
    """The study's noise sentence and JSON, when it was measured."""
    n = store.state.get(study_id, NOISE_STATE)
    return (noise.Noise.from_json(n).sentence(), n) if n else None


