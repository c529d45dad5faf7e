#!/usr/bin/env python3
"""The one-stream decode rate of tokensleuth and of llama-benchy 0.4, each tool's definition
applied to the other tool's requests, on one llama-server (``-np 1``), with the server's own
decode time of every request (its ``timings``, or its log's ``eval time`` line) as the referee.

The two definitions, as their code has them:

- tokensleuth (engines/serving.py ``sample_of``): the tokens streamed after the first chunk over
  the time from the first chunk to the last, client clock; tokens counted by the server's
  ``tokens_predicted`` in each chunk of ``/completion``;
- llama-benchy (client.py ``_finalize_stream_tokens``, results.py ``_process_batch``): on
  ``/v1/chat/completions``, the chunks whose delta has content; llama-server sends no
  ``token_ids``, so it takes the usage count n and spreads n timestamps evenly from the first
  content chunk to the last: (n - 1) / (last content chunk - first content chunk).

Per round (the order alternates): tokensleuth's ``bench -w pp512+tg128 -r R`` and R requests
made and timed by llama-benchy's own prompt generator, client and results code
(``_peers.benchy_requests``), after a warm-up each. Printed: the per-round means, and over the
rounds, geometric means of their ratios with 95% t intervals, read at ±5% (``_peers.agreement``).

    .venv/bin/python bench/peer_decode.py --rounds 8 --reps 5 [--model M.gguf]
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from _common import tiny_model, tokensleuth_cmd
from _peers import benchy_requests, make_tokenizer, serve_book, wait_health
from peer_check import ratio_cell

from tokensleuth.commands.common import targets_for
from tokensleuth.engines.serving import free_port
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache

PP, TG = 512, 128
EVAL = re.compile(r"^\s*.*\beval time =\s*([\d.]+) ms /\s*(\d+) tokens")


def tokensleuth_turn(url: str, model: Path, reps: int, work: Path) -> list[dict[str, float]]:
    """tokensleuth's requests: its own rate, llama-benchy's definition on the same stored chunks
    (the server's count less one over the first-to-last chunk time, the sum of its intervals),
    and the server's own (predicted_n - 1 decode steps over predicted_ms)."""
    db, out = work / "ts.db", work / "ts.json"
    subprocess.run([*tokensleuth_cmd(), "bench", "--engine", f"url:{url}", "--kind", "llama-server", "-m", str(model),
                    "-w", f"pp{PP}+tg{TG}", "--json", str(out), "--db", str(db), "--", "-r", str(reps)],
                   check=True, capture_output=True)
    study = json.loads(out.read_text())["study"]
    con = sqlite3.connect(db)
    rows = con.execute("SELECT s.metrics_json FROM samples s JOIN results r ON r.id=s.result_id JOIN trials t"
                       " ON t.id=r.trial_id WHERE t.study_id=? ORDER BY s.id", (study,)).fetchall()
    con.close()
    got = []
    for (metrics,) in rows:
        m = json.loads(metrics)
        span_ms, n = sum(m["itl_ms_all"]), m["server"]["predicted_n"]
        got.append({"own": m["client_tg_ts"], "other": (n - 1) / (span_ms / 1e3),
                    "server": (n - 1) / (m["server"]["predicted_ms"] / 1e3), "span_over_server":
                    span_ms / m["server"]["predicted_ms"], "tokens": n})
    return got


def benchy_turn(url: str, tok: Path, book: str, reps: int, work: Path, log: Path) -> list[dict[str, Any]]:
    """llama-benchy's requests: its own rate (its results code), tokensleuth's definition where
    every content chunk held one token (as many chunks as the usage count; None otherwise: a
    chunk's tokens are not known), and the server's own from its log's eval line."""
    before = len(log.read_text(errors="replace").splitlines())
    reqs = benchy_requests(url, tok, book, work / "benchy.jsonl", PP, TG, reps)
    ok = [r for r in reqs if not r["error"]]
    evals: list[tuple[float, int] | None] = [
        (float(m[1]), int(m[2])) for line in log.read_text(errors="replace").splitlines()[before:]
        if (m := EVAL.match(line)) and "prompt eval" not in line]
    # the warm-up's line, then one per request that reached the server; where a request failed
    # and the lines cannot be told apart, the turn has no server figure
    evals = evals[1:] if len(evals) == len(ok) + 1 else [None] * len(ok)
    got = []
    for r, ev in zip(ok, evals, strict=True):
        times = [t for t, _ in r["chunks"]]
        span = times[-1] - times[0]
        row = {"own": r["tg_req_throughput"], "other": (len(times) - 1) / span if len(times) == r["usage"] else None,
               "chunks": len(times), "tokens": r["usage"], "first_ms": (r["first"] - r["start"]) * 1e3}
        if ev is not None:
            ms, n = ev
            row.update(server=(n - 1) / (ms / 1e3), span_over_server=span * 1e3 / ms, server_tokens=n)
        got.append(row)
    if len(ok) < len(reqs):
        print(f"  {len(reqs) - len(ok)} of llama-benchy's {len(reqs)} requests failed: "
              f"{next(r['error'] for r in reqs if r['error'])}", flush=True)
    return got


def mean(rows: list[dict[str, Any]], key: str) -> float | None:
    v = [r[key] for r in rows if r.get(key) is not None]
    return statistics.fmean(v) if v else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5, help="requests per tool and round")
    ap.add_argument("--model", type=Path, help="a GGUF with a qwen2 vocabulary (default: the tiny MoE)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/peer_decode.jsonl"))
    a = ap.parse_args()
    engine = BuildCache().get(DEFAULT_ENGINE, targets=targets_for(["llama-server"]))
    model = a.model or tiny_model(engine, "qwen3moe")
    work = Path(tempfile.mkdtemp(prefix="peer-decode-"))
    httpd, book = serve_book(work)
    tok, _ = make_tokenizer(model, work / "tok", work / "book.txt")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = work / "server.log"
    with log.open("w") as sink:
        server = subprocess.Popen([str(Path(engine.bin_dir) / "llama-server"), "-m", str(model), "--port", str(port),
                                   "-np", "1", "-c", str(2 * (PP + TG + 64)), "-cram", "0", "--no-webui", "-t", "1"],
                                  stdout=sink, stderr=subprocess.STDOUT)
    done = [json.loads(line) for line in a.out.read_text().splitlines()] if a.out.exists() else []
    try:
        wait_health(url, server)
        for i in range(len(done), a.rounds):
            order = ["tokensleuth", "llama-benchy"][:: 1 if i % 2 == 0 else -1]
            row: dict[str, Any] = {"round": i + 1, "order": order}
            for who in order:
                row[who] = (tokensleuth_turn(url, model, a.reps, work) if who == "tokensleuth"
                            else benchy_turn(url, tok, book, a.reps, work, log))
            with a.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            done.append(row)
            print(f"round {i + 1} ({' → '.join(order)}) done", flush=True)
    finally:
        server.terminate()
        server.wait(10)
        httpd.shutdown()
    render(done, a.reps)


