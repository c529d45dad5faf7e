"""Seconds per server trial and per study, before and after model facts were read once per
file: an A/A compare of one real llama-server (`url:` arms, tiny MoE, -w tg32 -w pp128).

"before" runs the tool's source at REV (default e875b16, the last commit that parsed the
model file inside every trial) from a git worktree, "after" runs this checkout; the same
server, the same venv, alternating.

    .venv/bin/python bench/server_trial_cost.py [--before e875b16] [--pairs 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import tiny_model

from tokensleuth.commands.common import targets_for
from tokensleuth.engines.serving import free_port
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache

ROOT = Path(__file__).resolve().parent.parent


def study(src: Path, url: str, model: Path, db: Path, pairs: int) -> tuple[float, list[float]]:
    """Run one A/A compare with the tool's source at ``src``: (study wall s, per-trial wall s)."""
    env = dict(os.environ, PYTHONPATH=str(src), TOKENSLEUTH_DB=str(db))
    argv = [sys.executable, "-m", "tokensleuth.cli", "compare", "--arm", f"a=url:{url}", "--arm", f"b=url:{url}",
            "--model", str(model), "-w", "tg32", "-w", "pp128", "--min-pairs", str(pairs), "--max-pairs",
            str(pairs), "--band", "50%", "--", "-r", "5"]
    t0 = time.monotonic()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    con = sqlite3.connect(db)
    sid = con.execute("SELECT id FROM studies ORDER BY created_at DESC LIMIT 1").fetchone()[0]
    trials = [(t1 - t0_) / 1e9 for t0_, t1 in con.execute(
        "SELECT t0_ns, t1_ns FROM trials WHERE study_id=? AND status='done'", (sid,))]
    return wall, trials


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="e875b16")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    server_build = BuildCache().get(DEFAULT_ENGINE, targets=targets_for(["llama-server"]))
    model = tiny_model(server_build, "qwen3moe")
    port = free_port()
    srv = subprocess.Popen([str(Path(server_build.bin_dir) / "llama-server"), "-m", str(model), "--host", "127.0.0.1",
                            "--port", str(port), "-t", "1", "-c", "2048", "--no-webui"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as d:
        wt = Path(d) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(wt), a.before], check=True)
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            got: dict[str, list[tuple[float, list[float]]]] = {"before": [], "after": []}
            for r in range(a.rounds):
                for label, src in (("before", wt / "src"), ("after", ROOT / "src")):
                    got[label].append(study(src, url, model, Path(d) / f"{label}{r}.sqlite", a.pairs))
            trials = 2 * 2 * a.pairs
            print(f"A/A compare of one llama-server (url: arms, tiny MoE {model.stat().st_size / 1e6:.0f} MB), "
                  f"-w tg32 -w pp128, {a.pairs} pairs ({trials} trials), -r 5; {a.rounds} studies each")
            print("| tool | s per trial (median) | s per trial (max) | s per study |")
            print("| --- | ---: | ---: | ---: |")
            for label, runs in got.items():
                per = sorted(x for _, ts in runs for x in ts)
                walls = [w for w, _ in runs]
                print(f"| {label} ({a.before if label == 'before' else 'this checkout'}) | {per[len(per) // 2]:.2f} | "
                      f"{per[-1]:.2f} | {sum(walls) / len(walls):.1f} |")
        finally:
            srv.kill()
            srv.wait()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)], check=False)


if __name__ == "__main__":
    main()
