"""A verdict a detected confounder could have steered drives no automatic decision
(comparisons.guard): on stored trials, the rule applied as bisect, decompose and scan read it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tokensleuth.drivers.verdicts.comparisons import analyze
from tokensleuth.store import PlannedTrial, ResultRow, SampleRow, Store, TrialOutcome
from tokensleuth.trials.spec import CompareSpec, build_compare_spec

BUSY = ("busy-process", "llama-bench[4242] 68% of a core")


def study(tmp_path: Path, load: dict[tuple[int, str], float], pairs: int = 10, seed: int = 3,
          both: bool = False) -> tuple[Store, str]:
    """An A/A of ``pairs`` pairs (0.5% noise per trial); ``load[(pair, arm)]`` slows that trial by
    the factor given and files a busy-process warning on it (on both of its pair's trials with
    ``both``: a load that hit the pair's two sides alike)."""
    rng = np.random.default_rng(seed)
    plan = [PlannedTrial(arm, "/m.gguf", "pp128", (), p) for p in range(pairs) for arm in ("a", "b")]
    s = Store(tmp_path / "s.db")
    sid = s.writes.create_study("compare", {"x": 1}, "h", [("a", "pypi:x==1", {}, (), {}), ("b", "pypi:x==1", {}, (), {})],
                         plan)
    for t in s.reads.planned(sid):
        key = (int(t["pair"]), str(t["arm"]))
        slow = load.get(key, 1.0)
        tps = [100 / slow * math.exp(rng.normal(0, 0.005)) for _ in range(3)]
        reps = tuple(SampleRow(i, int(128 / v * 1e9), 128) for i, v in enumerate(tps))
        r = ResultRow(0, "pp128", 128, 0, 0, float(np.mean(tps)), 0.0, {}, reps)
        loaded = key in load or (both and any((key[0], a) in load for a in ("a", "b")))
        s.writes.mark_running(t["id"])
        s.writes.finish_trial(t["id"], TrialOutcome("done", 0, "", "", 0.0, 1.0, 0, 10**9, {}, (r,), (),
                                             warnings=(BUSY,) if loaded else ()))
    return s, sid


def spec(confounders: str, band: float = 0.05) -> CompareSpec:
    return build_compare_spec({"arms": [{"name": "a", "source": "pypi:x==1"}, {"name": "b", "source": "pypi:x==1"}],
                               "models": ["/m.gguf"], "workloads": ["pp128"], "band": band,
                               "confounders": confounders}, "test")


# another llama-bench beside 7 of b's 10 trials, each of them 1.6x as long (decompose's dense
# control read "slower" 0.50 [0.27, 0.93] this way, with busy-process in 7 trials)
PLANTED = {(p, "b"): 1.6 for p in (0, 1, 3, 4, 6, 8, 9)}


def test_a_verdict_a_busy_neighbour_steered_waits(tmp_path: Path) -> None:
    s, sid = study(tmp_path, PLANTED)
    with s:
        (said,) = analyze(s, sid, spec("said"))
        (waits,) = analyze(s, sid, spec("wait"))
    # said: the verdict as the pairs give it, with the confounded pairs and the others' interval beside
    assert said.verdict == "slower" and said.confounded == {"busy-process": 7} and not said.steered
    assert said.clean is not None and said.clean.lo < 1 < said.clean.hi
    # the note computes both answers and says they differ (it said "the same answer" whatever they gave)
    assert said.clean_verdict == "same"
    assert said.confounder_note().endswith("which answers same where all pairs answer slower: that verdict "
                                           "rests on the pairs the confounder touched"), said.confounder_note()
    assert "the same answer" not in said.confounder_note()
    assert said.to_json()["confounded"]["clean_verdict"] == "same"
    # wait: the answer must hold on the clean pairs too; it does not, so the cell stays open
    assert waits.verdict == "unresolved" and waits.steered
    assert waits.estimate is not None and said.estimate is not None
    assert waits.estimate.lo <= said.estimate.lo and waits.estimate.hi >= 1
    assert "busy-process in 7 pairs" in waits.confounder_note() and "no decision" in waits.confounder_note()
    assert waits.to_json()["confounded"]["steered"] is True


def test_an_answer_the_clean_pairs_give_too_stands(tmp_path: Path) -> None:
    """A real 20% slowdown in every pair, and the neighbour beside 2 of b's trials: both the
    all-pairs and the clean-pairs intervals say slower, so the decision is taken."""
    slow = {(p, "b"): 1.2 for p in range(10)}
    slow.update({(p, "b"): 1.2 * 1.5 for p in (2, 7)})
    s, sid = study(tmp_path, {k: v for k, v in slow.items()})
    with s:
        # (every b trial is slower; only those of pairs 2 and 7 carry the warning)
        s.db.execute("DELETE FROM warnings WHERE trial_id IN (SELECT t.id FROM trials t WHERE t.pair NOT IN (2, 7))")
        s.db.commit()
        (c,) = analyze(s, sid, spec("wait"))
    assert c.verdict == "slower" and not c.steered and c.confounded == {"busy-process": 2}
    assert c.clean_verdict == "slower" and c.confounder_note().endswith(", the same answer (slower)")


def test_a_load_on_both_sides_of_every_pair_is_not_a_confounder(tmp_path: Path) -> None:
    """A busy host all along (the suite's other worker): every trial carries the warning, no pair is
    confounded, and the verdict is the pairs' own."""
    s, sid = study(tmp_path, {(p, "b"): 1.0 for p in range(10)}, both=True)
    with s:
        assert len(s.reads.warnings(sid)) == 20
        (c,) = analyze(s, sid, spec("wait"))
    assert c.confounded == {} and c.verdict == "same" and not c.steered
    # "the same" is said from the interval inside the band, and said with it
    from tokensleuth.drivers.verdicts.sentences import summary_sentence

    assert c.estimate is not None and 0.95 <= c.estimate.lo and c.estimate.hi <= 1.05
    line = summary_sentence([c], 0.05)
    assert line.startswith("b is the same as a within ±5% on pp128") and f"{(c.estimate.lo - 1) * 100:+.1f}%" in line
    s2, sid2 = study(tmp_path / "slow", PLANTED)
    with s2:
        (slow,) = analyze(s2, sid2, spec("said"))
    assert slow.verdict == "slower" and "the same" not in summary_sentence([slow], 0.05)


def test_a_neighbour_beside_every_trial_does_not_hide_one_beside_some(tmp_path: Path) -> None:
    """The suite's other worker (python3) beside every trial, and another llama-bench beside 7 of
    b's: the pairs are told apart by the neighbour's name."""
    s, sid = study(tmp_path, PLANTED)
    with s:
        for (tid,) in s.db.execute("SELECT id FROM trials WHERE study_id=?", (sid,)).fetchall():
            s.db.execute("INSERT INTO warnings (trial_id, code, detail) VALUES (?, 'busy-process', "
                         "'python3[77] 40% of a core')", (tid,))
        s.db.commit()
        (c,) = analyze(s, sid, spec("wait"))
    assert c.steered and c.verdict == "unresolved" and c.confounded == {"busy-process": 7}


def test_too_few_clean_pairs_give_no_interval_to_answer_with(tmp_path: Path) -> None:
    s, sid = study(tmp_path, {(p, "b"): 2.0 for p in range(9)})
    with s:
        (c,) = analyze(s, sid, spec("wait"))
    assert c.steered and c.estimate is None and c.verdict == "unresolved" and c.clean is None
    # withheld for want of an interval of its own, not for one that "answers otherwise"
    assert c.confounder_note() == ("pp128: busy-process in 9 pairs; the other pairs alone give nothing (too few pairs), "
                                   "no answer of their own, so no decision is taken on this cell until more pairs "
                                   "settle it"), c.confounder_note()
