"""What a command hands its driver: one typed request per study kind, on one shared base.

A command parses its options (and its study file) into one of these and calls its driver's
``run(request, say)``; the driver builds, checks, guards, measures, diagnoses and profiles.
``merged`` puts the command line over a study file, field by field, for every request alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from tokensleuth.engines.base import DEFAULT_KIND

if TYPE_CHECKING:
    from tokensleuth.trials.spec import CompareSpec

Log = Callable[[str], None]


class Say(Protocol):
    """Where a driver says what it is doing: a line, and an engine build's progress."""

    def line(self, text: str) -> None:
        ...

    def building(self, source: str) -> AbstractContextManager[Log]:
        """A log for the build's own lines (ninja's [n/m]) while ``source`` builds."""
        ...


@dataclass(frozen=True, kw_only=True)
class DriverOptions:
    """The options every measuring command shares (the engine, the watchdog, the outputs, the fleet)."""

    # the command line's own option for a field, where its name differs (the file merge asks it)
    OPTIONS: ClassVar[dict[str, str]] = {"models": "model", "control_models": "control_model",
                                         "workloads": "workload", "timeout_s": "timeout", "json_out": "json_out"}
    TOGETHER: ClassVar[tuple[tuple[str, ...], ...]] = ()  # fields given together or not at all
    models: list[str] = field(default_factory=list)
    workloads: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # the engine's flags (after `--`)
    cmake: list[str] = field(default_factory=list)
    timeout_s: float = 1800
    resume: bool = False
    json_out: Path | None = None
    cluster: str | None = None  # the fleet (--cluster, --on): drivers.shared.open_fleet
    on: list[str] = field(default_factory=list)
    db: Path | None = None
    argv: list[str] | None = None  # the words this command was run with, for the command to run next


@dataclass(frozen=True, kw_only=True)
class JudgedOptions(DriverOptions):
    """A driver that judges sources by paired comparisons (bisect, decompose, scan)."""

    control_models: list[str] = field(default_factory=list)
    band: str = "2%"
    max_pairs: int = 20
    kind: str = DEFAULT_KIND
    check_outputs: bool = False
    probe: bool = True  # the threads probe when a verdict stays unresolved
    profile: bool = True  # the culprit's per-op profile against its parent


@dataclass(frozen=True, kw_only=True)
class BenchRequest(DriverOptions):
    engine: str
    trials: int = 1
    env: dict[str, str] = field(default_factory=dict)
    kind: str = DEFAULT_KIND
    api_key_env: str | None = None
    sample_interval_s: float = 0.2


@dataclass(frozen=True, kw_only=True)
class CompareRequest(DriverOptions):
    spec: CompareSpec  # the arms, models, workloads, band, pairs, budget
    pin_params: bool = False
    check_outputs: bool = False
    profile: bool = False
    per_host: bool = False
    probe: bool = True
    identity: dict[str, Any] | None = None  # more of what the study measures (a re-run: the study it re-checks)


@dataclass(frozen=True, kw_only=True)
class RerunRequest(DriverOptions):
    """A bundle's compare measured again here (``tokensleuth rerun``)."""

    bundle: Path  # the file (named in the re-run's state)
    content: dict[str, Any]  # the bundle as read and checked (importers.bundle.checked)
    sources: dict[str, str] = field(default_factory=dict)  # arm -> its source here (--arm NAME=SOURCE)
    model_paths: dict[str, str] = field(default_factory=dict)  # a bundle model's file name -> its path here
    probe: bool = True


@dataclass(frozen=True, kw_only=True)
class BisectRequest(JudgedOptions):
    good: str = ""
    bad: str = ""
    repo: Path | None = None
    source: str | None = None
    bins: list[str] = field(default_factory=list)
    pin_params: bool = False


@dataclass(frozen=True, kw_only=True)
class DecomposeRequest(JudgedOptions):
    base: str = ""
    repo: Path | None = None
    series: str | None = None
    patches: list[Path] = field(default_factory=list)
    band: str = "1%"
    keep_neutral: bool = False
    check_outputs: bool = True
    allow_output_change: bool = False
    out_branch: str | None = None
    out_dir: Path | None = None
    profile: bool = False  # each kept or dropped patch's kernel (or op) diff: opt-in, a study per patch


@dataclass(frozen=True, kw_only=True)
class ScanRequest(JudgedOptions):
    OPTIONS: ClassVar[dict[str, str]] = {**DriverOptions.OPTIONS, "profile": "no_profile"}
    TOGETHER: ClassVar[tuple[tuple[str, ...], ...]] = (("repo", "source"),)  # one range, from one place
    from_: str = ""
    to: str = ""
    repo: str | None = None
    source: str | None = None
    samples: int = 8
    rounds: int = 2
    max_gap: int = 32
    budget: str | None = None
    pin_params: bool = False
    # whether the user gave --band (or the study file a band): if not, the scan uses the band its
    # noise resolves where that is wider than the default (drivers/hunts/scan/resolve.py)
    band_given: bool = False


R = TypeVar("R", bound=DriverOptions)


def merged(request: R, file: Mapping[str, Any], given: Callable[[str], bool]) -> R:
    """``request`` (from the command line) with a study file's values where the command line gave
    none: a field the user gave (``given``, by its option's name) wins, else the file's value
    where it has one; fields that go together (``TOGETHER``) come all from one side."""
    groups = {name: group for group in request.TOGETHER for name in group}
    updates: dict[str, Any] = {}
    for f in dataclasses.fields(request):
        together = groups.get(f.name, (f.name,))
        if any(given(request.OPTIONS.get(n, n)) for n in together):
            continue
        if f.name in groups or file.get(f.name) is not None:
            updates[f.name] = file.get(f.name)
    return dataclasses.replace(request, **updates)
