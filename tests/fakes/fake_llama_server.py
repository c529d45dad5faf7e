#!/usr/bin/env python3
"""A fake llama-server for faults a real one cannot be made to show.

Takes llama-server's --port; the fault comes from FAKE_SERVER_MODE:
never (never healthy), exit (exits at start), http500, garbage (malformed SSE),
die (SIGSEGV after the first streamed token), stall (stops streaming), short (a
stream with no final event). Anything else: a well-behaved server whose timings
say 10 ms per token.
"""

import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = os.environ.get("FAKE_SERVER_MODE", "ok")
PORT = int(sys.argv[sys.argv.index("--port") + 1])
print(f"fake llama-server mode {MODE} pid {os.getpid()}", flush=True)
if MODE == "exit":
    print("load_model: failed to load model", flush=True)
    sys.exit(1)


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: object) -> None:
        pass

    def send(self, code: int, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send(503 if MODE == "never" else 200, {"status": "ok"})
        elif self.path == "/v1/models":
            self.send(200, {"data": [{"id": "fake", "meta": {"n_vocab": 1000}}]})
        else:
            self.send(404, {})

    def start_stream(self) -> bool:
        """The headers of a chunked event stream (False: mode http500 answered an error instead)."""
        if MODE == "http500":
            self.send(500, {"error": {"code": 500, "message": "fake internal error"}})
            return False
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        return True

    def event(self, obj: object) -> None:
        data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = os.environ.get("FAKE_SERVER_KEY")
        if key and self.headers.get("Authorization") != f"Bearer {key}":
            self.send(401, {"error": {"code": 401, "message": "Invalid API Key"}})
            return
        if self.path == "/v1/completions":
            self.openai(req)
            return
        if not self.start_stream():
            return
        n = max(1, int(req["n_predict"]))
        for i in range(n):
            time.sleep(0.01)
            if MODE == "garbage" and i == 1:
                self.event(b"{not json")
                break
            self.event({"content": "x", "tokens": [5], "stop": False, "tokens_predicted": i + 1})
            if MODE == "die":
                os.kill(os.getpid(), signal.SIGSEGV)
            if MODE == "stall":
                time.sleep(3600)
        if MODE != "short":
            self.event({"content": "", "stop": True, "tokens_predicted": n,
                        "timings": {"prompt_n": len(req["prompt"]), "prompt_ms": 5.0, "cache_n": 0,
                                    "predicted_n": n, "predicted_ms": 10.0 * n}})
        self.wfile.write(b"0\r\n\r\n")


    def openai(self, req: dict) -> None:  # type: ignore[type-arg]
        """/v1/completions: one word is one token; no llama-server timings (client-timed)."""
        if not self.start_stream():
            return
        n = int(req["max_tokens"])
        time.sleep(0.002 * len(req["prompt"].split()))  # "prompt processing"
        for _ in range(n):
            self.event({"choices": [{"text": "x", "index": 0, "finish_reason": None}]})
            time.sleep(0.01)
        self.event({"choices": [{"text": "", "index": 0, "finish_reason": "length"}]})
        if MODE != "nousage":
            self.event({"choices": [], "usage": {"prompt_tokens": len(req["prompt"].split()),
                                                 "completion_tokens": n}})
        self.event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")


if MODE == "attach":  # started by a test, not by tokensleuth: serve until killed
    pass
ThreadingHTTPServer(("127.0.0.1", PORT), H).serve_forever()
