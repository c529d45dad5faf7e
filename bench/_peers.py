"""The peers of tokensleuth's server figures, run as their users run them: NVIDIA's AIPerf and
llama-benchy, from the virtual environment ``scripts/setup.sh`` makes for them (their pins,
rich 14 and psutil 7.0, conflict with tokensleuth's, so they cannot share its environment).

Both need a Hugging Face tokenizer, and nothing may be fetched: ``make_tokenizer`` builds a
``tokenizer.json`` from the model's own GGUF vocabulary (qwen2 BPE: its merges and its pre-
tokenizer's regex) with the ``tokenizers`` package, in the peers' environment. llama-benchy also
reads a book over HTTP: ``serve_book`` serves a text every Debian machine has, on loopback.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Literal

import httpx

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "bench" / "requirements-peer.txt"
BAND = 0.05  # a peer's figure agrees with tokensleuth's when the ratio's whole interval is within this

Agreement = Literal["agrees (within ±5%)", "differs", "not resolved to ±5%"]


def agreement(lo: float, hi: float) -> Agreement:
    """What a ratio's 95% interval [lo, hi] (peer / tokensleuth) says at ±5% (``BAND``).

    Agreement is shown only by an interval that lies wholly inside [0.95, 1.05]: the interval-
    inclusion form of Schuirmann's two one-sided tests (Schuirmann 1987; a 95% interval makes
    each one-sided test at 2.5%). A difference only by one wholly outside the band, which then
    excludes 1. An interval that reaches over an edge of the band, however near 1 its centre
    is, decides neither: "not resolved", never "agrees".
    """
    if not 0 < lo <= hi:
        raise ValueError(f"not a ratio interval: [{lo}, {hi}]")
    if 1 - BAND <= lo and hi <= 1 + BAND:
        return "agrees (within ±5%)"
    if hi < 1 - BAND or lo > 1 + BAND:
        return "differs"
    return "not resolved to ±5%"



def peer_venv() -> Path:
    """Where setup.sh installs AIPerf and llama-benchy (TOKENSLEUTH_PEER_VENV overrides)."""
    if os.environ.get("TOKENSLEUTH_PEER_VENV"):
        return Path(os.environ["TOKENSLEUTH_PEER_VENV"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tokensleuth" / "peer-venv"


def peer_ready() -> str | None:
    """None when the peers' environment is installed as bench/requirements-peer.txt pins it,
    else what is missing (for a skip, or a failure under CI=true)."""
    v = peer_venv()
    if not (v / "bin" / "aiperf").exists():
        return f"AIPerf is not installed in {v} (bash scripts/setup.sh installs bench/requirements-peer.txt)"
    stamp = v / ".installed"
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text().strip() != want:
        return f"{v} does not hold bench/requirements-peer.txt as pinned now (bash scripts/setup.sh)"
    return None


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


def make_tokenizer(model: Path, folder: Path, text: Path) -> tuple[Path, int]:
    """A tokenizer folder (tokenizer.json + config) from the GGUF's vocabulary, and its token
    count of ``text`` (to hold against the server's own /tokenize)."""
    folder.mkdir(parents=True, exist_ok=True)
    got = subprocess.run([str(peer_venv() / "bin" / "python"), "-c", MAKE_TOKENIZER, str(model),
                          str(folder / "tokenizer.json"), str(text)], check=True, capture_output=True, text=True)
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return folder, int(got.stdout.split()[-1])


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


def serve_book(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """llama-benchy's book (``book.txt``), served from ``folder`` on loopback: (server, its URL)."""
    corpus(folder / "book.txt")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/book.txt"


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


def aiperf(url: str, tokenizer: Path, out: Path, isl: int, osl: int, concurrency: int, requests: int,
           extra: tuple[str, ...] = ()) -> Path:
    """One ``aiperf profile`` run, as its docs show it for an OpenAI-compatible server: the
    completions endpoint, streamed, fixed lengths, the server's own token counts, one warm-up
    request per stream, and no prompt cache (llama-server's ``cache_prompt``). Returns its
    artifact folder (``tokensleuth import`` reads it)."""
    cmd = [str(peer_venv() / "bin" / "aiperf"), "profile", "--url", url, "--endpoint-type", "completions",
           "--streaming", "--model-names", "served", "--tokenizer", str(tokenizer),
           "--synthetic-input-tokens-mean", str(isl), "--synthetic-input-tokens-stddev", "0",
           "--output-tokens-mean", str(osl), "--output-tokens-stddev", "0", "--use-server-token-count",
           "--extra-inputs", "ignore_eos:true", "--extra-inputs", "cache_prompt:false",
           *(a for e in extra for a in ("--extra-inputs", e)),
           "--concurrency", str(concurrency), "--request-count", str(requests),
           "--warmup-request-count", str(concurrency), "--artifact-dir", str(out), "--ui-type", "none"]
    # its dataset's memory-mapped files (aiperf_mmap_*) go to TMPDIR and outlive the run: a private one
    with tempfile.TemporaryDirectory(prefix="tokensleuth-aiperf-") as tmp:
        p = subprocess.run(cmd, capture_output=True, text=True,
                           env={**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1", "TMPDIR": tmp})
    if p.returncode != 0 or not (out / "profile_export_aiperf.json").exists():
        raise SystemExit(f"aiperf failed ({p.returncode}): {p.stdout[-1500:]}{p.stderr[-1500:]}")
    return out


def benchy(url: str, tokenizer: Path, book: str, out: Path, pp: int, tg: int, concurrency: tuple[int, ...],
           runs: int, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """One llama-benchy run (its /v1/chat/completions, exact output length, no prompt cache):
    its --format json result."""
    cmd = [str(peer_venv() / "bin" / "python"), "-m", "llama_benchy", "--base-url", f"{url}/v1", "--model", "served",
           "--tokenizer", str(tokenizer), "--pp", str(pp), "--tg", str(tg), "--runs", str(runs), "--exact-tg",
           "--no-cache", "--skip-coherence", "--book-url", book, "--concurrency", *map(str, concurrency),
           "--format", "json", "--save-result", str(out), *(a for e in extra for a in ("--extra-body", e))]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if p.returncode != 0 or not out.exists():
        raise SystemExit(f"llama-benchy failed ({p.returncode}): {p.stdout[-1500:]}{p.stderr[-1500:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


BENCHY_REQUESTS = r'''
# llama-benchy 0.4's own prompt generator, client and results code, one stream, with its content
# chunks kept: what its tg_req_throughput is computed from, request by request
import asyncio, json, sys
import aiohttp
from llama_benchy.client import LLMClient
from llama_benchy.corpus import TokenizedCorpus
from llama_benchy.prompts import PromptGenerator
from llama_benchy.results import BenchmarkResults
base, tok, book, pp, tg, n, out = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7]), sys.argv[7]
finalize = LLMClient._finalize_stream_tokens
def keep(self, result, chunks, usage, tokenizer=None):
    result.kept = {"chunks": [(c["timestamp"], len(c["text"])) for c in chunks], "usage": usage}
    return finalize(self, result, chunks, usage, tokenizer)
LLMClient._finalize_stream_tokens = keep
client = LLMClient(base, "EMPTY", "served", {"temperature": 0}, exact_tg=True)
gen = PromptGenerator(TokenizedCorpus(book, tok, "served"))
async def main():
    # a connection per request: on a kept-alive one, llama-server at times closed it under the next
    # request ("Server disconnected"); the connection is made before the first chunk, outside the
    # decode time measured here
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600),
                                     connector=aiohttp.TCPConnector(force_close=True)) as s:
        got = []
        for i in range(n + 1):  # the first is its warm-up run
            _, prompt = gen.generate(pp, 0, True)
            got.append(await client.run_generation(s, "", prompt, tg, True, gen.tokenizer))
        return got[1:]
results = asyncio.run(main())
with open(out, "w") as f:
    for r in results:
        kept = getattr(r, "kept", {"chunks": [], "usage": None})
        rate = None
        if not r.error:
            b = BenchmarkResults()
            b.add("served", pp, tg, 0, 1, [[r]], 0.0, pp)
            rate = b.runs[0].tg_req_throughput.mean
        f.write(json.dumps({"error": r.error, "start": r.start_ts, "first": r.first_token_ts, "end": r.end_ts,
                            "usage": kept["usage"], "chunks": kept["chunks"], "tg_req_throughput": rate}) + "\n")
'''


def benchy_requests(url: str, tokenizer: Path, book: str, out: Path, pp: int, tg: int, n: int) -> list[dict[str, Any]]:
    """``n`` one-stream requests made and timed by llama-benchy's own code (after its warm-up
    run), each with its content chunks' arrival times and text lengths, its usage count and the
    tg_req_throughput llama-benchy's results code gives it."""
    p = subprocess.run([str(peer_venv() / "bin" / "python"), "-c", BENCHY_REQUESTS, f"{url}/v1", str(tokenizer), book,
                        str(pp), str(tg), str(n), str(out)], capture_output=True, text=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if p.returncode != 0:
        raise SystemExit(f"llama-benchy's requests failed ({p.returncode}): {p.stdout[-1500:]}{p.stderr[-1500:]}")
    return [json.loads(line) for line in out.read_text().splitlines()]
