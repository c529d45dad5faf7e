"""llama-server: one server process per trial, the workload sent as timed requests.

A trial starts the built ``llama-server`` on a free loopback port, waits for
``/health`` (the model load is never timed), sends one warm-up request and then
``-r N`` timed repetitions (5 by default, as llama-bench), and stops the server.
Each repetition is one sample, or, at concurrency ``xcN``, N streams at once make
one sample (aggregate t/s) with per-request figures in its metrics.

Prompts are token-exact: ``/completion`` takes an array of token ids and uses it
verbatim (no BOS). The ids are drawn, with a fixed seed, from the middle of the
vocabulary (no control tokens), the same for every arm, and differ per repetition.

What a sample's rate counts, like llama-bench's test of the same name:

- ``ppN``: N prompt tokens over the server's ``timings.prompt_ms`` (one token is
  generated); the client's time to first token is in the metrics.
- ``tgN``: N tokens generated after a 1-token prompt; the first is sampled from the
  prompt's logits, so the rate is the N-1 decode steps after it over
  ``timings.predicted_ms`` (the server's own ``predicted_per_second``); the client's
  own rate and the inter-token latencies (from the arrival of the streamed chunks) are
  in the metrics.
- ``ppN+tgM``: both, over both times.
- ``@dK``: K tokens of a shared prefix are put in the slot's KV cache by a request
  first; the timed request (prefix + prompt, ``cache_prompt`` on, same slot) must
  report ``timings.cache_n == K`` — that is how the cache is checked; a sample where
  it is not is refused (the trial's message says so) rather than counted.

Prompt caching never inflates a prompt rate: ``cache_prompt`` is off for every
request without a depth, the host-RAM prompt cache is off (``-cram 0``), and the
server's own ``prompt_n`` excludes cached tokens.

Tokens are counted from the server's ``tokens_predicted``, not from chunks: a token
that ends in an incomplete UTF-8 sequence is sent merged with the next one, so an
interval that spans k tokens counts as k intervals of 1/k of it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from typing import Any

import httpx

from tokensleuth.core.errors import UserError, show
from tokensleuth.core.records import SampleRow, TrialOutcome, WindowRow
from tokensleuth.core.workloads import Workload, parse
from tokensleuth.engines.base import ArmRuntime, EngineRun, Settings
from tokensleuth.engines.proc import Probe
from tokensleuth.engines.serving import (
    Served,
    ServerArgv,
    check_served_model,
    model_meta,
    result_of,
    sample_of,
    split_flags,
)
from tokensleuth.engines.streams import (
    STALL_S,
    RequestFailed,
    Stream,
    http_client,
    post_stream,
    sse_events,
)

BINARY = "llama-server"
# Flags tokensleuth sets itself: the model, where it listens, how many streams.
OWNED_FLAGS = {"-m", "--model", "--host", "--port", "-np", "--parallel"}


def parse_sse(lines: Iterable[str], stream: Stream) -> None:
    """Read a /completion event stream into ``stream``; RequestFailed for anything malformed."""
    for obj in sse_events(lines):
        now = time.monotonic_ns()
        if obj.get("stop"):
            stream.final = obj
            stream.done_ns = now
            break
        n = obj.get("tokens_predicted")
        toks = obj.get("tokens")
        if not isinstance(n, int) or isinstance(n, bool):
            n = (stream.chunks[-1][1] if stream.chunks else 0) + (len(toks) if isinstance(toks, list) else 1)
        stream.chunks.append((now, n))
    if not stream.final:
        raise RequestFailed("crashed", "the stream ended before its final event")


def _timings(stream: Stream) -> dict[str, float]:
    t = stream.final.get("timings")
    if not isinstance(t, dict):
        raise RequestFailed("garbage", "the final event has no timings object")
    out: dict[str, float] = {}
    for k in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "cache_n"):
        v = t.get(k)
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e12:
            raise RequestFailed("garbage", f"timings.{k} is {show(repr(v), 30)}, not a count or duration")
        out[k] = float(v)
    return out


class Prompts:
    """Token-exact prompts: ids from the middle of the vocabulary, fixed seed."""

    def __init__(self, n_vocab: int) -> None:
        if n_vocab < 64:
            raise RequestFailed("failed", f"the model's vocabulary has {n_vocab} tokens — too few to build prompts")
        self.lo, self.hi = n_vocab // 4, n_vocab // 2

    def make(self, n: int, *key: object) -> list[int]:
        rng = random.Random(repr(key))
        return [rng.randrange(self.lo, self.hi) for _ in range(n)]


class Client:
    """Requests to one llama-server, timed at the client."""

    def __init__(self, base: str, headers: Mapping[str, str] | None = None, stall_s: float = STALL_S) -> None:
        self.base = base
        self.headers = dict(headers or {})
        self.timeout = httpx.Timeout(stall_s, connect=10.0)
        self.http = http_client(self.headers, self.timeout)

    def get(self, path: str, timeout: float = 5.0) -> httpx.Response:
        return self.http.get(self.base + path, timeout=timeout)

    def complete(self, body: dict[str, Any]) -> Stream:
        return post_stream(self.http, self.base + "/completion", dict(body, stream=True), parse_sse)

    def close(self) -> None:
        self.http.close()


def request_body(prompt: list[int], n_predict: int, cache: bool, slot: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "cache_prompt": cache,
                            "temperature": 0, "n_probs": 0, "response_fields": ["timings", "tokens_predicted",
                                                                                "stop", "stop_type"]}
    if slot is not None:
        body["id_slot"] = slot
    return body


def run_requests(client: Client, w: Workload, reps: int, n_vocab: int, pid: int | None,
                 probe: Probe | None) -> tuple[list[SampleRow], list[WindowRow]]:
    """The warm-up and the timed repetitions of workload ``w``."""
    prompts = Prompts(n_vocab)
    n_predict = w.n_gen or 1
    n_prompt = w.n_prompt or 1

    def prefix(rep: int, i: int) -> list[int]:
        return prompts.make(w.n_depth, "depth", rep, i) if w.n_depth else []

    def fill(rep: int, i: int) -> None:
        """Put the depth prefix in slot i's KV cache (untimed, outside the window)."""
        if w.n_depth:
            client.complete(request_body(prefix(rep, i), 0, True, i))

    def timed(rep: int, i: int) -> Stream:
        body = prefix(rep, i) + prompts.make(n_prompt, "prompt", rep, i)
        return client.complete(request_body(body, n_predict, bool(w.n_depth), i if w.n_depth else None))

    fill(-1, 0)
    timed(-1, 0)  # warm-up, like llama-bench's: not timed, not stored
    samples, windows = [], []
    for rep in range(reps):
        for i in range(w.concurrency):
            fill(rep, i)
        got: list[Stream | RequestFailed] = [RequestFailed("failed", "not run")] * w.concurrency

        def run(i: int, rep: int = rep) -> None:
            try:
                got[i] = timed(rep, i)
            except RequestFailed as exc:
                got[i] = exc

        edge0 = probe(pid) if probe is not None and pid is not None else None
        t_start = time.monotonic_ns()
        if w.concurrency == 1:
            run(0)
        else:
            threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(w.concurrency)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        t_end = time.monotonic_ns()
        edge1 = probe(pid) if probe is not None and pid is not None else None
        for g in got:
            if isinstance(g, RequestFailed):
                raise g
        streams = [g for g in got if isinstance(g, Stream)]
        s, win = sample_of(w, rep, streams, (edge0, edge1), t_start, t_end, _timings)
        samples.append(s)
        windows.append(win)
    return samples, windows


