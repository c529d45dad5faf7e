"""The confounder rule on real processes: another llama-bench runs beside 7 of arm b's 10 trials
(started before each of them, stopped after it), and the planted engine makes each of those
trials 2.2x as long per decode call: a slowdown that comes only with the neighbour, as when a
busy machine steered decompose's dense control to "slower". The real monitor names the
neighbour; the rule the judge decides by waits where compare's own verdict would not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tokensleuth.analysis import stats
from tokensleuth.drivers.verdicts.comparisons import analyze
from tokensleuth.drivers.verdicts.pairs import run_compare
from tokensleuth.store import Store
from tokensleuth.trials.spec import build_compare_spec

PLANTED = (1, 2, 4, 5, 7, 8, 9)  # the pairs whose b trial runs beside the neighbour (not the first)
SPIN_US = 1500  # the planted engine's busy wait per decode call; b's planted trials 2.2x that

WRAP = r'''#!{python}
"""llama-bench of arm {arm}: the planted engine with a busy wait per decode call, longer while
the file {slow} exists (the test makes it for b's planted trials). This process becomes llama-bench."""
import os, sys
real = "{real}"
us = {spin} * (2.2 if os.path.exists("{slow}") else 1)
os.execve(real, [real, *sys.argv[1:]], dict(os.environ, TOKENSLEUTH_SPIN_US=str(int(us))))
'''


def test_a_neighbour_that_slows_only_its_trials_steers_no_decision(dense_model: Path, tmp_path: Path) -> None:
    from tests.planted import planted_engine

    _, build = planted_engine()
    real = Path(build.bin_dir) / "llama-bench"
    slow = tmp_path / "slow"
    builds = {}
    for arm in ("a", "b"):
        d = tmp_path / arm
        d.mkdir()
        (d / "llama-bench").write_text(WRAP.format(python=sys.executable, arm=arm, real=real, spin=SPIN_US,
                                                   slow=slow if arm == "b" else tmp_path / "never"))
        (d / "llama-bench").chmod(0o755)
        builds[arm] = type(build)(f"bin:{d}", str(d), f"wrap-{arm}", None, None, (), build.compiler,
                                  build.backends, ("llama-bench",))
    data = {"arms": [{"name": "a", "source": builds["a"].source}, {"name": "b", "source": builds["b"].source}],
            "models": [str(dense_model)], "workloads": ["tg16"], "band": 0.05, "min_pairs": 10, "max_pairs": 10,
            "common_flags": ["-t", "1", "-r", "3"], "separate_processes": True}
    said_spec = build_compare_spec(data, "test")
    neighbour: list[subprocess.Popen[bytes]] = []
    pids: list[int] = []  # every neighbour started

    def stop() -> None:
        for p in neighbour:
            p.kill()
            p.wait()
        neighbour.clear()
        slow.unlink(missing_ok=True)

    with Store(tmp_path / "s.db") as store:
        def next_trial(*_: Any) -> None:
            """After each trial: the neighbour stops, and starts again before a planted b trial."""
            stop()
            nxt = store.db.execute("SELECT a.name, t.pair FROM trials t JOIN arms a ON a.id=t.arm_id"
                                   " WHERE t.status='planned' ORDER BY t.seq LIMIT 1").fetchone()
            if nxt is not None and nxt[0] == "b" and int(nxt[1]) in PLANTED:
                neighbour.append(subprocess.Popen([str(real), "-m", str(dense_model), "-p", "256", "-n", "0",
                                                   "-r", "100000", "-t", "1"], stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL))
                pids.append(neighbour[-1].pid)
                slow.touch()

        try:  # (the first trial runs without it: pair 0 is not planted)
            sid, _ = run_compare(store, said_spec, builds, on_trial=next_trial)
        finally:
            stop()
        # the real monitor named the neighbour (by its pid) beside b's planted trials, and beside no
        # trial of a (another test's llama-bench may be named too, beside either: a confounder as well)
        named = {(str(w["arm"]), p) for w in store.reads.warnings(sid) if w["code"] == "busy-process"
                 and any(f"llama-bench[{pid}]" in str(w["detail"]) for pid in pids)
                 for (p,) in store.db.execute("SELECT pair FROM trials WHERE id=?", (w["trial_id"],))}
        assert sorted(p for arm, p in named if arm == "b") == list(PLANTED), named
        assert not [p for arm, p in named if arm == "a"], named
        (said,) = analyze(store, sid, said_spec)
        (waits,) = analyze(store, sid, build_compare_spec({**data, "confounders": "wait"}, "test"))
        # the busy neighbours beside each trial, by name, read off the stored warnings themselves
        beside: dict[tuple[str, int], set[str]] = {}
        for w in store.reads.warnings(sid):
            if w["code"] == "busy-process":
                (pair,) = store.db.execute("SELECT pair FROM trials WHERE id=?", (w["trial_id"],)).fetchone()
                names = {part.split("[", 1)[0].strip() for part in str(w["detail"]).split(",")}
                beside.setdefault((str(w["arm"]), int(pair)), set()).update(names)
    # a pair counts when a neighbour is beside one of its trials and not the other. Each planted pair
    # counts, unless another test's llama-bench ran beside its a trial as well (the suite's parallel
    # workers): then both trials carry the same neighbour by name, and it cancels.
    differ = {p for p in range(10) if beside.get(("a", p), set()) != beside.get(("b", p), set())}
    assert said.confounded.get("busy-process", 0) == len(differ), (said.confounded, beside)
    assert {p for p in PLANTED if "llama-bench" not in beside.get(("a", p), set())} <= differ, beside
    assert said.estimate is not None and said.estimate.ratio < 0.85  # the pairs as compare reads them
    if said.clean is None:  # (another test's neighbour touched the other pairs too) no interval answers
        assert waits.estimate is None and waits.verdict == "unresolved" and waits.steered
        return
    # the rule: the judge's interval holds the clean pairs' too
    assert waits.estimate is not None
    assert (waits.estimate.lo, waits.estimate.hi) == (min(said.estimate.lo, said.clean.lo),
                                                       max(said.estimate.hi, said.clean.hi))
    # the judge waits where the untouched pairs alone answer otherwise than all pairs, and only there
    clean_says = stats.verdict(said.clean, 0.05)
    if clean_says != said.verdict:
        assert waits.steered and waits.verdict != said.verdict, (said.verdict, clean_says, waits.verdict)
    else:
        assert not waits.steered and waits.verdict == said.verdict
    # so it says slower only where the untouched pairs alone say so too
    assert waits.verdict != "slower" or clean_says == "slower"
