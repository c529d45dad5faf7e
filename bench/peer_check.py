#!/usr/bin/env python3
"""Server figures against the tools people trust: tokensleuth, NVIDIA's AIPerf and llama-benchy
on one llama-server, back to back, in interleaved rounds (the order rotates each round).

Matched workloads: a 512-token prompt and 128 generated tokens per request (``pp512+tg128`` in
tokensleuth's names), at concurrency 1 and 4 (``--concurrency``); greedy sampling, no prompt cache,
exact output length for every tool. Per round and tool:

- tokensleuth: ``bench --engine url:… --kind llama-server -w pp512+tg128 -w pp512+tg128xc4``;
- AIPerf: ``aiperf profile --endpoint-type completions --streaming --use-server-token-count``
  with ``--extra-inputs ignore_eos:true cache_prompt:false temperature:0``, read back through
  ``tokensleuth import`` (engines/peers.py);
- llama-benchy: ``--pp 512 --tg 128 --exact-tg --no-cache --extra-body temperature=0``.

Printed, per figure: each tool's median over the rounds, then the ratio of each peer to
tokensleuth (geometric mean over rounds, 95% t interval) with what that interval says at ±5%
(``_peers.agreement``): "agrees (within ±5%)" only where all of it lies in [0.95, 1.05],
"differs" where all of it lies outside, else "not resolved to ±5%"; and the definition each
tool uses. Where the
definitions differ, both are measured on the same requests:

- ITL percentiles: tokensleuth's and AIPerf's ``inter_chunk_latency`` are over every interval
  between tokens; AIPerf's ``inter_token_latency`` is over one mean per request, so its p99 is
  the p99 of request means (a smaller tail);
- decode rate at concurrency 1: tokensleuth's client rate (tokens after the first over the first-
  to-last token time) against AIPerf's 1 / per-request ITL and llama-benchy's tg_req_throughput;
- sampling: tokensleuth always asks for greedy decoding; both peers sample with the server's
  defaults unless told otherwise. ``--tools aiperf,aiperf-default`` runs one peer both ways in
  the same rounds (``--sampling default`` runs every peer that way), and the server's own decode
  rate (``--metrics``) over each tool's turn shows what the sampler costs;
- concurrency: tokensleuth's ``xc4`` sends 4 requests at once and waits for all (a burst);
  AIPerf keeps 4 in flight all along; llama-benchy sends 4 at once per run, like tokensleuth.

    bash scripts/setup.sh    # the peers' environment (bench/requirements-peer.txt)
    .venv/bin/python bench/peer_check.py --rounds 4 --reps 5 [--model M.gguf] [-- -ngl 99]
    .venv/bin/python bench/peer_check.py --concurrency 1 --rounds 12 --reps 8   # one stream, -np 1

Resumable: each round's figures are appended to ``--out`` (JSON lines) as soon as they exist,
and a rerun with the same ``--out`` starts at the next round.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _common import tiny_model, tokensleuth_cmd
from _peers import agreement, aiperf, benchy, make_tokenizer, serve_book, wait_health
from scipy import stats

from tokensleuth.commands.common import targets_for
from tokensleuth.engines.serving import free_port
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache

PP, TG = 512, 128
# the tools a round can run; "-default": that peer with the server's default sampling (the others
# ask for greedy decoding, as tokensleuth always does)
TOOLS = ("tokensleuth", "aiperf", "llama-benchy", "aiperf-default", "llama-benchy-default")


def server_counters(url: str) -> dict[str, float]:
    """llama-server's own running totals (--metrics): prompt and decode tokens and seconds."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("llamacpp:") and " " in line:
            name, _, value = line.partition(" ")
            out[name.removeprefix("llamacpp:")] = float(value)
    return out


def server_decode(before: dict[str, float], after: dict[str, float]) -> float:
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    return d["tokens_predicted_total"] / d["tokens_predicted_seconds_total"]


def run_tokensleuth(url: str, model: Path, reps: int, concs: list[int], work: Path) -> dict[str, float]:
    out, db = work / "ts.json", work / "ts.db"
    ws = [a for c in concs for a in ("-w", f"pp{PP}+tg{TG}" + (f"xc{c}" if c > 1 else ""))]
    subprocess.run([*tokensleuth_cmd(), "bench", "--engine", f"url:{url}", "--kind", "llama-server", "-m", str(model),
                    *ws, "--json", str(out), "--db", str(db), "--", "-r", str(reps)], check=True, capture_output=True)
    got: dict[str, float] = {}
    res = json.loads(out.read_text())
    for r in res["results"]:
        c = int(r["workload"].split("xc")[1]) if "xc" in r["workload"] else 1
        lat = r["latency"]
        got[f"ttft_p50@{c}"] = lat["ttft_ms"]["p50"]
        for p in ("p50", "p90", "p99"):
            got[f"itl_{p}@{c}"] = lat["itl_ms"][p]
        if c == 1:
            got["decode_tps@1"] = lat["client_tg_tokens_per_s"]
        else:  # every token over the burst's wall clock: the output share of it
            got[f"output_tps@{c}"] = r["tokens_per_s"]["mean"] * TG / (PP + TG)
            got[f"output_tps_after_first@{c}"] = after_first(db, res["study"], r["workload"], c)
    return got


