"""What the server engine kinds share: the server a trial talks to, its faults, and samples.

A server trial gets its server from :class:`Served` (started from the build, started by
the arm's ``cmd:`` command — a container —, or attached at a ``url:``), times requests as
:class:`Stream` s, turns each repetition's streams into one engine-neutral sample with
its window (:func:`sample_of`), and turns every fault into a
:class:`~tokensleuth.engines.streams.RequestFailed` with the trial's status (the requests and
their streams are streams.py's). An engine kind (llama-server, openai) adds only its protocol: how to
build a request and read its stream.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil

from tokensleuth.analysis.results import percentiles
from tokensleuth.core.errors import UserError, show
from tokensleuth.core.records import ResultRow, SampleRow, WindowRow
from tokensleuth.core.workloads import Workload
from tokensleuth.engines.base import ArmRuntime, NoFlags
from tokensleuth.engines.proc import Background, exit_reason
from tokensleuth.engines.streams import RequestFailed, Stream
from tokensleuth.monitor.attribute import counter_deltas

DEFAULT_REPS = 5
HEALTH_POLL_S = 0.05


def split_flags(flags: Sequence[str]) -> tuple[int, list[str]]:
    """(repetitions, llama-server flags): ``-r N`` is tokensleuth's, like llama-bench's."""
    reps, out, i = DEFAULT_REPS, [], 0
    args = list(flags)
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        if name in ("-r", "--repetitions"):
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            if not value.isdigit() or not 1 <= int(value) <= 1000:
                raise UserError(f"-r {show(value)}: give the repetitions per trial as a number from 1 to 1000")
            reps = int(value)
            i += 1 if eq else 2
            continue
        out.append(args[i])
        i += 1
    return reps, out


def sets_repetitions(flags: Sequence[str]) -> bool:
    """Whether the flags name the requests per trial (``-r``)."""
    return any(f.partition("=")[0] in ("-r", "--repetitions") for f in flags)


class ServerArgv(NoFlags):
    """A server kind's answers about a trial's argv: its workload comes by name (no flags), its
    repetitions are requests per trial, given in the arm's flags (``-r``)."""

    default_repetitions: int | None = None  # requests, not repetitions inside a process
    workload_flags: frozenset[str] = frozenset()
    profiles = False  # the profiler takes llama-bench's flags

    def argv_for(self, workloads: Sequence[str], repetitions: int | None = None) -> list[str] | None:
        return [] if len(workloads) <= 1 else None  # a trial serves one workload

    def repetitions(self, flags: Sequence[str]) -> int | None:
        return split_flags(flags)[0] if sets_repetitions(flags) else None

    def sets_repetitions(self, flags: Sequence[str]) -> bool:
        return sets_repetitions(flags)

    def flag_tests(self, flags: Sequence[str]) -> list[tuple[int, int, int]]:
        return []  # its flags are not llama-bench's (no memory guard)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sample_of(w: Workload, rep: int, streams: Sequence[Stream], probe_edges: tuple[Any, Any],
              t_start: int, t_end: int,
              timings_of: Callable[[Stream], dict[str, float]], exact: bool = True) -> tuple[SampleRow, WindowRow]:
    """One sample (and its window) from the repetition's streams (one, or N at xcN).

    ``timings_of`` gives a stream's timings in llama-server's shape (prompt_n/ms,
    predicted_n/ms, cache_n): the server's own, or what an engine derives from its clock.
    """
    timings = [timings_of(s) for s in streams]
    for s, t in zip(streams, timings, strict=True) if exact else ():
        if w.n_gen and int(t["predicted_n"]) != w.n_gen:
            raise RequestFailed("garbage", f"the server generated {int(t['predicted_n'])} tokens, not {w.n_gen}")
        if w.n_prompt and int(t["prompt_n"]) != w.n_prompt:
            raise RequestFailed("garbage", f"the server processed {int(t['prompt_n'])} prompt tokens, not "
                                f"{w.n_prompt} (cached {int(t['cache_n'])})")
        if w.n_depth and int(t["cache_n"]) != w.n_depth:
            raise RequestFailed("failed", f"the depth prefix was not in the KV cache (cache_n {int(t['cache_n'])}"
                                f", want {w.n_depth}) — the server did not keep the slot's cache")
    n_prompt = sum(int(t["prompt_n"]) for t in timings) if w.n_prompt else 0
    n_gen = sum(int(t["predicted_n"]) for t in timings) if w.n_gen else 0
    rated = n_prompt + n_gen  # the tokens the sample's rate counts
    if len(streams) == 1:
        t = timings[0]
        ms = (t["prompt_ms"] if w.n_prompt else 0.0) + (t["predicted_ms"] if w.n_gen else 0.0)
        duration_ns = int(ms * 1e6)
        if w.n_gen and not w.n_prompt:
            # tgN: the first token is sampled from the 1-token prompt's logits, and
            # predicted_ms covers the N-1 decode steps after it (the server's own
            # predicted_per_second): N-1 tokens over them, as llama-bench counts decode steps
            rated = max(1, n_gen - 1)
    else:  # concurrent streams: every token over the client's wall clock
        duration_ns = max(s.done_ns for s in streams) - min(s.sent_ns for s in streams)
    if duration_ns <= 0:
        raise RequestFailed("garbage", "the server reported a zero duration")
    ttft = [s.ttft_ns / 1e6 for s in streams if s.ttft_ns is not None]
    itl = [x for s in streams for x in s.itl_ms()]
    metrics: dict[str, Any] = {"server": timings if len(timings) > 1 else timings[0],
                               # every request's TTFT and every inter-token interval: a cell's
                               # percentiles are taken over all of them (results.Cell.latency)
                               "ttft_ms_all": [round(x, 4) for x in ttft], "itl_ms_all": [round(x, 4) for x in itl]}
    if (p := percentiles(ttft)) is not None:
        metrics["ttft_ms"] = p
    if (p := percentiles(itl)) is not None:
        metrics["itl_ms"] = p
    if w.n_gen and len(streams) == 1 and len(streams[0].chunks) >= 2:
        (t0, n0), (t1, n1) = streams[0].chunks[0], streams[0].chunks[-1]
        if t1 > t0 and n1 > n0:
            metrics["client_tg_ts"] = (n1 - n0) * 1e9 / (t1 - t0)
    sample = SampleRow(rep, duration_ns, rated, n_prompt, n_gen, t_start, t_end,
                       min(s.ttft_ns for s in streams if s.ttft_ns is not None) if ttft else None, metrics)
    before, after = probe_edges
    deltas = counter_deltas(before, after) if before and after else {}
    cpu_ms = deltas.pop("cpu_ms", None)
    return sample, WindowRow(0, rep, t_start, t_end, cpu_ms, deltas)


