"""One study across many machines, on Ray (the optional ``fleet`` extra).

A machine joins with ``ray start --address HEAD:6379 --labels host=strix1,backend=rocm``
(tokensleuth installed in its Python, nothing else). The driver connects
(:class:`Fleet`), picks machines by their labels or resources (``--on``), and hands
them units of work through :class:`~tokensleuth.executors.ray.RayExecutor` (``on_fleet``). Each
machine builds its own engines in its own cache (:meth:`Fleet.build`); samples come
back to the driver, the store's only writer. Nothing here imports Ray until a fleet is
asked for, so the single-machine path pays nothing for it.

Floor 5: imports trials (the runner a worker calls) and below.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.paths import cache_dir
from tokensleuth.sources import parse_source
from tokensleuth.sources.build import DEFAULT_TARGETS, BuildCache, EngineBuild

FLOOR = 5  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)

INSTALL = "pip install 'tokensleuth[fleet]'"
Recipe = tuple[str, tuple[str, ...], tuple[str, ...]]  # (source, the user's cmake flags, targets)


@dataclass(frozen=True, slots=True)
class Node:
    """A machine of the cluster, as the driver selects it."""

    id: str
    labels: dict[str, str] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The name people know the machine by: its ``host`` label, else its Ray node id."""
        return self.labels.get("host") or self.labels.get("name") or self.id[:8]

    def matches(self, selector: str) -> bool:
        """``key=value[,key=value…]``: every part a label of that value (or a resource of
        that name, for ``key`` alone or ``key=1``)."""
        for part in selector.split(","):
            key, _, value = part.strip().partition("=")
            if key in self.labels:
                if value and self.labels[key] != value:
                    return False
            elif key in self.resources:
                if value and value not in ("1", str(self.resources[key])):
                    return False
            else:
                return False
        return True


def parse_selectors(on: Sequence[str]) -> list[str]:
    """--on values, checked: each ``key=value`` (comma-joined parts all hold)."""
    out = []
    for s in on:
        parts = [p.strip() for p in s.split(",")]
        if not s.strip() or any(not p or p.startswith("=") or p.endswith("=") for p in parts):
            raise UserError(f"cannot read --on {s!r} — write LABEL=VALUE (e.g. host=strix1 or gpu=H200), "
                            "several joined by commas")
        out.append(s.strip())
    return out


def select(nodes: Sequence[Node], selectors: Sequence[str]) -> list[Node]:
    """The nodes any selector matches (all nodes when there is none)."""
    return [n for n in nodes if not selectors or any(n.matches(s) for s in selectors)]


def check_address(address: str) -> str:
    """``auto`` (a cluster running here), ``HOST:PORT`` or ``ray://HOST:PORT``."""
    a = address.strip()
    if a == "auto" or a.startswith("ray://") or (":" in a and a.rsplit(":", 1)[1].isdigit()):
        return a
    raise UserError(f"cannot read --cluster {address!r} — write auto (a cluster started here with "
                    "`ray start --head`), HOST:PORT or ray://HOST:PORT")


def reachable(address: str, timeout_s: float = 3.0) -> str:
    """The cluster's HOST:PORT if its head answers, else a UserError (Ray itself waits minutes).

    ``auto`` is the cluster this machine's ``ray start --head`` recorded (Ray's own file)."""
    target = address
    if address == "auto":
        import tempfile

        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        try:
            target = current.read_text().strip()
        except OSError:
            raise UserError("--cluster auto: no Ray cluster was started on this machine — start one with "
                            "`ray start --head`, or pass the head's HOST:PORT") from None
    host, _, port = target.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError):
        raise UserError(f"no Ray cluster answers at {target} — start one with `ray start --head` (or check "
                        "the head's HOST:PORT and that its port is open)") from None
    return address


def lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's errors that mean a machine (or its worker) is gone, not that the call failed."""
    ex = ray.exceptions
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "ActorUnschedulableError",
             "NodeDiedError", "WorkerCrashedError", "OwnerDiedError", "ObjectLostError", "LocalRayletDiedError")
    return tuple(getattr(ex, n) for n in names if hasattr(ex, n))


