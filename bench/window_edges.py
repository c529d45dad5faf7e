"""Each timed window of a study against the engine's own duration of that repetition: whether a
window flagged ``short-window`` is short because its start was stamped late, or its end early.

For every window: the engine's duration, the window's span (after timed_part cut the untimed
tail), their difference, and the gap from the window before it in the same process (its end to
this start). A start stamped late shows as a span shorter than the duration by about the gap's
excess; the untimed time cut off a window's end shows as ``untimed_ms``.

    python3 bench/window_edges.py --db STORE [--study ID] [--workload tg32]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from tokensleuth.monitor.attribute import EDGE_ERROR_LIMIT
from tokensleuth.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, required=True)
    ap.add_argument("--study", help="a study id (default: the newest compare)")
    ap.add_argument("--workload", default="")
    a = ap.parse_args()
    with Store(a.db) as s:
        sid = a.study or s.db.execute("SELECT id FROM studies WHERE kind='compare' ORDER BY created_at DESC"
                                      " LIMIT 1").fetchone()[0]
        print(f"study {sid}")
        short, over, n = [], 0, 0
        for t in s.db.execute("SELECT t.id, t.seq, a.name FROM trials t JOIN arms a ON a.id=t.arm_id"
                              " WHERE t.study_id=? AND t.status='done' AND t.workload LIKE ? ORDER BY t.seq",
                              (sid, f"%{a.workload}%")):
            dur = {(int(r["test_idx"]), int(r["rep"])): int(r["duration_ns"]) for r in s.db.execute(
                "SELECT r.test_idx, m.rep, m.duration_ns FROM results r JOIN samples m ON m.result_id=r.id"
                " WHERE r.trial_id=?", (t[0],))}
            prev_end = None
            for w in s.reads.windows(t[0]):
                key = (int(w["test_idx"]), int(w["rep"]))
                d = dur.get(key)
                span = int(w["end_ns"]) - int(w["start_ns"])
                cut = json.loads(w["counters_json"] or "{}").get("untimed_ms", 0.0)
                gap: float | None = None if prev_end is None else (int(w["start_ns"]) - prev_end) / 1e6
                prev_end = int(w["end_ns"])
                if d is None:
                    continue
                n += 1
                err = (span - d) / d
                over += abs(err) > EDGE_ERROR_LIMIT
                if span < d:
                    short.append((d - span) / 1e6)
                print(f"trial {t[1]:3d} {t[2]:>6} test {key[0]} rep {key[1]}: engine {d / 1e6:8.2f} ms, window "
                      f"{span / 1e6:8.2f} ms ({err:+.1%}), untimed cut {cut:6.2f} ms, gap before "
                      + ("   —" if gap is None else f"{gap:6.2f} ms"))
        print(f"{n} windows, {over} beyond ±{EDGE_ERROR_LIMIT:.0%}; {len(short)} shorter than the engine's duration"
              + (f" (by {np.median(short):.2f} ms in the median, {max(short):.2f} ms at most)" if short else ""))


if __name__ == "__main__":
    main()
