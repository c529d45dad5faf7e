"""The A/A studies of a store as measured processes in the format bench/sim_compare.py resamples
(one JSON line per trial: its design, workload, study, pair and repetitions), so a simulation
draws the new studies' processes in the order they ran.

    python3 bench/aa_processes.py --db STORE [--db STORE …] --out FILE.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokensleuth.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, action="append", required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    lines = []
    n_study = 0
    for db in a.db:
        with Store(db) as s:
            for st in s.db.execute("SELECT id, spec_json FROM studies WHERE kind='compare' ORDER BY created_at"):
                spec = json.loads(st["spec_json"])
                sources = {arm["source"] for arm in spec["arms"]}
                flags = {tuple(arm.get("flags") or ()) for arm in spec["arms"]}
                if len(sources) != 1 or len(flags) != 1 or spec.get("design"):
                    continue  # an A/A of a process per trial only
                for t in s.db.execute("SELECT id, pair, workload FROM trials WHERE study_id=? AND status='done'"
                                      " ORDER BY seq", (st["id"],)):
                    rows = [{"samples_ns": [int(m["duration_ns"]) for m in s.db.execute(
                        "SELECT duration_ns FROM samples WHERE result_id=? ORDER BY rep", (r["id"],))]}
                        for r in s.db.execute("SELECT id FROM results WHERE trial_id=? ORDER BY test_idx", (t["id"],))]
                    lines.append({"label": "aa", "design": "separate", "workload": t["workload"],
                                  "study": n_study, "pair": int(t["pair"]), "rows": rows})
                n_study += 1
    a.out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    print(f"{len(lines)} processes of {n_study} A/A studies -> {a.out}")


if __name__ == "__main__":
    main()
