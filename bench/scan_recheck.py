"""Re-check a scan's steps by plain two-release compares (issue 43 item 3): none may be false.

For each step the scan reported, a separate `tokensleuth compare` of its parent and its first bad
commit, in a store of its own (fresh pairs: nothing the scan measured is reused), at the scan's
band, models, workloads and engine flags; and the same for the first interval the scan judged
the same (a neutral pair: it must not come out as a step). Prints, per pair, the scan's cells and
the compare's, and what the compare found of each (``classify``): confirmed (the scan's verdict,
beyond the band the same way, or the same), moved the same way but not beyond the band (its
interval excludes no change), contradicted (the other way, or the same where the scan saw a
step, or a step where the scan judged the same), or unresolved. An unresolved cell, on either
side, is never counted as agreement. Exit 1 where any cell is contradicted.

    .venv/bin/python bench/scan_recheck.py --db SCAN_DB --study SCAN_ID --out-db RECHECK_DB [--max-pairs 20]

A git history only (a --repo checkout or a packed bundle): the sources are the scan's own.
Killed, it goes on where it was when run again with the same --out-db (each compare resumes).

    .venv/bin/python bench/scan_recheck.py --reclass bench/results/scan_planted_6pct_recheck.txt

prints a stored re-check with each cell's class and the count line recomputed by ``classify`` from
the verdicts and intervals it printed (nothing measured again; other lines unchanged).
A control model's cells are shown beside the step's bisect's answer for it, not scored: the
bisect judged the control in a band of its own. The neutral pair is compared on the scanned
models alone, with up to twice --max-pairs (what the scan gives an interval it cannot decide).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tokensleuth.store import Store


def _full(repo: str, short: str) -> str:
    return subprocess.run(["git", "-C", repo, "rev-parse", f"{short}^{{commit}}"], check=True, capture_output=True,
                          text=True).stdout.strip()


def _compare(args: argparse.Namespace, spec: dict[str, Any], repo: str, a: str, b: str, *, controls: bool = True,
             pairs: int | None = None) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "c.json"
        cmd = [sys.executable, "-m", "tokensleuth.cli", "compare", "--resume", "--arm",
               f"parent=git:{repo}@{_full(repo, a)}", "--arm", f"next=git:{repo}@{_full(repo, b)}",
               "--band", f"{spec['band'] * 100:g}%", "--max-pairs", str(pairs or args.max_pairs),
               "--db", str(args.out_db), "--json", str(out), "--no-probe"]
        for m in spec["models"] + ((spec.get("control_models") or []) if controls else []):
            cmd += ["--model", m]
        for w in spec["workloads"]:
            cmd += ["-w", w]
        for f in spec.get("cmake") or []:
            cmd += ["--cmake", f]
        cmd += ["--", *(spec.get("flags") or [])]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode not in (0, 1) or not out.exists():
            raise SystemExit(f"compare {a} → {b} failed ({p.returncode}): {p.stderr[-2000:]}")
        return list(json.loads(out.read_text())["comparisons"])


KINDS = ("confirmed", "moved, not beyond the band", "contradicted", "unresolved")
DECIDED = ("slower", "faster", "same")


def classify(scan: str, got: str, ci: tuple[float, float] | None) -> str:
    """What a re-check found of one cell the scan judged ``scan`` (slower, faster, same or
    unresolved), from the compare's verdict ``got`` and its interval of the ratio. Confirmed
    means the compare gave the scan's own decided verdict. A cell the scan left unresolved made
    no claim, so nothing confirms or contradicts it: it is unresolved whatever the compare says."""
    if scan not in DECIDED:
        return "unresolved"
    if got == scan:
        return "confirmed"
    if scan in ("slower", "faster"):
        if got in DECIDED:  # the other way, or within the band: not the step
            return "contradicted"
        side = ci is not None and (ci[1] < 1 if scan == "slower" else ci[0] > 1)
        return "moved, not beyond the band" if side else "unresolved"
    if got in ("slower", "faster"):  # a step where the scan judged the interval the same
        return "contradicted"
    return "unresolved"


CELL = re.compile(r"^(  \S+ \S+: scan (\w+), compare (\w+) [\d.]+ (?:\[([\d.]+), ([\d.]+)\] )?after \d+ pairs) — (.+)$")
COUNTS = re.compile(r"^(\d+ pairs re-checked: ).+$")


def reclass(text: str) -> str:
    """A stored re-check's text with each scored cell's class, and the count line, as ``classify``
    decides them from the verdicts and intervals printed (control cells are not scored)."""
    found = dict.fromkeys(KINDS, 0)
    out = []
    for line in text.splitlines():
        if m := CELL.match(line):
            head, scan, got, lo, hi = m.group(1, 2, 3, 4, 5)
            kind = classify(scan, got, (float(lo), float(hi)) if lo else None)
            found[kind] += 1
            line = f"{head} — {kind}"
        elif m := COUNTS.match(line):
            line = m.group(1) + ", ".join(f"{n} {k}" for k, n in found.items())
        out.append(line)
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reclass", type=Path, help="print this stored re-check re-classified; measure nothing")
    ap.add_argument("--db", type=Path)
    ap.add_argument("--study")
    ap.add_argument("--out-db", type=Path)
    ap.add_argument("--max-pairs", type=int, default=20)
    args = ap.parse_args()
    if args.reclass:
        sys.stdout.write(reclass(args.reclass.read_text()))
        return 0
    if not (args.db and args.study and args.out_db):
        ap.error("--db, --study and --out-db are needed (or --reclass FILE)")
    with Store(args.db) as store:
        sid = store.reads.study(args.study)["id"]
        spec = dict(store.reads.study(sid)["spec"])
        r = store.state.get(sid, "result") or {}
    repo = str(spec["first"]).removeprefix("git:").rpartition("@")[0]
    pairs = [(f"step {n} ({s.get('subject') or s['first_bad']}, {s['direction']})", s["parent"], s["first_bad"],
              {(Path(c["model"]).stem, c["workload"]): c["verdict"] for c in s["cells"]},
              {(Path(c["model"]).stem, c["workload"]): c["verdict"]
               for c in (s.get("controls") or {}).get("parent_vs_culprit") or []}, False)
             for n, s in enumerate(r.get("steps") or [], 1)]
    if r.get("same"):
        same = r["same"][0]
        pairs.append((f"neutral ({same['commits']} commits judged the same)", same["from"], same["to"], {}, {}, True))
    measured = {Path(m).stem for m in spec["models"]}
    found = dict.fromkeys(KINDS, 0)
    for label, a, b, scan, controls, neutral in pairs:
        # (the neutral pair: the scan measured no control there; its own models, as many pairs as it had)
        comps = _compare(args, spec, repo, a, b, controls=not neutral, pairs=2 * args.max_pairs if neutral else None)
        print(f"{label}: {a} → {b}")
        for c in comps:
            key = (Path(c["model"]).stem, c["workload"])
            ci = f"[{c['ci'][0]:.3f}, {c['ci'][1]:.3f}]" if c.get("ci") else ""
            got = f"compare {c['verdict']} {c.get('ratio') or 0:.3f} {ci} after {c['pairs']} pairs"
            if key[0] not in measured:  # a control model: the scan judged it only in the step's bisect, in a
                # band of its own (half the step), so its answer is shown beside this one, not scored
                said = f"the bisect's control answer {controls[key]}" if key in controls else "not measured by the scan"
                print(f"  {key[0]} {key[1]} (control): {said}; {got}")
                continue
            want = scan.get(key, "same")
            kind = classify(want, c["verdict"], tuple(c["ci"]) if c.get("ci") else None)
            found[kind] += 1
            print(f"  {key[0]} {key[1]}: scan {want}, {got} — {kind}")
    print(f"{len(pairs)} pairs re-checked: " + ", ".join(f"{n} {k}" for k, n in found.items()))
    bad = found["contradicted"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
