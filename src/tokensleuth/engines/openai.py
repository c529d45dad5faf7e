"""Any OpenAI-compatible server, attached by URL (``--arm NAME=url:http://HOST:PORT``).

LM Studio, Lemonade, Ollama, vLLM or a llama-server someone else started: tokensleuth
does not start it, so the model load is never in a trial, and there is no local process
to measure CPU on (the report says so; GPU figures come from the host's monitors).

Requests go to ``/v1/completions`` (streamed, ``stream_options.include_usage``), with a
prompt of text whose token count is checked against the server's ``usage``: the text is
made of common words, its length calibrated once per trial by untimed probes, and
every timed request's own ``usage.prompt_tokens`` is what its sample counts (a request
more than 2% off the workload's count is refused). Generation asks for exactly the
workload's tokens (``max_tokens``, with ``ignore_eos``/``min_tokens`` for servers that
take them) and counts ``usage.completion_tokens``.

A server that reports llama-server's ``timings`` (llama-server does, on this endpoint
too) gives the rates its own clock measured; otherwise they come from the client:
prompt rate over the time to first token, decode rate over the first to the last
streamed chunk. Prompt caching: ``cache_prompt`` is sent off, every request's text
differs, and a cached count the server reports (``usage.prompt_tokens_details.cached_tokens``
or ``timings.cache_n``) is excluded from the prompt tokens. An API key is read from the
environment variable ``--api-key-env`` names at request time: never stored or printed.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterable, Sequence
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
    model_meta,
    result_of,
    sample_of,
    split_flags,
)
from tokensleuth.engines.streams import RequestFailed, Stream, http_client, post_stream, sse_events

STALL_S = 120.0
TOLERANCE = 0.02  # a prompt this far off the workload's token count is refused
_WORDS = ("the of and to in is was for on that with as by at from his her it an were are which this be or had not "
          "but their one all also its have after first new more who when two been they time other into only has "
          "most over would some she may three there while where during many these such both under then year city "
          "later before between river small house water light early village music world people called").split()


def words(n: int, *key: object) -> str:
    rng = random.Random(repr(key))
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, n)))


class OpenAIClient:
    def __init__(self, base: str, key: str | None, stall_s: float) -> None:
        self.base = base
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.timeout = httpx.Timeout(stall_s, connect=10.0)
        self.http = http_client(self.headers, self.timeout)

    def close(self) -> None:
        self.http.close()

    def model_id(self) -> str:
        try:
            r = self.http.get(self.base + "/v1/models", timeout=10.0)
            if r.status_code >= 400:
                raise RequestFailed("failed", f"HTTP {r.status_code} from /v1/models: {show(r.text, 120)}")
            return str(r.json()["data"][0]["id"])
        except httpx.HTTPError as exc:
            raise RequestFailed("failed", f"cannot reach {self.base} ({type(exc).__name__}) — is the server "
                                          "running?") from None
        except (ValueError, KeyError, IndexError, TypeError):
            raise RequestFailed("garbage", "/v1/models gave no data[0].id") from None

    def complete(self, model: str, prompt: str, max_tokens: int) -> Stream:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "min_tokens": max_tokens,
                "ignore_eos": True, "temperature": 0, "stream": True, "cache_prompt": False,
                "stream_options": {"include_usage": True}}
        return post_stream(self.http, self.base + "/v1/completions", body, parse_oai_sse)


def parse_oai_sse(lines: Iterable[str], stream: Stream) -> None:
    """An OpenAI completions event stream: a chunk per text delta, then usage, then [DONE]."""
    n = 0
    for obj in sse_events(lines):
        now = time.monotonic_ns()
        choices = obj.get("choices") or []
        if choices and isinstance(choices[0], dict) and choices[0].get("text"):
            n += 1
            stream.chunks.append((now, n))
        for k in ("usage", "timings"):
            if isinstance(obj.get(k), dict):
                stream.final[k] = obj[k]
                stream.done_ns = stream.done_ns or now
    if "usage" not in stream.final:
        raise RequestFailed("crashed" if not stream.chunks else "garbage",
                            "the stream ended without usage (the server must honour stream_options.include_usage)")
    stream.done_ns = stream.chunks[-1][0] if stream.chunks else stream.done_ns


def _count(obj: dict[str, Any], key: str) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**31:
        raise RequestFailed("garbage", f"usage.{key} is {show(repr(v), 30)}, not a count")
    return v


def timings_of(w: Workload) -> Any:
    """llama-server-shaped timings for a stream: the server's when it sent them, else the client's."""

    def of(s: Stream) -> dict[str, float]:
        usage = s.final["usage"]
        prompt, gen = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        t = s.final.get("timings")
        if isinstance(t, dict) and all(isinstance(t.get(k), int | float) for k in ("prompt_ms", "predicted_ms")):
            cached = int(t.get("cache_n") or cached)
            return {"prompt_n": float(t.get("prompt_n", prompt - cached)), "prompt_ms": float(t["prompt_ms"]),
                    "predicted_n": float(t.get("predicted_n", gen)), "predicted_ms": float(t["predicted_ms"]),
                    "cache_n": float(cached)}
        if not s.chunks:
            raise RequestFailed("garbage", "the server streamed no text: nothing to time")
        first, last = s.chunks[0][0], s.chunks[-1][0]
        # client clock: the prompt until the first token; decode from the first to the last
        # chunk (gen - 1 steps, as llama-server's predicted_ms)
        return {"prompt_n": float(prompt - int(cached)), "prompt_ms": (first - s.sent_ns) / 1e6,
                "predicted_n": float(gen), "predicted_ms": (last - first) / 1e6, "cache_n": float(cached)}

    return of


class OpenAICompatible(ServerArgv):
    kind = "openai"
    targets: tuple[str, ...] = ()
    attaches = True
    builds = False
    reps_per_process = False  # -r is requests per trial
    shares_process = False  # a server serves one build's settings
    load_log_flag: str | None = None
    settings: Settings | None = None
    default_workloads = ("pp512", "tg128")

    def check(self, arm: ArmRuntime, workloads: Sequence[str]) -> None:
        if not (arm.endpoint or "").startswith(("url:", "cmd:")):
            raise UserError(f"arm {arm.name}: kind openai measures a server at a url: or started by a cmd: "
                            "— give the arm such a source")
        for w in workloads:
            if parse(w).n_depth:
                raise UserError(f"arm {arm.name}: depth workloads ({show(w)}) need a server whose cache tokensleuth "
                                "can check — measure them with a llama-server arm")
        if arm.api_key_env and arm.api_key_env not in os.environ:
            raise UserError(f"--api-key-env {arm.api_key_env}: that variable is not set — export it first")

    def run_trial(self, arm: ArmRuntime, model: str, workload: str, argv: Sequence[str], *,
                  timeout_s: float | None, probe: Probe | None, host_env: dict[str, Any]) -> EngineRun:
        w = parse(workload)
        reps, _ = split_flags(arm.flags)
        key = os.environ.get(arm.api_key_env) if arm.api_key_env else None
        served = Served(arm, model, w, _no_binary, "/v1/models")
        env = dict(host_env, engine_kind=self.kind, endpoint=arm.endpoint, api_key_env=arm.api_key_env,
                   argv=list(served.argv))
        if served.attached:
            env["cpu_note"] = "attached server: no local process, so no CPU figures (GPU figures only)"
        extra: dict[str, Any] = {"engine": self.kind, "endpoint": arm.endpoint,
                                 **model_meta(model, split_flags(arm.flags)[1])}  # before the clock
        t0, started = time.monotonic_ns(), time.time()
        status, message = "done", ""
        samples: list[SampleRow] = []
        windows: list[WindowRow] = []
        with served:
            try:
                if not served.attached:
                    extra["load_s"] = round(served.wait_ready(timeout_s or 600.0), 3)
                with closing(OpenAIClient(served.base, key, min(STALL_S, timeout_s or STALL_S))) as client:
                    model_id = client.model_id()
                    extra["model_id"] = model_id
                    per_word = calibrate(client, model_id, w.n_prompt) if w.n_prompt else 1.0
                    extra["words_per_token"] = per_word
                    samples, windows = run_oai(client, model_id, w, reps, per_word, served.measured_pid(), probe)
            except RequestFailed as exc:
                status, message = served.fault(exc)
            t1 = time.monotonic_ns()
            tail = served.tail(20)
        results = (result_of(w, samples, extra),) if status == "done" else ()
        out = TrialOutcome(status, None, message[:2000], tail, started, time.time(), t0, t1, env, results,
                           tuple(windows) if status == "done" else ())
        return EngineRun(out, served.measured_pid())


def calibrate(client: OpenAIClient, model: str, target: int) -> float:
    """Words per token of this server's tokenizer on the word list (untimed probes)."""
    n_words = target
    for i in range(6):
        got = _count(client.complete(model, words(n_words, "calibrate", i), 1).final["usage"], "prompt_tokens")
        if got <= 0:
            raise RequestFailed("garbage", "usage.prompt_tokens is 0 for a non-empty prompt")
        if abs(got - target) <= max(1, target * TOLERANCE / 4):
            break
        n_words = max(1, round(n_words * target / got))
    return n_words / target


