"""tests/rules.py against the code it restates: the real compare driver, run on a simulated
llama-bench whose noise is chosen, stops where the replay says; the interval is analyze's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests import rules
from tests.conftest import GOLDEN
from tokensleuth.sources.build import BuildCache, EngineBuild
from tokensleuth.store import Store

# A llama-bench that prints the golden JSON line per test with its own t/s: each process at a
# level drawn with SD FAKE_SD (log scale), its repetitions a third of that around it; FAKE_COLD
# slows every process's first repetition by half. Seeded by its run's number (FAKE_COUNT counts
# them), so a study's samples are the same at every run.
FAKE = '''#!{python}
import json, os, random, sys
args = sys.argv[1:]
if "--help" in args:
    sys.stdout.write(open("{golden}/llama-bench-help-b11434.txt").read())
    sys.exit(0)
if "--version" in args:
    print("version: 11434 (unknown)", file=sys.stderr)
    sys.exit(0)
count = os.environ["FAKE_COUNT"]
run = int(open(count).read()) if os.path.exists(count) else 0
open(count, "w").write(str(run + 1))
random.seed(run)
row = json.loads(open("{golden}/b11434-jsonl.stdout").readline())
opt = lambda name, default: args[args.index(name) + 1] if name in args else default
sd = float(os.environ.get("FAKE_SD", "0.01"))
level = random.gauss(0, sd)
for p, n in [(int(x), 0) for x in opt("-p", "512").split(",") if int(x)] + \\
        [(0, int(x)) for x in opt("-n", "128").split(",") if int(x)]:
    ts = [1000 * 2.718281828 ** (level + random.gauss(0, sd / 3)) for _ in range(int(opt("-r", "5")))]
    if os.environ.get("FAKE_COLD"):
        ts[0] /= 1.5
    ns = [int((p or n) / t * 1e9) for t in ts]
    print(json.dumps(dict(row, n_prompt=p, n_gen=n, n_depth=0, samples_ns=ns, samples_ts=ts, avg_ts=sum(ts) / len(ts),
                          stddev_ts=0.0, avg_ns=sum(ns) // len(ns), stddev_ns=0, model_filename=opt("-m", ""))),
          flush=True)
'''
MODEL = "/m.gguf"


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> EngineBuild:
    monkeypatch.setenv("FAKE_COUNT", str(tmp_path / "runs"))
    d = tmp_path / "bin"
    d.mkdir()
    (d / "llama-bench").write_text(FAKE.format(python=sys.executable, golden=GOLDEN))
    (d / "llama-bench").chmod(0o755)
    return BuildCache().get(f"bin:{d}")


def _study(store: Store, fake: EngineBuild, data: dict[str, Any], **kw: Any) -> str:
    from tokensleuth.drivers.verdicts.pairs import run_compare
    from tokensleuth.trials.spec import build_compare_spec

    spec = build_compare_spec({"arms": [{"name": "A", "source": fake.source}, {"name": "B", "source": fake.source}],
                               "models": [MODEL], "common_flags": ["-r", "3"], **data}, "t")
    sid, _ = run_compare(store, spec, {"A": fake, "B": fake}, create=True, **kw)
    return sid


@pytest.mark.parametrize("sd", [0.003, 0.05, 0.3])
def test_the_replay_stops_where_the_driver_did(fake: EngineBuild, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               sd: float) -> None:
    """Two-sided (futility included, joined cells parting), one-sided, and a forced round."""
    from tokensleuth.drivers.verdicts.comparisons import analyze, stored_spec

    monkeypatch.setenv("FAKE_SD", str(sd))
    with Store(tmp_path / "s.db") as store:
        # an A/A at ±2%: `same` early at the least noise, futile after 24 pairs at the middle (these
        # samples), unresolved at the cap at the most
        data = {"workloads": ["tg8", "pp16"], "band": 0.02, "min_pairs": 3, "max_pairs": 40}
        sid = _study(store, fake, data)
        planned = rules.planned_pairs(store, sid)
        for c in analyze(store, sid, stored_spec(store, sid)):
            iv = rules.interval(rules.paired_rates(store, sid, MODEL, c.workload, "A", "B"))
            assert iv is not None and c.estimate is not None and c.verdict == rules.band_verdict(iv, 0.02)
            assert (iv.pairs, iv.ratio, iv.lo, iv.hi) == pytest.approx(
                (c.estimate.pairs, c.estimate.ratio, c.estimate.lo, c.estimate.hi), rel=1e-12)
            assert planned[(MODEL, c.workload)] == rules.stopped_at(store, sid, MODEL, c.workload, ("A", "B"),
                                                                    band=0.02, min_pairs=3, max_pairs=40)
    one = {"workloads": ["tg8"], "band": 0.001, "min_pairs": 4, "max_pairs": 40}
    for edge in (0.99, 1.01):  # an A/A settles above the one, below the other
        with Store(tmp_path / f"edge{edge}.db") as store:
            sid = _study(store, fake, {**one, "edge": edge})
            n = rules.stopped_at(store, sid, MODEL, "tg8", ("A", "B"), band=0.001, min_pairs=4, max_pairs=40,
                                 edge=edge)
            assert rules.planned_pairs(store, sid)[(MODEL, "tg8")] == n
            # asked again two-sided, with a round forced past its cap (a judge's second look)
            assert _study(store, fake, {**one, "max_pairs": 8}, add_pairs_to=n + 2) == sid
            assert rules.planned_pairs(store, sid)[(MODEL, "tg8")] == rules.stopped_at(
                store, sid, MODEL, "tg8", ("A", "B"), band=0.001, min_pairs=4, max_pairs=8, start=n,
                add_pairs_to=n + 2)


def test_as_of_is_the_study_after_a_round(fake: EngineBuild, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cold repetitions are found again from the earlier pairs alone: the -r the driver gave the
    second round is the user's and those the first round showed."""
    import json

    from tokensleuth.analysis.results import load_cells

    monkeypatch.setenv("FAKE_COLD", "1")
    with Store(tmp_path / "s.db") as store:
        sid = _study(store, fake, {"workloads": ["tg8"], "band": 0.001, "min_pairs": 4, "max_pairs": 8})
        with rules.as_of(store, sid, 4) as first:
            assert {t["pair"] for t in first.reads.trials(sid)} == {0, 1, 2, 3}
            assert len(rules.paired_rates(first, sid, MODEL, "tg8", "A", "B")) == 4
            (found,) = {c.cold.count if c.cold else 0 for c in load_cells(first, sid)}
        assert found == 1 and len(store.reads.trials(sid)) == 16  # the copy left the study whole
        later = [json.loads(t["argv_json"]) for t in store.reads.trials(sid) if t["pair"] >= 4]
        assert all(a[a.index("-r") + 1] == str(3 + found) for a in later)


def test_a_failed_trial_is_said_not_replayed(fake: EngineBuild, tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store:
        sid = _study(store, fake, {"workloads": ["tg8"], "band": 0.05, "min_pairs": 2, "max_pairs": 2})
        store.db.execute("UPDATE trials SET status='failed' WHERE seq=0")
        with pytest.raises(AssertionError, match="did not finish"):
            rules.stopped_at(store, sid, MODEL, "tg8", ("A", "B"), band=0.05, min_pairs=2, max_pairs=2)
