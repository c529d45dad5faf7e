"""One scan's stored state (its keys, points, blocks, budget, live line) and the ``Scan`` that
holds it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.drivers.hunts.scan.progress import eta_text, parse_budget
from tokensleuth.drivers.slower import Profiler
from tokensleuth.drivers.verdicts.judge import Judge
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.sources.build import DEFAULT_TARGETS, EngineBuild
from tokensleuth.sources.history import Candidate
from tokensleuth.store import engine_ns
from tokensleuth.trials.outputs import CHECK_TARGETS

if TYPE_CHECKING:
    from tokensleuth.fleet import Fleet, Node
    from tokensleuth.store import Store


Log = Callable[[str], None]

POINTS = "scan-points"  # [candidate label] sampled, in order
LEVELS = "scan-levels"  # [{label, round, model, workload, ts}] one per trial of a round
INTERVALS = "scan-intervals"  # {"A..B": {verdict, cells, study, note}} the paired verdicts
BISECTS = "scan-bisects"  # {"A..B": bisect result} a step's bisect inside its interval
CAUSES = "scan-causes"  # {"parent..culprit": pinned check} a step whose settings changed
BLOCKS = "scan-blocks"  # [{from, to, node}] with a fleet: the blocks of the range and their machines
SPENT = "scan-spent"  # {"wall_s", "engine_s", "builds"} what earlier runs of this scan took
SKIPPED = "scan-skipped"  # {label: why} sampled points that did not build or crashed
PROGRESS = "scan-progress"  # {machine or "": {line, at}} the latest live line (`report` shows it while it runs)
CANDIDATES = "scan-candidates"  # the candidates of the latest run (`report` reads them while it runs)
SETTINGS = "scan-settings"  # {"A..B": {last_same, first_changed, diffs}} a settings change located inside an interval
NOISE = "scan-noise"  # the levels' noise, the band it resolves and the band used (resolve.noise_of)
PROBES = "scan-probes"  # {label: llama-bench settings} each probed build's (a located change's search)


def interval_key(a: Candidate, b: Candidate) -> str:
    return f"{a.label}..{b.label}"


class Scan:
    """One scan's state and the work that moves it on; every change is stored at once.

    With a fleet, the range is cut into blocks at sampled points (:func:`~tokensleuth.drivers.hunts.scan.plan.blocks_of`), and each
    block is a lane: one machine builds, measures and refines it (:func:`~tokensleuth.drivers.hunts.scan.refine.run_block`) in a
    thread of its own, with a ``Scan`` of its own on a store connection of its own; the
    state they share is changed under ``lock``, read again first (:meth:`update`)."""

    def __init__(self, store: Store, sid: str, cands: Sequence[Candidate], spec: dict[str, Any], log: Log,
                 profile: Profiler | None, fleet: Fleet | None = None, node: Node | None = None,
                 lock: threading.Lock | None = None, judges: list[Judge] | None = None) -> None:
        self.store, self.sid, self.cands, self.spec = store, sid, list(cands), spec
        self.said = log
        self.thread = threading.get_ident()  # (its store connection is this thread's)
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
        spent = store.state.get(sid, SPENT, {})  # what its earlier runs cost (kept as they went)
        self.spent0 = float(spent.get("wall_s", 0.0))
        # (a run before engine time was kept leaves it unknown: withheld, never undercounted)
        self.engine0: float | None = float(spent["engine_s"]) if spent.get("engine_s") is not None else (
            None if spent else 0.0)
        self.builds0 = int(spent.get("builds", 0))
        self.engine_mark = engine_ns()
        self.compare_s: list[float] = []
        self.exhausted = False
        self.block = (0, len(self.cands) - 1)  # the part of the range this Scan works on
        for key, got in self.get(INTERVALS, {}).items():  # decided before a kill: their pairs are final
            a, _, b = key.partition("..")
            if got["verdict"] != "undecided" and a in self.index and b in self.index:
                self.judge.settled(self.cands[self.index[a]].source, self.cands[self.index[b]].source, spec["models"])

    # state
    def get(self, key: str, default: Any) -> Any:
        return self.store.state.get(self.sid, key, default)

    def put(self, key: str, value: Any) -> None:
        self.store.state.put(self.sid, key, value)
        self.keep_spent()

    def keep_spent(self) -> None:
        """What every run of this scan took so far (its wall, engine time and builds), stored: a
        run killed after its builds and before its next verdict still counts them."""
        self.store.state.put(self.sid, SPENT, {"wall_s": self.wall_s(), "engine_s": self.engine_s(),
                                               "builds": self.builds_all()})

    def log(self, line: str) -> None:
        """Say ``line``, and keep what the scan took up to it (each build and each bisect step is said).
        Kept from this Scan's own thread only (its store connection is that thread's): a lane
        keeps its spending through its own Scan and store."""
        self.said(line)
        if threading.get_ident() == self.thread:
            self.keep_spent()  # (a kill after this line loses none of what was spent)

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

    def engine_s(self) -> float | None:
        """Seconds of engine processes, this scan's earlier runs included (levels, pairs, bisects
        and profiles: every trial measured since this run began, in this process); None where an
        earlier run did not keep it."""
        return None if self.engine0 is None else self.engine0 + (engine_ns() - self.engine_mark) / 1e9

    def builds_made(self) -> int:
        """Builds this run made (a cache hit is none)."""
        return sum(1 for j in self.judges for b in j.builds.values() if b is not None and not b.cache_hit)

    def builds_all(self) -> int:
        """Builds made by every run of this scan (a release built again on another machine counts again)."""
        return self.builds0 + self.builds_made()

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
            self.drop_point(i, f"does not build ({self.judge.build_errors.get(self.cands[i].source, 'build failed')})",
                            unbuildable=True)
        return b

    def on(self) -> str:
        return f" on {self.node_label}" if self.node_label is not None else ""


    def blocks(self) -> list[tuple[int, int, str | None]]:
        """(first, last, machine) of each block: the whole range on this machine without a fleet."""
        stored = self.get(BLOCKS, None)
        if not stored:
            return [(0, len(self.cands) - 1, None)]
        bounds = [0, *[self.index[b["to"]] for b in stored[:-1] if b["to"] in self.index], len(self.cands) - 1]
        return [(lo, hi, b.get("node")) for lo, hi, b in zip(bounds, bounds[1:], stored, strict=False)]

    # verdicts


    def progress(self, verdicts: Mapping[tuple[int, int], str], left: dict[str, int]) -> None:
        """The live line: the intervals between neighbouring points now (one split since it was
        judged counts as its two halves), what is left and how long it will take."""
        counts = {v: sum(1 for x in verdicts.values() if x == v) for v in ("same", "undecided")}
        found = {b.get("first_bad") for b in self.get(BISECTS, {}).values() if b.get("status") == "found"}
        counts["step"] = len(found | {self.cands[q].label for (p, q), v in verdicts.items() if v == "step"})
        line = (f"scan{self.on()}: {len(self.block_points())} points ({self.builds_made()} built by this run), intervals: "
                f"{counts['same']} same, {counts['undecided']} undecided; {counts['step']} steps found; "
                f"left: {left['judge']} to judge, "
                f"{left['split']} to split, ~{left['bisect']} bisect steps"
                + (f", ~{left['locate']} settings probes" if left.get("locate") else "") + self.eta(left))
        self.log(line)
        self.set_item(PROGRESS, self.node_label or "", {"line": line, "at": time.time()})

    def eta(self, left: dict[str, int]) -> str:
        made = [b.build_s for j in self.judges for b in j.builds.values() if b is not None and b.build_s]
        return eta_text(left, self.compare_s, made)
