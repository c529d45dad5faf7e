#!/usr/bin/env python3
"""Client headroom: how fast tokensleuth's server client parses a token stream, on one core.

A local SSE source (a separate process) answers every POST /completion with a
precomputed llama-server stream of N token events and the final event, written in one
go, so the source costs next to nothing and the figure is the client's: the request,
httpx's line reading and tokensleuth's SSE parsing and per-token stamping
(tokensleuth.engines.llamaserver.Client.complete). Printed: tokens parsed per second
(wall) and the client's CPU per token (this process's CPU time over the request,
pinned to one core). The client must stay far above any real decode rate so it is
never the bottleneck: compare with the fastest decode rate seen on the H200.

    .venv/bin/python bench/client_headroom.py [--tokens 200000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from tokensleuth.engines.llamaserver import Client, request_body  # noqa: E402
from tokensleuth.engines.serving import free_port  # noqa: E402

SOURCE = r'''
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
events = [b'data: {"index":0,"content":" tok","tokens":[%d],"stop":false,"id_slot":-1,"tokens_predicted":%d,"tokens_evaluated":1}\n\n' % (1000 + i % 5000, i + 1) for i in range(n)]
events.append(b'data: {"content":"","tokens":[],"stop":true,"tokens_predicted":%d,"timings":{"prompt_n":1,"prompt_ms":1.0,"predicted_n":%d,"predicted_ms":1000.0,"cache_n":0}}\n\n' % (n, n))
body = b"".join(events)
head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", port)); s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += c.recv(65536)
    h, _, rest = buf.partition(b"\r\n\r\n")
    length = int([l.split(b":")[1] for l in h.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
    while len(rest) < length:
        rest += c.recv(65536)
    c.sendall(head + body)
    c.close()
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # the client on one core
    port = free_port()
    src = subprocess.Popen([sys.executable, "-c", SOURCE, str(port), str(args.tokens)], stdout=subprocess.PIPE)
    try:
        assert src.stdout is not None and src.stdout.readline().strip() == b"ready"
        client = Client(f"http://127.0.0.1:{port}")
        rates, cpu_us = [], []
        for _ in range(args.runs):
            c0, t0 = time.process_time(), time.perf_counter()
            s = client.complete(request_body([1], args.tokens, False))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert s.chunks[-1][1] == args.tokens and s.final["stop"], "stream not fully parsed"
            assert len(s.itl_ms()) == args.tokens - 1
            rates.append(args.tokens / wall)
            cpu_us.append(cpu / args.tokens * 1e6)
        print(f"machine: {os.cpu_count()} cores (client pinned to one); {args.tokens} tokens per stream, "
              f"{args.runs} streams")
        print(f"client parse rate: median {statistics.median(rates):,.0f} tokens/s "
              f"(min {min(rates):,.0f}, max {max(rates):,.0f})")
        print(f"client CPU per streamed token: median {statistics.median(cpu_us):.2f} µs "
              f"(min {min(cpu_us):.2f}, max {max(cpu_us):.2f})")
        print(json.dumps({"tokens_per_s": rates, "cpu_us_per_token": cpu_us}))
    finally:
        src.kill()
        src.wait()


if __name__ == "__main__":
    main()
