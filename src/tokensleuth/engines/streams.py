"""A timed request to a server: its streamed answer as the client saw it (:class:`Stream`), the
server-sent events it reads, one pooled HTTP client per trial, and every fault of a request as a
:class:`RequestFailed` with the trial status it means."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from tokensleuth.core.errors import show

STALL_S = 120.0  # a request with no byte for this long has stalled


class RequestFailed(Exception):
    """A request that did not give a sample: status and message for the trial."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class Stream:
    """One streamed request as the client saw it."""

    sent_ns: int
    chunks: list[tuple[int, int]] = field(default_factory=list)  # (arrival ns, tokens_predicted so far)
    final: dict[str, Any] = field(default_factory=dict)
    done_ns: int = 0

    @property
    def ttft_ns(self) -> int | None:
        return self.chunks[0][0] - self.sent_ns if self.chunks else None

    def itl_ms(self) -> list[float]:
        """Inter-token latencies: an interval spanning k tokens is k intervals of 1/k of it."""
        out: list[float] = []
        for (t0, n0), (t1, n1) in zip(self.chunks, self.chunks[1:], strict=False):
            k = max(1, n1 - n0)
            out += [(t1 - t0) / 1e6 / k] * k
        return out


def sse_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent event stream, until ``[DONE]`` or its end.

    Blank lines and ``:`` keep-alive comments are skipped; anything that is not a JSON
    object on a ``data:`` line, or an ``error`` object, is a RequestFailed.
    """
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith(":"):
            continue  # event separator, or the server's keep-alive comment
        if not line.startswith("data:"):
            raise RequestFailed("garbage", f"server streamed a line that is not SSE data: {show(line, 60)}")
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            raise RequestFailed("garbage", f"server streamed malformed JSON: {show(payload, 60)}") from None
        if not isinstance(obj, dict):
            raise RequestFailed("garbage", f"server streamed {show(payload, 40)}, not an object")
        if "error" in obj:
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            raise RequestFailed("failed", f"server reported an error mid-stream: {show(str(msg), 120)}")
        yield obj


def http_client(headers: Mapping[str, str], timeout: httpx.Timeout) -> httpx.Client:
    """One pooled HTTP client for a trial's requests. Made once, before any timed request:
    making one costs milliseconds (httpx builds its TLS context even for http://), which a
    client made per request put inside every time to first token."""
    return httpx.Client(timeout=timeout, headers=dict(headers),
                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))


def post_stream(http: httpx.Client, url: str, body: dict[str, Any],
                parse: Callable[[Iterable[str], Stream], None]) -> Stream:
    """POST ``body`` and read the streamed answer with ``parse``, timed from the send.

    The body is encoded before the clock starts, so a long prompt's JSON is not counted as
    the server's. HTTP errors, stalls (``timeout.read`` with no byte) and lost connections
    are the request's RequestFailed, with the trial status each one means.
    """
    content = json.dumps(body, separators=(",", ":")).encode()
    stall = http.timeout.read
    s = Stream(time.monotonic_ns())
    try:
        with http.stream("POST", url, content=content, headers={"Content-Type": "application/json"}) as r:
            if r.status_code >= 400:
                text = r.read().decode(errors="replace")
                path = "/" + url.split("/", 3)[-1]
                raise RequestFailed("failed", f"HTTP {r.status_code} from {path}: {show(text, 160)}")
            parse(r.iter_lines(), s)
    except httpx.TimeoutException:
        raise RequestFailed("timeout", f"request stalled: nothing for {stall:.0f} s") from None
    except httpx.HTTPError as exc:
        raise RequestFailed("crashed", f"connection lost mid-request ({type(exc).__name__})") from None
    return s
