"""The seam between the runner and an engine kind.

An engine kind (llama-bench, llama-server, …) turns one planned trial into one
:class:`TrialOutcome`: it starts what it needs, times the workload's repetitions,
brackets each timed unit with the monitor's probe (window edges for CPU and energy),
and classifies every fault (crash, hang, garbage, HTTP error) as the trial's status,
never as an exception. Everything downstream — store, statistics, reports — reads
engine-neutral records: results with samples (one per repetition or request) and
windows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tokensleuth.core.records import TrialOutcome
from tokensleuth.engines.proc import Probe

if TYPE_CHECKING:
    from tokensleuth.engines.placement import LoadSettings
    from tokensleuth.sources.build import EngineBuild

DEFAULT_KIND = "llama-bench"


@dataclass(frozen=True, slots=True)
class ArmRuntime:
    """What the runner needs to start (or reach) an arm's engine."""

    name: str
    bin_dir: Path | None  # the build's binaries (None for an arm that attaches to a server)
    flags: tuple[str, ...]
    env: Mapping[str, str]
    kind: str = DEFAULT_KIND
    endpoint: str | None = None  # url: the server to attach to; cmd: the command that starts one
    api_key_env: str | None = None  # the environment variable holding the API key (never stored)
    options: Mapping[str, Any] = field(default_factory=dict)
    wrap: tuple[str, ...] = ()  # a command the engine runs under (a kernel tracer's: rocprofv3 … --)


@dataclass(frozen=True, slots=True)
class ParamDiff:
    """One setting that differs between the baseline's run and the candidate's."""

    field: str
    baseline: Any
    candidate: Any
    requested: bool  # the arms' own flags set it: the user asked for this difference
    shown: tuple[str, str] = ("", "")  # the two values as a person reads them (the engine's show)

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "baseline": self.baseline, "candidate": self.candidate,
                "requested": self.requested}

    def label(self) -> str:
        return f"{self.field}: {self.shown[0]} → {self.shown[1]}"


