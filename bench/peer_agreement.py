#!/usr/bin/env python3
"""Agreement with a peer: tokensleuth's decode t/s and time to first token against
llama-benchy's, on the same llama-server process and model, in interleaved rounds.

One llama-server (the default engine's, ``-t 1 -np 1``, tiny synthetic MoE) is started
and both tools attach to it over loopback, taking turns (the order alternates by round):

- tokensleuth: ``bench --engine url:… --kind llama-server -w pp512 -w tg128 -- -r R``
  (token-exact ``/completion``; tg128 t/s = decode steps over the server's predicted_ms,
  pp512 TTFT = first byte sent to first token received);
- llama-benchy: ``--pp 512 --tg 128 --runs R --exact-tg --no-cache`` over
  ``/v1/chat/completions`` (its tg t/s = tokens after the first over the client's first-to-
  last token time; its e2e_ttft = request sent to first token).

llama-benchy needs a HF tokenizer and a book. Both are made here with no network: the
tokenizer.json is built with the ``tokenizers`` package from the model's own GGUF vocab
(qwen2 BPE: its merges and its pre-tokenizer regex), and checked against the server's
``/tokenize`` on the corpus; the book is a text file served on loopback.

Printed: per round each tool's tg128 t/s and pp512 TTFT, tokensleuth's client-clock decode
rate, and the server's own decode and prompt rates over each tool's requests (from
llama-server's ``--metrics`` counters, read before and after each tool's turn), then per
metric the ratio tokensleuth / llama-benchy (geometric mean over rounds, 95% t interval).

    python3 -m venv .venv-peer && .venv-peer/bin/pip install -r bench/requirements-peer.txt
    .venv/bin/python bench/peer_agreement.py --rounds 6 --reps 5
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import math
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from _common import tiny_model, tokensleuth_cmd
from scipy import stats

from tokensleuth.engines.serving import free_port
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache

ROOT = Path(__file__).resolve().parent.parent

MAKE_TOKENIZER = r'''
import sys, gguf
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, Regex
r = gguf.GGUFReader(sys.argv[1])
def strings(key):
    f = r.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
assert r.fields["tokenizer.ggml.pre"].contents() == "qwen2", "this builder knows the qwen2 vocab only"
vocab = {t: i for i, t in enumerate(strings("tokenizer.ggml.tokens"))}
merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
tk.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(split), behavior="isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tk.decoder = decoders.ByteLevel()
tk.save(sys.argv[2])
text = open(sys.argv[3], encoding="utf-8").read()
print(len(tk.encode(text, add_special_tokens=False).ids))
'''


def corpus(dest: Path) -> Path:
    """A real English text of a few thousand lines, present on any Debian machine."""
    src = next((p for p in (Path("/usr/share/common-licenses/GPL-3"), Path("/usr/share/common-licenses/GPL-2"))
                if p.exists()), None)
    text = src.read_text() if src else "".join(__import__("this").s for _ in range(40))
    dest.write_text(text * 3)
    return dest


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


def serve_dir(d: Path) -> tuple[http.server.ThreadingHTTPServer, int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(d)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, int(httpd.server_address[1])


def wait_health(url: str, proc: subprocess.Popen[bytes], limit: float = 120) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if proc.poll() is not None:
            raise SystemExit("llama-server exited before it was healthy")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("llama-server never became healthy")


def run_tokensleuth(url: str, model: Path, reps: int, out: Path, db: Path) -> dict[str, float]:
    cmd = [*tokensleuth_cmd(), "bench", "--engine", f"url:{url}", "--kind", "llama-server",
           "-m", str(model), "-w", "pp512", "-w", "tg128", "--json", str(out), "--db", str(db), "--", "-r", str(reps)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    res = json.loads(out.read_text())
    got: dict[str, float] = {}
    for r in res["results"]:
        if r["workload"] == "tg128":
            got["tg_tps"] = r["tokens_per_s"]["mean"]
            got["tg_client_tps"] = r["latency"]["client_tg_tokens_per_s"]
        if r["workload"] == "pp512":
            got["ttft_ms"] = r["latency"]["ttft_ms"]["p50"]
    return got


def run_benchy(peer: str, url: str, model: Path, tok: Path, book: str, reps: int, out: Path) -> dict[str, float]:
    cmd = [peer, "-m", "llama_benchy", "--base-url", f"{url}/v1", "--model", model.name, "--tokenizer", str(tok),
           "--pp", "512", "--tg", "128", "--runs", str(reps), "--exact-tg", "--no-cache", "--skip-coherence",
           "--book-url", book, "--format", "json", "--save-result", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if p.returncode != 0:
        raise SystemExit(f"llama-benchy failed: {p.stdout[-2000:]}{p.stderr[-2000:]}")
    res = json.loads(out.read_text())
    got: dict[str, float] = {}
    for row in res["benchmarks"]:
        if row.get("tg_throughput"):
            got["tg_tps"] = row["tg_throughput"]["mean"]
        if row.get("e2e_ttft"):
            got["ttft_ms"] = row["e2e_ttft"]["median" if "median" in row["e2e_ttft"] else "mean"]
    return got


def server_counters(url: str) -> dict[str, float]:
    """llama-server's own running totals (--metrics): prompt and decode tokens and seconds."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("llamacpp:") and " " in line:
            name, _, value = line.partition(" ")
            out[name.removeprefix("llamacpp:")] = float(value)
    return out


