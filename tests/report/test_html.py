"""HTML pages, the issue Markdown and the site, from studies made by real engine runs, opened
in a real headless Chromium."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.browser import assert_clean, open_page
from tests.conftest import tokensleuth_bin
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import EngineBuild


def run(args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([tokensleuth_bin(), *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def study_ids(db: str, kind: str) -> list[str]:
    con = sqlite3.connect(db)
    return [r[0] for r in con.execute("SELECT id FROM studies WHERE kind=? ORDER BY created_at", (kind,))]


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory, engine: EngineBuild, dense_model: Path) -> dict[str, str]:
    """A bench and a compare (two depths, so the depth explanation has a line to fit) on the
    real engine, in one store."""
    import os

    d = tmp_path_factory.mktemp("html")
    env = dict(os.environ, TOKENSLEUTH_DB=str(d / "store.sqlite"))
    run(["bench", "-m", str(dense_model), "--", "-p", "16", "-n", "8", "-r", "2", "-t", "1"], env)
    # (the CUDA setting does nothing on this CPU build: the arms still differ in it, as the reports say)
    run(["compare", "--arm", f"one={DEFAULT_ENGINE}", "--arm", f"two={DEFAULT_ENGINE}", "--flags", "one=-t 1",
         "--flags", "two=-t 2", "--env", "two:GGML_CUDA_DISABLE_FUSION=1", "-m", str(dense_model), "-w", "tg16",
         "-w", "tg16@d256", "--min-pairs", "3", "--max-pairs", "3", "--", "-r", "2"], env)
    return {"db": env["TOKENSLEUTH_DB"], "dir": str(d), "bench": study_ids(env["TOKENSLEUTH_DB"], "bench")[0],
            "compare": study_ids(env["TOKENSLEUTH_DB"], "compare")[0]}


def env_of(studies: dict[str, str]) -> dict[str, str]:
    import os

    return dict(os.environ, TOKENSLEUTH_DB=studies["db"])


@pytest.mark.needs("browser")
def test_compare_page_shows_every_figure_and_its_numbers(studies: dict[str, str]) -> None:
    env = env_of(studies)
    page = Path(studies["dir"]) / "compare.html"
    run(["report", studies["compare"], "--html", str(page), "--json", str(page.with_suffix(".json"))], env)
    obj = json.loads(page.with_suffix(".json").read_text())
    seen = open_page(page, "compare")
    assert_clean(seen, page)
    # forest, per-pair ratios, the sequential history and the resource timeline
    assert len(seen.figures) == 4, seen.figures
    for c in obj["comparisons"]:
        assert f"{c['ratio']:.4f}" in seen.text  # the ratio of every cell, as a number
        assert f"{c['ci'][0]:.4f}" in seen.text
    assert obj["summary"] in seen.text
    # what sets each arm apart, in the sentence and the arms table; what they share, once, apart
    assert obj["differences"]["arms"] == {"one": ["-t 1"], "two": ["-t 2", "GGML_CUDA_DISABLE_FUSION=1"]}
    assert "two (-t 2, GGML_CUDA_DISABLE_FUSION=1)" in obj["summary"] and "one (-t 1)" in obj["summary"]
    assert "sets it apart" in seen.text and "-t 2, GGML_CUDA_DISABLE_FUSION=1" in seen.text
    shared = obj["differences"]["shared"]
    assert shared[0] == f"source {DEFAULT_ENGINE}" and "flags -r 2" in shared
    assert seen.text.count("Every arm: " + "; ".join(shared)) == 1
    # the depth explanation: a line per arm and where the change sits
    # placement from each arm's load log, captured once per arm and model by the real engine
    assert "Where the weights and buffers live" in seen.text
    assert "two and one place the model alike (CPU_Mapped" in seen.text
    assert "Per-token cost vs depth" in seen.text
    assert re.search(r"the change is (in both|in the per-token|in the depth-dependent|in neither)", seen.text)
    assert page.stat().st_size < 600_000


def test_a_bad_html_path_is_one_line(studies: dict[str, str]) -> None:
    p = subprocess.run([tokensleuth_bin(), "report", studies["bench"], "--html", studies["dir"]], env=env_of(studies),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [f"error: --html {studies['dir']} is a folder — give a file path, "
                                             f"e.g. {Path(studies['dir']) / 'report.html'}"]


@pytest.mark.needs("browser")
def test_bench_page_and_issue_markdown(studies: dict[str, str]) -> None:
    env = env_of(studies)
    page = Path(studies["dir"]) / "bench.html"
    run(["report", studies["bench"], "--html", str(page), "--json", str(page.with_suffix(".json"))], env)
    seen = open_page(page, "bench")
    assert_clean(seen, page)
    assert "CPU busy cores" in page.read_text()  # the timeline's CPU panel, from the timed windows
    # the roofline: tg8 read the model's weights once per token, against this CPU's probed peak
    from tokensleuth.models.info import model_info

    res = json.loads(page.with_suffix(".json").read_text())["results"]
    tg = next(r for r in res if r["workload"] == "tg8")
    achieved = model_info(Path(tg["model"])).bytes_per_token * tg["tokens_per_s"]["mean"] / 1e9
    assert f"= {achieved:.1f} GB/s" in seen.text and "of the CPU (probe) peak" in seen.text
    md = run(["report", studies["compare"], "--issue"], env).stdout
    for heading in ("Name and Version", "Operating systems", "GGML backends", "Hardware", "Models",
                    "Problem description & steps to reproduce", "First Bad Commit", "Relevant log output"):
        assert f"### {heading}" in md
    # the verdict sentence once, naming what sets the arms apart; the command that reruns it, once
    summary = run(["report", studies["compare"]], env).stdout.splitlines()[0]
    assert md.count(summary) == 1 and "two (-t 2, GGML_CUDA_DISABLE_FUSION=1)" in summary
    assert "- two: `" in md and "; run with -t 2, GGML_CUDA_DISABLE_FUSION=1" in md
    steps = [ln for ln in md.splitlines() if ln.startswith("tokensleuth compare ")]
    assert len(steps) == 1 and "--env two:GGML_CUDA_DISABLE_FUSION=1" in steps[0], steps
    assert "--flags 'one=-t 1'" in steps[0] and "-w tg16 -w tg16@d256" in steps[0] and steps[0].endswith(" -- -r 2")
    assert "llama-bench" in md and "-t 2" in md  # the engine command of the arm, without tokensleuth
    assert "n/a (not bisected)" in md


@pytest.mark.needs("browser")
def test_site_lists_every_study_and_updates_incrementally(studies: dict[str, str]) -> None:
    env = env_of(studies)
    site = Path(studies["dir"]) / "site"
    first = run(["site", str(site)], env).stdout
    assert "2 studies" in first
    index = open_page(site / "index.html", "site-index")
    assert index.console_errors == [] and index.scripts == 0
    for sid in (studies["bench"], studies["compare"]):
        assert sid in index.text
        assert (site / "studies" / f"{sid}.html").exists()
    hist = sorted((site / "history").glob("*.html"))
    assert any("tg16" in h.name for h in hist), hist
    seen = open_page(hist[0], "site-history")
    assert_clean(seen, hist[0])
    again = run(["site", str(site)], env).stdout
    assert "0 page(s) written" in again  # nothing changed: nothing rewritten


@pytest.mark.needs("browser")
@pytest.mark.slow
def test_bisect_page_escapes_a_commit_subject(engine: EngineBuild, moe_model: Path, tmp_path: Path,
                                             cli_env: dict[str, str]) -> None:
    from tests.planted import bisect_history

    evil = "spin: a wait per decode <script>alert('pwned')</script> & <b>co</b>"
    # a slowdown no load can erase: a 1.5 ms busy wait per decode call, at -t 1 (the MoE-graph
    # plant needs 2 threads to show, and 2 threads on 2 cores measure the machine's load)
    repo, shas = bisect_history(("spin",), branch="bisect-html-spin1500", subjects={"spin": evil}, spin_us=1500)
    out = tmp_path / "b.json"
    p = run(["bisect", "--repo", str(repo), "--good", shas["base"], "--bad", shas["spin"], "--model",
             str(moe_model), "-w", "tg32", "--json", str(out), "--", "-r", "5", "-t", "1"], cli_env)
    r = json.loads(out.read_text())
    assert r["first_bad"] == shas["spin"][:10], p.stderr[-2000:]
    sid = r["study"]
    page = tmp_path / "bisect.html"
    run(["report", sid, "--html", str(page)], cli_env)
    html = page.read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(" in html
    seen = open_page(page, "bisect")
    assert_clean(seen, page)
    assert evil in seen.text  # shown as text, never run
    # what changed at the culprit: one compiled file, its diff on the page
    assert [(f["path"], f["group"]) for f in r["changes"]["files"]] == [("src/llama-context.cpp", "compiled")]
    assert "What changed in the source" in seen.text and "tokensleuth_spin(); return" in html
    md = run(["report", sid, "--issue"], cli_env).stdout
    assert shas["spin"][:10] in md.split("### First Bad Commit", 1)[1]
