"""The figures of a store's studies that depend on window edges, trial by trial and cell by cell.

For each study: every trial's largest edge error (|window - llama-bench's own duration| /
duration), how many of its windows were over the limit and whether it ran with the load log
(-v); for each cell (arm, model, test): t/s, cold repetitions, busy cores, CPU ms/token and
J/token. Last, for each (model, test), each figure's spread over every cell of every study
(max / min - 1): issue 39 asks that bench, a 5-pair and a 20-pair compare agree within 3%.

    python bench/windows_figures.py STORE.sqlite
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from tokensleuth.analysis.results import load_cells  # noqa: E402
from tokensleuth.monitor.attribute import EDGE_ERROR_LIMIT, edge_error  # noqa: E402
from tokensleuth.store import Store  # noqa: E402

FIGURES = ("busy_cores", "cpu_ms_per_token", "joules_per_token")


def trial_lines(store: Store, study_id: str) -> list[str]:
    out = []
    durations: dict[tuple[int, int, int], int] = {}
    for r in store.reads.results(study_id):
        for s in store.reads.samples(int(r["id"])):
            durations[(int(r["trial_id"]), int(r["test_idx"]), int(s["rep"]))] = int(s["duration_ns"])
    for t in store.reads.trials(study_id):
        tid = int(t["id"])
        errs = [e for w in store.reads.windows(tid)
                if (e := edge_error(int(w["end_ns"]) - int(w["start_ns"]),
                                    durations.get((tid, int(w["test_idx"]), int(w["rep"]))))) is not None]
        verbose = "-v" in json.loads(t["argv_json"] or "[]")
        worst = f"{max(errs):.2%}" if errs else "-"
        out.append(f"  trial {t['seq']:>3} {t['arm']:<8} {'-v' if verbose else '  '} {t['status']:<8} "
                   f"windows {len(errs):>3}, over {EDGE_ERROR_LIMIT:.0%}: {sum(e > EDGE_ERROR_LIMIT for e in errs)}, "
                   f"max edge error {worst}")
    return out


def main() -> None:
    db = Path(sys.argv[1])
    spread: dict[tuple[str, str], dict[str, list[tuple[str, float]]]] = defaultdict(lambda: defaultdict(list))
    with Store(db) as store:
        for st in store.reads.studies():
            sid = st.id
            print(f"study {sid} ({st.kind}), {len(store.reads.trials(sid))} trials")
            print("\n".join(trial_lines(store, sid)))
            for c in load_cells(store, sid):
                res = c.resources()
                cold = f"{c.cold.count} cold (ratio {c.cold.ratio:.3f})" if c.cold and c.cold.count else "no cold"
                mean = sum(c.kept_tokens_per_s) / len(c.kept_tokens_per_s) if c.kept_tokens_per_s else float("nan")
                figs = ", ".join(f"{k} {res[k]:.4g}" if res[k] is not None else f"{k} withheld" for k in FIGURES)
                print(f"  cell {c.arm}/{Path(c.model).stem}/{c.test}: {mean:.1f} t/s over {len(c.kept_tokens_per_s)} "
                      f"reps of {len(c.trial_means)} processes, {cold}; {figs}; edge max "
                      f"{res['edge_error_max'] or 0:.2%}, over limit {res['windows_over_edge_limit']}")
                for n in res["notes"]:
                    print(f"    note: {n}")
                for k in FIGURES:
                    if res[k] is not None:
                        spread[(Path(c.model).stem, c.test)][k].append((f"{sid[:8]}/{c.arm}", float(res[k])))
    print("\nspread of each figure over every cell of every study (max / min - 1):")
    for (model, test), by_fig in sorted(spread.items()):
        for k, vals in by_fig.items():
            lo, hi = min(v for _, v in vals), max(v for _, v in vals)
            print(f"  {model} {test} {k}: {hi / lo - 1:.2%} over {len(vals)} cells "
                  f"({', '.join(f'{n} {v:.4g}' for n, v in vals)})")


if __name__ == "__main__":
    main()