class Settings(Protocol):
    """An engine kind's own settings, as its results report them: diffed between two arms, and
    pinned (--pin-params) so that a comparison asks what the engine change alone is worth."""

    FIELDS: tuple[str, ...]  # the settings it reports

    def settings(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """The settings of one result object (other fields dropped)."""
        ...

    def flag_fields(self, flags: Sequence[str]) -> set[str]:
        """The settings that these flags set (asked for, so not a hidden difference)."""
        ...

    def diff(self, base: Mapping[str, Any], cand: Mapping[str, Any], requested: set[str]) -> list[ParamDiff]:
        ...

    def show(self, field: str, v: Any) -> str:
        ...

    def probe(self, build: Any, model: str, flags: Sequence[str], timeout_s: float) -> dict[str, Any]:
        """The settings ``build`` runs ``flags`` with, from one tiny run."""
        ...

    def pin_to(self, base: Mapping[str, Any], build: Any, model: str, flags: Sequence[str], asked: set[str],
               timeout_s: float) -> tuple[list[str], list[str]]:
        """The flags that give ``build`` the settings ``base``, and the settings it cannot pin."""
        ...

    def pin_line(self, name: str, base: str, flags: Sequence[str], cannot: Sequence[str]) -> str:
        ...


@dataclass(frozen=True, slots=True)
class JoinedFlags:
    """An arm's argv from the common flags and its own (Engine.join_flags), and each option the
    arm overrides: (the arm's words, the common words)."""

    argv: tuple[str, ...]
    overrides: tuple[tuple[str, str], ...] = ()

    def notes(self, arm: str) -> list[str]:
        """What a study says of the overrides, a line each."""
        return [f"arm {arm}: {own} overrides the common {common}" for own, common in self.overrides]


@dataclass(frozen=True, slots=True)
class EngineRun:
    outcome: TrialOutcome
    pid: int | None  # the engine's process (for the confounder checks), when there is one
    stderr: tuple[tuple[int, str], ...] = ()  # its stderr lines, stamped at arrival (a kernel tracer reads them)


class Engine(Protocol):
    """One engine kind. A new kind is a module in this package with ``ENGINE`` + its registry line."""

    kind: str
    targets: tuple[str, ...]  # build targets it runs (llama-bench, llama-server)
    # What the core asks of a kind instead of its name:
    attaches: bool  # it can measure a server the arm attaches to (a url:/cmd: source)
    builds: bool  # it can run from a build of a source (not only from a server)
    reps_per_process: bool  # repetitions inside one process: the design may choose them
    shares_process: bool  # arms differing in one context setting can run a pair in one process
    sharing: Sharing | None  # how it does so (None where it cannot)
    load_log_flag: str | None  # the flag that makes a trial print its load log (placement)
    default_workloads: tuple[str, ...]  # when none is given (empty: the engine's own defaults)
    default_repetitions: int | None  # per process when its flags name none (None: it counts none in one)
    settings: Settings | None  # its reported settings, their diff and pinning (None: it reports none)
    workload_flags: frozenset[str]  # its flags that name tests: a trial's workloads set them (refused beside them)
    profiles: bool  # drivers.profile can time its workloads kernel by kernel (the profiler takes its flags)

    def argv_for(self, workloads: Sequence[str], repetitions: int | None = None) -> list[str] | None:
        """The argv a trial of these workloads is planned with, composed from their names (none:
        the engine's own tests; several: one process, each a test of its own), with ``repetitions``
        per process where it counts them there; None where one process cannot run them together."""
        ...

    def join_flags(self, common: Sequence[str], own: Sequence[str]) -> JoinedFlags:
        """The argv an arm runs: the common flags, then its own; an option given in both is passed
        once, with the arm's value (where the kind knows its options; else both, the arm's last).
        Every caller that runs or checks an arm's flags asks this, never joins them itself."""
        ...

    def check_one_test(self, flags: Sequence[str]) -> None:
        """Refuse, before any build, flags that make one trial several tests (a list of values):
        each value is an arm of its own (UserError, one line)."""
        ...

    def repetitions(self, flags: Sequence[str]) -> int | None:
        """The repetitions per trial these flags ask for (the last counts), None where they name none."""
        ...

    def sets_repetitions(self, flags: Sequence[str]) -> bool:
        """Whether these flags name the repetitions at all (the user chose them)."""
        ...

    def flag_tests(self, flags: Sequence[str]) -> list[tuple[int, int, int]]:
        """The largest (prompt, generated, depth) tests the flags themselves name (memory guard)."""
        ...

    def guard(self, flags: Sequence[str], tests: Sequence[tuple[int, int, int]]) -> LoadSettings | None:
        """What a run with these flags and tests ((prompt, generated, depth) each) loads, as the
        memory guard sizes it (tokensleuth.trials.memory); None where this kind loads nothing the
        guard can size (:class:`NoFlags`)."""
        ...

    def with_threads(self, flags: Sequence[str], threads: int) -> list[str] | None:
        """``flags`` with the engine's thread count set to ``threads`` (its own thread flag
        replaced where given); None where this kind has no thread flag (:class:`NoFlags`)."""
        ...

    def sets_threads(self, flags: Sequence[str]) -> bool:
        """Whether these flags set the engine's thread count themselves."""
        ...

    def check(self, arm: ArmRuntime, workloads: Sequence[str]) -> None:
        """Refuse, before any trial, what this engine cannot run (UserError, one line)."""
        ...

    def check_served(self, endpoint: str, models: Sequence[str]) -> None:
        """Refuse an attached server (``url:``) that serves another model than ``models``
        (UserError, one line); a kind that cannot tell checks nothing (:class:`NoFlags`)."""
        ...

    def check_source_flags(self, source: str, flags: Sequence[str]) -> None:
        """Before a build: refuse flags the source's own option parser does not know (UserError);
        a kind whose flags no source names checks nothing (:class:`NoFlags`)."""
        ...

    def check_build_flags(self, build: EngineBuild, flags: Sequence[str], help_cache: dict[str, str]) -> None:
        """After the build: refuse flags its binary's --help does not know (UserError), keeping
        each build's --help text in ``help_cache``; nothing for a kind without one (:class:`NoFlags`)."""
        ...

    def run_trial(self, arm: ArmRuntime, model: str, workload: str, argv: Sequence[str], *,
                  timeout_s: float | None, probe: Probe | None, host_env: dict[str, Any]) -> EngineRun:
        """Run one trial; engine faults are the outcome's status, never an exception."""
        ...


INSTANCES = 2  # instances per arm in a shared process (A, B, B, A): the sharing's contract


def per_instance(cold: int) -> int:
    """Cold leading repetitions of a shared trial (interleaved) as repetitions per instance."""
    return -(-cold // INSTANCES)


def own_argv(argv: Sequence[str], shared: Mapping[str, object], arm: str) -> list[str]:
    """A shared process's command as one arm alone runs it (the setting's list replaced by the
    arm's value): what a user types to reproduce that arm. ``shared`` is the trial's
    ``env["shared_process"]`` (``order``, ``flag``, ``values``, as :class:`SharedRun` split it)."""
    order, values, flag = list(shared["order"]), list(shared["values"]), shared["flag"]  # type: ignore[call-overload]
    value = values[0] if order[0] == arm else values[1]
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == flag:
            out[i + 1] = str(value)
    return out


class SharedRun(Protocol):
    """A pair of trials that runs as one engine process: the jobs (in the pair's order), the
    process's arm and argv, and how its outcome becomes one outcome per trial."""

    @property
    def jobs(self) -> tuple[Any, Any]: ...
    @property
    def arm(self) -> ArmRuntime: ...
    @property
    def argv(self) -> tuple[str, ...]: ...

    def split(self, out: TrialOutcome) -> tuple[TrialOutcome, TrialOutcome]: ...


class Sharing(Protocol):
    """How a kind runs both arms of a pair in one process (``Engine.sharing``; None: it cannot)."""

    def differing_setting(self, a: ArmRuntime, b: ArmRuntime,
                          in_process: bool = False) -> tuple[str, str, str] | None: ...

    def shared_unit(self, arms: Mapping[str, ArmRuntime], unit: Sequence[Any]) -> SharedRun | None: ...


class NoFlags:
    """The answers of a kind whose flags have no memory guard, no thread count and no option table
    (a server's, llama-batched-bench's): a kind inherits these where it has no such flag."""

    def guard(self, flags: Sequence[str], tests: Sequence[tuple[int, int, int]]) -> LoadSettings | None:
        return None

    def with_threads(self, flags: Sequence[str], threads: int) -> list[str] | None:
        return None

    def sets_threads(self, flags: Sequence[str]) -> bool:
        return False

    sharing: Sharing | None = None

    def join_flags(self, common: Sequence[str], own: Sequence[str]) -> JoinedFlags:
        return JoinedFlags((*common, *own))  # no option table: both, the arm's last (a later flag wins)

    def check_one_test(self, flags: Sequence[str]) -> None:
        return None

    def check_served(self, endpoint: str, models: Sequence[str]) -> None:
        return None

    def check_source_flags(self, source: str, flags: Sequence[str]) -> None:
        return None

    def check_build_flags(self, build: EngineBuild, flags: Sequence[str], help_cache: dict[str, str]) -> None:
        return None
