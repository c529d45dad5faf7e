#!/usr/bin/env python3
"""What a report costs to render: HTML page time and size per study kind, and the site.

Makes its studies with the real engine in a fresh store (tiny dense model, ``-t 1``): a
40-pair compare (tg8, two arms), and bench studies up to 50 studies in the store; then
times ``report --html`` (each a fresh process, as a user runs it, so the figures include
the interpreter's start and matplotlib's import) and ``site`` (first run, then a re-run
with nothing changed). ``--extra-db`` adds the studies of another store to the page
timings (a bisect or decompose made by the test suite, say).

    .venv/bin/python bench/render_cost.py [--extra-db PATH]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

from _common import default_engine, tiny_model, tokensleuth_cmd

from tokensleuth.sources import DEFAULT_ENGINE


def ts(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([*tokensleuth_cmd(), *args], env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def page_costs(db: Path, work: Path, label: str) -> None:
    env = dict(os.environ, TOKENSLEUTH_DB=str(db))
    con = sqlite3.connect(db)
    seen: set[str] = set()
    for sid, kind in con.execute("SELECT id, kind FROM studies WHERE status='done' ORDER BY created_at"):
        if kind in seen:
            continue
        seen.add(kind)
        page = work / f"{label}-{sid}.html"
        dt = min(ts(["report", sid, "--html", str(page)], env) for _ in range(3))
        pairs = con.execute("SELECT COUNT(DISTINCT pair) FROM trials WHERE study_id=? AND pair>=0", (sid,)).fetchone()[0]
        print(f"{label}: {kind} {sid} ({pairs} pairs): report --html {dt:.2f} s (best of 3), "
              f"{page.stat().st_size / 1024:.0f} KiB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--studies", type=int, default=50)
    ap.add_argument("--extra-db", type=Path, action="append", default=[])
    ap.add_argument("--bisect24", action="store_true",
                    help="also run a bisect over bench/bisect_cost.py's 24-commit history and time its page")
    a = ap.parse_args()
    model = tiny_model(default_engine(), "llama")
    work = Path(tempfile.mkdtemp(prefix="render-"))
    db = work / "store.sqlite"
    env = dict(os.environ, TOKENSLEUTH_DB=str(db))
    t0 = time.perf_counter()
    ts(["compare", "--arm", f"a={DEFAULT_ENGINE}", "--arm", f"b={DEFAULT_ENGINE}", "--flags", "b=-ub 256",
        "-m", str(model), "-w", "tg8", "--min-pairs", "40", "--max-pairs", "40", "--", "-r", "1", "-t", "1"], env)
    for _ in range(a.studies - 1):
        ts(["bench", "-m", str(model), "--", "-p", "8", "-n", "4", "-r", "1", "-t", "1"], env)
    print(f"made 1 compare (40 pairs) and {a.studies - 1} bench studies in {time.perf_counter() - t0:.0f} s")
    if a.bisect24:
        from bisect_cost import NAMES

        from tests.planted import bisect_history

        moe = tiny_model(default_engine(), "qwen3moe")
        repo, shas = bisect_history(NAMES, "bisect24")
        bdb = work / "bisect24.sqlite"
        t1 = time.perf_counter()
        ts(["bisect", "--repo", str(repo), "--good", shas["base"], "--bad", shas["n21"], "--model", str(moe),
            "-w", "tg32", "--", "-r", "5"], dict(env, TOKENSLEUTH_DB=str(bdb)))
        print(f"bisect over 24 commits: {time.perf_counter() - t1:.0f} s")
        page_costs(bdb, work, "bisect24")
    page_costs(db, work, "here")
    for extra in a.extra_db:
        page_costs(extra, work, extra.parent.name)
    site = work / "site"
    first = ts(["site", str(site)], env)
    again = ts(["site", str(site)], env)
    size = sum(p.stat().st_size for p in site.rglob("*.html"))
    print(f"site of {a.studies} studies: {first:.1f} s first run, {again:.1f} s re-run with nothing changed; "
          f"{size / 1024:.0f} KiB of HTML")


if __name__ == "__main__":
    main()
