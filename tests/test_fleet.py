"""The fleet: one study over several machines of a real Ray cluster (a head and two worker
nodes on this machine, each its own `ray start` process group with its own label and
cache), the real engine, and a machine killed mid-study."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import rules
from tests.conftest import tokensleuth_bin
from tokensleuth.core.errors import UserError
from tokensleuth.core.paths import cache_dir
from tokensleuth.drivers.hunts.bisect import probe_points, search, search_parallel
from tokensleuth.drivers.verdicts.comparisons import CONFOUNDERS
from tokensleuth.executors import units_of
from tokensleuth.fleet import Node, check_address, parse_selectors, select
from tokensleuth.sources.build import EngineBuild
from tokensleuth.trials.runner import TrialJob

# -- pure parts ---------------------------------------------------------------------------


def test_nodes_are_selected_by_label_or_resource() -> None:
    a = Node("a" * 40, {"host": "strix1", "backend": "rocm"}, {"CPU": 16.0})
    b = Node("b" * 40, {"host": "h200", "gpu": "H200", "backend": "cuda"}, {"CPU": 16.0, "GPU": 1.0})
    assert [n.label for n in select([a, b], ["backend=rocm"])] == ["strix1"]
    assert [n.label for n in select([a, b], ["gpu=H200,backend=cuda"])] == ["h200"]
    assert select([a, b], ["gpu=H200,backend=rocm"]) == []  # every part must hold
    assert [n.label for n in select([a, b], ["host=strix1", "host=h200"])] == ["strix1", "h200"]  # any selector
    assert [n.label for n in select([a, b], ["GPU"])] == ["h200"]  # a resource by name
    assert select([a, b], []) == [a, b]
    for bad in ("", "=x", "host=", "a=1,,b=2"):
        with pytest.raises(UserError, match="--on"):
            parse_selectors([bad])
    for bad in ("nonsense", "host:", "host:port"):
        with pytest.raises(UserError, match="--cluster"):
            check_address(bad)
    assert check_address("ray://h:10001") == "ray://h:10001"


def test_a_pair_is_one_unit_and_other_trials_go_alone() -> None:
    j = [TrialJob(1, 0, "a", "m", "tg32", (), 0), TrialJob(2, 1, "b", "m", "tg32", (), 0),
         TrialJob(3, 2, "b", "m", "tg32", (), 1), TrialJob(4, 3, "a", "m", "tg32", (), 1),
         TrialJob(5, 4, "x", "m", "", (), -1), TrialJob(6, 5, "x", "m", "", (), -1)]
    assert [[x.trial_id for x in u] for u in units_of(j)] == [[1, 2], [3, 4], [5], [6]]


def _judge_for(n: int, first_bad: int, odd: dict[int, str] | None = None) -> dict[int, str]:
    return {i: (odd or {}).get(i, "good" if i < first_bad else "bad") for i in range(n)}


@pytest.mark.parametrize("n", [3, 5, 24, 300])
def test_k_ary_search_finds_what_binary_search_finds_in_fewer_rounds(n: int) -> None:
    for first_bad in range(1, n, max(1, n // 23)):
        truth = _judge_for(n, first_bad)
        seq = search(n, truth.__getitem__)
        one, rounds1 = search_parallel(n, lambda idx: {i: truth[i] for i in idx}, 1)
        assert one.order == seq.order and one.first_bad == seq.first_bad == first_bad  # k=1 is search
        assert rounds1 == len(seq.order)
        for k in (2, 4, 8):
            got, rounds = search_parallel(n, lambda idx: {i: truth[i] for i in idx}, k)
            assert got.first_bad == first_bad
            assert rounds <= rounds1
            if n >= 24:
                assert rounds < rounds1 or rounds1 <= 2


def test_k_ary_search_steps_around_skips_and_unresolved() -> None:
    truth = _judge_for(24, 13, {12: "skip", 6: "unresolved", 18: "crash"})
    got, _ = search_parallel(24, lambda idx: {i: truth[i] for i in idx}, 3)
    assert got.first_bad is None and got.culprit_range == [12, 13]  # only a skip separates them
    assert 12 in got.skipped
    assert probe_points(0, 23, set(), 3) == [5, 11, 17]
    assert probe_points(0, 3, set(), 8) == [1, 2]  # fewer untried than machines: all of them


def test_a_git_revision_is_shipped_as_a_bundle_and_the_users_repo_gains_no_ref(tmp_path: Path) -> None:
    from tokensleuth.fleet import ship

    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid", *a],
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    for i in range(3):
        (repo / "f.c").write_text(f"int x = {i};\n")
        git("add", "f.c")
        git("commit", "-qm", f"c{i}")
    sha = git("rev-parse", "HEAD~1")
    refs_before = git("for-each-ref")
    data = ship.bundle(repo, sha, tmp_path / "driver")
    assert git("for-each-ref") == refs_before  # nothing added to the user's repository
    worker_src = tmp_path / "worker" / "src"
    rid = ship.repo_id(repo)
    assert not ship.has(worker_src, rid, sha)
    m = ship.receive(worker_src, rid, sha, data)
    assert ship.has(worker_src, rid, sha) and not ship.has(worker_src, rid, git("rev-parse", "HEAD"))
    show = subprocess.run(["git", "-C", str(m), "show", f"{sha}:f.c"], capture_output=True, text=True, check=True)
    assert show.stdout == "int x = 1;\n"
    with pytest.raises(UserError, match="not on this machine"):
        ship.receive(worker_src, rid, git("rev-parse", "HEAD"), None)


def test_fleet_options_without_a_cluster_are_one_line_errors(engine: EngineBuild, dense_model: Path,
                                                             tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for extra, want in ((["--cluster", f"127.0.0.1:{port}"], "no Ray cluster answers"),
                        (["--on", "host=x"], "--on needs --cluster"),
                        (["--per-host"], "--per-host needs --cluster"),
                        (["--cluster", "nowhere"], "cannot read --cluster")):
        # in a fresh interpreter that then says whether Ray was imported: refused before Ray is
        # even loaded, so never Ray's minutes of waiting on a wrong address
        argv = ["compare", "--db", str(tmp_path / "s.db"), "--arm", f"a=bin:{engine.bin_dir}", "--arm",
                f"b=bin:{engine.bin_dir}", "--model", str(dense_model), *extra]
        code = ("import sys; from tokensleuth import cli; rc = cli.main(sys.argv[1:]); "
                "print('ray' in sys.modules); sys.exit(rc)")
        p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and want in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
        assert p.stdout.strip() == "False"


# -- the real cluster -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from tests.fleet import local_cluster

    root = tmp_path_factory.mktemp("fleet")
    # Each machine keeps its own build cache, as a real one would: under the user cache dir, so
    # a machine builds every revision it measures once, on the first run (no file is shared
    # with the driver; git revisions reach the machines as bundles)
    with local_cluster(root, ccache=cache_dir() / "ccache", caches=cache_dir() / "test-fleet-machines") as c:
        yield c


def _trials(db: Path) -> list[sqlite3.Row]:
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)  # never creates the store
    con.row_factory = sqlite3.Row
    try:
        return con.execute("SELECT t.*, a.name AS arm, (SELECT COUNT(*) FROM results r WHERE r.trial_id=t.id) AS n_res,"
                           " (SELECT COUNT(*) FROM samples s JOIN results r ON r.id=s.result_id"
                           " WHERE r.trial_id=t.id) AS n_samples FROM trials t JOIN arms a ON a.id=t.arm_id"
                           " ORDER BY t.study_id, t.seq").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def _warnings(db: Path, code: str) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute("SELECT detail FROM warnings WHERE code=?", (code,))]
    finally:
        con.close()


def test_the_local_path_imports_no_ray(engine: EngineBuild, dense_model: Path, tmp_path: Path) -> None:
    code = ("import sys\nfrom tokensleuth.cli import main\n"
            f"sys.argv = ['tokensleuth', 'compare', '--db', {str(tmp_path / 's.db')!r}, '--arm', 'a=bin:{engine.bin_dir}',"
            f" '--arm', 'b=bin:{engine.bin_dir}', '--model', {str(dense_model)!r}, '-w', 'tg16', '--max-pairs', '2',"
            " '--min-pairs', '2', '--', '-t', '1', '-r', '2']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('RAY' if any(m == 'ray' or m.startswith('ray.') for m in sys.modules) else 'NO-RAY')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "study:" in p.stdout, p.stderr[-2000:]  # it really compared
    assert p.stdout.strip().splitlines()[-1] == "NO-RAY"


@pytest.mark.slow
def test_cross_host_table_and_a_killed_driver_resumes(cluster: object, engine: EngineBuild, dense_model: Path,
                                                       tmp_path: Path) -> None:
    from tests.fleet import LocalCluster

    assert isinstance(cluster, LocalCluster)
    db, out = tmp_path / "s.db", tmp_path / "x.json"
    study = tmp_path / "study.toml"
    study.write_text(f'''models = ["{dense_model}"]
workloads = ["tg128"]
min_pairs = 6
max_pairs = 6
common_flags = ["-t", "1", "-r", "3"]
[[arms]]
name = "base"
source = "bin:{engine.bin_dir}"
[[arms]]
name = "cand"
source = "bin:{engine.bin_dir}"
[[hosts]]
on = "role=bench"
''')
    args = [tokensleuth_bin(), "compare", "--db", str(db), "--study", str(study), "--cluster", cluster.address,
            "--per-host", "--json", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 300
    # kill the driver while a trial is out on a machine and some are already stored
    while time.monotonic() < deadline and proc.poll() is None:
        rows = _trials(db)
        if sum(r["status"] == "done" for r in rows) >= 4:  # 24 trials: mid-study, trials out on both machines
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    handed = [r for r in _trials(db) if r["status"] == "running"]
    assert handed and all(r["node"] in ("w1", "w2") for r in handed)
    p = subprocess.run([*args, "--resume"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    # the trials that were out came back as warnings, and ran again
    notes = _warnings(db, "handed-out")
    assert len(notes) >= 1 and all("never came back" in n for n in notes)
    rows = _trials(db)
    assert rows and all(r["status"] == "done" for r in rows)
    assert all(r["n_res"] == 1 and r["n_samples"] == 3 for r in rows)  # nothing counted twice
    by_study: dict[str, set[str]] = {}
    for r in rows:
        by_study.setdefault(r["study_id"], set()).add(json.loads(r["env_json"])["node"])
    assert sorted(tuple(v) for v in by_study.values()) == [("w1",), ("w2",)]  # each study on one machine
    keys = [(r["study_id"], r["arm"], r["pair"]) for r in rows]
    assert len(keys) == len(set(keys)) == 2 * 2 * 6
    obj = json.loads(out.read_text())
    assert [h["node"] for h in obj["hosts"]] == ["w1", "w2"]
    for h in obj["hosts"]:
        assert h["hardware"]["cpu"] and h["backends"] == ["CPU"]
        assert [c["pairs"] for c in h["comparisons"]] == [6]
    assert "| w1 " in p.stdout and "| w2 " in p.stdout and "cand/base" in p.stdout


@pytest.mark.slow
def test_parallel_bisect_on_two_machines_finds_the_culprit(cluster: object, engine: EngineBuild, moe_model: Path,
                                                           tmp_path: Path) -> None:
    from tests.fleet import LocalCluster
    from tests.planted import bisect_history

    assert isinstance(cluster, LocalCluster)
    # a 3 ms spin per decode call: clear even with both machines sharing this machine's 2 cores (at
    # 1.5 ms a neutral commit ended unresolved at 1.07 when the halved endpoint ratio was its band)
    # Two candidates between the endpoints: with two machines one round judges both (each
    # machine builds every revision it measures in its own cache: the test's cost on a fresh machine)
    repo, shas = bisect_history(("n1", "spin", "n2"), branch="bisect-fleet-spin3000-short", spin_us=3000)
    out = tmp_path / "b.json"
    args = [tokensleuth_bin(), "bisect", "--db", str(tmp_path / "s.db"), "--repo", str(repo),
            "--good", shas["base"], "--bad", shas["n2"], "--model", str(moe_model), "-w", "tg32",
            "--cluster", cluster.address, "--on", "role=bench", "--band", "10%", "--json", str(out),
            "--", "-t", "1", "-r", "5"]
    # the plant triples a token's time; a 10% band lets the neutral commits be `same` although
    # both "machines" share this machine's 2 cores (one run, no retry)
    p = subprocess.run(args, capture_output=True, text=True, timeout=1500)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    r = json.loads(out.read_text())
    # found; or (two "machines" on 2 cores) a commit beside the spin held open by pairs the other's
    # engine touched on one side: said, exit 1, the spin inside the range left
    held = rules.held_open(r, shas["spin"][:10])
    assert p.returncode == (1 if held else 0), p.stderr[-3000:]
    assert held or r["first_bad"] == shas["spin"][:10] and rules.verified(r), (r, p.stderr[-2000:])
    assert r["machines"] == 2
    assert r["rounds"] < len(r["steps"])  # two candidates judged in at least one round
    rows = _trials(tmp_path / "s.db")
    nodes = {json.loads(x["env_json"])["node"] for x in rows if x["status"] == "done"}
    assert nodes == {"w1", "w2"}
    # a candidate and good are measured on the same machine, pair by pair
    pairs: dict[tuple[str, str, int], set[str]] = {}
    for x in rows:
        pairs.setdefault((x["study_id"], x["workload"], x["pair"]), set()).add(json.loads(x["env_json"])["node"])
    assert all(len(v) == 1 for v in pairs.values())


def _assert_the_spin_found_or_held_open(r: dict[str, object], labels: list[str], spin: str) -> None:
    """The spin's step is found; or its interval is undecided with every cell held open by pairs a
    busy neighbour touched on one side (on 2 cores, the other machine's engine or the suite's other
    process: comparisons.guard), said in its reason — never the same, and no step named elsewhere."""
    undecided, steps = r["undecided"], r["steps"]
    assert isinstance(undecided, list) and isinstance(steps, list)
    held = [u for u in undecided if u["cells"] and all(c["verdict"] == "unresolved" and c.get("steered")
                                                       and any(f"{code} in " in c["confounded"] for code in CONFOUNDERS)
                                                       for c in u["cells"])
            and labels.index(u["from"]) < labels.index(spin) <= labels.index(u["to"])]
    assert all(u["reason"].startswith("pairs a confounder touched on one side held it open") for u in held)
    found = [(s["first_bad"], s["direction"]) for s in steps]
    assert found == ([] if held else [(spin, "slower")]), (steps, undecided)
    assert all(u["to"] != spin for u in undecided if u not in held)


@pytest.mark.slow
def test_a_scan_on_two_machines_splits_the_range_and_keeps_their_levels_apart(
        cluster: object, engine: EngineBuild, moe_model: Path, tmp_path: Path) -> None:
    """The range is cut in two blocks at a sampled point: each machine builds, measures and judges
    its own block (the boundary point on both), the step is found inside the first, and no pair
    or level sequence mixes machines. The driver is killed (SIGKILL) once the first interval is
    judged and resumed: the verdicts made are kept, one scan study. (The history of the parallel
    bisect above: its builds are each machine's cache hits.)"""
    from tests.fleet import LocalCluster
    from tests.planted import bisect_history

    assert isinstance(cluster, LocalCluster)
    repo, shas = bisect_history(("n1", "spin", "n2"), branch="bisect-fleet-spin3000-short", spin_us=3000)
    db, out = tmp_path / "s.db", tmp_path / "scan.json"
    args = [tokensleuth_bin(), "scan", "--db", str(db), "--repo", str(repo), "--from", shas["base"],
            "--to", shas["n2"], "--model", str(moe_model), "-w", "tg32", "--samples", "3",
            "--band", "20%", "--max-pairs", "10", "--cluster", cluster.address, "--on", "role=bench",
            "--json", str(out), "--", "-t", "1", "-r", "5"]
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 900
    while first.poll() is None and time.monotonic() < deadline and not _scan_state(db, "scan-intervals"):
        time.sleep(0.5)
    first.kill()
    _, killed_err = first.communicate()
    judged = _scan_state(db, "scan-intervals")
    assert judged, ("killed before an interval was judged", killed_err[-3000:])
    p = subprocess.run([*args[:2], "--resume", *args[2:]], capture_output=True, text=True, timeout=1500)
    r = json.loads(out.read_text())
    after = _scan_state(db, "scan-intervals")
    assert all(after[k].get("study") == v["study"] for k, v in judged.items() if "study" in v), \
        "a verdict made before the kill was made again"
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM studies WHERE kind='scan'").fetchone()[0] == 1
    # both "machines" share this machine's 2 cores: a neutral commit the noise leaves undecided
    # is said so (exit 1) — never the spin (+3 ms per decode call), whose step is found unless the
    # other machine's engine confounded its pairs
    assert p.returncode == (1 if r["undecided"] else 0), p.stderr[-3000:]
    labels = [shas[n][:10] for n in ("base", "n1", "spin", "n2")]
    _assert_the_spin_found_or_held_open(r, labels, shas["spin"][:10])
    con = sqlite3.connect(db)
    state = {k: json.loads(v) for k, v in con.execute("SELECT key, value_json FROM state WHERE key LIKE 'scan-%'")}
    assert [(b["from"], b["to"], b["node"]) for b in state["scan-blocks"]] == [
        (labels[0], labels[2], "w1"), (labels[2], labels[3], "w2")]
    measured: dict[str, set[str]] = {}
    for x in state["scan-levels"]:
        measured.setdefault(x["node"], set()).add(x["label"])
    assert measured == {"w1": set(labels[:3]), "w2": set(labels[2:])}  # the boundary point on both
    assert [x["node"] for x in r["sampled"]] == ["w1", "w1", "w1", "w2"]  # the history: each from its block's
    rows = _trials(db)
    pairs: dict[tuple[str, int], set[str]] = {}
    for x in rows:
        if x["status"] == "done":
            pairs.setdefault((x["study_id"], x["pair"]), set()).add(json.loads(x["env_json"])["node"])
    assert pairs and all(len(v) == 1 for v in pairs.values())  # a pair on one machine
    on = {k: set().union(*(v for (sid, _), v in pairs.items() if sid == got["study"]))
          for k, got in state["scan-intervals"].items()}
    assert on[f"{labels[2]}..{labels[3]}"] == {"w2"} and on[f"{labels[0]}..{labels[1]}"] == {"w1"}
    assert "[w1]" in p.stderr + killed_err and "[w2]" in p.stderr + killed_err  # each machine's lines, named


def _scan_state(db: Path, key: str) -> Any:
    """A scan's stored state ``key`` (None before it is written, or while the store is busy)."""
    try:
        row = sqlite3.connect(db, timeout=30).execute("SELECT value_json FROM state WHERE key=?", (key,)).fetchone()
    except sqlite3.OperationalError:
        return None
    return json.loads(row[0]) if row else None


@pytest.mark.slow
def test_a_flag_the_workers_engine_refuses_and_a_missing_model_are_one_line(
        cluster: object, engine: EngineBuild, dense_model: Path, tmp_path: Path) -> None:
    from tests.fleet import LocalCluster

    assert isinstance(cluster, LocalCluster)
    base = [tokensleuth_bin(), "compare", "--db", str(tmp_path / "s.db"), "--cluster", cluster.address,
            "--on", "role=bench", "--arm", f"a=bin:{engine.bin_dir}", "--arm", f"b=bin:{engine.bin_dir}"]
    p = subprocess.run([*base, "--model", str(dense_model), "--", "--no-such-flag"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2 and "--no-such-flag" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not _trials(tmp_path / "s.db")  # refused before any trial
    gone = tmp_path / "copy.gguf"
    gone.write_bytes(dense_model.read_bytes())
    code = ("import sys, json; sys.path.insert(0, %r)\n" % str(Path(__file__).parent.parent)) + (
        "from tokensleuth.fleet import Fleet\n"
        f"f = Fleet({cluster.address!r}, ['host=w1'])\n"
        f"print(json.dumps(f._get(f.worker(f.nodes[0]).files.remote([{str(gone)!r}, '/no/such/model.gguf']))))\n")
    q = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert json.loads(q.stdout.strip().splitlines()[-1]) == {str(gone): gone.stat().st_size,
                                                             "/no/such/model.gguf": None}, q.stderr[-2000:]


@pytest.mark.slow
def test_a_machine_lost_mid_pair_loses_only_that_pair(cluster: object, engine: EngineBuild, dense_model: Path,
                                                      tmp_path: Path) -> None:
    """Runs next to last: it kills w2 for good (the last test brings a w3)."""
    from tests.fleet import LocalCluster

    assert isinstance(cluster, LocalCluster)
    db, out = tmp_path / "s.db", tmp_path / "c.json"
    args = [tokensleuth_bin(), "compare", "--db", str(db), "--cluster", cluster.address, "--on", "role=bench",
            "--arm", f"a=bin:{engine.bin_dir}", "--arm", f"b=bin:{engine.bin_dir}", "--model", str(dense_model),
            "-w", "tg64", "--min-pairs", "10", "--max-pairs", "10", "--json", str(out), "--", "-t", "1", "-r", "4"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        rows = _trials(db)
        if any(r["status"] == "done" for r in rows) and any(r["status"] == "running" and r["node"] == "w2"
                                                            for r in rows):
            break
        time.sleep(0.02)
    killed_at = time.time()
    cluster.kill("w2")
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    lost = _warnings(db, "node-lost")
    assert lost and all("worker w2 lost at" in w for w in lost)
    rows = _trials(db)
    assert all(r["status"] == "done" for r in rows) and len(rows) == 20
    assert all(r["n_res"] == 1 and r["n_samples"] == 4 for r in rows)  # re-run, not duplicated
    assert len({(r["arm"], r["pair"]) for r in rows}) == 20
    after = [r for r in rows if r["started_at"] >= killed_at]  # handed out after the loss (the re-run too)
    assert after and all(json.loads(r["env_json"])["node"] == "w1" for r in after)
    c = json.loads(out.read_text())["comparisons"][0]
    assert c["pairs"] == 10
    assert "worker w2 lost" in stdout  # the report lists the lost machine and the time


@pytest.mark.slow
def test_a_scan_whose_machine_is_lost_gives_its_block_to_another(cluster: object, engine: EngineBuild,
                                                                 moe_model: Path, tmp_path: Path) -> None:
    """With w2 gone for good (killed by the test before, or here when run alone), a machine w3
    joins, takes the second block, and is killed while it judges; w1 then scans that block too,
    measuring its levels again (none of w3's are used), and the answer is the same."""
    from tests.fleet import LocalCluster
    from tests.planted import bisect_history

    assert isinstance(cluster, LocalCluster)
    if "w2" in cluster.procs:  # run on its own (-k): the test before it, which kills w2, did not run
        cluster.kill("w2")
    cluster.start("w3", ccache=cache_dir() / "ccache")
    repo, shas = bisect_history(("n1", "spin", "n2"), branch="bisect-fleet-spin3000-short", spin_us=3000)
    db, out = tmp_path / "s.db", tmp_path / "scan.json"
    args = [tokensleuth_bin(), "scan", "--db", str(db), "--repo", str(repo), "--from", shas["base"],
            "--to", shas["n2"], "--model", str(moe_model), "-w", "tg32", "--samples", "3", "--band", "20%",
            "--max-pairs", "10", "--cluster", cluster.address, "--on", "role=bench", "--json", str(out),
            "--", "-t", "1", "-r", "5"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and proc.poll() is None:
        if any(r["status"] == "running" and r["node"] == "w3" for r in _trials(db)):
            break
        time.sleep(0.05)
    if proc.poll() is not None:
        _, err = proc.communicate()
        raise AssertionError(f"the scan ended (exit {proc.returncode}) before w3 judged anything: {err[-3000:]}")
    cluster.kill("w3")
    stdout, stderr = proc.communicate(timeout=1500)
    r = json.loads(out.read_text())
    assert proc.returncode == (1 if r["undecided"] else 0), stderr[-3000:]
    assert "machine w3 was lost" in stderr
    labels = [shas[n][:10] for n in ("base", "n1", "spin", "n2")]
    _assert_the_spin_found_or_held_open(r, labels, shas["spin"][:10])
    con = sqlite3.connect(db)
    state = {k: json.loads(v) for k, v in con.execute("SELECT key, value_json FROM state WHERE key LIKE 'scan-%'")}
    assert [b["node"] for b in state["scan-blocks"]] == ["w1", "w1"]
    on_w1 = {x["label"] for x in state["scan-levels"] if x.get("node") == "w1"}
    assert on_w1 == set(labels)  # the second block's levels measured again on w1
    assert [x["node"] for x in r["sampled"]] == ["w1"] * 4


@pytest.mark.slow
def test_a_machine_killed_just_before_a_study_is_left_out(cluster: object, engine: EngineBuild, dense_model: Path,
                                                          tmp_path: Path) -> None:
    """Ray lists a killed machine as alive until it has missed some heartbeats: a study that
    starts in that window finds it gone at its first call there (the check of the model
    files) and goes on without it, as it would mid-study — no traceback."""
    from tests.fleet import LocalCluster

    assert isinstance(cluster, LocalCluster)
    cluster.start("w4", ccache=cache_dir() / "ccache")
    cluster.kill("w4")
    db, out = tmp_path / "s.db", tmp_path / "c.json"
    p = subprocess.run([tokensleuth_bin(), "compare", "--db", str(db), "--cluster", cluster.address, "--on",
                        "role=bench", "--arm", f"a=bin:{engine.bin_dir}", "--arm", f"b=bin:{engine.bin_dir}",
                        "--model", str(dense_model), "-w", "tg8", "--min-pairs", "2", "--max-pairs", "2",
                        "--json", str(out), "--", "-t", "1", "-r", "2"], capture_output=True, text=True, timeout=600)
    assert "fleet: " in p.stderr and "w4" in p.stderr.split("fleet: ", 1)[1].splitlines()[0], p.stderr[-2000:]
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "machine w4 is gone" in p.stderr
    rows = _trials(db)
    assert len(rows) == 4 and {json.loads(r["env_json"])["node"] for r in rows} == {"w1"}
