"""A real local Ray cluster for the fleet tests: a head and worker nodes, each a separate
``ray start --block`` process group on this machine, with its own labels and its own
tokensleuth cache (the compiler cache is shared, as sccache/ccache can be between machines)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalCluster:
    address: str
    root: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    caches: Path | None = None  # each machine's tokensleuth cache under here (default: under root, empty)

    def env(self, label: str, ccache: Path | None) -> dict[str, str]:
        cache = (self.caches / label) if self.caches is not None else (self.root / label / "cache")
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", TOKENSLEUTH_CACHE=str(cache))
        if ccache is not None:
            env["CCACHE_DIR"] = str(ccache)
        return env

    def alive(self) -> dict[str, bool]:
        """label -> alive, from the cluster's own view (a short-lived driver)."""
        code = ("import ray, json; ray.init(address=%r, log_to_driver=False, logging_level='ERROR'); "
                "print('ALIVE', json.dumps({n['Labels'].get('host', '?'): n['Alive'] for n in ray.nodes()}))"
                % self.address)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))
        # Ray may print its own warnings (a lagging heartbeat) around the answer: take its line
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("ALIVE ")]
        return dict(json.loads(lines[-1][len("ALIVE "):])) if p.returncode == 0 and lines else {}

    def start(self, label: str, head: bool = False, ccache: Path | None = None) -> None:
        (self.root / label).mkdir(parents=True, exist_ok=True)
        port = self.address.rsplit(":", 1)[1]
        argv = [RAY, "start", "--block", "--num-cpus", "0" if head else "1", "--labels", f"host={label},role={'head' if head else 'bench'}",
                "--object-store-memory", str(80 * 1024 * 1024), "--disable-usage-stats"]
        argv += (["--head", "--port", port, "--include-dashboard=false"] if head
                 else ["--address", self.address])
        log = open(self.root / f"{label}.log", "wb")  # noqa: SIM115 - the process owns it
        self.procs[label] = subprocess.Popen(argv, env=self.env(label, ccache), stdout=log, stderr=log,
                                             start_new_session=True)
        deadline = time.time() + 90
        while time.time() < deadline:  # nodes join one at a time: two at once can time out
            if self.procs[label].poll() is not None:
                self.procs.pop(label)
                raise RuntimeError(f"ray start {label} exited: {(self.root / f'{label}.log').read_text()[-2000:]}")
            if self.alive().get(label):
                return
            time.sleep(1)
        self.kill(label)  # not left running for a later test to find alive
        raise RuntimeError(f"node {label} did not join: {(self.root / f'{label}.log').read_text()[-2000:]}")

    def kill(self, label: str) -> None:
        """The machine dies: its raylet, its workers and the engine they run, all at once."""
        p = self.procs.pop(label)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)

    def stop(self) -> None:
        for label in [x for x in self.procs if x != "head"] + (["head"] if "head" in self.procs else []):
            p = self.procs.pop(label)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)


@contextmanager
def local_cluster(root: Path, workers: tuple[str, ...] = ("w1", "w2"), ccache: Path | None = None,
                  caches: Path | None = None) -> Iterator[LocalCluster]:
    c = LocalCluster(f"127.0.0.1:{_free_port()}", root, caches=caches)
    try:
        c.start("head", head=True)
        for w in workers:
            c.start(w, ccache=ccache)
        yield c
    finally:
        c.stop()
