"""Judging candidates: :class:`Bisector` builds a candidate through the judge, compares it
with good one-sided on the cells that regressed (:meth:`Bisector.classify`), and persists each
:class:`Step` under the bisect study, so a killed bisect never measures one twice; on a fleet,
several candidates at once, each on a machine of its own (:meth:`Bisector.judge_many`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tokensleuth.analysis import stats
from tokensleuth.core.errors import EngineError
from tokensleuth.drivers.hunts.bisect.verdicts import half_regression_band, regression_edge
from tokensleuth.drivers.verdicts.judge import Judge, Judgement
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.executors.ray import on_fleet
from tokensleuth.sources.build import DEFAULT_TARGETS, EngineBuild
from tokensleuth.sources.history import Candidate
from tokensleuth.store import Store
from tokensleuth.trials.outputs import CHECK_TARGETS

if TYPE_CHECKING:
    from tokensleuth.fleet import Fleet


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

    def answered(self, a: int, b: int, models: Sequence[str], band: float, max_pairs: int) -> Judgement | None:
        """Candidates ``a`` and ``b`` compared before, read back without building (Judge.answered)."""
        return self.judge_.answered(self.cands[a].source, self.cands[b].source, models, band, max_pairs)

    def judge(self, i: int, judge: Judge | None = None, store: Store | None = None) -> str:
        """Judge candidate ``i`` (with ``judge``/``store`` of a thread of :meth:`judge_many`)."""
        judge, store = judge or self.judge_, store or self.store
        steps = store.state.get(self.study, "steps", {})
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
            steps = store.state.get(self.study, "steps", {})
            steps[str(i)] = step.to_json()
            store.state.put(self.study, "steps", steps)
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
        endpoint = float(store.state.get(self.study, "endpoint_ratio"))
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
            cells = {tuple(x) for x in store.state.get(self.study, "endpoint_cells", [])}
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
