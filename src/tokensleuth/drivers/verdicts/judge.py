"""Judge A against B: build both through the cache, compare them sequentially, report.

The one step bisect (and later decompose) repeats: two engine sources, the same models,
workloads and flags, a band and a pair budget. The comparison is a compare study whose
identity leaves out the stopping rules (band, pair budget), so asking again with a wider
budget or another band continues the pairs already measured instead of starting over.
A comparison that ended ``unresolved`` in an earlier invocation is a place to add pairs:
the first time this process asks for it again, its budget doubles past the pairs it has.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.drivers.shared import quarter_lines
from tokensleuth.drivers.verdicts.comparisons import Comparison
from tokensleuth.drivers.verdicts.pairs import run_compare, still_open
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import DEFAULT_KIND, ParamDiff
from tokensleuth.sources.build import DEFAULT_TARGETS, BuildCache, EngineBuild, failure_line
from tokensleuth.store import Store
from tokensleuth.trials.spec import arm_argv, build_compare_spec

if TYPE_CHECKING:
    from tokensleuth.executors import Executor
    from tokensleuth.fleet import RemoteCache

Log = Callable[[str], None]
FAILED_STATUSES = ("failed", "crashed", "timeout", "garbage")


@dataclass(frozen=True, slots=True)
class ArmFailure:
    """An arm none of whose trials succeeded on some model x workload."""

    arm: str  # "A" (baseline) or "B" (candidate)
    status: str  # crashed | timeout | garbage (malformed output) | failed (bad exit, no results)
    message: str


@dataclass(frozen=True, slots=True)
class Judgement:
    study: str
    comparisons: list[Comparison]
    failures: list[ArmFailure] = field(default_factory=list)
    # llama-bench settings that differ between A's and B's runs and nobody asked for
    param_diffs: list[ParamDiff] = field(default_factory=list)

    def failed(self, arm: str) -> ArmFailure | None:
        return next((f for f in self.failures if f.arm == arm), None)

    def verdicts(self) -> set[str]:
        return {c.verdict for c in self.comparisons}


class Judge:
    """Builds sources once per process and compares pairs of them in one store."""

    def __init__(self, store: Store, *, workloads: Sequence[str], flags: Sequence[str],
                 cmake: Sequence[str], timeout_s: float, arm_flags: dict[str, list[str]] | None = None,
                 pin_to: str | None = None, log: Log | None = None, cache: BuildCache | None = None,
                 targets: Sequence[str] = DEFAULT_TARGETS, kind: str = DEFAULT_KIND,
                 executor: Executor | None = None) -> None:
        self.store = store
        self.workloads = list(workloads)
        self.flags = list(flags)
        self.cmake = list(cmake)
        self.timeout_s = timeout_s
        self.arm_flags = arm_flags or {}  # source -> extra flags (pinned parameters)
        self.pin_to = pin_to  # give every other source this source's llama-bench settings
        self._pin_base: dict[str, Any] | None = None
        self.log = log or (lambda s: None)
        self.cache: BuildCache | RemoteCache = cache or BuildCache()
        self.executor = executor  # where the pairs run (None: here)
        from tokensleuth.engines import engine_for

        self.kind = kind  # the engine kind both arms run (llama-bench, llama-server)
        # e.g. llama-perplexity or llama-server beside llama-bench: one build of each source
        self.targets = tuple(dict.fromkeys([*targets, *engine_for(kind).targets]))
        self.builds: dict[str, EngineBuild | None] = {}
        self.build_errors: dict[str, str] = {}
        self._help: dict[str, str] = {}  # each build's llama-bench --help, for the flag check
        self._extended: set[tuple[str, str, tuple[str, ...], str]] = set()
        self._guarded: set[tuple[str, tuple[str, ...], tuple[str, ...]]] = set()

    def build(self, source: str) -> EngineBuild | None:
        """The source's build, or None when it does not build (the reason in build_errors)."""
        if source not in self.builds:
            if getattr(self.cache, "check_arm", None) is None:  # an unknown flag: refused before this build
                engine_for(self.kind).check_source_flags(source, self.flags)
            try:  # (a build says its progress at each quarter: a hunt's builds are minutes each on a GPU)
                self.builds[source] = self.cache.get(source, self.cmake, targets=self.targets,
                                                     log=quarter_lines(source, self.log))
            except EngineError as exc:
                self.build_errors[source] = failure_line(exc)
                self.builds[source] = None
            else:
                self._check(source, self.builds[source])
        return self.builds[source]

    def flags_of(self, source: str) -> list[str]:
        """The flags ``source`` runs with: the common flags and its own (pinned) ones, as the engine
        joins them (trials.spec.arm_argv)."""
        return list(arm_argv(self.kind, self.flags, self.arm_flags.get(source, [])).argv)

    def settled(self, a: str, b: str, models: Sequence[str]) -> None:
        """Take the stored comparison of ``b`` with ``a`` as it is: asked again in this process, it
        adds no pairs to a cell it left unresolved (a caller that already read its answer)."""
        self._extended.add((a, b, tuple(models), ""))

    def prepare(self, source: str, models: Sequence[str]) -> EngineBuild | None:
        """Build ``source`` and make it ready to measure outside a comparison (a scan's levels):
        its settings pinned when asked, its load checked against this machine's memory."""
        build = self.build(source)
        if build is not None:
            self._pin(source, build, models[0])
            self._guard(source, build, models)
        return build

    def _check(self, source: str, build: EngineBuild | None) -> None:
        """The flags and devices against the build just made, before it measures anything: an
        unknown engine flag, or a GPU build that sees no GPU, is one line (exit 2)."""
        if build is None:
            return
        remote = getattr(self.cache, "check_arm", None)  # a fleet machine's cache checks there
        if remote is not None:
            remote(build, source, self.kind, self.flags, {}, self.workloads, source)
            return
        from tokensleuth.engines.checks import check_arm

        check_arm(build, source, self.kind, self.flags, {}, self.workloads, self._help, source=source)

    def compare(self, a: str, b: str, models: Sequence[str], band: float, max_pairs: int,
                fresh: str = "", edge: float | None = None,
                until: Callable[[list[Comparison]], bool] | None = None) -> Judgement:
        """Compare source ``b`` (candidate) with ``a`` (baseline); both must build.

        ``edge``: ask only which side of this ratio each cell lies on (see ``CompareSpec.edge``).

        ``until``: the caller's question is answered (``run_compare``'s): no more rounds.

        ``fresh``: a label that makes this a measurement of its own (in the arms' environment,
        so in the comparison's identity), not the pairs an earlier ask of the same A and B took.
        """
        known = self.answered(a, b, models, band, max_pairs, fresh, edge)
        if known is not None:
            return known
        ba, bb = self.build(a), self.build(b)
        if ba is None or bb is None:
            raise EngineError(f"cannot compare: {a if ba is None else b} does not build")
        for src, build in ((a, ba), (b, bb)):
            self._pin(src, build, models[0])
            self._guard(src, build, models)
        spec_data = self._spec_data(a, b, models, band, max_pairs, fresh, edge)
        key = (a, b, tuple(models), fresh)
        add_to = None
        if key not in self._extended:
            # First ask in this process: an unresolved answer stored by an earlier run is a
            # place to add pairs (one doubling past what it has), never an answer to hand back.
            self._extended.add(key)
            prev_spec = build_compare_spec(spec_data, "judge")
            prev_id, prev = run_compare(self.store, prev_spec, {"A": ba, "B": bb}, resume=True, create=True,
                                        measure=False)
            done = max((c.pairs for c in prev if still_open(c, prev_spec)), default=0)
            # (a study cut short by a kill just continues its plan: same totals as an uninterrupted run)
            if done >= 2 and self.store.reads.study(prev_id)["status"] == "done":
                add_to = 2 * done
                spec_data["max_pairs"] = max(max_pairs, add_to)
        spec = build_compare_spec(spec_data, "judge")
        sid, comps = run_compare(self.store, spec, {"A": ba, "B": bb}, resume=True, create=True,
                                 add_pairs_to=add_to, executor=self.executor, until=until)
        return self._judgement(sid, comps)

    def answered(self, a: str, b: str, models: Sequence[str], band: float, max_pairs: int,
                 fresh: str = "", edge: float | None = None) -> Judgement | None:
        """The stored answer of this comparison where asking would measure nothing more, read
        without building either side (a resumed hunt on a fresh machine builds only what it will
        run): a finished study of these two builds (their keys as they would be built here, each
        build's manifest as a stored arm recorded it) with no cell still open at this band (an
        unresolved verdict, or a one-sided question its interval straddles: either would get more
        pairs). None where it would measure more, either build is not known to the store, or the
        settings are pinned (what to pin is read from the builds)."""
        planned = getattr(self.cache, "planned_key", None)  # (a fleet's machines build their own)
        if planned is None or self.pin_to is not None or (a in self.builds and b in self.builds):
            return None  # (both built in this run already: asked as always, no key or store read here)
        builds: dict[str, EngineBuild] = {}
        for name, src in (("A", a), ("B", b)):
            try:
                k = planned(src, self.cmake, self.targets)
            except EngineError:  # (a source that cannot be fetched: its build says so, as it always has)
                return None
            manifest = self.store.reads.build(k) if k else None
            if manifest is None:
                return None
            builds[name] = manifest_build(manifest)
        spec = build_compare_spec(self._spec_data(a, b, models, band, max_pairs, fresh, edge), "judge")
        sid, comps = run_compare(self.store, spec, builds, create=True, measure=False)
        if not sid or self.store.reads.study(sid)["status"] != "done" or any(still_open(c, spec) for c in comps):
            return None
        self._extended.add((a, b, tuple(models), fresh))
        return self._judgement(sid, comps)

    def _judgement(self, sid: str, comps: list[Comparison]) -> Judgement:
        unasked = [d for d in (comps[0].param_diffs if comps else []) if not d.requested]
        return Judgement(sid, comps, arm_failures(self.store, sid), unasked)

    def _spec_data(self, a: str, b: str, models: Sequence[str], band: float, max_pairs: int,
                   fresh: str, edge: float | None) -> dict[str, Any]:
        spec_data: dict[str, Any] = {
            "arms": [{"name": "A", "source": a, "cmake": self.cmake, "flags": self.arm_flags.get(a, [])},
                     {"name": "B", "source": b, "cmake": self.cmake, "flags": self.arm_flags.get(b, [])}],
            "models": list(models), "workloads": self.workloads, "band": band,
            "max_pairs": max_pairs, "common_flags": self.flags, "timeout_s": self.timeout_s,
            "edge": edge, "confounders": "wait",  # no automatic decision on pairs a confounder could steer
        }
        if fresh:
            for arm in spec_data["arms"]:
                arm["env"] = {"TOKENSLEUTH_MEASUREMENT": fresh}
        if self.kind != DEFAULT_KIND:  # (a default kind is left out: older studies keep their identity)
            for arm in spec_data["arms"]:
                arm["kind"] = self.kind
        return spec_data

    def _guard(self, source: str, build: EngineBuild, models: Sequence[str]) -> None:
        """A load that cannot fit in this machine's memory is refused (one line, exit 2) before
        the first trial of ``source`` runs; one close to full is logged. (A fleet machine's
        memory is not this machine's: there the engine's own load failure is the trial's.)"""
        extra = self.arm_flags.get(source, [])
        key = (build.key, tuple(models), tuple(extra))
        if key in self._guarded or getattr(self.cache, "check_arm", None):
            return
        from tokensleuth.trials.memory import guard

        # (the engine reads its own flags: a kind with no load to guard answers None)
        guard(models, self.flags_of(source), self.workloads, build.backends, warn=self.log, kind=self.kind)
        self._guarded.add(key)

    def _pin(self, source: str, build: EngineBuild, model: str) -> None:
        """Flags that give ``source`` the pinned source's llama-bench settings (once each)."""
        if self.pin_to is None or source == self.pin_to or source in self.arm_flags:
            return
        base_build = self.build(self.pin_to)
        if base_build is None:
            raise EngineError(f"cannot pin settings to {self.pin_to}: it does not build")
        params = engine_for(self.kind).settings
        if params is None:
            raise UserError(f"--pin-params: {self.kind} reports no settings to pin — drop --pin-params")
        if self._pin_base is None:
            self._pin_base = params.probe(base_build, model, self.flags, self.timeout_s)
        flags, cannot = params.pin_to(self._pin_base, build, model, self.flags, params.flag_fields(self.flags),
                                      self.timeout_s)
        self.arm_flags[source] = flags
        self.log("  " + params.pin_line(source, self.pin_to, flags, cannot))


def manifest_build(manifest: dict[str, Any]) -> EngineBuild:
    """The build an arm's stored manifest (``arms.engine_json``) describes (what it ran with)."""
    from dataclasses import fields

    names = {f.name for f in fields(EngineBuild)}
    return EngineBuild.from_json({f: v for f, v in manifest.items() if f in names})


def arm_failures(store: Store, study_id: str) -> list[ArmFailure]:
    """Arms that failed every trial of some cell (crash, hang, garbage): one entry per arm."""
    done: set[tuple[str, str, str]] = set()
    failed: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for t in store.reads.trials(study_id):
        k = (t["arm"], t["model"], t["workload"])
        if t["status"] == "done":
            done.add(k)
        elif t["status"] in FAILED_STATUSES:
            failed[k].append(t)
    out: dict[str, ArmFailure] = {}
    for k, rows in failed.items():
        if k not in done and k[0] not in out:
            last = rows[-1]
            out[k[0]] = ArmFailure(k[0], str(last["status"]), str(last["message"] or ""))
    return [out[a] for a in sorted(out)]