class Fleet:
    """A connection to a Ray cluster and the machines a study may use."""

    def __init__(self, address: str, on: Sequence[str] = (), *, connect_timeout_s: float = 60,
                 log: Callable[[str], None] | None = None) -> None:
        address = reachable(check_address(address))
        self.selectors = parse_selectors(on)
        try:
            import ray
        except ImportError:
            raise UserError(f"--cluster needs Ray, which is not installed — {INSTALL}") from None
        self.ray: Any = ray
        import logging

        if not ray.is_initialized():
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING,
                         configure_logging=False, include_dashboard=False)
            except ConnectionError as exc:
                raise UserError(f"no Ray cluster at {address} ({str(exc).splitlines()[0][:160]}) — start one with "
                                "`ray start --head`, or pass the head's HOST:PORT") from None
        self.address = address
        self.log = log or (lambda line: None)
        self.actors: dict[str, Any] = {}
        self.recipes: dict[str, Recipe] = {}  # a build's bin_dir -> how any worker makes its own
        self.lost: dict[str, float] = {}  # node id -> when it was lost
        self.built: dict[tuple[str, str, tuple[str, ...], tuple[str, ...]], EngineBuild] = {}
        self.bundles: dict[tuple[str, str], Any] = {}  # (repo id, sha) -> the shipped bundle in Ray's store
        self.nodes = select(self.alive(), self.selectors)
        if not self.nodes:
            have = ", ".join(f"{n.label} {n.labels}" for n in self.alive()) or "none alive"
            raise UserError(f"no machine of the cluster matches --on {' / '.join(self.selectors)} (machines: "
                            f"{have}) — label one with `ray start --address … --labels KEY=VALUE`")

    def alive(self) -> list[Node]:
        out = []
        for n in self.ray.nodes():
            if not n.get("Alive"):
                continue
            labels = {k: str(v) for k, v in (n.get("Labels") or {}).items() if not k.startswith("ray.io/")}
            out.append(Node(str(n["NodeID"]), labels, {k: float(v) for k, v in (n.get("Resources") or {}).items()}))
        return sorted(out, key=lambda x: x.label)

    def worker(self, node: Node) -> Any:
        """The node's worker actor (one per machine, made on first use, never restarted: a lost
        machine's units go elsewhere)."""
        if node.id not in self.actors:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            from tokensleuth.fleet.worker import TrialWorker

            cls = self.ray.remote(num_cpus=0, max_restarts=0, max_concurrency=2)(TrialWorker)
            self.actors[node.id] = cls.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.id, soft=False),
                name=f"tokensleuth-{node.id[:12]}-{time.time_ns()}").remote(node.label)
        return self.actors[node.id]

    def forget(self, node: Node) -> None:
        """A node that was lost: no more work goes to it in this run."""
        self.lost[node.id] = time.time()
        actor = self.actors.pop(node.id, None)
        if actor is not None:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - nothing a user reads depends on this kill
                # The machine is in self.lost: no unit goes to it again in this run, and whatever
                # its worker still returns is never read (its unit runs on another machine). Ray's
                # kill is asynchronous (the cluster's control store does it) and does not raise for
                # an actor already gone with its machine; it raises where this driver has lost Ray
                # itself, which the next remote call reports as an error. A worker that lives on
                # (its machine only unreachable for a while) ends with this driver's job anyway:
                # it is not a detached actor.
                pass

    def usable(self, nodes: Sequence[Node]) -> list[Node]:
        return [n for n in nodes if n.id not in self.lost]

    def build(self, node: Node, source: str, cmake: Sequence[str] = (),
              targets: Sequence[str] = DEFAULT_TARGETS) -> EngineBuild:
        """``source`` built on ``node``, in that machine's own cache (EngineError/UserError as locally).

        A ``git:`` source is not read at its path there: the commit's history is shipped as a
        bundle when the machine lacks it (fleet.ship), so no file system is shared."""
        key = (node.id, source, tuple(cmake), tuple(targets))
        if key in self.built:
            return self.built[key]
        w = self.worker(node)
        src = parse_source(source)
        if src.kind == "git":
            from tokensleuth.fleet import ship

            assert src.path is not None and src.rev is not None
            sha = BuildCache().resolve_rev(src.path, src.rev)
            rid = ship.repo_id(src.path)
            data = None
            if not self._get(w.has_commit.remote(rid, sha)):
                if (rid, sha) not in self.bundles:
                    self.bundles[(rid, sha)] = self.ray.put(ship.bundle(src.path, sha, cache_dir() / "fleet-ship"))
                data = self.bundles[(rid, sha)]
            ref = w.build.remote(source, tuple(cmake), tuple(targets), rid, sha, data)
        else:
            ref = w.build.remote(source, tuple(cmake), tuple(targets))
        b = EngineBuild.from_json(self._get(ref))
        self.recipes[b.bin_dir] = (source, tuple(cmake), tuple(targets))
        self.built[key] = b
        return b

    def ensure(self, node: Node, recipes: Sequence[Recipe]) -> None:
        """Every recipe built on ``node`` before a unit that needs it goes there."""
        for r in recipes:
            self.build(node, *r)

    def check_files(self, paths: Sequence[str]) -> None:
        """Models and bin: folders are read at the same path on every machine: one line
        naming what a machine lacks (or has at another size) before anything runs.

        A machine the cluster still lists but that is gone (Ray notices a killed machine only
        after some missed heartbeats) is forgotten here, as it would be mid-study."""
        want = {p: (0 if Path(p).is_dir() else Path(p).stat().st_size) if Path(p).exists() else None for p in paths}
        for n in self.nodes:
            try:
                got = self._get(self.worker(n).files.remote(list(paths)))
            except lost_errors(self.ray) as exc:
                self.forget(n)
                self.log(f"machine {n.label} is gone ({type(exc).__name__}) — the study goes on without it")
                continue
            for p, size in got.items():
                if size is None or (want[p] is not None and size != want[p]):
                    what = "is not on" if size is None else f"has another size ({size} vs {want[p]} bytes) on"
                    raise UserError(f"{p} {what} machine {n.label} — copy it to the same path there "
                                    "(models and bin: folders are read where they are)")
        if not self.usable(self.nodes):
            raise EngineError(f"every machine of the cluster that matches --on was lost ({', '.join(n.label for n in self.nodes)}) "
                              "— start one again, then rerun")

    def check_arm(self, node: Node, build: EngineBuild, name: str, kind: str, flags: Sequence[str],
                  env: dict[str, str], workloads: Sequence[str], source: str) -> None:
        """The arm's flags and devices against ``node``'s build (one line if they do not fit)."""
        self._get(self.worker(node).check_arm.remote(build.to_json(), name, kind, list(flags), dict(env),
                                                     list(workloads), source))

    def host(self, node: Node) -> dict[str, Any]:
        """The machine's hardware as a trial would record it (CPU, GPUs, driver)."""
        return dict(self._get(self.worker(node).host.remote()))

    def cache(self, node: Node) -> RemoteCache:
        return RemoteCache(self, node)

    def _get(self, ref: Any) -> Any:
        """A remote call's value; the worker's UserError/EngineError come through as themselves."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, (UserError, EngineError)):
                raise type(cause)(str(cause)) from None
            raise


class RemoteCache:
    """The build cache of one machine of the fleet, with :class:`BuildCache`'s ``get``."""

    def __init__(self, fleet: Fleet, node: Node) -> None:
        self.fleet, self.node = fleet, node

    def get(self, source: str, cmake_flags: Sequence[str] = (), targets: Sequence[str] = DEFAULT_TARGETS,
            log: Any = None) -> EngineBuild:
        return self.fleet.build(self.node, source, cmake_flags, targets)

    def check_arm(self, build: EngineBuild, name: str, kind: str, flags: Sequence[str], env: dict[str, str],
                  workloads: Sequence[str], source: str) -> None:
        """The arm's flags and devices against this machine's build (one line if they do not fit)."""
        self.fleet.check_arm(self.node, build, name, kind, flags, env, workloads, source)