def result_of(w: Workload, samples: Sequence[SampleRow], extra: dict[str, Any]) -> ResultRow:
    ts = [s.tokens_per_s for s in samples]
    mean = sum(ts) / len(ts)
    sd = (sum((x - mean) ** 2 for x in ts) / (len(ts) - 1)) ** 0.5 if len(ts) > 1 else 0.0
    return ResultRow(0, w.name, w.n_prompt, w.n_gen, w.n_depth, mean, sd, extra, tuple(samples))


def model_meta(model: str, flags: Sequence[str]) -> dict[str, Any]:
    """The result fields llama-bench would print about the model and the offload/threads the
    server was given (None: the server's own default), so server rows read like llama-bench's."""
    from tokensleuth.models.info import model_info

    out: dict[str, Any] = {}
    try:
        info = model_info(Path(model))
        out = {"model_type": f"{info.arch} {info.n_params / 1e9:.2f}B", "model_size": info.file_bytes,
               "model_n_params": info.n_params}
    except (UserError, OSError, ValueError):
        pass
    args = list(flags)
    for key, names in (("n_gpu_layers", ("-ngl", "--gpu-layers", "--n-gpu-layers")), ("n_threads", ("-t", "--threads"))):
        for i, a in enumerate(args):
            name, eq, inline = a.partition("=")
            if name in names:
                out[key] = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
        out.setdefault(key, "default")
    return out


def check_served_model(url: str, models: Sequence[str]) -> None:
    """An attached llama-server (``url:``) serves the model the study names, or one line says
    it does not: its ``/v1/models`` reports the loaded model's parameter count and vocabulary,
    and so does the GGUF file given with ``-m``. A server that cannot be reached is the first
    trial's fault to report, not this check's."""
    from tokensleuth.models.info import model_info

    base = url.removeprefix("url:").rstrip("/")
    try:
        meta = httpx.get(base + "/v1/models", timeout=10.0).json()["data"][0]["meta"]
        served = (int(meta["n_params"]), int(meta["n_vocab"]))
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return
    for m in models:
        try:
            info = model_info(Path(m))
        except (UserError, OSError, ValueError):
            continue
        if (info.n_params, info.n_vocab) != served:
            raise UserError(f"the server at {show(base)} serves another model ({served[0] / 1e6:.1f} M parameters, "
                            f"vocabulary {served[1]}), not {show(Path(m).name)} ({info.n_params / 1e6:.1f} M, "
                            f"{info.n_vocab}) — start it with -m {show(m)}, or name the model it serves")


