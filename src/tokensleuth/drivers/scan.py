"""The scan driver: every performance change across a history, found, bisected and explained.

Sample, measure, detect, refine:

- **sample**: both ends and evenly spaced points between (:func:`initial_sample`);
- **levels**: interleaved rounds, each running every sampled build once per cell, forward
  then backward (:func:`round_order`), so the machine's drift falls on every build alike.
  They draw the history and feed the step fit (:func:`fit_steps`);
- **decide**: each interval between sampled neighbours gets a paired sequential verdict
  (``Judge.compare``: its pairs are stored, resumed and reused by everything after): ``same``,
  a step (``slower``/``faster`` in some cell) or undecided. The fit orders the work (where it
  sees a step is judged first) and says what the scan could have seen; the verdicts decide;
- **refine**: an interval judged the same but longer than ``max_gap`` could hide a step and
  its revert, so it gets its middle point; an interval that holds a step is bisected inside
  (``bisect.run_bisect`` on the sub-range: skips, crashes, verification, controls, the
  culprit's profile), and its parent and culprit join the points, so the intervals on either
  side are judged too. It ends when every interval between neighbours is the same (and short),
  a step of one commit, or undecided (reported so, with its figures: never as "no change");
- **explain**: each step's cells, its direction, llama-bench's own settings that changed at the
  culprit (and what is left of the step with them pinned: a default change is reported as
  such), the files it changed that the build compiles, the op that grew; with
  ``check_outputs`` the first commit whose outputs changed, searched over the whole range;
- **settings**: an interval judged the same (or undecided after its pairs) whose ends run
  llama-bench with different settings nobody asked for (a default changed inside it, its speed effect inside the band or cancelled
  by another change) is searched for the first commit whose settings differ (a build and a
  one-second probe per step, no pairs: :func:`first_changed`); its parent and it join the points,
  and their interval is judged like any other — a step there is explained as a default change,
  and one within the band is still reported (``settings_changes``), never dropped.

Every verdict, level and bisect is stored as soon as it exists (the scan study's state and
the compare and bisect studies it asks for), so a killed scan resumes losing nothing, and a
finished one resumed with a later end extends the history without redoing any of it.

The step fit is PELT (``ruptures``) on the mean log t/s of the sampled points per cell, with a
penalty from the noise measured between rounds (BIC-like: ``2 log n`` times the variance of a
point's mean), each step kept only when a Welch t-test between the segments says it is real and
its size is beyond the band (the test Otava puts after E-divisive). Why not E-divisive: the
sampled sequences are short (tens of points), the noise is measured directly rather than
inferred from the sequence, and an exact penalised fit (what asv uses) is then both the best
and the cheapest.
"""

from __future__ import annotations

import math
import re
import statistics
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import stats as sps

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.drivers.bisect import (
    ANSWERED,
    Bisector,
    Profiler,
    bisect_outputs,
    run_bisect,
)
from tokensleuth.drivers.judge import Judge
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.sources.history import Candidate
from tokensleuth.sources.build import DEFAULT_TARGETS, EngineBuild
from tokensleuth.trials.outputs import CHECK_TARGETS
from tokensleuth.trials.spec import spec_hash

if TYPE_CHECKING:
    from tokensleuth.core.records import TrialOutcome
    from tokensleuth.fleet import Fleet, Node
    from tokensleuth.store import Store

Log = Callable[[str], None]

POINTS = "scan-points"  # [candidate label] sampled, in order
LEVELS = "scan-levels"  # [{label, round, model, workload, ts}] one per trial of a round
INTERVALS = "scan-intervals"  # {"A..B": {verdict, cells, study, note}} the paired verdicts
BISECTS = "scan-bisects"  # {"A..B": bisect result} a step's bisect inside its interval
CAUSES = "scan-causes"  # {"parent..culprit": pinned check} a step whose settings changed
BLOCKS = "scan-blocks"  # [{from, to, node}] with a fleet: the blocks of the range and their machines
SPENT = "scan-spent"  # {"wall_s"} what earlier runs of this scan took
SKIPPED = "scan-skipped"  # {label: why} sampled points that did not build or crashed
PROGRESS = "scan-progress"  # {machine or "": {line, at}} the latest live line (`report` shows it while it runs)
CANDIDATES = "scan-candidates"  # the candidates of the latest run (`report` reads them while it runs)
SETTINGS = "scan-settings"  # {"A..B": {last_same, first_changed, diffs}} a settings change located inside an interval
PROBES = "scan-probes"  # {label: llama-bench settings} each probed build's (a located change's search)
CONFIDENCE = 0.95


# -- pure parts -------------------------------------------------------------------------------


def initial_sample(n: int, intervals: int = 8) -> list[int]:
    """Both ends and evenly spaced points between: at most ``intervals`` intervals."""
    if n < 2:
        raise UserError("a scan needs at least two commits or releases in its range")
    k = min(n - 1, max(1, intervals))
    return sorted({round(i * (n - 1) / k) for i in range(k + 1)})


def round_order(points: Sequence[int], r: int) -> list[int]:
    """The order of round ``r``: forward on even rounds, backward on odd ones (each build sits
    at every place of the round on average, so a drift during a round cancels)."""
    return list(points) if r % 2 == 0 else list(points)[::-1]


@dataclass(frozen=True, slots=True)
class FitStep:
    after: int  # the step lies between sampled point ``after`` and the next (indices into the sample)
    ratio: float  # the level after over the level before
    ci: tuple[float, float]
    p: float  # Welch's t-test between the two segments


def fit_steps(levels: Sequence[Sequence[float]], band: float, alpha: float = 0.001) -> list[FitStep]:
    """Steps in a sequence of sampled points, each a list of its rounds' t/s (in order).

    PELT on the mean log t/s of each point, penalised by ``2 log n`` times the variance of a
    point's mean (pooled between its rounds), every segment at least two points long (one odd
    point is not a step: that is left to the paired verdicts); a step is kept when Welch's
    t-test between the segments on either side rejects equality at ``alpha`` and its size is
    beyond ``band``. On 30 flat points at 1% noise and 2 rounds it calls a false step in 0.25%
    of sequences and finds 90% of 3% steps (tests/test_scan.py)."""
    import ruptures as rpt

    logs = [np.log(np.asarray(x, dtype=float)) for x in levels]
    if len(logs) < 2 or any(len(x) == 0 for x in logs):
        return []
    means = np.array([x.mean() for x in logs])
    dev = [x - x.mean() for x in logs if len(x) > 1]
    dof = sum(len(x) - 1 for x in logs if len(x) > 1)
    var = float(sum((d ** 2).sum() for d in dev) / dof) if dof else float(np.var(np.diff(means)) / 2 or 1e-12)
    reps = float(np.mean([len(x) for x in logs]))
    pen = 2 * math.log(len(means)) * max(var / reps, 1e-12)
    ends = rpt.Pelt(model="l2", min_size=2, jump=1).fit(means.reshape(-1, 1)).predict(pen=pen)
    cuts = [0, *ends]
    out = []
    for i in range(1, len(cuts) - 1):
        lo, at, hi = cuts[i - 1], cuts[i], cuts[i + 1]
        a = np.concatenate(logs[lo:at])
        b = np.concatenate(logs[at:hi])
        d = float(b.mean() - a.mean())
        if len(a) < 2 or len(b) < 2:
            continue
        se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)) or 1e-12
        t = float(sps.t.ppf(0.5 + CONFIDENCE / 2, min(len(a), len(b)) - 1))
        p = float(sps.ttest_ind(b, a, equal_var=False).pvalue) if se > 1e-12 else 0.0
        if p < alpha and abs(math.exp(d) - 1) > band:
            out.append(FitStep(at - 1, math.exp(d), (math.exp(d - t * se), math.exp(d + t * se)), p))
    return out


