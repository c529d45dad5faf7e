"""What the measuring drivers share: the store and the fleet a request names (one path for every
driver), engine builds with progress, the doctor's line, and the diagnose and profile hooks."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import UserError
from tokensleuth.core.paths import default_db
from tokensleuth.core.records import TrialOutcome
from tokensleuth.drivers.requests import DriverOptions, JudgedOptions, Log, Say
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.sources import parse_source
from tokensleuth.sources.build import DEFAULT_TARGETS, BuildCache, EngineBuild
from tokensleuth.store import Store
from tokensleuth.trials.runner import TrialCallback

Summarize = Callable[[str, dict[str, Any]], dict[str, Any]]  # (study id, profile object) -> its summary

if TYPE_CHECKING:
    from tokensleuth.executors import Executor
    from tokensleuth.fleet import Fleet


def open_store(db: Path | None) -> Store:
    return Store(db or default_db())


class PlainSay:
    """A driver's lines to a log; a build's progress a line at each quarter."""

    def __init__(self, log: Log) -> None:
        self.line = log

    @contextmanager
    def building(self, source: str) -> Iterator[Log]:
        yield quarter_lines(source, self.line)


def quarter_lines(source: str, say: Log) -> Log:
    """A build's log that says ninja's [n/m] at each quarter, and any download."""
    marks: set[int] = set()

    def log(line: str) -> None:
        m = re.match(r"\[(\d+)/(\d+)\]", line)
        if m:
            q = 4 * int(m.group(1)) // int(m.group(2))
            if q not in marks:
                marks.add(q)
                say(f"building {source}: {m.group(1)}/{m.group(2)}")
        elif line.startswith("downloading"):
            say(line)

    return log


def build(source: str, cmake: Sequence[str], targets: tuple[str, ...], say: Say) -> EngineBuild:
    """Build ``source`` (or fetch it from the cache; a cache hit says nothing)."""
    src = parse_source(source)
    with say.building(source) as log:
        b = BuildCache().get(src, list(cmake), targets, log=log)
    if not b.cache_hit:
        say.line(f"engine {source}: built in {b.build_s:.0f} s ({b.bin_dir})")
    return b


def targets_for(kinds: Sequence[str], base: tuple[str, ...] = DEFAULT_TARGETS) -> tuple[str, ...]:
    """Build targets for arms of these engine kinds on one source: one build serves them all."""
    from tokensleuth.engines import engine_for

    out = list(base)
    for k in kinds:
        out += [t for t in engine_for(k).targets if t not in out]
    return tuple(out)


# -- the fleet: every driver takes it from its request, here ---------------------------------


def open_fleet(request: DriverOptions, say: Say, needs: str = "", on: Sequence[str] = ()) -> Fleet | None:
    """The fleet the request's --cluster names (None without it); --on or ``needs`` without
    --cluster is refused. ``on``: more machines by label (a study file's hosts)."""
    selectors = [*request.on, *on]
    if request.cluster is None:
        if selectors or needs:
            raise UserError(f"{'--on' if selectors else needs} needs --cluster — add --cluster auto (a cluster "
                            "started here) or --cluster HOST:PORT")
        return None
    from tokensleuth.fleet import Fleet

    fleet = Fleet(request.cluster, selectors, log=say.line)
    say.line(f"fleet: {len(fleet.nodes)} machine(s): " + ", ".join(n.label for n in fleet.nodes))
    return fleet


def executor_for(fleet: Fleet | None) -> Executor | None:
    """Where a driver's trials run: the fleet's machines, or here (None)."""
    if fleet is None:
        return None
    from tokensleuth.executors.ray import on_fleet

    return on_fleet(fleet)


def fleet_paths(models: Sequence[str], sources: Sequence[str]) -> list[str]:
    """What every machine must have at the same path: the models and any bin: folder."""
    return [*models, *(s.split(":", 1)[1] for s in sources if s.startswith("bin:"))]


def refuse_on_fleet(fleet: Fleet | None, **flags: bool) -> None:
    """Options that run on this machine only: refused with --cluster (one line)."""
    for name, given in flags.items():
        if fleet is not None and given:
            raise UserError(f"--{name.replace('_', '-')} runs on this machine only — drop it or --cluster")


# -- what a driver says and the hooks it runs ------------------------------------------------


def trial_printer(say: Say, label: str = "") -> TrialCallback:
    """A line for each finished trial (``label``: the machine, before the arm)."""
    def on_trial(i: int, n: int, arm: str, o: TrialOutcome) -> None:
        arm = f"{label} {arm}" if label else arm
        n_samples = sum(len(r.samples) for r in o.results)
        dur = (o.t1_ns - o.t0_ns) / 1e9
        if o.status == "done":
            say.line(f"  trial {i}/{n} [{arm}] done: {n_samples} samples in {dur:.1f} s")
        else:
            tail = o.stderr_tail.strip().splitlines()[-1:] if o.stderr_tail else []
            extra = f" — last stderr: {tail[0][:120]}" if tail else ""
            say.line(f"  trial {i}/{n} [{arm}] {o.status.upper()}: {o.message}{extra}")
    return on_trial


# -- the spec of a driver that judges sources by paired comparisons --------------------------


def judged_spec(request: JudgedOptions, workloads: Sequence[str], **extra: Any) -> dict[str, Any]:
    """The stored spec of a bisect, decompose or scan (``workloads``: its default), checked as the
    comparisons it runs will check it, before any build."""
    from tokensleuth.trials.spec import model_paths, parse_percent

    spec: dict[str, Any] = {
        "models": model_paths(request.models),
        "control_models": model_paths(request.control_models) if request.control_models else [],
        "workloads": request.workloads or list(workloads), "band": parse_percent(request.band),
        "max_pairs": request.max_pairs, "cmake": list(request.cmake), "flags": list(request.flags),
        "timeout_s": request.timeout_s, **extra}
    return spec


def check_outputs_flags(flags: Sequence[str]) -> None:
    """A flag llama-perplexity cannot take is refused before any build (--check-outputs)."""
    from tokensleuth.engines.perplexity import perplexity_flags

    perplexity_flags(list(flags))


def set_kind(spec: dict[str, Any], kind: str) -> None:
    """A driver's engine kind, in its spec only when not llama-bench (older studies keep their identity)."""
    from tokensleuth.engines import engine_for

    engine_for(kind)
    if kind != DEFAULT_KIND:
        spec["kind"] = kind


def check_judged(spec: dict[str, Any], command: str) -> None:
    """Validate the settings of a judged spec that each comparison will use, before any build,
    as a compare's settings are (models, workloads, band, pairs, flags, watchdog)."""
    from tokensleuth.engines import engine_for
    from tokensleuth.engines.checks import check_arm
    from tokensleuth.trials.spec import check_settings

    check_settings({"models": spec["models"], "workloads": spec["workloads"], "band": spec["band"],
                    "max_pairs": spec["max_pairs"], "common_flags": spec["flags"], "timeout_s": spec["timeout_s"]},
                   "command line", command)
    # what the flags and workloads alone show (tokensleuth's own flags, -r; one test per trial), before any build
    check_arm(None, command, spec.get("kind", DEFAULT_KIND), list(spec["flags"]), {}, list(spec["workloads"]))
    engine_for(spec.get("kind", DEFAULT_KIND)).check_one_test(list(spec["flags"]))