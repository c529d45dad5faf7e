"""`tokensleuth compare` on the real engine: A/A, threads, a planted slowdown, resume."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import tokensleuth_bin
from tokensleuth.drivers.verdicts.comparisons import Comparison
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import EngineBuild

E = DEFAULT_ENGINE


def compare(args: list[str], env: dict[str, str], tmp_path: Path, timeout: float = 900) -> tuple[
        subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "c.json"
    p = subprocess.run([tokensleuth_bin(), "compare", "--json", str(out), *args], env=env,
                       capture_output=True, text=True, timeout=timeout)
    doc = json.loads(out.read_text()) if out.exists() else {}
    return p, doc


def test_workloads_one_process_can_run_are_joined() -> None:
    from tokensleuth.core.workloads import trial_workloads
    from tokensleuth.engines import engine_for

    joined_flags = engine_for("llama-bench").argv_for

    assert joined_flags(["tg32", "pp512"]) == ["-p", "512", "-n", "32", "-d", "0"]
    assert joined_flags(["pp512@d4096", "tg32@d4096", "pp512+tg32@d4096"]) == [
        "-p", "512", "-n", "32", "-pg", "512,32", "-d", "4096"]
    assert joined_flags(["pp64", "pp512", "tg16"]) == ["-p", "64,512", "-n", "16", "-d", "0"]
    assert joined_flags(["tg32"]) == ["-p", "0", "-n", "32", "-d", "0"]  # one workload: a process of its own
    assert joined_flags(["tg32", "pp512@d4096"]) is None  # two depths would cross
    assert joined_flags(["pp512+tg32", "pp64+tg8"]) is None
    assert joined_flags(["tg32", "tg32xc4"]) is None  # a concurrent workload is a server's
    assert trial_workloads("tg32,pp512") == ["tg32", "pp512"] and trial_workloads("") == [""]


def test_a_round_joins_the_open_workloads_of_a_model_and_leaves_decided_ones_out() -> None:
    from tokensleuth.drivers.verdicts.pairs import round_trials
    from tokensleuth.engines import engine_for

    def joins(ws: Sequence[str]) -> bool:
        return engine_for("llama-bench").argv_for(ws) is not None

    m, d = "moe.gguf", "dense.gguf"
    # the first round: every cell open at pair 0, one trial per model for both workloads
    first = round_trials({(m, "tg32"): 5, (m, "pp512"): 5, (d, "tg32"): 5, (d, "pp512"): 5}, {}, {(m, "pp512"): 1},
                         joins)
    assert first == [(m, "tg32,pp512", ["tg32", "pp512"], 1, 0, 5),
                     (d, "tg32,pp512", ["tg32", "pp512"], 0, 0, 5)]
    # tg32 decided on the MoE model: its next trials run pp512 alone; the dense model's stay joined
    have = {(m, "tg32"): 5, (m, "pp512"): 5, (d, "tg32"): 5, (d, "pp512"): 5}
    nxt = round_trials({(m, "pp512"): 10, (d, "tg32"): 10, (d, "pp512"): 10}, have, {}, joins)
    assert nxt == [(m, "pp512", ["pp512"], 0, 5, 10),
                   (d, "tg32,pp512", ["tg32", "pp512"], 0, 5, 10)]
    # cells at different pairs (one re-asked for more) are not joined
    apart = round_trials({(m, "tg32"): 20, (m, "pp512"): 20}, {(m, "tg32"): 10, (m, "pp512"): 5}, {}, joins)
    assert [(r[1], r[4]) for r in apart] == [("tg32", 10), ("pp512", 5)]
    # a process per workload
    assert [r[1] for r in round_trials({(m, "tg32"): 5, (m, "pp512"): 5}, {}, {}, None)] == ["tg32", "pp512"]


def test_aa_gives_each_cell_the_rules_verdict(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str],
                                              tmp_path: Path) -> None:
    """An A/A over two workloads: each cell is reported with the band's verdict on its stored
    pairs, and its rounds stop where compare's schedule says on them. (Whether an A/A reads
    `same` or `unresolved` is the machine's noise; how rarely it reads a finding is
    bench/verdict_quality.py's to measure, not one run's to assert.)"""
    from tests import rules
    from tokensleuth.drivers.verdicts.comparisons import stored_spec
    from tokensleuth.store import Store

    p, doc = compare(["--arm", f"a={E}", "--arm", f"b={E}", "--model", str(dense_model),
                      "-w", "tg16", "-w", "pp64", "--max-pairs", "10", "--", "-r", "3", "-t", "1"], cli_env, tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(c["workload"] for c in doc["comparisons"]) == ["pp64", "tg16"]
    sid = doc["study"]
    with Store(Path(cli_env["TOKENSLEUTH_DB"])) as store:
        spec = stored_spec(store, sid)
        planned = rules.planned_pairs(store, sid)
        for c in doc["comparisons"]:
            cell = (c["model"], c["workload"])
            iv = rules.interval(rules.paired_rates(store, sid, *cell, "a", "b"))
            assert iv is not None and c["pairs"] == iv.pairs, (c, iv)
            assert c["ratio"] == pytest.approx(iv.ratio) and c["ci"] == pytest.approx([iv.lo, iv.hi]), (c, iv)
            assert c["verdict"] == rules.band_verdict(iv, spec.band), (c, iv)
            assert planned[cell] == rules.stopped_at(store, sid, *cell, ("a", "b"), band=spec.band,
                                                     min_pairs=spec.min_pairs, max_pairs=spec.max_pairs), c
    assert doc["schema_version"] == 1 and doc["summary"]


def test_a_planted_wait_is_slower_on_tg(engine: EngineBuild, moe_model: Path, cli_env: dict[str, str],
                                       tmp_path: Path) -> None:
    """A 1.5 ms busy wait per decode call at -t 1: slower whatever else runs on the machine
    (2 threads against 1 on 2 cores measured the machine's load, not the engine)."""
    from tests.planted import planted_engine

    src, _ = planted_engine()
    p, doc = compare(["--arm", f"base={src}", "--arm", f"spin={src}", "--env", "spin:TOKENSLEUTH_SPIN_US=1500",
                      "--model", str(moe_model), "-w", "tg32", "--", "-r", "3", "-t", "1"], cli_env, tmp_path)
    assert p.returncode == 0, p.stderr
    (c,) = doc["comparisons"]
    assert (c["baseline"], c["candidate"], c["verdict"]) == ("base", "spin", "slower")
    assert c["ci"][1] < 0.99
    # one compute thread: each arm's busy cores is a real figure, at most one core (and a bit)
    for arm in ("baseline", "candidate"):
        assert 0 < c["resources"][arm]["busy_cores"] <= 1.15, c["resources"][arm]
    assert "spin (TOKENSLEUTH_SPIN_US=1500) is" in p.stdout and "% slower than base" in p.stdout
    # the plan interleaved the arms: never all of one arm first
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    arms = [r[0] for r in con.execute("SELECT a.name FROM trials t JOIN arms a ON a.id=t.arm_id ORDER BY seq")]
    assert arms[:4] == ["base", "spin", "spin", "base"]


def test_a_trial_runs_every_workload_of_its_model_in_one_process(engine: EngineBuild, moe_model: Path,
                                                                 cli_env: dict[str, str], tmp_path: Path) -> None:
    """Two workloads, one llama-bench process per trial: the model is loaded once for both, each
    test lands in its own cell, and a wait planted per decode call is found on tg only.
    --separate-processes gives each workload its own process again."""
    from tests.planted import planted_engine
    from tokensleuth.drivers.verdicts.comparisons import JOINED_DESIGN

    src, _ = planted_engine()
    args = ["--arm", f"base={src}", "--arm", f"spin={src}", "--env", "spin:TOKENSLEUTH_SPIN_US=1500",
            "--model", str(moe_model), "-w", "tg32", "-w", "pp64"]
    p, doc = compare([*args, "--max-pairs", "20", "--", "-r", "3", "-t", "1"], cli_env, tmp_path)
    assert p.returncode == 0, p.stderr
    cells = {c["workload"]: c for c in doc["comparisons"]}
    assert sorted(cells) == ["pp64", "tg32"]
    assert cells["tg32"]["verdict"] == "slower" and cells["tg32"]["ci"][1] < 0.99, cells["tg32"]
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    (sid, spec_json), = con.execute("SELECT id, spec_json FROM studies WHERE kind='compare'").fetchall()
    assert json.loads(spec_json)["design"] == JOINED_DESIGN
    assert all(c["design"] == JOINED_DESIGN for c in doc["comparisons"])
    trials = con.execute("SELECT id, workload, argv_json, status, pair FROM trials WHERE study_id=?",
                         (sid,)).fetchall()
    assert all(t[3] == "done" for t in trials)
    # the first round: both workloads in each process; a cell decided is left out of later ones
    assert {t[1] for t in trials if t[4] < 5} == {"tg32,pp64"}
    assert {t[1] for t in trials} <= {"tg32,pp64", "tg32", "pp64"}
    for tid, w, argv, _st, _pair in trials:
        tests = [r[0] for r in con.execute("SELECT test FROM results WHERE trial_id=? ORDER BY test_idx", (tid,))]
        if w == "tg32,pp64":
            assert json.loads(argv)[:6] == ["-p", "64", "-n", "32", "-d", "0"] and tests == ["pp64", "tg32"]
        else:
            assert tests == [w]
    # each cell's pairs are the pairs of the trials that ran its workload, and no trial ran a
    # workload it did not need: after the first round, only open cells
    for name, c in cells.items():
        assert c["pairs"] == len({t[4] for t in trials if name in t[1].split(",")})
    assert len(trials) == 2 * len({t[4] for t in trials})
    # a process per workload, when asked
    db2 = tmp_path / "separate.db"
    q, doc2 = compare([*args, "--separate-processes", "--db", str(db2), "--min-pairs", "2", "--max-pairs", "2", "--",
                       "-r", "2", "-t", "1"], cli_env, tmp_path)
    assert q.returncode in (0, 1), q.stderr
    ws = sorted(r[0] for r in sqlite3.connect(db2).execute("SELECT workload FROM trials"))
    assert ws == ["pp64"] * 4 + ["tg32"] * 4
    assert "design" not in json.loads(sqlite3.connect(db2).execute("SELECT spec_json FROM studies").fetchone()[0])
    assert not any("design" in c for c in doc2["comparisons"])


def test_a_study_begun_with_a_process_per_workload_goes_on_so(engine: EngineBuild, dense_model: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A study stored before one process per model (its identity has no design) is continued as
    it began — by --resume while unfinished, and by a driver asking for it again (bisect's
    judge) once finished — never measured again from its start under the new design."""
    from tokensleuth.drivers.verdicts import pairs as cmp
    from tokensleuth.store import Store
    from tokensleuth.trials.spec import build_compare_spec

    src = f"bin:{engine.bin_dir}"
    spec = build_compare_spec({"arms": [{"name": "A", "source": src}, {"name": "B", "source": src}],
                               "models": [str(dense_model)], "workloads": ["tg8", "pp32"], "band": 0.3,
                               "min_pairs": 2, "max_pairs": 2, "common_flags": ["-r", "2", "-t", "1"]}, "test")
    builds = {"A": engine, "B": engine}
    with Store(tmp_path / "s.db") as store:
        with monkeypatch.context() as m:  # the older version: a process per workload
            m.setattr(cmp, "joins_workloads", lambda spec: False)
            old, _ = cmp.run_compare(store, spec, builds)
        n = len(store.reads.trials(old))
        assert n == 8 and {t["workload"] for t in store.reads.trials(old)} == {"tg8", "pp32"}
        again, comps = cmp.run_compare(store, spec, builds, create=True)
        assert again == old and len(store.reads.trials(old)) == n and len(comps) == 2
        store.writes.finish_study(old, "interrupted")
        resumed, _ = cmp.run_compare(store, spec, builds, resume=True)
        assert resumed == old and {t["workload"] for t in store.reads.trials(old)} == {"tg8", "pp32"}
        fresh, _ = cmp.run_compare(store, spec, builds)  # a new study: one process per model
        assert fresh != old and {t["workload"] for t in store.reads.trials(fresh)} == {"tg8,pp32"}


@pytest.mark.slow
def test_planted_slowdown_is_found_with_the_interval_of_its_pairs(
        engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    """A wait planted per decode call, sized to about 30% of a token: `slower`, with the ratio and
    interval that the stored pairs give, computed here apart from the tool's statistics. (A
    reference ratio measured before the compare is the machine's of another moment: on a fresh
    machine whose tg32 at -t 1 ran anywhere from 800 to 1850 t/s, the two need not agree.)"""
    from tests import rules
    from tests.planted import planted_engine
    from tokensleuth.store import Store

    src, build = planted_engine()
    bench = Path(build.bin_dir) / "llama-bench"
    # Calibrate a spin that costs ~30% of a token (-t 1: not the load's). (5% ended unresolved,
    # [0.905, 0.998], with another core busy; 10% ended unresolved at [0.817, 1.011] after 40
    # pairs on a fresh machine: a plant the host's noise cannot erase.)
    out = subprocess.run([str(bench), "-m", str(dense_model), "-p", "0", "-n", "32", "-t", "1", "-o", "jsonl",
                          "-r", "20"], env={**cli_env, "TOKENSLEUTH_SPIN_US": "0"}, capture_output=True, text=True,
                         check=True)
    spin_us = int(0.30 / float(json.loads(out.stdout)["avg_ts"]) * 1e6 / 0.70)
    p, doc = compare(["--arm", f"base={src}", "--arm", f"spin={src}", "--env", f"spin:TOKENSLEUTH_SPIN_US={spin_us}",
                      "--model", str(dense_model), "-w", "tg32", "--", "-r", "5", "-t", "1"], cli_env, tmp_path)
    assert p.returncode == 0, p.stderr
    (c,) = doc["comparisons"]
    assert c["verdict"] == "slower", c
    with Store(Path(cli_env["TOKENSLEUTH_DB"])) as store:
        iv = rules.interval(rules.paired_rates(store, doc["study"], c["model"], "tg32", "base", "spin"))
    assert iv is not None and c["pairs"] == iv.pairs, (c, iv)
    assert c["ratio"] == pytest.approx(iv.ratio) and c["ci"] == pytest.approx([iv.lo, iv.hi]), (c, iv)


def test_resume_continues_with_its_pairs(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str],
                                         tmp_path: Path) -> None:

    from tests.gate import Gate

    db = cli_env["TOKENSLEUTH_DB"]
    # the last of the study's 10 trials is held until the kill: the kill lands part-way, however
    # slowly the poll below comes round
    gate = Gate(tmp_path / "gate", Path(engine.bin_dir), hold=9)
    e = f"bin:{gate.bin_dir}"
    args = [tokensleuth_bin(), "compare", "--arm", f"a={e}", "--arm", f"b={e}", "--model", str(dense_model),
            "-w", "tg16", "--min-pairs", "5", "--max-pairs", "5", "--no-probe", "--", "-r", "2", "-t", "1"]
    proc = subprocess.Popen(args, env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def done() -> int:
        try:
            con = sqlite3.connect(db, timeout=30)
            return int(con.execute("SELECT COUNT(*) FROM trials WHERE status='done'").fetchone()[0])
        except sqlite3.OperationalError:
            return 0

    gate.kill_when(proc, done, 3)
    before = done()
    assert 3 <= before < 10
    p = subprocess.run([*args[:2], "--resume", *args[2:]], env=cli_env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM studies").fetchone()[0] == 1
    rows = con.execute("SELECT pair, COUNT(*) FROM trials WHERE status='done' GROUP BY pair").fetchall()
    assert rows == [(i, 2) for i in range(5)]
    assert p.stderr.count(" done: ") == 10 - before


def test_study_file(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    f = tmp_path / "study.toml"
    f.write_text(f'''
band = "2%"
max_pairs = 5
models = ["{dense_model}"]
workloads = ["tg8"]
common_flags = "-r 2"
[[arms]]
name = "base"
source = "{E}"
[[arms]]
name = "alt"
source = "{E}"
flags = "-t 1"
''')
    p, doc = compare(["--study", str(f)], cli_env, tmp_path)
    assert p.returncode == 0, p.stderr
    assert doc["band"] == 0.02 and doc["comparisons"][0]["candidate"] == "alt"
    bad = tmp_path / "bad.toml"
    bad.write_text('band = "2%"\nmodels = []\nbogus = 1\n[[arms]]\nname = "a"\nsource = "x"\n')
    p, _ = compare(["--study", str(bad)], cli_env, tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args,msg", [
    (["--arm", f"a={E}"], "at least two arms"),
    (["--arm", f"a={E}", "--arm", f"a={E}"], "given twice"),
    (["--arm", "a", "--arm", f"b={E}"], "NAME=SOURCE"),
    (["--arm", f"a={E}", "--arm", f"b={E}", "--flags", "c=-t 1"], "--flags"),
    (["--arm", f"a={E}", "--arm", f"b={E}", "--env", "b=X"], "NAME:VAR=VALUE"),
    (["--arm", f"a={E}", "--arm", f"b={E}", "-w", "zz9"], "unknown workload"),
    (["--arm", f"a={E}", "--arm", f"b={E}", "--band", "abc"], "band"),
    (["--arm", f"a={E}", "--arm", f"b={E}", "--baseline", "c"], "--baseline"),
    (["--arm", f"a={E}", "--arm", f"b={E}", "--", "-p", "512"], "conflicts with --workload"),
])
def test_bad_compare_inputs(args: list[str], msg: str, engine: EngineBuild, dense_model: Path,
                            cli_env: dict[str, str]) -> None:
    p = subprocess.run([tokensleuth_bin(), "compare", "--model", str(dense_model), *args], env=cli_env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and msg in p.stderr, p.stderr
    assert not Path(cli_env["TOKENSLEUTH_DB"]).exists()


def test_a_one_sided_question_stops_once_its_side_is_settled(engine: EngineBuild, dense_model: Path,
                                                              tmp_path: Path) -> None:
    """An A/A with edge 0.2 (bisect's "like good or like bad?" far below) stops at the first round
    whose interval lies wholly on one side of it, although a ±0.1% band is far from settled
    there: the same study asked two-sided goes on. Both stops are replayed on the stored pairs
    (the first round settles the side on a quiet machine; one fresh run needed the second)."""
    from tests import rules
    from tokensleuth.analysis import stats
    from tokensleuth.drivers.verdicts.pairs import run_compare
    from tokensleuth.store import Store
    from tokensleuth.trials.spec import build_compare_spec

    data: dict[str, Any] = {"arms": [{"name": "A", "source": E}, {"name": "B", "source": E}],
                            "models": [str(dense_model)], "workloads": ["tg8"], "band": 0.001,
                            "min_pairs": 4, "max_pairs": 40, "common_flags": ["-r", "2", "-t", "1"]}
    cell = (str(dense_model), "tg8")
    with Store(tmp_path / "s.db") as store:
        sid, comps = run_compare(store, build_compare_spec({**data, "edge": 0.2}, "t"), {"A": engine, "B": engine},
                                 create=True)
        one_sided = rules.stopped_at(store, sid, *cell, ("A", "B"), band=0.001, min_pairs=4, max_pairs=40, edge=0.2)
        assert rules.planned_pairs(store, sid)[cell] == one_sided
        assert stats.side(comps[0].estimate, 0.2) is not None or one_sided == 40, comps[0].estimate
        # the same study asked two-sided goes on from there: its interval is no answer to a ±0.1% band
        again, _ = run_compare(store, build_compare_spec({**data, "max_pairs": 8}, "t"), {"A": engine, "B": engine},
                               create=True)
        assert again == sid
        assert rules.planned_pairs(store, sid)[cell] == rules.stopped_at(
            store, sid, *cell, ("A", "B"), band=0.001, min_pairs=4, max_pairs=8, start=one_sided)


def test_a_callers_answered_question_stops_the_rounds(engine: EngineBuild, dense_model: Path, tmp_path: Path) -> None:
    """``until`` (decompose: the step is decided, though a cell is still open) ends the study
    after the round that answered it; the cells stay as measured. The same study asked again
    for more pairs without it goes on where it stopped."""
    from tests import rules
    from tokensleuth.drivers.verdicts.pairs import run_compare
    from tokensleuth.store import Store
    from tokensleuth.trials.spec import build_compare_spec

    spec = build_compare_spec({"arms": [{"name": "A", "source": E}, {"name": "B", "source": E}],
                               "models": [str(dense_model)], "workloads": ["tg8"], "band": 0.001,
                               "min_pairs": 3, "max_pairs": 6, "common_flags": ["-r", "2", "-t", "1"]}, "t")
    asked: list[int] = []

    def answered(cs: list[Comparison]) -> bool:
        asked.append(cs[0].pairs)
        return len(asked) > 1  # answered by the first round, whatever it measured

    cell = (str(dense_model), "tg8")
    with Store(tmp_path / "s.db") as store:
        sid, comps = run_compare(store, spec, {"A": engine, "B": engine}, create=True, until=answered)
        # asked after each round (the first before anything was measured): the first round was the
        # last, though a ±0.1% band leaves an A/A open after 3 pairs (the rule goes on to 6)
        assert asked == [0, comps[0].pairs] and rules.planned_pairs(store, sid)[cell] == 3, asked
        assert store.reads.study(sid)["status"] == "done"
        assert comps[0].verdict == rules.band_verdict(
            rules.interval(rules.paired_rates(store, sid, *cell, "A", "B")), 0.001)
        # asked for more (as decompose's second look does), without it: one more round, to 6, while open
        again, comps = run_compare(store, spec, {"A": engine, "B": engine}, create=True, add_pairs_to=6)
        assert again == sid
        assert rules.planned_pairs(store, sid)[cell] == rules.stopped_at(
            store, sid, *cell, ("A", "B"), band=0.001, min_pairs=3, max_pairs=6, start=3, add_pairs_to=6)


def test_the_placement_comes_from_each_arms_first_trial_with_no_load_of_its_own(
        engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    """Where the weights live is read from the load log of each arm's first real trial (-v): no
    engine process loads the model except the trials (at 32 GB a load is 5-14 s)."""
    real = Path(engine.bin_dir) / "llama-bench"
    log = tmp_path / "loads.log"
    arms = []
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        w = d / "llama-bench"  # the real engine, counting the processes that load a model
        w.write_text(f'#!/bin/bash\ncase " $* " in *" -m "*) echo "$*" >> {log};; esac\nexec {real} "$@"\n')
        w.chmod(0o755)
        arms += ["--arm", f"{name}=bin:{d}"]
    p, doc = compare([*arms, "--model", str(dense_model), "-w", "tg8", "--min-pairs", "3", "--max-pairs", "3",
                      "--no-probe", "--", "-r", "2", "-t", "1"], cli_env, tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    sid = doc["study"]
    argvs = [json.loads(r[0]) for r in con.execute("SELECT argv_json FROM trials WHERE study_id=?", (sid,))]
    loads = log.read_text().splitlines()
    assert len(loads) == len(argvs) == 6  # one load per trial, none besides
    assert sum("-v" in a for a in argvs) == 2  # the first trial of each arm logs its load
    placement = json.loads(con.execute("SELECT value_json FROM state WHERE study_id=? AND key='placement'",
                                       (sid,)).fetchone()[0])
    assert set(placement) == {"a", "b"}
    for arm in placement.values():
        entry = arm[str(dense_model)]
        assert sum(entry["model_mib"].values()) > 0 and any("CPU" in k for k in entry["model_mib"]), entry