def smallest_seen(halfwidths: Sequence[float], band: float) -> float | None:
    """The smallest slowdown (a fraction) that a paired verdict of this noise calls ``slower``
    with 95% probability. A verdict says slower when its whole 99% interval (half-width h, in
    log) lies beyond the band, so the step must pass the band by h plus 1.645 standard errors
    (h is 2.576 of them); the noisiest interval judged the same sets it."""
    if not halfwidths:
        return None
    z = float(sps.norm.ppf(0.95) / sps.norm.ppf(0.995))
    return 1 - (1 - band) * math.exp(-max(halfwidths) * (1 + z))


_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(h|m|s|builds?)\s*$")


def build_pace(took: Sequence[float]) -> float:
    """Seconds per build to plan with: the lower median of those made, so that a first build that
    filled the compiler cache and the build folder (minutes, where the next commits take seconds)
    does not set the pace."""
    return statistics.median_low(took)


def builds_left(took: Sequence[float], left: int) -> str:
    """The live line's estimate of the builds left, from the seconds of those made so far (the
    first alone only as a bound: the next ones reuse its cache)."""
    def span(s: float) -> str:
        return f"~{s:.0f} s" if s < 120 else f"~{s / 60:.0f} min"

    if not took or left <= 0:
        return ""
    if len(took) == 1:
        return f"; at most {span(left * took[0])} of builds left (the next ones reuse this one's cache)"
    return f"; {span(left * build_pace(took))} of builds left"


def eta_text(left: Mapping[str, int], verdict_s: Sequence[float], build_s: Sequence[float]) -> str:
    """The time left (:func:`remaining`) at this run's mean seconds per verdict and its builds'
    pace (:func:`build_pace`; a build reused from the cache counts what it took when it was made)."""
    if not verdict_s or not (left["verdicts"] or left["builds"]):
        return ""
    per = sum(verdict_s) / len(verdict_s)
    build = build_pace(build_s) if build_s else None
    total = left["verdicts"] * per + left["builds"] * (build or 0.0)
    builds = f" and ~{left['builds']} builds at {build:.0f} s" if build is not None and left["builds"] else ""
    return f" — about {total / 60:.0f} min left: ~{left['verdicts']} verdicts at {per:.0f} s{builds}"