class LlamaServer(ServerArgv):
    """The llama-server engine kind."""

    kind = "llama-server"
    targets = (BINARY,)
    attaches = True
    builds = True
    reps_per_process = False  # -r is requests per trial
    shares_process = False  # a server serves one build's settings
    load_log_flag: str | None = None
    settings: Settings | None = None
    default_workloads = ("pp512", "tg128")

    def check(self, arm: ArmRuntime, workloads: Sequence[str]) -> None:
        _, flags = split_flags(arm.flags)
        for f in flags:
            if f.split("=", 1)[0] in OWNED_FLAGS:
                raise UserError(f"arm {arm.name}: llama-server flag {f.split('=', 1)[0]} is set by tokensleuth — "
                                "remove it (concurrency comes from the workload, e.g. tg128xc4)")
        for w in workloads:
            parse(w)
        if arm.endpoint is None and arm.bin_dir is not None and not (arm.bin_dir / BINARY).exists():
            raise UserError(f"arm {arm.name}: {BINARY} is not in {arm.bin_dir} — build it (the tool builds it "
                            "for a --kind llama-server arm) or give a bin: folder that has it")

    def server_argv(self, arm: ArmRuntime, model: str, w: Workload, port: int) -> list[str]:
        assert arm.bin_dir is not None
        _, flags = split_flags(arm.flags)
        argv = [str(arm.bin_dir / BINARY), "-m", model, "--host", "127.0.0.1", "--port", str(port),
                "-np", str(w.concurrency), "-cram", "0", "--no-webui"]
        names = {f.split("=", 1)[0] for f in flags}
        if not names & {"-c", "--ctx-size"}:
            per_slot = w.n_depth + max(w.n_prompt, 1) + w.n_gen + 64
            argv += ["-c", str(w.concurrency * (-(-per_slot // 256) * 256))]
        return argv + flags

    def check_served(self, endpoint: str, models: Sequence[str]) -> None:
        check_served_model(endpoint, models)  # its /v1/models names the loaded model's size

    def run_trial(self, arm: ArmRuntime, model: str, workload: str, argv: Sequence[str], *,
                  timeout_s: float | None, probe: Probe | None, host_env: dict[str, Any]) -> EngineRun:
        w = parse(workload)
        reps, _ = split_flags(arm.flags)
        meta = model_meta(model, split_flags(arm.flags)[1])  # the model file's facts, before the clock
        t0, started = time.monotonic_ns(), time.time()
        status, message = "done", ""
        samples: list[SampleRow] = []
        windows: list[WindowRow] = []
        extra: dict[str, Any] = {}
        served = Served(arm, model, w, self.server_argv, "/health")
        env = dict(host_env, argv=list(served.argv), engine_env=dict(arm.env), engine_kind=self.kind)
        if served.attached:
            env["cpu_note"] = "attached server: no local process, so no CPU figures (GPU figures only)"
        with served:
            try:
                load_s = served.wait_ready(timeout_s or 600.0)
                extra = {"engine": self.kind, "load_s": round(load_s, 3), "server": served.describe(), **meta}
                with closing(Client(served.base, stall_s=min(STALL_S, timeout_s or STALL_S))) as client:
                    n_vocab = vocab_size(client)
                    samples, windows = run_requests(client, w, reps, n_vocab, served.measured_pid(), probe)
            except RequestFailed as exc:
                status, message = served.fault(exc)
            t1 = time.monotonic_ns()
            tail = served.tail(20)
        results = (result_of(w, samples, extra),) if status == "done" else ()
        out = TrialOutcome(status, None, message[:2000], tail, started, time.time(), t0, t1, env, results,
                           tuple(windows) if status == "done" else ())
        return EngineRun(out, served.measured_pid())


def vocab_size(client: Client) -> int:
    try:
        r = client.get("/v1/models")
        n = r.json()["data"][0]["meta"]["n_vocab"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        raise RequestFailed("garbage", "/v1/models gave no data[0].meta.n_vocab") from None
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise RequestFailed("garbage", f"/v1/models: n_vocab is {show(repr(n), 30)}")
    return n


ENGINE = LlamaServer()