def after_first(db: Path, study: str, workload: str, c: int) -> float:
    """llama-benchy's definition of a burst's rate on tokensleuth's own bursts: every stream's
    tokens after its first, over the time from the first token of any stream to the burst's end
    (the prefill before the first token left out), mean over the bursts."""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT s.duration_ns, s.metrics_json FROM samples s JOIN results r ON r.id=s.result_id"
                       " JOIN trials t ON t.id=r.trial_id WHERE t.study_id=? AND r.test=?", (study, workload)).fetchall()
    con.close()
    rates = []
    for duration_ns, metrics in rows:
        first = min(json.loads(metrics)["ttft_ms_all"])
        rates.append(c * (TG - 1) / (duration_ns / 1e9 - first / 1e3))
    return statistics.fmean(rates)


def run_aiperf(url: str, tok: Path, reps: int, concs: list[int], work: Path, extra: tuple[str, ...]) -> dict[str, float]:
    got: dict[str, float] = {}
    for c in concs:
        art = aiperf(url, tok, work / f"aiperf{c}", PP, TG, c, reps * c, extra)
        s = json.loads((art / "profile_export_aiperf.json").read_text())
        got[f"ttft_p50@{c}"] = s["time_to_first_token"]["p50"]
        for p in ("p50", "p90", "p99"):
            got[f"itl_{p}@{c}"] = s["inter_chunk_latency"][p]
            got[f"itl_request_mean_{p}@{c}"] = s["inter_token_latency"][p]
        if c == 1:
            got["decode_tps@1"] = s["output_token_throughput_per_user"]["avg"]
        else:
            got[f"output_tps@{c}"] = s["output_token_throughput"]["avg"]
    return got


def run_benchy(url: str, tok: Path, book: str, reps: int, concs: list[int], work: Path,
               extra: tuple[str, ...]) -> dict[str, float]:
    res = benchy(url, tok, book, work / "benchy.json", PP, TG, tuple(concs), reps, extra)
    got: dict[str, float] = {}
    for b in res["benchmarks"]:
        c = int(b["concurrency"])
        got[f"ttft_p50@{c}"] = statistics.median(b["e2e_ttft"]["values"])
        if c == 1:
            got["decode_tps@1"] = b["tg_req_throughput"]["mean"]
        else:  # its definition: tokens after each stream's first over first-to-last token time
            got[f"output_tps_after_first@{c}"] = b["tg_throughput"]["mean"]
    return got


def ratio_interval(xs: list[float], ys: list[float]) -> tuple[float, float, float] | None:
    """(geometric mean of x / y over the rounds, its 95% t interval), None under 2 rounds."""
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if x and y]
    if len(pairs) < 2:
        return None
    logs = [math.log(x / y) for x, y in pairs]
    m = statistics.fmean(logs)
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(m), math.exp(m - half), math.exp(m + half)


def ratio_cell(xs: list[float], ys: list[float]) -> str:
    """The ratio, its interval and what the interval says at ±5% (_peers.agreement)."""
    got = ratio_interval(xs, ys)
    if got is None:
        return "—"
    m, lo, hi = got
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}] {agreement(lo, hi)}"


