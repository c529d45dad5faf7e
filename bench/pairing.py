"""Collect engine processes for the design study of in-process pairing (bench/pairing_sim.py).

Two arms that differ only in llama-bench *context* settings (-ub, --poll, -t, …) can share one
process: llama-bench keeps the model loaded across test instances whose model settings are
equal, so ``-ub 512,2048,2048,512`` runs A, B, B, A on one load. This runs, for one workload:

* ``separate``: today's design, one process per arm and pair, the arm that goes first
  alternating between pairs;
* ``inprocess``: one process per pair running the instances A, B, B, A (B, A, A, B on every
  other pair), each instance with its own warm-up.

Every process is appended to a JSON-lines file as soon as it ends: the design, pair, arm order,
its wall time (what it cost in engine seconds) and each instance's per-repetition durations.
An arm may also differ by environment (``--env-b GGML_CUDA_DISABLE_FUSION=1``, a build A/B):
only the separate design can run that.

    python3 bench/pairing.py --bench BIN/llama-bench --model M -w tg32 --flag -ub --a 2048 --b 512 \
        --design inprocess --pairs 16 --reps 4 --out $OUT/pairing.jsonl -- -ngl 99 -fa 1
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time


def workload_flags(w: str) -> list[str]:
    if w.startswith("pp"):
        return ["-p", w[2:], "-n", "0"]
    if w.startswith("tg"):
        return ["-p", "0", "-n", w[2:]]
    raise SystemExit(f"workload {w!r}: ppN or tgN")


def run(argv: list[str], env: dict[str, str], timeout_s: float) -> tuple[float, list[dict[str, object]]]:
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"{argv[0]} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    return wall, [{"samples_ns": r["samples_ns"], "avg_ts": r["avg_ts"], "n_ubatch": r.get("n_ubatch"),
                   "poll": r.get("poll"), "n_threads": r.get("n_threads")} for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("-w", "--workload", required=True)
    ap.add_argument("--flag", default="")
    ap.add_argument("--a", default="")
    ap.add_argument("--b", default="")
    ap.add_argument("--env-b", default="")
    ap.add_argument("--args-b", default="", help="flags only arm b gets (separate design), e.g. -v")
    ap.add_argument("--design", choices=("separate", "inprocess"), required=True)
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--label", default="")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting pairs after this many seconds")
    ap.add_argument("--out", required=True)
    ap.add_argument("rest", nargs="*")
    a = ap.parse_args()
    if a.design == "inprocess" and (a.env_b or a.args_b or not a.flag):
        raise SystemExit("in-process pairing needs arms that differ by one llama-bench flag, not by environment")
    base = [a.bench, "-m", a.model, *workload_flags(a.workload), "-r", str(a.reps), "-o", "jsonl", *a.rest]
    env_a = dict(os.environ)
    env_b = dict(os.environ)
    if a.env_b:
        k, _, v = a.env_b.partition("=")
        env_b[k] = v
    t_start = time.monotonic()
    with open(a.out, "a") as out:
        for pair in range(a.pairs):
            if time.monotonic() - t_start > a.budget_s:
                print(f"budget spent after {pair} pairs", file=sys.stderr)
                break
            order = ["a", "b"] if pair % 2 == 0 else ["b", "a"]
            if a.design == "separate":
                for arm in order:
                    flags = [a.flag, a.a if arm == "a" else a.b] if a.flag else []
                    flags += shlex.split(a.args_b) if arm == "b" else []
                    wall, rows = run([*base, *flags], env_a if arm == "a" else env_b, 600)
                    out.write(json.dumps({"label": a.label, "design": a.design, "workload": a.workload,
                                          "pair": pair, "order": [arm], "wall_s": wall, "rows": rows}) + "\n")
                    out.flush()
            else:
                seq = [*order, *order[::-1]]
                values = ",".join(a.a if arm == "a" else a.b for arm in seq)
                wall, rows = run([*base, a.flag, values], env_a, 600)
                if len(rows) != len(seq):
                    raise SystemExit(f"{len(rows)} instances reported for {len(seq)} asked")
                out.write(json.dumps({"label": a.label, "design": a.design, "workload": a.workload,
                                      "pair": pair, "order": seq, "wall_s": wall, "rows": rows}) + "\n")
                out.flush()
            print(f"{a.label} {a.design} {a.workload} pair {pair}: {wall:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
