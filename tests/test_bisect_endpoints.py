"""bisect endpoints: no regression only from `same`; undecided or crashed endpoints say so."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

from tests.conftest import tokensleuth_bin
from tokensleuth.analysis import stats
from tokensleuth.drivers.hunts.bisect import endpoint_answer
from tokensleuth.drivers.verdicts.comparisons import Comparison
from tokensleuth.drivers.verdicts.judge import ArmFailure, Judgement
from tokensleuth.sources.build import EngineBuild


def comp(w: str, verdict: str, ratio: float | None, pairs: int = 20, lo: float = 0.5,
         hi: float = 1.5) -> Comparison:
    est = None if ratio is None else stats.RatioEstimate(pairs, ratio, lo, hi, 0.99)
    return Comparison("m.gguf", w, "A", "B", pairs, [1.0], [1.0], est, verdict)


def test_only_same_everywhere_is_no_regression() -> None:
    same = Judgement("s", [comp("pp512", "same", 1.0, lo=0.995, hi=1.005)])
    assert endpoint_answer(same, 0.02, "g", "b") == ("no-regression", "no regression between endpoints")
    # the field report's noisy machine: 0.85 [0.52, 1.39] after 20 pairs
    noisy = Judgement("s", [comp("pp512", "unresolved", 0.85, 20, 0.52, 1.39)])
    status, reason = endpoint_answer(noisy, 0.02, "g", "b") or ("", "")
    assert status == "unresolved"
    assert "0.8500 [0.5200, 1.3900] after 20 pairs" in reason and "--resume" in reason
    assert "±2.0% takes more than 10,000 pairs" in reason
    near = Judgement("s", [comp("pp512", "unresolved", 0.99, 20, 0.95, 1.03)])
    reason = (endpoint_answer(near, 0.02, "g", "b") or ("", ""))[1]
    need = int(reason.split("takes about ")[1].split(" ")[0])
    assert 40 < need < 200  # 8% wide at 20 pairs; ±2% needs it under 4%: about 4x the pairs
    mixed = Judgement("s", [comp("pp512", "same", 1.0, lo=0.995, hi=1.005), comp("tg128", "unresolved", 0.9)])
    assert endpoint_answer(mixed, 0.02, "g", "b")[0] == "unresolved"  # type: ignore[index]
    assert endpoint_answer(Judgement("s", [comp("pp512", "slower", 0.8, lo=0.78, hi=0.82)]), 0.02, "g", "b") is None


def test_a_crashed_endpoint_is_a_crash_whatever_the_verdicts() -> None:
    for arm, who in (("A", "good"), ("B", "bad")):
        j = Judgement("s", [comp("pp512", "unresolved", None, 0)], [ArmFailure(arm, "crashed", "signal 11")])
        status, reason = endpoint_answer(j, 0.02, "good", "bad") or ("", "")
        assert status == "crash" and reason == f"endpoint {who} crashed: signal 11"
    j = Judgement("s", [comp("pp512", "unresolved", None, 0)], [ArmFailure("B", "timeout", "watchdog")])
    assert endpoint_answer(j, 0.02, "good", "bad") == ("crash", "endpoint bad hung (watchdog): watchdog")


def _wrapper(d: Path, real: Path, body: str) -> Path:
    """A bin: folder whose llama-bench wraps the real one (faults the real engine cannot show)."""
    d.mkdir()
    w = d / "llama-bench"
    w.write_text(f"#!/bin/bash\nREAL={real}\nif [ \"$1\" = --help ]; then exec \"$REAL\" --help; fi\n{body}\n")
    w.chmod(0o755)
    return d


def _bisect(dirs: list[Path], model: Path, env: dict[str, str], out: Path, *extra: str,
            threads: bool = True) -> subprocess.CompletedProcess[str]:
    """(``threads``: -t 1, unless the wrapper sets the thread count itself.)"""
    args = [a for d in dirs for a in ("--bin", str(d))]
    return subprocess.run([tokensleuth_bin(), "bisect", *args, "--model", str(model), "-w", "tg16",
                           "--max-pairs", "5", "--json", str(out), *extra, "--", "-r", "2",
                           *(["-t", "1"] if threads else [])],
                          env=env, capture_output=True, text=True, timeout=600)


def test_crashing_endpoint_is_reported_as_a_crash(engine: EngineBuild, dense_model: Path,
                                                  cli_env: dict[str, str], tmp_path: Path) -> None:
    real = Path(engine.bin_dir) / "llama-bench"
    ok = _wrapper(tmp_path / "ok", real, 'exec "$REAL" "$@"')
    segv = _wrapper(tmp_path / "segv", real, "kill -SEGV $$")
    out = tmp_path / "b.json"
    p = _bisect([ok, segv], dense_model, cli_env, out)
    assert p.returncode == 1, p.stdout + p.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["status"] == "crash" and r["first_bad"] is None
    assert r["reason"].startswith("endpoint segv crashed")
    assert "No bisect" not in p.stdout and "endpoint segv crashed" in p.stdout
    # the stored answer says the same, and the study is over (not "resume it")
    rep = subprocess.run([tokensleuth_bin(), "report", r["study"]], env=cli_env, capture_output=True,
                         text=True, timeout=60)
    assert rep.returncode == 0 and "endpoint segv crashed" in rep.stdout
    status = sqlite3.connect(cli_env["TOKENSLEUTH_DB"]).execute(
        "SELECT status FROM studies WHERE id=?", (r["study"],)).fetchone()[0]
    assert status == "failed"


def test_noisy_endpoints_are_unresolved_and_resume_adds_pairs(engine: EngineBuild, dense_model: Path,
                                                             cli_env: dict[str, str], tmp_path: Path) -> None:
    """A machine whose engine processes alternate between 1 and 2 threads (a noisy neighbour):
    the endpoints cannot be told apart or shown the same at ±2% in 5 pairs."""
    real = Path(engine.bin_dir) / "llama-bench"
    counter = tmp_path / "n"
    counter.write_text("0")
    # process k runs with 1 thread when k % 3 == 0, else 2: log ratios +,+,0,-,- over 5 pairs
    body = (f'n=$(cat {counter}); echo $((n+1)) > {counter}\n'
            'if [ $((n % 3)) = 0 ]; then t=1; else t=2; fi\nexec "$REAL" "$@" -t $t')
    good = _wrapper(tmp_path / "good", real, body)
    bad = _wrapper(tmp_path / "bad", real, body)
    out = tmp_path / "b.json"
    p = _bisect([good, bad], dense_model, cli_env, out, threads=False)
    assert p.returncode == 1, p.stdout + p.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["status"] == "unresolved" and r["first_bad"] is None
    assert "no regression" not in p.stdout.lower() and "UNRESOLVED" in p.stdout
    assert r["endpoints"][0]["verdict"] == "unresolved"
    first_pairs = r["endpoints"][0]["pairs"]
    assert 2 <= first_pairs <= 10  # undecided after --max-pairs 5: up to twice that
    # why: the trials' own diagnosis, printed and in the JSON
    d = r["diagnosis"]
    assert d["processes"] == 2 * first_pairs and d["findings"] and d["advice"]
    assert "Why unresolved:" in p.stdout and d["advice"][0] in p.stdout
    # report and --resume agree: not finished; resuming adds pairs, never hands the stored answer back
    rep = subprocess.run([tokensleuth_bin(), "report", r["study"]], env=cli_env, capture_output=True,
                         text=True, timeout=60)
    assert rep.returncode == 0 and "UNRESOLVED" in rep.stdout and "--resume" in rep.stdout
    p2 = _bisect([good, bad], dense_model, cli_env, out, "--resume", threads=False)
    r2 = json.loads(out.read_text())
    assert r2["study"] == r["study"]
    assert r2["endpoints"][0]["pairs"] > first_pairs, p2.stderr[-2000:]
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    assert con.execute("SELECT COUNT(*) FROM studies WHERE kind='bisect'").fetchone()[0] == 1


class _Ends:
    """A bisector whose endpoint comparisons answer from a list, recording the pairs asked for."""

    def __init__(self, answers: list[Judgement]) -> None:
        self.answers, self.asked = answers, []  # type: list[Judgement], list[int]
        self.builds: dict[str, object] = {}

    def build(self, i: int) -> object:
        return object()

    def answered(self, a: int, b: int, models: object, band: float, max_pairs: int) -> None:
        return None  # (nothing stored before: the endpoints are built and compared)

    def compare(self, a: int, b: int, models: object, band: float, max_pairs: int) -> Judgement:
        self.asked.append(max_pairs)
        return self.answers[len(self.asked) - 1]


def test_undecided_endpoints_get_twice_the_pairs_before_the_bisect_answers(tmp_path: Path) -> None:
    from tokensleuth.drivers.hunts.bisect.answer import answer_bisect
    from tokensleuth.sources.history import Candidate
    from tokensleuth.store import Store

    spec = {"models": ["m.gguf"], "band": 0.1, "max_pairs": 20}
    cands = [Candidate("g", "g"), Candidate("b", "b")]
    undecided = Judgement("s", [comp("tg32", "unresolved", 0.92, lo=0.74, hi=1.14)])
    same = Judgement("s", [comp("tg32", "same", 0.99, pairs=40, lo=0.95, hi=1.04)])
    with Store(tmp_path / "t.db") as store:
        bis = _Ends([undecided, same])
        r = answer_bisect(bis, store, "sid", cands, spec, lambda _m: None)  # type: ignore[arg-type]
        assert bis.asked == [20, 40]
        assert r["status"] == "no-regression" and r["endpoints"][0]["pairs"] == 40
        bis = _Ends([undecided, undecided])
        r = answer_bisect(bis, store, "sid", cands, spec, lambda _m: None)  # type: ignore[arg-type]
        assert bis.asked == [20, 40] and r["status"] == "unresolved"
        bis = _Ends([same])  # decided at once: no more pairs than asked
        r = answer_bisect(bis, store, "sid", cands, spec, lambda _m: None)  # type: ignore[arg-type]
        assert bis.asked == [20] and r["status"] == "no-regression"