def server_rates(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The server's own prompt and decode rates over the requests between two snapshots."""
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    return {"server_pp_tps": d["prompt_tokens_total"] / d["prompt_seconds_total"],
            "server_tg_tps": d["tokens_predicted_total"] / d["tokens_predicted_seconds_total"]}


def ratio_ci(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    logs = [math.log(x / y) for x, y in zip(xs, ys, strict=True)]
    m = statistics.fmean(logs)
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(m), math.exp(m - half), math.exp(m + half)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--peer-python", default=str(ROOT / ".venv-peer" / "bin" / "python"))
    a = ap.parse_args()
    engine = BuildCache().get(DEFAULT_ENGINE, [], ("llama-bench", "llama-quantize", "llama-server"))
    model = tiny_model(engine, "qwen3moe")
    work = Path(tempfile.mkdtemp(prefix="peer-"))
    book_dir = work / "www"
    book_dir.mkdir()
    text = corpus(book_dir / "book.txt")
    httpd, book_port = serve_dir(book_dir)
    tok = work / "tokenizer.json"
    n_local = int(subprocess.run([a.peer_python, "-c", MAKE_TOKENIZER, str(model), str(tok), str(text)],
                                 check=True, capture_output=True, text=True).stdout.split()[-1])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([str(Path(engine.bin_dir) / "llama-server"), "-m", str(model), "--port", str(port),
                               "-t", "1", "-np", "1", "-c", "4096", "--metrics"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_health(url, server)
        n_server = len(httpx.post(url + "/tokenize", json={"content": text.read_text()}, timeout=60).json()["tokens"])
        print(f"tokenizer.json from the GGUF vocab: {n_local} tokens on the corpus, the server's /tokenize "
              f"{n_server} ({100 * (n_local - n_server) / n_server:+.2f}%)")
        rows: list[tuple[dict[str, float], dict[str, float]]] = []
        db = work / "db.sqlite"
        book = f"http://127.0.0.1:{book_port}/book.txt"
        print(f"{'round':>5} {'first':>11} {'ts tg t/s':>10} {'peer tg t/s':>11} {'ts TTFT ms':>10} {'peer TTFT ms':>12} "
              f"{'ts client tg':>13} {'srv tg (ts)':>12} {'srv tg (peer)':>14} {'srv pp (ts)':>12} {'srv pp (peer)':>14}")
        for i in range(a.rounds):
            order = ["tokensleuth", "benchy"] if i % 2 == 0 else ["benchy", "tokensleuth"]
            got: dict[str, dict[str, Any]] = {}
            for who in order:
                before = server_counters(url)
                if who == "tokensleuth":
                    got[who] = run_tokensleuth(url, model, a.reps, work / f"ts{i}.json", db)
                else:
                    got[who] = run_benchy(a.peer_python, url, model, tok, book, a.reps, work / f"peer{i}.json")
                got[who].update(server_rates(before, server_counters(url)))
            ts, pe = got["tokensleuth"], got["benchy"]
            rows.append((ts, pe))
            print(f"{i + 1:>5} {order[0]:>11} {ts['tg_tps']:>10.1f} {pe['tg_tps']:>11.1f} "
                  f"{ts['ttft_ms']:>10.1f} {pe['ttft_ms']:>12.1f} {ts['tg_client_tps']:>13.1f} "
                  f"{ts['server_tg_tps']:>12.1f} {pe['server_tg_tps']:>14.1f} {ts['server_pp_tps']:>12.0f} "
                  f"{pe['server_pp_tps']:>14.0f}", flush=True)
        for key, label in (("tg_tps", "tg128 decode t/s"), ("ttft_ms", "pp512 time to first token"),
                           ("server_tg_tps", "server's own decode rate during each tool's requests"),
                           ("server_pp_tps", "server's own prompt rate during each tool's requests")):
            r, lo, hi = ratio_ci([t[key] for t, _ in rows], [p[key] for _, p in rows])
            print(f"{label}: tokensleuth / llama-benchy = {r:.4f} [{lo:.4f}, {hi:.4f}] "
                  f"({100 * (r - 1):+.2f}%), {a.rounds} rounds")
    finally:
        server.terminate()
        server.wait(10)
        httpd.shutdown()


if __name__ == "__main__":
    main()
