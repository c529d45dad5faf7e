"""Whether the in-process design measures a context setting's effect as a process per trial does:
an equivalence test (two one-sided tests at 5% each: the 90% interval of the difference inside
±band) on the H200's design study of -ub and --poll (bench/results/h200-pairing/pairing.jsonl,
Qwen3-30B-A3B, `-ngl 99 -fa 1`).

The effect is log(t/s of arm a / arm b): in one process, from each process's A, B, B, A instances;
a process per trial, from each pair of processes that ran back to back. The difference of the two
designs' mean effects, with Welch's interval, is "the same" when it lies inside ±band; otherwise
what the default rests on is said: how many processes, and how wide the interval is.

    python3 bench/inprocess_equivalence.py [--band 0.01] [--processes FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

ROOT = Path(__file__).resolve().parent.parent


def effects(rows: list[dict[str, Any]], label: str) -> tuple[list[float], list[float]]:
    inproc, sep = [], []
    pending: dict[str, float] = {}
    for r in rows:
        if r["label"] != label:
            continue
        ts = [x["avg_ts"] for x in r["rows"]]
        if r["design"] == "inprocess":
            a = [math.log(t) for o, t in zip(r["order"], ts, strict=True) if o == "a"]
            b = [math.log(t) for o, t in zip(r["order"], ts, strict=True) if o == "b"]
            inproc.append(float(np.mean(a) - np.mean(b)))
        else:
            pending[r["order"][0]] = math.log(ts[0])
            if len(pending) == 2:
                sep.append(pending["a"] - pending["b"])
                pending = {}
    return inproc, sep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--band", type=float, default=0.01)
    ap.add_argument("--processes", type=Path, default=ROOT / "bench/results/h200-pairing/pairing.jsonl")
    a = ap.parse_args()
    rows = [json.loads(ln) for ln in a.processes.read_text().splitlines() if ln.strip()]
    print(f"equivalence of the two designs' effect estimates at ±{a.band:.1%} (90% Welch interval of the "
          f"difference; {a.processes.name})")
    for label in ("ub", "poll"):
        x, y = effects(rows, label)
        mx, my = float(np.mean(x)), float(np.mean(y))
        vx, vy = float(np.var(x, ddof=1)) / len(x), float(np.var(y, ddof=1)) / len(y)
        se = math.sqrt(vx + vy)
        df = (vx + vy) ** 2 / (vx ** 2 / (len(x) - 1) + vy ** 2 / (len(y) - 1))
        half = float(sps.t.ppf(0.95, df)) * se
        lo, hi = math.expm1(mx - my - half), math.expm1(mx - my + half)
        same = -a.band <= lo and hi <= a.band
        need = math.ceil((float(sps.t.ppf(0.95, df)) * math.sqrt(np.var(x, ddof=1) + np.var(y, ddof=1))
                          / (a.band - abs(mx - my))) ** 2) if abs(mx - my) < a.band else None
        print(f"{label:5s} in one process {math.expm1(mx):+.2%} ({len(x)} processes), a process per trial "
              f"{math.expm1(my):+.2%} ({len(y)} pairs): difference {math.expm1(mx - my):+.2%} [{lo:+.2%}, {hi:+.2%}] — "
              + ("the same within the band" if same else
                 "not shown the same at this band" + (f" (about {need} of each would show it at this spread)"
                                                     if need else "")))


if __name__ == "__main__":
    main()