def render(done: list[dict[str, Any]], reps: int) -> None:
    ts = [{k: mean(r["tokensleuth"], k) for k in ("own", "other", "server", "span_over_server")} for r in done]
    lb = [{k: mean(r["llama-benchy"], k) for k in ("own", "other", "server", "span_over_server")} for r in done]
    for r, b in zip(done, lb, strict=True):  # its own rate on the requests where tokensleuth's applies
        b["own_where_other"] = mean([x for x in r["llama-benchy"] if x["other"] is not None], "own")
    print(f"\n{len(done)} rounds, {reps} requests per tool and round, one stream, pp{PP}+tg{TG}, -np 1\n")
    print("| round | ts own | ts under llama-benchy's def | server during ts | llama-benchy own | "
          "llama-benchy under ts's def | server during llama-benchy |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r, t, b in zip(done, ts, lb, strict=True):
        cells = [t["own"], t["other"], t["server"], b["own"], b["other"], b["server"]]
        print(f"| {r['round']} | " + " | ".join(f"{x:.2f}" if x is not None else "—" for x in cells) + " |")
    chunks = [x["chunks"] for r in done for x in r["llama-benchy"]]
    tokens = [x["tokens"] for r in done for x in r["llama-benchy"]]
    one = sum(c == t for c, t in zip(chunks, tokens, strict=True))
    print(f"\nllama-benchy's content chunks per request: {min(chunks)}–{max(chunks)} for {min(tokens)}–{max(tokens)} "
          f"tokens (usage); one token in every chunk in {one} of {len(chunks)} requests (tokensleuth's definition "
          "needs each chunk's tokens, so it is applied to those)")

    def col(rows: list[dict[str, float | None]], key: str) -> list[float]:
        return [x if (x := r[key]) is not None else 0.0 for r in rows]

    print("\n| ratio (geometric mean over rounds, 95% t interval, read at ±5%) | value |")
    print("| --- | --- |")
    for label, xs, ys in (
        ("llama-benchy own / ts own (the peer check's decode_tps@1)", col(lb, "own"), col(ts, "own")),
        ("ts under llama-benchy's def / ts own, on ts's requests", col(ts, "other"), col(ts, "own")),
        ("llama-benchy own / llama-benchy under ts's def, on its requests where each content chunk was one token",
         col(lb, "own_where_other"), col(lb, "other")),
        ("llama-benchy own / ts under llama-benchy's def (one definition)", col(lb, "own"), col(ts, "other")),
        ("server during llama-benchy / server during ts", col(lb, "server"), col(ts, "server")),
        ("ts own / server, on ts's requests", col(ts, "own"), col(ts, "server")),
        ("llama-benchy own / server, on its requests", col(lb, "own"), col(lb, "server")),
        ("client span / server span: llama-benchy over ts", col(lb, "span_over_server"), col(ts, "span_over_server")),
    ):
        print(f"| {label} | {ratio_cell(xs, ys)} |")


if __name__ == "__main__":
    main()