def parse_budget(text: str | None) -> dict[str, float]:
    """``--budget 4h``, ``90m``, ``40builds``, or both: ``4h,40builds`` → {"wall_s", "builds"}."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        m = _BUDGET.match(part.lower())
        if not m:
            raise UserError(f"--budget {text!r}: write a time (4h, 90m, 600s) and/or builds (40builds), "
                            "comma-separated")
        n, unit = float(m.group(1)), m.group(2)
        if unit.startswith("build"):
            out["builds"] = n
        else:
            out["wall_s"] = n * {"h": 3600, "m": 60, "s": 1}[unit]
    return out


def next_work(points: Sequence[int], verdicts: Mapping[tuple[int, int], str], bisected: Collection[tuple[int, int]],
              max_gap: int, closed: Collection[tuple[int, int]] = (), likely: Collection[int] = (),
              spent: Collection[tuple[int, int]] = (), failed: Collection[tuple[int, int]] = (),
              settings: Collection[tuple[int, int]] = ()) -> tuple[str, int, int] | None:
    """The scan's next move over the sampled ``points`` (candidate indices, in order), from the
    verdicts of the intervals between neighbours so far (same | step | undecided):

    - ``("judge", p, q)``: an interval with no verdict, or undecided (its pairs go on);
    - ``("split", p, q)``: the same, but longer than ``max_gap`` (a step and its revert could hide);
      undecided after its pairs were ``spent`` (a step and its revert, or a step near the band,
      could be inside); a step whose bisect ``failed`` to name a culprit (most often two steps
      inside, whose sum the bisect's candidates fall between): its middle is sampled, and each
      half judged on its own. (One commit long, such an interval is left as it is.)
    - ``("bisect", p, q)``: a step not bisected yet (one commit long too: the bisect explains it);
    - ``("locate", p, q)``: the same, or undecided after its pairs, but its ends' llama-bench
      ``settings`` differ (a default changed inside): the commit where they change is searched
      for instead of a split (a probe per step, no pairs; its neighbours are judged after).

    ``closed``: intervals nothing more can be done for now (nothing between them builds, the
    budget). The intervals after the points in ``likely`` (indices into ``points``: where the fit
    put a step) come first, then the longest. None: nothing left."""
    todo = []
    for k, (p, q) in enumerate(zip(points, points[1:], strict=False)):
        if (p, q) in closed:
            continue
        v = verdicts.get((p, q))
        action: str | None = None
        if v is None or v == "undecided":
            action = ("judge" if (p, q) not in spent else None if q - p <= 1 else
                      "locate" if (p, q) in settings else "split")
        elif v == "same":
            action = "locate" if (p, q) in settings and q - p > 1 else "split" if q - p > max_gap else None
        elif v == "step" and (p, q) not in bisected:
            action = "bisect" if (p, q) not in failed else "split" if q - p > 1 else None
        if action:
            todo.append((k not in likely, -(q - p), k, action, p, q))
    if not todo:
        return None
    *_, action, p, q = min(todo)
    return action, p, q


def pieces(length: int, max_gap: int) -> int:
    """How many intervals a same interval of ``length`` commits ends as, split at its middle
    until none is longer than ``max_gap``."""
    if length <= max_gap or length < 2:
        return 1
    return pieces(length // 2, max_gap) + pieces(length - length // 2, max_gap)


def first_changed(lo: int, hi: int, differs: Callable[[int], bool | None]) -> tuple[int, int]:
    """Where a setting changes between ``lo`` (the old settings) and ``hi`` (new ones): the last
    index with the old settings and the first with new ones, by halving. ``differs(i)``: whether
    ``i``'s settings differ from ``lo``'s, None when it cannot tell (``i`` does not build; it is
    passed over, so the two returned may then be more than one apart)."""
    inner = list(range(lo + 1, hi))
    while inner:
        mid = inner[len(inner) // 2]
        got = differs(mid)
        if got is None:
            inner.remove(mid)
        elif got:
            hi, inner = mid, [i for i in inner if i < mid]
        else:
            lo, inner = mid, [i for i in inner if i > mid]
    return lo, hi


def remaining(points: Sequence[int], verdicts: Mapping[tuple[int, int], str], bisected: Collection[tuple[int, int]],
              max_gap: int, settings: Collection[tuple[int, int]] = ()) -> dict[str, int]:
    """What is left to do, in verdicts and builds: intervals to judge, long same intervals to
    split (a build, two verdicts, again until no piece is longer than ``max_gap`` — an interval
    not judged yet is counted as the same, the common case) and the steps of the bisects still
    to run (about log2 of the interval's length, a build and a verdict each); a settings change to
    locate: about log2 of its length in builds (a probe each, no pairs) and two verdicts after."""
    judge = split = later = bisect = locate = 0
    for p, q in zip(points, points[1:], strict=False):
        v = verdicts.get((p, q))
        if v is None:
            judge += 1
            later += pieces(q - p, max_gap) - 1
        elif v == "same" and (p, q) in settings and q - p > 1:
            locate += math.ceil(math.log2(q - p))
        elif v == "same" and q - p > max_gap:
            split += 1
            later += pieces(q - p, max_gap) - 2
        elif v == "step" and (p, q) not in bisected and q - p > 1:
            bisect += math.ceil(math.log2(q - p))
    return {"judge": judge, "split": split, "bisect": bisect, "locate": locate,
            "verdicts": judge + 2 * (split + later) + bisect + (2 if locate else 0),
            "builds": split + later + bisect + locate}


def interval_key(a: Candidate, b: Candidate) -> str:
    return f"{a.label}..{b.label}"


# -- the driver ---------------------------------------------------------------------------------


class Scan:
    """One scan's state and the work that moves it on; every change is stored at once.

    With a fleet, the range is cut into blocks at sampled points (:func:`blocks_of`), and each
    block is a lane: one machine builds, measures and refines it (:meth:`run_block`) in a
    thread of its own, with a ``Scan`` of its own on a store connection of its own; the
    state they share is changed under ``lock``, read again first (:meth:`update`)."""

    def __init__(self, store: Store, sid: str, cands: Sequence[Candidate], spec: dict[str, Any], log: Log,
                 profile: Profiler | None, fleet: Fleet | None = None, node: Node | None = None,
                 lock: threading.Lock | None = None, judges: list[Judge] | None = None) -> None:
        self.store, self.sid, self.cands, self.spec, self.log = store, sid, list(cands), spec, log
        self.profile = profile
        self.node_label = node.label if node is not None else None  # levels are kept apart by machine
        self.lock = lock or threading.Lock()
        self.index = {c.label: i for i, c in enumerate(self.cands)}
        self.targets = CHECK_TARGETS if spec.get("check_outputs") else DEFAULT_TARGETS
        executor: Any = None
        cache: Any = None
        if fleet is not None and node is not None:
            from tokensleuth.executors.ray import on_fleet

            executor = on_fleet(fleet, [node])  # pairs and levels on this lane's machine only
            cache = fleet.cache(node)
        self.judge = Judge(store, workloads=spec["workloads"], flags=spec["flags"], cmake=spec["cmake"],
                           timeout_s=spec["timeout_s"], log=log,
                           pin_to=self.cands[0].source if spec.get("pin_params") else None,
                           targets=self.targets, kind=spec.get("kind", DEFAULT_KIND),
                           cache=cache, executor=executor)
        self.judges = judges if judges is not None else []  # every lane's (the builds budget counts them all)
        self.judges.append(self.judge)
        self.budget = parse_budget(spec.get("budget"))
        self.started = time.monotonic()
        self.spent0 = float(store.get_state(sid, SPENT, {}).get("wall_s", 0.0))
        self.compare_s: list[float] = []
        self.exhausted = False
        self.block = (0, len(self.cands) - 1)  # the part of the range this Scan works on
        for key, got in self.get(INTERVALS, {}).items():  # decided before a kill: their pairs are final
            a, _, b = key.partition("..")
            if got["verdict"] != "undecided" and a in self.index and b in self.index:
                self.judge.settled(self.cands[self.index[a]].source, self.cands[self.index[b]].source, spec["models"])

    # state
    def get(self, key: str, default: Any) -> Any:
        return self.store.get_state(self.sid, key, default)

    def put(self, key: str, value: Any) -> None:
        self.store.put_state(self.sid, key, value)
        self.store.put_state(self.sid, SPENT, {"wall_s": self.wall_s()})

    def update(self, key: str, default: Any, change: Callable[[Any], Any]) -> Any:
        """Read ``key`` again, change it and store it, under the lock the lanes share (another
        lane may have stored it since this one read it)."""
        with self.lock:
            value = change(self.get(key, default))
            self.put(key, value)
            return value

    def set_item(self, key: str, item: str, value: Any) -> None:
        """``key``'s dict with ``item`` set to ``value`` (under the lanes' lock, read again first)."""
        self.update(key, {}, lambda d: {**d, item: value})

    def wall_s(self) -> float:
        return self.spent0 + time.monotonic() - self.started

    def builds_made(self) -> int:
        return sum(1 for j in self.judges for b in j.builds.values() if b is not None and not b.cache_hit)

    def over_budget(self) -> bool:
        if "wall_s" in self.budget and self.wall_s() >= self.budget["wall_s"]:
            self.exhausted = True
        if "builds" in self.budget and self.builds_made() >= self.budget["builds"]:
            self.exhausted = True
        return self.exhausted

    def points(self) -> list[int]:
        stored = [self.index[x] for x in self.get(POINTS, []) if x in self.index]
        return sorted(set(stored))

    def block_points(self) -> list[int]:
        lo, hi = self.block
        return [i for i in self.points() if lo <= i <= hi]

    def add_points(self, idx: Sequence[int]) -> None:
        def add(labels: list[str]) -> list[str]:
            have = {self.index[x] for x in labels if x in self.index}
            return [self.cands[i].label for i in sorted(have | set(idx))]

        self.update(POINTS, [], add)

    def drop_point(self, i: int, why: str, unbuildable: bool = False) -> None:
        if i in (0, len(self.cands) - 1):  # an end that does not build is the range's fault: exit 2
            raise (UserError if unbuildable else EngineError)(
                f"{'--from' if i == 0 else '--to'} {self.cands[i].label} {why} — choose another end of the range")
        self.set_item(SKIPPED, self.cands[i].label, why)
        self.update(POINTS, [], lambda labels: [x for x in labels if x != self.cands[i].label])
        self.log(f"  {self.cands[i].label}: {why} — left out of the sample")

    def build(self, i: int) -> EngineBuild | None:
        """Build point ``i`` (a cache hit when made before), its settings pinned when asked and
        its memory checked; None when it does not build."""
        b = self.judge.prepare(self.cands[i].source, self.spec["models"])
        if b is None:
            self.drop_point(i, f"does not build ({self.judge.build_errors.get(self.cands[i].source, '')[:80]})",
                            unbuildable=True)
        return b

    def run_block(self, lo: int, hi: int) -> None:
        """Build, measure and refine the points from ``lo`` to ``hi`` (the whole range alone)."""
        self.block = (lo, hi)
        pts = self.block_points()
        took: list[float] = []
        for n, i in enumerate(pts, 1):
            if self.over_budget():
                continue
            t0 = time.monotonic()
            b = self.build(i)
            if b is not None and not b.cache_hit:
                took.append(time.monotonic() - t0)
            how = ("does not build" if b is None else "from the cache" if b.cache_hit
                   else f"built in {took[-1]:.0f} s")
            left = builds_left(took, len(pts) - n)
            self.log(f"  build{self._on()} {n}/{len(pts)}: {self.cands[i].label} {how}{left}")
        self.measure_levels(int(self.spec["rounds"]))
        self.refine()

    # levels
    def measure_levels(self, rounds: int) -> None:
        """Rounds over every sampled point of the block not yet measured that often (one trial
        per cell), on this lane's machine: a level carries its machine's label, and levels of
        different machines are never put in one sequence (:meth:`fit`)."""
        from tokensleuth.core.workloads import JOINED, canonical, joined_flags, planned_argv
        from tokensleuth.engines import engine_for
        from tokensleuth.engines.base import ArmRuntime

        engine = engine_for(self.spec.get("kind", DEFAULT_KIND))
        have = {(x["label"], x["round"], x["model"], x["workload"]) for x in self.get(LEVELS, [])
                if x.get("node") == self.node_label}
        for r in range(rounds):
            stored = all((self.cands[i].label, r, m, w) in have for i in self.block_points()
                         for m in self.spec["models"] for w in self.spec["workloads"])
            for i in round_order(self.block_points(), r):
                c = self.cands[i]
                for m in self.spec["models"]:
                    # one process for all of the model's workloads where one can run them (as the
                    # compares do: compare.joins_workloads), else one per workload
                    for ws in self._level_trials():
                        want = [w for w in ws if (c.label, r, m, w) not in have]
                        if not want or self.over_budget():
                            continue
                        b = self.judge.builds.get(c.source)
                        if b is None:
                            continue
                        flags = (*self.spec["flags"], *self.judge.arm_flags.get(c.source, []))
                        arm = ArmRuntime("level", Path(b.bin_dir), tuple(flags), {})
                        name = JOINED.join(ws)
                        argv = joined_flags(ws) if len(ws) > 1 else planned_argv(ws[0])
                        assert argv is not None
                        if self.judge.executor is None:
                            out = engine.run_trial(arm, m, name, argv, timeout_s=self.spec["timeout_s"],
                                                   probe=None, host_env={}).outcome
                        else:
                            out = self._remote_level(arm, m, name, argv)
                        got = {canonical(x.test) if len(ws) > 1 else ws[0]: float(x.avg_ts)
                               for x in (out.results if out.status == "done" else []) if x.avg_ts}
                        levels = [{"label": c.label, "round": r, "model": m, "workload": w, "ts": got.get(w),
                                   **({"node": self.node_label} if self.node_label is not None else {})}
                                  for w in want]
                        self.update(LEVELS, [], lambda xs: [*xs, *levels])  # (all of one process at once)
                        have.update((c.label, r, m, w) for w in want)
            self.log(f"  levels{self._on()}: round {r + 1}/{rounds} over {len(self.block_points())} builds"
                     + (" (measured before)" if stored else ""))

    def _level_trials(self) -> list[list[str]]:
        """The workloads each level trial of a model runs: all in one, or one each."""
        from tokensleuth.core.workloads import joined_flags

        ws = list(self.spec["workloads"])
        one = self.spec.get("kind", DEFAULT_KIND) == DEFAULT_KIND and joined_flags(ws) is not None
        return [ws] if one else [[w] for w in ws]

    def _on(self) -> str:
        return f" on {self.node_label}" if self.node_label is not None else ""

    def _remote_level(self, arm: Any, model: str, workload: str, argv: Sequence[str]) -> TrialOutcome:
        """One level trial on this lane's machine (its build made there first)."""
        from tokensleuth.executors import Done
        from tokensleuth.trials.runner import TrialJob

        assert self.judge.executor is not None
        job = TrialJob(-1, 0, "level", model, workload, tuple(argv))
        for got in self.judge.executor.run([(job,)], {"level": arm}, timeout_s=self.spec["timeout_s"],
                                           interval_s=0.2, handout=lambda unit, node: None, live=None):
            if isinstance(got, Done):
                return got.outcomes[0]
        raise EngineError(f"a level trial on {self.node_label} came back with nothing")  # pragma: no cover

    def fit(self) -> dict[tuple[str, str], list[FitStep]]:
        """The step fit per cell, block by block (each block's levels from its own machine);
        each step's ``after`` an index into :meth:`points`."""
        levels = self.get(LEVELS, [])
        pts = self.points()
        out: dict[tuple[str, str], list[FitStep]] = {}
        for lo, hi, node in self.blocks():
            sub = [i for i in pts if lo <= i <= hi]
            for m in self.spec["models"]:
                for w in self.spec["workloads"]:
                    seq = [[x["ts"] for x in levels if x["label"] == self.cands[i].label and x["model"] == m
                            and x["workload"] == w and x["ts"] and x.get("node") == node] for i in sub]
                    keep = [s for s in seq if s]
                    steps = fit_steps(keep, self.spec["band"]) if len(keep) == len(seq) else []
                    out.setdefault((m, w), []).extend(
                        replace(s, after=pts.index(sub[s.after])) for s in steps)
        return out

    def blocks(self) -> list[tuple[int, int, str | None]]:
        """(first, last, machine) of each block: the whole range on this machine without a fleet."""
        stored = self.get(BLOCKS, None)
        if not stored:
            return [(0, len(self.cands) - 1, None)]
        bounds = [0, *[self.index[b["to"]] for b in stored[:-1] if b["to"] in self.index], len(self.cands) - 1]
        return [(lo, hi, b.get("node")) for lo, hi, b in zip(bounds, bounds[1:], stored, strict=False)]

    # verdicts
    def judge_interval(self, p: int, q: int) -> dict[str, Any]:
        a, b = self.cands[p], self.cands[q]
        t0 = time.monotonic()
        for most in (self.spec["max_pairs"], 2 * self.spec["max_pairs"]):  # undecided: the same pairs go on
            j = self.judge.compare(a.source, b.source, self.spec["models"], self.spec["band"], most)
            if "unresolved" not in j.verdicts() or j.failures or j.verdicts() & {"slower", "faster"}:
                break  # (a step is a step: the cells it left unresolved are reported so)
        self.compare_s.append(time.monotonic() - t0)
        cells = [{"model": c.model, "workload": c.workload, "ratio": c.estimate.ratio if c.estimate else None,
                  "ci": [c.estimate.lo, c.estimate.hi] if c.estimate else None, "pairs": c.pairs,
                  "verdict": c.verdict} for c in j.comparisons]
        verdicts = {c["verdict"] for c in cells}
        if (f := j.failed("B")) is not None or (f := j.failed("A")) is not None:
            return {"verdict": "crash", "cells": cells, "study": j.study, "note": f"{f.status}: {f.message}"[:200],
                    "failed": b.label if j.failed("B") else a.label}
        verdict = ("step" if verdicts & {"slower", "faster"} else "same" if verdicts == {"same"} else "undecided")
        return {"verdict": verdict, "cells": cells, "study": j.study,
                "param_diffs": [d.to_json() for d in j.param_diffs]}

    def progress(self, verdicts: Mapping[tuple[int, int], str], left: dict[str, int]) -> None:
        """The live line: the intervals between neighbouring points now (one split since it was
        judged counts as its two halves), what is left and how long it will take."""
        counts = {v: sum(1 for x in verdicts.values() if x == v) for v in ("same", "undecided")}
        found = {b.get("first_bad") for b in self.get(BISECTS, {}).values() if b.get("status") == "found"}
        counts["step"] = len(found | {self.cands[q].label for (p, q), v in verdicts.items() if v == "step"})
        line = (f"scan{self._on()}: {len(self.block_points())} points ({self.builds_made()} built), intervals: "
                f"{counts['same']} same, {counts['undecided']} undecided; {counts['step']} steps found; "
                f"left: {left['judge']} to judge, "
                f"{left['split']} to split, ~{left['bisect']} bisect steps"
                + (f", ~{left['locate']} settings probes" if left.get("locate") else "") + self.eta(left))
        self.log(line)
        self.set_item(PROGRESS, self.node_label or "", {"line": line, "at": time.time()})

    def eta(self, left: dict[str, int]) -> str:
        made = [b.build_s for j in self.judges for b in j.builds.values() if b is not None and b.build_s]
        return eta_text(left, self.compare_s, made)

    def step(self, p: int, q: int, got: dict[str, Any]) -> None:
        """Bisect the step inside (p, q) and add its parent and culprit to the points."""
        key = interval_key(self.cands[p], self.cands[q])
        spec = {k: self.spec[k] for k in ("models", "control_models", "workloads", "band", "max_pairs", "cmake",
                                          "flags", "timeout_s")}
        for k in ("pin_params", "kind"):
            if k in self.spec:
                spec[k] = self.spec[k]
        # judged on the cell that moved most: a bisect judges every candidate at half its
        # endpoints' change, which a cell that moved less would fail; the scan judges the other
        # cells on either side of the culprit afterwards. (Every model is measured, so that the
        # bisect's endpoints and verification are the scan's own pairs.)
        moved = [c for c in got["cells"] if c["verdict"] in ("slower", "faster") and c["ratio"]]
        worst = max(moved, key=lambda c: abs(math.log(c["ratio"])))
        spec["cells"] = [[worst["model"], worst["workload"]]]
        self.log(f"step in {key}: bisecting its {q - p} commit(s) on {Path(worst['model']).stem} {worst['workload']}")
        result = run_bisect(self.store, self.cands[p:q + 1], spec, resume=True, log=self.log, profile=self.profile,
                            judge=self.judge, search_outputs=False)
        self.set_item(BISECTS, key, result)
        if result["status"] == "found":
            f = self.index[result["first_bad"]]
            # its verification
            self.set_item(BISECTS, interval_key(self.cands[f - 1], self.cands[f]), result)
            self.add_points([f - 1, f])
        elif result.get("culprit_range"):
            inner = [self.index[x] for x in result["culprit_range"] if x in self.index]
            if inner:
                self.add_points([min(inner) - 1, max(inner)])

    def refine(self) -> None:
        """Judge, split and bisect intervals (:func:`next_work`) until none is left to do."""
        fitted, all_pts = self.fit(), self.points()
        after = {all_pts[s.after] for steps in fitted.values() for s in steps}  # where the fit sees a step
        closed: set[tuple[int, int]] = set()  # nothing more this run can do for these
        spent: set[tuple[int, int]] = set()  # undecided after this run's pairs
        failed: set[tuple[int, int]] = set()  # a step whose bisect in this run named no culprit
        while True:
            pts = self.block_points()
            stored = self.get(INTERVALS, {})
            verdicts = {(p, q): stored[interval_key(self.cands[p], self.cands[q])]["verdict"]
                        for p, q in zip(pts, pts[1:], strict=False)
                        if interval_key(self.cands[p], self.cands[q]) in stored}
            bisects = self.get(BISECTS, {})
            bisected = {(p, q) for p, q in verdicts if bisects.get(interval_key(self.cands[p], self.cands[q]),
                                                                    {}).get("status") in ANSWERED}
            likely = {k for k, p in enumerate(pts) if p in after}
            moved = self.settings_moved(verdicts, stored)
            work = next_work(pts, verdicts, bisected, int(self.spec["max_gap"]), closed, likely, spent, failed,
                             moved)
            if work is None:
                return
            action, p, q = work
            key = interval_key(self.cands[p], self.cands[q])
            self.progress(verdicts, remaining(pts, verdicts, bisected, int(self.spec["max_gap"]), moved))
            if self.over_budget():
                closed.add((p, q))
                if action == "judge":
                    self.set_item(INTERVALS, key, {"verdict": "undecided", "cells": [],
                                                   "note": "budget spent before it was judged"})
                continue
            if action == "judge":
                got = self.judge_interval(p, q)
                if got["verdict"] == "crash":
                    self.drop_point(self.index[got["failed"]], f"crashed beside its neighbour ({got['note']})")
                    continue
                self.set_item(INTERVALS, key, got)
                if got["verdict"] == "undecided":
                    spent.add((p, q))  # its pairs doubled already: split (one commit: --resume adds pairs)
                self.log(f"  {key}: {got['verdict']} (" + ", ".join(
                    f"{Path(c['model']).stem} {c['workload']} {c['ratio']:.4f}" if c["ratio"] else
                    f"{c['workload']} —" for c in got["cells"]) + ")")
            elif action == "locate":
                self.locate(p, q, stored[key].get("param_diffs") or [])
            elif action == "split":
                why = {"same": "the same", "undecided": "undecided"}.get(verdicts.get((p, q), ""),
                                                                         "a step whose bisect named no culprit")
                if not self._split(p, q, why):
                    closed.add((p, q))
            else:
                self.step(p, q, stored[key])
                if self.get(BISECTS, {})[key]["status"] not in ANSWERED:
                    failed.add((p, q))  # split (one commit long: undecided, and --resume adds pairs)

    def settings_moved(self, verdicts: Mapping[tuple[int, int], str],
                       stored: Mapping[str, Any]) -> set[tuple[int, int]]:
        """Intervals judged the same or undecided whose ends' llama-bench settings differ unasked,
        not searched yet. (On a fleet the builds are the machines', not here to probe: such an
        interval is reported with its ends only.)"""
        if self.node_label is not None:
            return set()
        located = self.get(SETTINGS, {})
        out = set()
        for (p, q), v in verdicts.items():
            key = interval_key(self.cands[p], self.cands[q])
            if v in ("same", "undecided") and q - p > 1 and stored[key].get("param_diffs") and key not in located:
                out.add((p, q))
        return out

    def locate(self, p: int, q: int, diffs: Sequence[dict[str, Any]]) -> None:
        """The first commit inside (p, q] whose llama-bench settings differ from ``p``'s (a build
        and a probe of each point halving the interval, stored as they come), its parent and it
        added to the points."""
        from tokensleuth.engines import engine_for

        params = engine_for(self.spec.get("kind", DEFAULT_KIND)).settings
        assert params is not None  # (settings differ only where the engine reports them)
        key = interval_key(self.cands[p], self.cands[q])
        fields = ", ".join(d["field"] for d in diffs)
        flags = list(self.spec["flags"])
        asked = params.flag_fields(flags)

        def settings_of(i: int) -> dict[str, Any] | None:
            label = self.cands[i].label
            got = self.get(PROBES, {}).get(label)
            if got is None:
                b = self.judge.build(self.cands[i].source)
                if b is None:
                    return None
                got = params.probe(b, self.spec["models"][0], flags, self.spec["timeout_s"])
                self.set_item(PROBES, label, got)
            return dict(got)

        base = settings_of(p)
        if base is None:  # (a sampled point: it built before)
            raise EngineError(f"{self.cands[p].label} no longer builds — rerun with --resume")
        self.log(f"  {key}: llama-bench's settings differ ({fields}) — finding the commit where they change")

        def differs(i: int) -> bool | None:
            got = settings_of(i)
            return None if got is None else bool(params.diff(base, got, asked))

        lo, hi = first_changed(p, q, differs)
        last = settings_of(hi) or {}
        found = [d.to_json() for d in params.diff(base, last, asked)] or list(diffs)
        self.set_item(SETTINGS, key, {"last_same": self.cands[lo].label, "first_changed": self.cands[hi].label,
                                      "diffs": found})
        self.log(f"  settings change ({', '.join(d['field'] for d in found)}) first at {self.cands[hi].label}"
                 + (f" (after {self.cands[lo].label})" if hi - lo == 1 else
                    f" (somewhere after {self.cands[lo].label}: nothing between builds)"))
        self.add_points([lo, hi])

    def _split(self, p: int, q: int, why: str) -> bool:
        """Sample the buildable point nearest the middle of (p, q); False when none builds."""
        mid = (p + q) // 2
        for i in sorted(range(p + 1, q), key=lambda k: (abs(k - mid), k)):
            if self.cands[i].label in self.get(SKIPPED, {}):
                continue
            self.add_points([i])
            if self.build(i):
                self.log(f"  {self.cands[p].label}..{self.cands[q].label} is {why} and {q - p} long: "
                         f"sampling {self.cands[i].label}")
                self.measure_levels(int(self.spec["rounds"]))
                return True
        key = interval_key(self.cands[p], self.cands[q])  # nothing between builds: it stays as it is (said)
        self.update(INTERVALS, {}, lambda d: {**d, key: {**d[key], "note": "nothing between builds"}})
        return False


def blocks_of(points: Sequence[int], k: int) -> list[tuple[int, int]]:
    """The range cut at sampled ``points`` into at most ``k`` blocks of about as many intervals,
    neighbours sharing their boundary point (each block is one machine's: its intervals, pairs
    and levels all there; the boundary point is built on both)."""
    k = max(1, min(k, len(points) - 1))
    bounds = sorted({points[round(j * (len(points) - 1) / k)] for j in range(k + 1)})
    return list(zip(bounds, bounds[1:], strict=False))


def run_lanes(main: Scan, fleet: Fleet) -> None:
    """Build, measure and refine the blocks of the range on the fleet's machines at once, one
    block per machine at a time, each in a thread with a store connection of its own.

    A block keeps its machine across runs when that machine is there (its levels were measured
    there); a block whose machine is lost goes to another, which measures its levels again (a
    level is only ever compared with levels of its own machine). Pairs never leave a machine."""
    from tokensleuth.executors.ray import NodesLost
    from tokensleuth.fleet import lost_errors as gone
    from tokensleuth.store import Store

    lost_errors: tuple[type[BaseException], ...] = (NodesLost, *gone(fleet.ray))
    stored = main.get(BLOCKS, None)
    if stored and len(main.blocks()) == len(stored):  # an earlier run's (an extension's new end joins the last)
        blocks = [(lo, hi) for lo, hi, _ in main.blocks()]
        owner = [b.get("node") for b in stored]
    else:
        blocks = blocks_of(main.points(), len(fleet.usable(fleet.nodes)))
        owner = [None] * len(blocks)
    main.update(BLOCKS, None, lambda _: [{"from": main.cands[lo].label, "to": main.cands[hi].label, "node": n}
                                         for (lo, hi), n in zip(blocks, owner, strict=True)])
    queue = list(range(len(blocks)))
    errors: list[BaseException] = []
    lanes: list[Scan] = []

    def lane(node: Node) -> None:
        while True:
            with main.lock:
                if not queue or errors:
                    return
                j = next((x for x in queue if owner[x] == node.label), queue[0])
                queue.remove(j)
                owner[j] = node.label
            try:
                with Store(main.store.path) as st:  # (a store connection is its thread's own)
                    scan = Scan(st, main.sid, main.cands, main.spec, lambda line: main.log(f"[{node.label}] {line}"),
                                None, fleet=fleet, node=node, lock=main.lock, judges=main.judges)
                    scan.started, scan.spent0 = main.started, main.spent0  # one clock: the scan's wall time
                    lanes.append(scan)
                    scan.update(BLOCKS, [], lambda bs: [{**b, "node": node.label} if k == j else b
                                                         for k, b in enumerate(bs)])
                    scan.run_block(*blocks[j])
            except lost_errors as exc:
                fleet.forget(node)
                main.log(f"machine {node.label} was lost ({type(exc).__name__}) — its block "
                         f"{main.cands[blocks[j][0]].label}..{main.cands[blocks[j][1]].label} goes to another")
                with main.lock:
                    queue.insert(0, j)
                return
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                with main.lock:
                    errors.append(exc)
                return

    while queue and not errors:
        nodes = fleet.usable(fleet.nodes)
        if not nodes:
            raise EngineError("every machine of the fleet was lost — rerun with --resume once one is back; "
                              "nothing measured so far is lost")
        main.log(f"scan: {len(queue)} block(s) on {len(nodes)} machine(s): "
                 + ", ".join(f"{main.cands[blocks[j][0]].label}..{main.cands[blocks[j][1]].label}" for j in queue))
        # daemon: an interrupted driver exits; what was out is measured again on --resume
        threads = [threading.Thread(target=lane, args=(n,), name=f"scan-{n.label}", daemon=True) for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    main.exhausted = main.exhausted or any(s.exhausted for s in lanes)
    if errors:
        raise errors[0]


def run_scan(store: Store, cands: Sequence[Candidate], spec: dict[str, Any], *, resume: bool = False,
             log: Log | None = None, profile: Profiler | None = None, fleet: Fleet | None = None) -> dict[str, Any]:
    """Scan ``cands`` (oldest first); returns the scan's JSON object (DESIGN.md's scan contract).

    With ``fleet``, the machines scan blocks of the range at once (:func:`run_lanes`).

    The scan's identity leaves out its end, so ``--resume`` with a later end extends a finished
    scan: every stored verdict, level and bisect is kept and only the new part is measured."""
    log = log or (lambda s: None)
    key = {k: v for k, v in spec.items() if k not in ("budget",)}
    key["first"] = cands[0].source
    handle = store.begin_study("scan", key, spec_hash(key), resume=resume)
    sid = handle.id
    stored = store.get_state(sid, "result")
    rng = [c.source for c in cands]
    if handle.finished and stored is not None and [c["source"] for c in store.get_state(sid, CANDIDATES, [])] == rng:
        log(f"scan {sid} already finished — its stored result follows")
        return dict(stored)
    with store.lease(sid):
        if handle.finished:
            store.finish_study(sid, "running")  # extended to a later end, or resumed with budget left
        store.put_state(sid, "result", None)
        scan = Scan(store, sid, cands, spec, log, profile)
        store.put_state(sid, CANDIDATES, [asdict(c) for c in cands])  # what `report` reads while it runs
        if not scan.get(POINTS, []):
            scan.add_points(initial_sample(len(cands), int(spec["samples"])))
        else:  # an extension keeps every stored point and adds the new end
            scan.add_points([0, len(cands) - 1])
        log(f"scan {sid}: {len(cands)} candidates, {len(scan.points())} sampled")
        if fleet is None:
            if scan.get(BLOCKS, None):  # an earlier run on a cluster: its levels stay its machines'
                scan.put(BLOCKS, None)
            scan.run_block(0, len(cands) - 1)
        else:
            run_lanes(scan, fleet)
        result = finish(scan)
        if spec.get("check_outputs"):
            bis = Bisector(store, sid, cands, dict(spec, check_outputs=True), log, judge=scan.judge)
            result["outputs_search"] = bisect_outputs(bis, log)
            first = result["outputs_search"].get("culprit")
            if first:
                i = scan.index[first["label"]]
                result["output_changes"] = [{"first_changed": first["label"], "parent": cands[i - 1].label,
                                             "mean_kld": first.get("mean_kld"), "same_top_p": first.get("same_top_p"),
                                             "subject": first.get("subject")}]
        store.put_state(sid, "result", result)
        if not result["undecided"]:  # undecided: the study stays open, and --resume adds pairs
            store.finish_study(sid)
        return result


def _cause(scan: Scan, parent: Candidate, culprit: Candidate, diffs: list[dict[str, Any]],
           moved: Sequence[tuple[str, str]], measure: bool = True) -> dict[str, Any]:
    """engine, or settings when the step goes away, in the cells it ``moved``, with the culprit
    given its parent's llama-bench settings (one more paired comparison, stored; its pairs
    doubled once while a moved cell is undecided; ``measure=False``: pending until the scan has
    made it)."""
    if not diffs:
        return {"cause": "engine"}
    causes = scan.get(CAUSES, {})
    key = interval_key(parent, culprit)
    got = causes.get(key)

    def cause_of(entry: dict[str, Any]) -> str:
        verdicts = {c["verdict"] for c in entry["cells"] if (c["model"], c["workload"]) in moved}
        return "settings" if verdicts == {"same"} else "engine" if verdicts & {"slower", "faster"} else "undecided"

    if got is None and not measure:
        return {"cause": "pending"}
    if measure and (got is None or (cause_of(got) == "undecided" and not got.get("doubled"))):
        scan.log(f"  {culprit.label}: llama-bench's settings changed ({', '.join(d['field'] for d in diffs)}) — "
                 f"measuring it again with {parent.label}'s")
        pinned = Judge(scan.store, workloads=scan.spec["workloads"], flags=scan.spec["flags"],
                       cmake=scan.spec["cmake"], timeout_s=scan.spec["timeout_s"], log=scan.log,
                       pin_to=parent.source, targets=scan.targets, kind=scan.spec.get("kind", DEFAULT_KIND))
        pinned.settled(parent.source, culprit.source, scan.spec["models"])
        most = scan.spec["max_pairs"] * (2 if got is not None else 1)
        j = pinned.compare(parent.source, culprit.source, scan.spec["models"], scan.spec["band"], most)
        got = {"study": j.study, "doubled": got is not None, "cells": [
            {"model": c.model, "workload": c.workload, "ratio": c.estimate.ratio if c.estimate else None,
             "ci": [c.estimate.lo, c.estimate.hi] if c.estimate else None, "verdict": c.verdict}
            for c in j.comparisons]}
        causes[key] = got
        scan.put(CAUSES, causes)
        if cause_of(got) == "undecided" and not got["doubled"]:
            return _cause(scan, parent, culprit, diffs, moved, measure)
    assert got is not None
    return {"cause": cause_of(got), "pinned": got}


def partial(store: Store, sid: str) -> dict[str, Any]:
    """A scan under way (or killed), from its stored state alone: what it has found so far and
    what is left (`report ID` while it runs). Measures nothing."""
    import json

    cands = [Candidate(**c) for c in store.get_state(sid, CANDIDATES, [])]
    if not cands:
        raise UserError(f"scan {sid} has not sampled its range yet — wait for it, or resume it with --resume")
    spec = json.loads(store.study(sid)["spec_json"])
    got = finish(Scan(store, sid, cands, spec, lambda s: None, None), measure=False)
    got["status"] = "running"
    got["live"] = [v for _, v in sorted(store.get_state(sid, PROGRESS, {}).items())]
    return got


def finish(scan: Scan, measure: bool = True) -> dict[str, Any]:
    """The scan's JSON object from its stored state (``measure=False``: a step's pinned
    settings check not made yet is left pending)."""
    cands, spec = scan.cands, scan.spec
    pts = scan.points()
    intervals = scan.get(INTERVALS, {})
    bisects = scan.get(BISECTS, {})
    steps: list[dict[str, Any]] = []
    undecided: list[dict[str, Any]] = []
    same: list[tuple[int, int, dict[str, Any]]] = []
    for p, q in zip(pts, pts[1:], strict=False):
        key = interval_key(cands[p], cands[q])
        got = intervals.get(key, {"verdict": "undecided", "cells": [], "note": "not judged"})
        if got["verdict"] == "same":
            same.append((p, q, got))
        elif got["verdict"] == "step" and q - p == 1:
            steps.append(_explain(scan, p, q, got, bisects, measure))
        else:
            b = bisects.get(key)
            why = got.get("note") or (f"a step whose bisect ended {b['status']}: {b.get('reason') or ''}".rstrip(": ")
                                      if got["verdict"] == "step" and b else "a step not bisected yet"
                                      if got["verdict"] == "step" else "the pairs measured could not decide")
            undecided.append({"from": cands[p].label, "to": cands[q].label, "commits": q - p, "reason": why,
                              "cells": got["cells"], "study": got.get("study")})
    halfwidths = [(math.log(c["ci"][1]) - math.log(c["ci"][0])) / 2 for _, _, g in same for c in g["cells"]
                  if c.get("ci") and c["ci"][0] > 0]
    gaps = [q - p - 1 for p, q, _ in same]
    levels = scan.get(LEVELS, [])
    blocks = scan.blocks()
    sampled = []
    for i in pts:
        c = cands[i]
        node = next(n for lo, hi, n in blocks if lo <= i <= hi)  # each point from its block's machine
        cells = {}
        for m in spec["models"]:
            for w in spec["workloads"]:
                ts = [x["ts"] for x in levels if x["label"] == c.label and x["model"] == m and x["workload"] == w
                      and x["ts"] and x.get("node") == node]
                cells[f"{Path(m).stem} {w}"] = sum(ts) / len(ts) if ts else None
        sampled.append({"label": c.label, "index": i, "subject": c.subject, "ts": cells,
                        **({"node": node} if node is not None else {})})
    fit = [{"model": m, "workload": w, "after": cands[pts[s.after]].label, "before": cands[pts[s.after + 1]].label,
            "ratio": s.ratio, "ci": list(s.ci), "p": s.p} for (m, w), ss in scan.fit().items() for s in ss]
    seen = smallest_seen(halfwidths, spec["band"])
    status = "done" if not undecided else "budget" if scan.exhausted else "undecided"
    settings_changes = []
    # a default change where no step was found (the same, or undecided): said, never dropped (a step
    # says its own); one longer than a commit was not located (on a fleet, nothing between builds,
    # or undecided: it is split like any undecided interval)
    for p, q in zip(pts, pts[1:], strict=False):
        got = intervals.get(interval_key(cands[p], cands[q]), {})
        if not got.get("param_diffs") or got["verdict"] not in ("same", "undecided"):
            continue
        one = q - p == 1  # located to its commit
        settings_changes.append({
            "verdict": got["verdict"], "first_changed": cands[q].label if one else None,
            "parent": cands[p].label if one else None, "subject": cands[q].subject if one else None,
            "from": cands[p].label, "to": cands[q].label, "commits": q - p, "param_diffs": got["param_diffs"],
            "cells": [{k: c[k] for k in ("model", "workload", "ratio", "ci", "verdict")} for c in got["cells"]]})
    label = {c.source: c.label for c in cands}
    pinned = {label[src]: list(flags) for src, flags in scan.judge.arm_flags.items() if flags and src in label}
    return {"study": scan.sid, "status": status, "first": cands[0].label, "last": cands[-1].label,
            "pinned": pinned if spec.get("pin_params") else None,
            "candidates": len(cands), "models": spec["models"], "workloads": spec["workloads"], "band": spec["band"],
            "steps": steps, "settings_changes": settings_changes, "output_changes": [], "sampled": sampled,
            "skipped": scan.get(SKIPPED, {}),
            "undecided": undecided, "fit": fit,
            "same": [{"from": cands[p].label, "to": cands[q].label, "commits": q - p} for p, q, _ in same],
            "resolution": {"smallest_step_seen": seen, "longest_unsampled": max(gaps, default=0),
                           "max_gap": spec["max_gap"]},
            "builds": scan.builds_made(), "wall_s": scan.wall_s(),
            "progress": {"points": len(pts), "intervals": len(pts) - 1, "same": len(same), "steps": len(steps),
                         "open": len(undecided)}}


def _explain(scan: Scan, p: int, q: int, got: dict[str, Any], bisects: dict[str, Any],
             measure: bool = True) -> dict[str, Any]:
    """A step of one commit: its cells, direction, cause, files and profile (from the bisect
    that found it, when one did)."""
    cands = scan.cands
    parent, culprit = cands[p], cands[q]
    found = next((b for b in bisects.values() if b.get("first_bad") == culprit.label), None)
    moved = [c for c in got["cells"] if c["verdict"] in ("slower", "faster")]
    worst = max(moved, key=lambda c: abs(math.log(c["ratio"]))) if moved else None
    diffs = (found or {}).get("culprit_param_diffs") or got.get("param_diffs") or []
    step: dict[str, Any] = {
        "first_bad": culprit.label, "parent": parent.label, "subject": culprit.subject,
        "direction": "slower" if worst and worst["ratio"] < 1 else "faster",
        "cells": [{k: c[k] for k in ("model", "workload", "ratio", "ci", "verdict")} for c in got["cells"]],
        "param_diffs": diffs,
        **_cause(scan, parent, culprit, diffs, [(c["model"], c["workload"]) for c in moved], measure),
        "files": [f for f in ((found or {}).get("changes") or {}).get("files", []) if f.get("group") == "compiled"],
        "bisect": (found or {}).get("study"), "verified": (found or {}).get("verified"),
        "study": got.get("study"),
    }
    for k in ("profile", "controls", "specific_to_model"):
        if found and k in found:
            step[k] = found[k]
    return step
