"""Real A/A studies of both designs: a pair in one process (--in-process: A, B, B, A on one load,
the setting's one value listed four times) and a process per trial (--separate-processes).

Each study is the real `tokensleuth compare` of the default engine against itself on the tiny
dense model, `-t 1`, tg32 and pp256, --max-pairs 40, at ``--band`` (here ±2% is out of reach of
either design in 40 pairs: both first studies ended unresolved); the designs alternate study by
study, so the machine's drift falls on both. Every study is printed (verdict and pairs per cell),
then per design and cell: false alarms (faster/slower), same, unresolved, and the pairs of the
studies that decided. Every process is also written (--processes FILE.jsonl, the format of
bench/results/h200-pairing/pairing.jsonl: its instances' per-repetition durations, in the order
they ran) for bench/sim_compare.py to resample: its prediction beside these real outcomes.

    .venv/bin/python bench/inprocess_aa.py [--studies 20] [--band 0.05] [--processes FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from _common import default_engine, tiny_model, tokensleuth_cmd

from tokensleuth.drivers.verdicts.comparisons import analyze, stored_spec
from tokensleuth.store import Store

DESIGNS = {"in-process": ["--in-process"], "separate": ["--separate-processes"]}


def processes(store: Store, sid: str, design: str, study: int) -> list[dict[str, Any]]:
    """The study's engine processes as bench/pairing.py writes them: in one process, its four
    instances in the order they ran (the first arm's two are its 1st and 4th; split() interleaved
    each arm's pair of instances), else each trial alone."""
    trials = {int(t["id"]): t for t in store.reads.trials(sid)}
    by_pair: dict[tuple[str, int], dict[str, list[int]]] = defaultdict(dict)
    order: dict[tuple[str, int], list[str]] = {}
    out = []
    for r in store.reads.results(sid):
        t = trials[int(r["trial_id"])]
        ns = [int(x["duration_ns"]) for x in store.reads.samples(int(r["id"]))]
        w = str(r["workload"])
        if design == "in-process":
            by_pair[(w, int(t["pair"]))][str(t["arm"])] = ns
            order[(w, int(t["pair"]))] = json.loads(t["env_json"])["shared_process"]["order"]
        else:
            out.append({"label": "aa", "design": "separate", "study": study, "workload": w, "pair": int(t["pair"]),
                        "order": [str(t["arm"])], "rows": [{"samples_ns": ns}]})
    for (w, pair), arms in sorted(by_pair.items()):
        first, second = order[(w, pair)][0], order[(w, pair)][1]
        pos = {0: arms[first][0::2], 3: arms[first][1::2], 1: arms[second][0::2], 2: arms[second][1::2]}
        out.append({"label": "aa", "design": "inprocess", "study": study, "workload": w, "pair": pair,
                    "order": order[(w, pair)], "rows": [{"samples_ns": pos[k]} for k in range(4)]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--studies", type=int, default=20, help="per design")
    ap.add_argument("--band", default="5%")
    ap.add_argument("--processes", type=Path, default=None, help="write every process here")
    a = ap.parse_args()
    eng = default_engine()
    model = tiny_model(eng, "llama")
    tally: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    rows = []
    with tempfile.TemporaryDirectory() as td:
        env = dict(os.environ, TOKENSLEUTH_DB=str(Path(td) / "aa.sqlite"))
        for i in range(a.studies):
            for design in (DESIGNS if i % 2 == 0 else dict(reversed(list(DESIGNS.items())))):
                out = Path(td) / f"{design}-{i}.json"
                t0 = time.monotonic()
                p = subprocess.run([*tokensleuth_cmd(), "compare", "--arm", "a=" + eng.source, "--arm",
                                    "b=" + eng.source, "-m", str(model), "-w", "tg32", "-w", "pp256",
                                    "--max-pairs", "40", "--band", a.band, "--no-probe", *DESIGNS[design],
                                    "--json", str(out),
                                    "--", "-t", "1"], env=env, capture_output=True, text=True)
                wall = time.monotonic() - t0
                if p.returncode != 0:
                    raise SystemExit(f"study {i} ({design}) failed: {p.stderr[-500:]}")
                obj = json.loads(out.read_text())
                cells = []
                with Store(Path(env["TOKENSLEUTH_DB"])) as store:
                    comps = analyze(store, obj["study"], stored_spec(store, obj["study"]))
                    rows += processes(store, obj["study"], design, i)
                for c in comps:
                    tally[(design, c.workload)][c.verdict].append(c.pairs)
                    cells.append(f"{c.workload} {c.verdict}@{c.pairs}")
                shared = {c.shared for c in comps}
                print(f"study {i:2d} {design:10s} {', '.join(cells)} ({wall:.0f} s wall; one process a pair: "
                      f"{shared})", flush=True)
    if a.processes is not None:
        a.processes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"\n{'design':10s} {'cell':6s} {'studies':>7s} {'false alarm':>11s} {'same':>5s} {'unresolved':>10s} "
          "pairs of the decided (mean, max)")
    for (design, w), by in sorted(tally.items()):
        n = sum(len(v) for v in by.values())
        decided = by["same"] + by["faster"] + by["slower"]
        print(f"{design:10s} {w:6s} {n:7d} {len(by['faster']) + len(by['slower']):11d} {len(by['same']):5d} "
              f"{len(by['unresolved']):10d} " + (f"{sum(decided) / len(decided):.1f}, {max(decided)}" if decided else "-"))


if __name__ == "__main__":
    main()