def _no_binary(arm: ArmRuntime, model: str, w: Workload, port: int) -> list[str]:
    raise UserError(f"arm {arm.name}: kind openai needs a url: or cmd: source (it starts no built binary)")


def run_oai(client: OpenAIClient, model: str, w: Workload, reps: int, per_word: float, pid: int | None = None,
            probe: Probe | None = None) -> tuple[list[SampleRow], list[WindowRow]]:
    """``reps`` timed requests of workload ``w`` (after an untimed warm-up) through an
    OpenAI-compatible client: each one a sample (prompt and generation timed from the stream, its
    token counts checked against the server's usage) with the window the monitor reads."""
    n_predict = w.n_gen or 1

    def timed(rep: int, i: int) -> Stream:
        prompt = words(round(w.n_prompt * per_word), "prompt", rep, i) if w.n_prompt else "the"
        s = client.complete(model, prompt, n_predict)
        usage = s.final["usage"]
        if w.n_prompt and abs(_count(usage, "prompt_tokens") - w.n_prompt) > max(1, w.n_prompt * TOLERANCE):
            raise RequestFailed("failed", f"the prompt came to {usage['prompt_tokens']} tokens, not {w.n_prompt} "
                                          "(±2%): the server's tokenizer changed between requests?")
        if w.n_gen and _count(usage, "completion_tokens") != w.n_gen:
            raise RequestFailed("failed", f"the server generated {usage['completion_tokens']} tokens, not {w.n_gen}"
                                          " — it stopped early (it does not honour ignore_eos/min_tokens)")
        return s

    timed(-1, 0)  # warm-up: not timed, not stored
    samples, windows = [], []
    for rep in range(reps):
        got: list[Stream | RequestFailed] = [RequestFailed("failed", "not run")] * w.concurrency

        def run(i: int, rep: int = rep) -> None:
            try:
                got[i] = timed(rep, i)
            except RequestFailed as exc:
                got[i] = exc

        edge0 = probe(pid) if probe is not None and pid is not None else None
        t_start = time.monotonic_ns()
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
        # the counts were checked above (a text prompt is exact to ±2%): the server's stand
        s, win = sample_of(w, rep, streams, (edge0, edge1), t_start, t_end, timings_of(w), exact=False)
        samples.append(s)
        windows.append(win)
    return samples, windows


ENGINE = OpenAICompatible()
