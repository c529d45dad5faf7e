"""Cold leading repetitions: what leaving them out buys, from a stored store of real studies.

For every compare study and cell in the store: the cold repetitions found (cold_leading),
and the pairs a ±1% (and ±0.5%) verdict would need at the spread of each trial's t/s with
every repetition counted against with the cold ones left out (stats.pairs_for_same on the
paired interval). The H200 store of this repository (bench/results/h200-scale/store.sqlite:
A/A studies of the Qwen3-30B-A3B shape, Q8_0, -ngl 99 -fa 1 -ub 2048 -r 5) is the default.

    .venv/bin/python bench/cold_figures.py [STORE]
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from tokensleuth.analysis import stats
from tokensleuth.analysis.cold import cold_leading
from tokensleuth.store import Store

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "bench/results/h200-scale/store.sqlite"
    with Store(path) as store:
        studies = store.db.execute("SELECT id, spec_json FROM studies WHERE kind='compare' ORDER BY created_at").fetchall()
        print(f"{'study':10s} {'cell':8s} {'procs':>5s} {'cold':>4s} {'cold ran':>9s}  "
              f"{'±1% all':>8s} {'±1% out':>8s}  {'±0.5% all':>9s} {'±0.5% out':>9s}")
        for st in studies:
            rows = store.db.execute(
                "SELECT t.id, a.name AS arm, t.pair, t.workload, s.rep, s.tokens_per_s FROM trials t"
                " JOIN arms a ON a.id=t.arm_id JOIN results r ON r.trial_id=t.id JOIN samples s ON s.result_id=r.id"
                " WHERE t.study_id=? AND t.status='done' ORDER BY t.id, s.rep", (st["id"],)).fetchall()
            reps: dict[int, list[float]] = defaultdict(list)
            meta: dict[int, tuple[str, int, str]] = {}
            for r in rows:
                reps[int(r["id"])].append(float(r["tokens_per_s"]))
                meta[int(r["id"])] = (str(r["arm"]), int(r["pair"]), str(r["workload"]))
            arms = sorted({m[0] for m in meta.values()})
            if len(arms) != 2:
                continue
            for w in sorted({m[2] for m in meta.values()}):
                trials = [t for t, m in meta.items() if m[2] == w]
                cold = cold_leading([[math.log(v) for v in reps[t]] for t in trials])
                need = {}
                for label, c in (("all", 0), ("out", cold.count)):
                    by = {(meta[t][0], meta[t][1]): float(np.mean(reps[t][c:])) for t in trials}
                    pairs = sorted({p for _, p in by if (arms[0], p) in by and (arms[1], p) in by})
                    est = stats.ratio_interval([by[(arms[0], p)] for p in pairs], [by[(arms[1], p)] for p in pairs])
                    need[label] = (stats.pairs_for_same(est, 0.01), stats.pairs_for_same(est, 0.005))
                ran = f"{(1 - cold.ratio) * 100:.1f}% slow" if cold.ratio else "-"
                print(f"{st['id']:10s} {w:8s} {cold.processes:5d} {cold.count:4d} {ran:>9s}  "
                      f"{need['all'][0]!s:>8s} {need['out'][0]!s:>8s}  {need['all'][1]!s:>9s} {need['out'][1]!s:>9s}")


if __name__ == "__main__":
    main()