DEFINED = {
    "ttft_p50": "request sent to first token, client clock, median (all three)",
    "itl_p50": "every interval between tokens (ts: chunks split per token; AIPerf inter_chunk_latency)",
    "itl_request_mean_p50": "AIPerf inter_token_latency: one mean per request, (latency - TTFT) / (n - 1)",
    "decode_tps": "ts: tokens after the first / first-to-last token; AIPerf: 1 / request ITL; "
                  "llama-benchy: tg_req_throughput",
    "output_tps": "output tokens / wall clock: ts a burst of C, AIPerf C in flight all along",
    "output_tps_after_first": "llama-benchy's tg_throughput: each stream's tokens after its first / first token "
                              "of any stream to the last (the prefill before it left out); ts: the same on its bursts",
    "server_decode_tps": "llama-server's own decode rate over the tool's turn (--metrics)",
    "client_cpu_s": "CPU seconds the tool's own processes used in its turn (start-up included), beside the server",
    "turn_s": "the tool's turn, wall clock (start-up included)",
    "decode_over_server": "decode_tps@1 over server_decode_tps of the same turn (one stream only): the tool's "
                          "figure against the server's own for the same requests, the machine's speed divided out",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5, help="requests per workload and round (per stream)")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--model", type=Path, help="a GGUF with a qwen2 vocabulary (default: the tiny MoE)")
    ap.add_argument("--sampling", choices=("greedy", "default"), default="greedy",
                    help="the peers' sampling: greedy as tokensleuth's, or the server's defaults")
    ap.add_argument("--out", type=Path, default=Path("bench/results/peer_check.jsonl"))
    ap.add_argument("--bin", type=Path, help="a folder with llama-server (tokensleuth engine build … --target "
                                              "llama-server prints one); default: the default engine, built here")
    ap.add_argument("--tools", default="tokensleuth,aiperf,llama-benchy",
                    help=f"which to run, in the first round's order (of {', '.join(TOOLS)}); ratios are to the first")
    ap.add_argument("server_flags", nargs="*", help="after --: llama-server flags (-ngl 99 …)")
    a = ap.parse_args()
    concs = [int(c) for c in a.concurrency.split(",")]
    if a.bin and a.model:
        bin_dir, model = a.bin, a.model
    else:
        engine = BuildCache().get(DEFAULT_ENGINE, targets=targets_for(["llama-server"]))
        bin_dir, model = a.bin or Path(engine.bin_dir), a.model or tiny_model(engine, "qwen3moe")
    work = Path(tempfile.mkdtemp(prefix="peer-"))
    httpd, book = serve_book(work)
    tok, n_local = make_tokenizer(model, work / "tok", work / "book.txt")
    extra = ("temperature:0",) if a.sampling == "greedy" else ()
    bextra = ("temperature=0",) if a.sampling == "greedy" else ()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    per_slot = PP + TG + 64
    server = subprocess.Popen([str(bin_dir / "llama-server"), "-m", str(model), "--port", str(port),
                               "-np", str(max(concs)), "-c", str(max(concs) * per_slot * 2), "-cram", "0", "--metrics",
                               "--no-webui", *(a.server_flags or ["-t", "1"])],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = [json.loads(line) for line in a.out.read_text().splitlines()] if a.out.exists() else []
    try:
        wait_health(url, server)
        n_server = len(httpx.post(url + "/tokenize", json={"content": (work / "book.txt").read_text()},
                                  timeout=60).json()["tokens"])
        print(f"tokenizer.json from the GGUF vocab: {n_local} tokens on the corpus, the server's /tokenize {n_server}"
              f" ({100 * (n_local - n_server) / n_server:+.2f}%); peers' sampling: {a.sampling}", flush=True)
        tools = [t for t in a.tools.split(",") if t]
        for i in range(len(done), a.rounds):
            order = tools[i % len(tools):] + tools[:i % len(tools)]
            row: dict[str, Any] = {"round": i + 1, "order": order, "sampling": a.sampling}
            for who in order:
                before = server_counters(url)
                cpu0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
                greedy = not who.endswith("-default")  # (a -default peer samples as the server does)
                if who == "tokensleuth":
                    got = run_tokensleuth(url, model, a.reps, concs, work)
                elif who.startswith("aiperf"):
                    got = run_aiperf(url, tok, a.reps, concs, work, extra if greedy else ())
                else:
                    got = run_benchy(url, tok, book, a.reps, concs, work, bextra if greedy else ())
                got["server_decode_tps"] = server_decode(before, server_counters(url))
                cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the tool's processes, all of them
                got["client_cpu_s"] = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
                got["turn_s"] = time.monotonic() - t0
                row[who] = got
            with a.out.open("a") as f:  # the round is kept as soon as it exists
                f.write(json.dumps(row) + "\n")
            done.append(row)
            print(f"round {i + 1} ({' → '.join(order)}) done", flush=True)
    finally:
        server.terminate()
        server.wait(10)
        httpd.shutdown()
    first = [t for t in done[0]["order"]] if done else []
    tools = sorted({t for t in first if all(t in r for r in done)}, key=lambda t: (TOOLS.index(t) if t in TOOLS else 9, t))
    if not tools:
        return
    if concs == [1]:  # one stream: the server's decode rate over a turn is that of the tool's own requests
        for r in done:
            for t in tools:
                if r[t].get("decode_tps@1") and r[t].get("server_decode_tps"):
                    r[t]["decode_over_server@1"] = r[t]["decode_tps@1"] / r[t]["server_decode_tps"]
    keys = sorted({k for r in done for t in tools for k in r[t]})
    base = tools[0]
    print(f"\n{len(done)} rounds, {a.reps} requests per workload and stream; ratio = tool / {base} "
          "(geometric mean over rounds, 95% t interval), then what the interval says: 'agrees (within ±5%)' "
          "only where all of it lies in [0.95, 1.05], 'differs' where all of it lies outside, else "
          "'not resolved to ±5%'\n")
    print("| figure | " + " | ".join(tools) + " | " + " | ".join(f"{t} / {base}" for t in tools[1:]) + " | definition |")
    print("| --- |" + " ---: |" * len(tools) + " --- |" * (len(tools) - 1) + " --- |")
    for k in keys:
        col = {t: [r[t].get(k) for r in done] for t in tools}

        def med(xs: list[float | None]) -> str:
            v = [x for x in xs if x is not None]
            return f"{statistics.median(v):.2f}" if v else "—"

        ratios = [ratio_cell([x or 0 for x in col[t]], [x or 0 for x in col[base]]) if any(col[base]) else "—"
                  for t in tools[1:]]
        print(f"| {k} | " + " | ".join(med(col[t]) for t in tools) + " | " + " | ".join(ratios) + " | "
              f"{DEFINED.get(k.split('@')[0].replace('_p90', '_p50').replace('_p99', '_p50'), '')} |")

if __name__ == "__main__":
    main()
