"""Study bundles (`report ID --bundle FILE`, `import FILE`, `rerun FILE`) on the real engine: what
a bundle leaves out, the study it imports as, a re-run's word per cell, and bad bundles."""

from __future__ import annotations

import copy
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import tokensleuth_bin
from tokensleuth.analysis import stats
from tokensleuth.cli import main
from tokensleuth.core.paths import cache_dir
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store
from tokensleuth.store.bundle import sniff

ARM_TOKEN = "hf_plantedarmtoken0123456789"  # an arm's environment: HF_TOKEN
WRITER_KEY = "sk-plantedwriterkey0123456789"  # the writer's own OPENAI_API_KEY, written into a log line
QUERY_KEY = "sk-plantedquerykey987654"
URL_PASSWORD = "plantedpassword"


@dataclass(frozen=True)
class Original:
    db: Path
    env: dict[str, str]
    home: Path
    model: Path
    study: str
    bundle: Path
    report: dict[str, Any]


def _cli(args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tokensleuth_bin(), *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def original(engine: EngineBuild, dense_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Original:
    """An A/A compare run by a writer whose home holds the model, with a secret in an arm's
    environment, its own key in its environment and a URL with credentials in the study's state."""
    d = tmp_path_factory.mktemp("bundle")
    home = d / "home"
    model = home / "models" / "tiny.gguf"
    model.parent.mkdir(parents=True)
    shutil.copyfile(dense_model, model)
    db = d / "store.sqlite"
    env = dict(os.environ, TOKENSLEUTH_DB=str(db), TOKENSLEUTH_CACHE=str(cache_dir()), HOME=str(home),
               OPENAI_API_KEY=WRITER_KEY)
    p = _cli(["compare", "--arm", f"a={DEFAULT_ENGINE}", "--arm", f"b={DEFAULT_ENGINE}", "--env",
              f"b:HF_TOKEN={ARM_TOKEN}", "-m", str(model), "-w", "tg8", "--min-pairs", "2", "--max-pairs", "2",
              "--no-probe", "--json", str(d / "c.json"), "--", "-r", "2", "-t", "1"], env)
    assert p.returncode == 0, p.stderr
    study = json.loads((d / "c.json").read_text())["study"]
    with Store(db) as s:
        s.state.put(study, "planted", {"endpoint": f"url:http://user:{URL_PASSWORD}@host:8080/v1?api_key={QUERY_KEY}",
                                       "log": f"OPENAI_API_KEY was {WRITER_KEY} here", "path": f"{home}/elsewhere"})
    bundle = d / "study.bundle.json"
    p = _cli(["report", study, "--bundle", str(bundle), "--json", str(d / "r.json")], env)
    assert p.returncode == 0, p.stderr
    assert "secret(s) left out" in p.stderr
    return Original(db, env, home, model, study, bundle, json.loads((d / "r.json").read_text()))


def _load(b: Path) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(b.read_text())
    return got


def _cells(obj: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(c["workload"], c["baseline"], c["candidate"], c["verdict"], c["ratio"], c["ci"], c["pairs"])
            for c in obj["comparisons"]]


def test_a_bundle_leaves_out_the_writers_home_and_every_secret(original: Original) -> None:
    text = original.bundle.read_text()
    b = json.loads(text)
    assert b["format"] == "tokensleuth-bundle" and b["schema_version"] == 1 and sniff(original.bundle)
    for leak in (str(original.home), os.path.realpath(original.home), ARM_TOKEN, WRITER_KEY, QUERY_KEY, URL_PASSWORD):
        assert leak not in text
    assert b["study"]["spec"]["models"] == ["~/models/tiny.gguf"]
    assert {a["name"]: a["env"] for a in b["arms"]} == {"a": {}, "b": {"HF_TOKEN": "<redacted>"}}
    assert b["state"]["planted"]["path"] == "~/elsewhere"
    assert b["redacted"]["home_paths"] > 0 and b["redacted"]["secrets"] >= 4
    # what the study is: the spec, the arms' builds, the machine, every sample, the verdicts
    assert all(a["engine"]["commit"] == b["arms"][0]["engine"]["commit"] for a in b["arms"])
    assert b["machine"]["cpu"] and b["models"][0]["file"] == "tiny.gguf" and b["models"][0]["n_params"] > 0
    done = [t for t in b["trials"] if t["status"] == "done"]
    assert len(done) == 4 and all(len(r["samples"]) >= 2 for t in done for r in t["results"])
    assert _cells(b["verdicts"]) == _cells(original.report)


def test_a_bundle_imports_as_the_study_it_was_and_only_once(original: Original, tmp_path: Path) -> None:
    env = dict(original.env, TOKENSLEUTH_DB=str(tmp_path / "other.sqlite"))
    first = _cli(["import", str(original.bundle)], env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"imported the bundle's study as study {original.study}: 4 trials")
    again = _cli(["import", str(original.bundle)], env)
    assert again.returncode == 0 and "in the store already" in again.stdout
    report = _cli(["report", original.study, "--json", str(tmp_path / "r.json")], env)
    assert report.returncode == 0, report.stderr
    assert _cells(json.loads((tmp_path / "r.json").read_text())) == _cells(original.report)
    with Store(tmp_path / "other.sqlite") as s:
        assert [r.id for r in s.reads.studies()] == [original.study]
        assert s.state.get(original.study, "bundle")["study"] == original.study
    home = _cli(["import", str(original.bundle)], original.env)  # the store it was written from has it
    assert home.returncode == 0 and "in the store already" in home.stdout
    gz = tmp_path / "study.bundle.json.gz"
    assert _cli(["report", original.study, "--bundle", str(gz)], original.env).returncode == 0
    assert gzip.decompress(gz.read_bytes()).startswith(b'{\n "format": "tokensleuth-bundle"') and sniff(gz)
    third = _cli(["import", str(gz)], dict(env, TOKENSLEUTH_DB=str(tmp_path / "third.sqlite")))
    assert third.returncode == 0 and original.study in third.stdout


def test_a_bench_study_bundles_and_imports_too(engine: EngineBuild, dense_model: Path, tmp_path: Path) -> None:
    env = dict(os.environ, TOKENSLEUTH_DB=str(tmp_path / "a.sqlite"))
    p = _cli(["bench", "-m", str(dense_model), "--json", str(tmp_path / "b.json"), "--", "-p", "0", "-n", "8", "-r", "2",
              "-t", "1"], env)
    assert p.returncode == 0, p.stderr
    study = json.loads((tmp_path / "b.json").read_text())["study"]
    packed = tmp_path / "bench.bundle.json.gz"
    assert _cli(["report", study, "--bundle", str(packed), "--json", str(tmp_path / "r1.json")], env).returncode == 0
    other = dict(env, TOKENSLEUTH_DB=str(tmp_path / "b.sqlite"))
    assert _cli(["import", str(packed)], other).returncode == 0
    assert _cli(["report", study, "--json", str(tmp_path / "r2.json")], other).returncode == 0
    a, b = (json.loads((tmp_path / f).read_text())["results"] for f in ("r1.json", "r2.json"))
    assert [(r["workload"], r["tokens_per_s"], r["samples"]) for r in a] == [
        (r["workload"], r["tokens_per_s"], r["samples"]) for r in b]
    rerun = _cli(["rerun", str(packed)], other)
    assert rerun.returncode == 2 and "holds a study of kind bench — rerun measures compare studies again" in rerun.stderr


def _snapshot(db: Path) -> list[Any]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as c:
        return [c.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]  # noqa: S608 - the tests' own names
                for t in ("studies", "arms", "trials", "results", "samples", "windows", "warnings", "state")]


def _edited(b: dict[str, Any], how: str) -> dict[str, Any]:
    b = copy.deepcopy(b)
    if how == "another schema version":
        b["schema_version"] = 2
    elif how == "a trial without results":
        del b["trials"][0]["results"]
    elif how == "a spec that is not a compare's":
        b["study"]["spec"]["band"] = "lots"
    elif how == "a kind bundles do not hold":
        b["study"]["kind"] = "bisect"
    elif how == "a sample of text":
        b["trials"][0]["results"][0]["samples"][0]["tokens_per_s"] = "fast"
    elif how == "a repetition twice":
        r = b["trials"][0]["results"][0]
        r["samples"].append(dict(r["samples"][0]))
    return b


BAD = {
    "truncated": lambda text: text[: len(text) // 2],
    "truncated gzip": lambda text: gzip.compress(text.encode())[:400],
    "another schema version": None, "a trial without results": None, "a spec that is not a compare's": None,
    "a kind bundles do not hold": None, "a sample of text": None, "a repetition twice": None,
    "unknown format": lambda text: text.replace('"format": "tokensleuth-bundle"', '"format": "other-tool"', 1),
}


@pytest.mark.parametrize("command", ["import", "rerun"])
def test_a_bad_bundle_is_one_line_and_changes_nothing_stored(original: Original, tmp_path: Path, command: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "kept.sqlite"
    assert main(["import", str(original.bundle), "--db", str(db)]) == 0
    capsys.readouterr()
    before = _snapshot(db)
    text = original.bundle.read_text()
    for name, damage in BAD.items():
        f = tmp_path / f"{name.replace(' ', '_')}.bundle.json"
        content = damage(text) if damage else json.dumps(_edited(json.loads(text), name))
        f.write_bytes(content if isinstance(content, bytes) else content.encode())
        rc = main([command, str(f), "--db", str(db)])
        err = capsys.readouterr().err
        assert rc == 2, (name, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, (name, err)
        assert _snapshot(db) == before, name
        if command == "rerun" or name != "unknown format":  # (import reads a file of no known format as llama-bench's)
            assert "bundle" in err, (name, err)
    assert len(BAD) == 9


def _rerun_env(original: Original, db: Path) -> dict[str, str]:
    return dict(original.env, TOKENSLEUTH_DB=str(db), HF_TOKEN="here-own-token")


def test_a_rerun_refuses_what_it_cannot_run_here_before_anything_is_stored(
        original: Original, tmp_path: Path, moe_model: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "kept.sqlite"
    assert main(["import", str(original.bundle), "--db", str(db)]) == 0
    before = _snapshot(db)
    capsys.readouterr()
    b = _load(original.bundle)
    repo = tmp_path / "not-llama"
    repo.mkdir()
    for cmd in (["init", "-q"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    # (the writer's home here: the bundle's ~/models/tiny.gguf is found; elsewhere it is not)
    cases: dict[str, tuple[bool, list[str], str]] = {
        "a secret left out": (True, [], "export HF_TOKEN here"),
        "a model not here": (False, [], "is not here — give it with --model tiny.gguf=PATH"),
        "another model": (True, ["--model", f"tiny.gguf={moe_model}"], "is not the bundle's model tiny.gguf"),
        "no such arm": (True, ["--arm", "c=pypi:x==1"], "the bundle has no arm c"),
        "a git path not here": (True, ["--arm", "a=git:~/nowhere/llama.cpp@abc"], "arm a's engine"),
        "an engine that does not build": (True, ["--arm", f"a=git:{repo}@HEAD"], "cannot be built here"),
    }
    monkeypatch.delenv("HF_TOKEN", raising=False)
    for name, (writers_home, extra, said) in cases.items():
        monkeypatch.setenv("HOME", str(original.home) if writers_home else str(tmp_path))
        if name != "a secret left out":
            monkeypatch.setenv("HF_TOKEN", "x")
        rc = main(["rerun", str(original.bundle), "--db", str(db), *extra])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and said in err, (name, err)
        assert _snapshot(db) == before, name
    kind = tmp_path / "bench.bundle.json"
    kind.write_text(json.dumps(dict(b, study=dict(b["study"], kind="import"))))
    assert main(["rerun", str(kind), "--db", str(db)]) == 2
    assert "holds a study of kind import — rerun measures compare studies again" in capsys.readouterr().err


def test_a_rerun_says_per_cell_whether_this_machine_agrees(original: Original, tmp_path: Path) -> None:
    db = tmp_path / "here.sqlite"
    env = _rerun_env(original, db)
    p = _cli(["rerun", str(original.bundle), "--no-probe", "--json", str(tmp_path / "r.json")], env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"Re-run of study {original.study} (bundle {original.bundle.name};")
    got = json.loads((tmp_path / "r.json").read_text())
    (cell,) = got["rerun"]["cells"]
    orig = original.report["comparisons"][0]
    assert cell["original"]["verdict"] == orig["verdict"] and cell["original"]["ci"] == orig["ci"]
    assert cell["here"]["verdict"] == got["comparisons"][0]["verdict"] and cell["here"]["pairs"] == 2
    assert cell["agreement"] == stats.agreement(orig["verdict"], cell["here"]["verdict"])
    assert cell["original_model"] == "~/models/tiny.gguf" and cell["model"] == str(original.model)
    with Store(db) as s:
        studies = {r.id: r for r in s.reads.studies()}
        assert set(studies) == {original.study, got["study"]}  # the original, imported, beside the re-run
        assert studies[got["study"]].spec["rerun_of"] == original.study
        n_trials = len(s.reads.trials(got["study"]))
    here = cell["here"]["verdict"]
    # the original's verdict as a bundle could claim it: the word comes from both sides, never one
    for claimed in ("faster", "same", "unresolved"):
        b = _load(original.bundle)
        b["verdicts"]["comparisons"][0]["verdict"] = claimed
        edited = tmp_path / f"{claimed}.bundle.json"
        edited.write_text(json.dumps(b))
        q = _cli(["rerun", str(edited), "--resume", "--no-probe", "--json", str(tmp_path / f"{claimed}.json")], env)
        assert q.returncode == 0, q.stderr
        (c,) = json.loads((tmp_path / f"{claimed}.json").read_text())["rerun"]["cells"]
        assert (c["original"]["verdict"], c["here"]["verdict"]) == (claimed, here)
        assert c["agreement"] == stats.agreement(claimed, here)
        assert c["agreement"] == ("unresolved" if "unresolved" in (claimed, here) else
                                  "agrees" if claimed == here else "disagrees")
    with Store(db) as s:
        assert len(s.reads.studies()) == 2 and len(s.reads.trials(got["study"])) == n_trials  # resumed, measured nothing again
    shown = _cli(["report", got["study"]], env)
    assert shown.returncode == 0 and "Re-run of study" in shown.stdout


# -- the rule, on stored verdicts (no engine) -------------------------------------------------------


@pytest.mark.parametrize(("original", "here", "word"), [
    ("faster", "faster", "agrees"), ("same", "same", "agrees"), ("slower", "slower", "agrees"),
    ("faster", "same", "disagrees"), ("same", "slower", "disagrees"), ("faster", "slower", "disagrees"),
    ("unresolved", "faster", "unresolved"), ("same", "unresolved", "unresolved"),
    ("unresolved", "unresolved", "unresolved"), ("fast", "fast", "unresolved"), ("", "same", "unresolved"),
])
def test_an_unresolved_side_is_never_an_agreement(original: str, here: str, word: str) -> None:
    assert stats.agreement(original, here) == word


def _comparison(model: str, verdict: str, lo: float, hi: float) -> Any:
    from tokensleuth.drivers.verdicts.comparisons import Comparison

    est = stats.RatioEstimate(5, (lo + hi) / 2, lo, hi, 0.99, "t")
    return Comparison(model, "tg8", "a", "b", 5, [1.0] * 5, [1.0] * 5, est, verdict)


def test_each_original_cell_meets_the_cell_of_its_model_here() -> None:
    from tokensleuth.drivers.verdicts.agreement import original_cells, rerun_cells

    verdicts = {"comparisons": [
        {"model": "~/m/one.gguf", "workload": "tg8", "baseline": "a", "candidate": "b", "verdict": "faster",
         "ratio": 1.2, "ci": [1.1, 1.3], "pairs": 10},
        {"model": "~/m/two.gguf", "workload": "tg8", "baseline": "a", "candidate": "b", "verdict": "same",
         "ratio": 1.0, "ci": [0.995, 1.005], "pairs": 20},
        {"model": "~/m/gone.gguf", "workload": "tg8", "baseline": "a", "candidate": "b", "verdict": "same",
         "ratio": "x", "ci": "y", "pairs": None}, "not a cell"]}
    state: dict[str, Any] = {"models": [["~/m/one.gguf", "/here/one.gguf"], ["~/m/two.gguf", "/here/two.gguf"]],
             "cells": original_cells(verdicts)}
    assert state["cells"][2]["ratio"] is None and state["cells"][2]["ci"] is None and len(state["cells"]) == 3
    got = rerun_cells(state, [_comparison("/here/two.gguf", "faster", 1.05, 1.1),
                              _comparison("/here/one.gguf", "faster", 1.15, 1.25)])
    assert [(c["original_model"], c["model"], c["original"]["verdict"], c["here"]["verdict"], c["agreement"])
            for c in got] == [
        ("~/m/one.gguf", "/here/one.gguf", "faster", "faster", "agrees"),
        ("~/m/two.gguf", "/here/two.gguf", "same", "faster", "disagrees"),
        ("~/m/gone.gguf", "~/m/gone.gguf", "same", "unresolved", "unresolved")]  # not measured here: no answer
    assert got[0]["here"]["ci"] == [1.15, 1.25] and got[2]["here"]["pairs"] == 0


def test_a_kind_bundles_do_not_hold_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    from tokensleuth.core.errors import UserError
    from tokensleuth.pages.bundle import bundle_of

    with Store(tmp_path / "s.sqlite") as s:
        sid = s.writes.create_study("scan", {}, "h", [], [])
        with pytest.raises(UserError, match="a scan study cannot be bundled yet"):
            bundle_of(s, sid, ("", {}))