class Served:
    """The server one trial talks to: started from the build (``bin``), started by the arm's
    command (``cmd:`` — a container), or attached (``url:``: someone else runs it).

    A started server is always stopped when the trial ends, also on an exception or an
    interrupt; a container started by ``podman run``/``docker run`` is named and removed
    by name, and a detached reaper removes it even if tokensleuth is killed outright.
    """

    def __init__(self, arm: ArmRuntime, model: str, w: Workload,
                 own_argv: Callable[[ArmRuntime, str, Workload, int], list[str]], ready_path: str) -> None:
        self.arm, self.ready_path = arm, ready_path
        source = arm.endpoint or ""
        self.attached = source.startswith("url:")
        self.container: str | None = None
        self.server: Background | None = None
        self.reaper: Background | None = None
        if self.attached:
            self.base, self.argv = source[4:], []
            return
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        if source.startswith("cmd:"):
            self.argv = command_argv(source[4:], model, self.port, arm)
            if len(self.argv) > 1 and Path(self.argv[0]).name in ("podman", "docker") and self.argv[1] == "run":
                self.container = f"tokensleuth-{os.getpid()}-{self.port}"
                self.argv[2:2] = ["--name", self.container]
        else:
            self.argv = own_argv(arm, model, w, self.port)

    def __enter__(self) -> Served:
        if self.argv:
            self.server = Background(self.argv, env=self.arm.env)
            if self.container is not None:
                self.reaper = reaper(self.argv[0], self.container)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.stop()
        if self.container is not None:
            subprocess.run([self.argv[0], "rm", "-f", "-t", "0", self.container], capture_output=True, timeout=60)
        if self.reaper is not None:
            self.reaper.stop(grace_s=0)

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until the server answered ``ready_path`` with 200 (the model load: never timed)."""
        if self.server is not None and self.server.spawn_error:
            raise RequestFailed("failed", self.server.spawn_error)
        t0 = time.monotonic()
        while True:
            if self.server is not None and (rc := self.server.poll()) is not None:
                status, why = exit_reason(rc)
                raise RequestFailed(status, f"server {why} before it was ready")
            try:
                if httpx.get(self.base + self.ready_path, timeout=2.0).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass  # not listening yet
            if time.monotonic() - t0 > timeout_s:
                raise RequestFailed("crashed", f"server never became healthy in {time.monotonic() - t0:.0f} s")
            time.sleep(HEALTH_POLL_S)

    def measured_pid(self) -> int | None:
        """The process whose tree (and cgroup) the window edges read: the server itself.

        A command's own process may be a container client (podman run) that does no work:
        the process listening on the port is the server (host network), else the client."""
        if self.server is None:
            return None
        if self.container is not None:
            if (pid := listener(self.port)) is not None:
                return pid
        return self.server.pid

    def describe(self) -> dict[str, Any]:
        return {"attached": self.attached, "container": self.container, "base": self.base,
                "measured_pid": self.measured_pid()}

    def tail(self, n: int) -> str:
        return self.server.tail(n) if self.server is not None else ""

    def fault(self, exc: RequestFailed) -> tuple[str, str]:
        status, message = exc.status, exc.message
        if self.server is not None and self.server.proc is not None and status == "crashed":
            try:  # a lost connection: give a dying server a moment to be reaped, to say how it died
                self.server.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        if self.server is not None and self.server.poll() is not None:
            # the server is gone: that is the fault, whatever the client saw
            status, why = exit_reason(self.server.poll())
            message = f"server {why} ({exc.message})"
        if self.tail(4):
            message += " — last log lines: " + " | ".join(self.tail(4).splitlines())
        return status, message


def command_argv(template: str, model: str, port: int, arm: ArmRuntime) -> list[str]:
    """A cmd: arm's command with {model}, {port} and {bin} filled in, plus the arm's flags."""
    _, flags = split_flags(arm.flags)
    values = {"model": model, "port": str(port), "bin": str(arm.bin_dir or "")}
    out = []
    for tok in shlex.split(template):
        for k, v in values.items():
            tok = tok.replace("{" + k + "}", v)
        out.append(tok)
    return out + flags


def listener(port: int) -> int | None:
    """The pid listening on 127.0.0.1:port (or any address), if this host can see it."""
    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return int(c.pid)
    except (psutil.AccessDenied, OSError):
        pass
    return None


def reaper(runtime: str, container: str) -> Background:
    """A watcher outside tokensleuth's process group: when tokensleuth dies (even by SIGKILL),
    it removes the container. Stopped (killed) when the trial ends normally."""
    script = (f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 0.5; done; "
              f"{shlex.quote(runtime)} rm -f -t 0 {shlex.quote(container)} >/dev/null 2>&1")
    return Background(["sh", "-c", script], die_with_parent=False)
