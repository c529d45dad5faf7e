"""The why beside the verdict: a page's section with the two arms' bars per op or kernel and the
shares of the measured difference, or only the reason they are withheld; the site and the issue
link to it. From a real `compare --profile` (the planted engine's wait per decode call on one arm),
and from withheld diffs planted in a copy of its store, opened in a real headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.browser import assert_clean, open_page
from tests.conftest import tokensleuth_bin
from tokensleuth.sources.build import EngineBuild

# kernel names that exist only in the planted withheld trace: none of them may show anywhere
PLANTED_KERNELS = ("planted_gemm_kernel", "planted_norm_kernel")


def run(args: list[str], env: dict[str, str], timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([tokensleuth_bin(), *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory, engine: EngineBuild, dense_model: Path) -> dict[str, Any]:
    """compare --profile on two arms of the planted engine's one CPU build, b waiting 20 ms per decode
    call (outside the graph): the op profile of each arm beside the slower verdict. The wait is ~40x
    a tiny token: a busy neighbour's preemptions (a few ms/token over 4 processes a side, as a CI
    run once gave against a 2 ms wait) cannot take the profiler's interval down to zero."""
    from tests.planted import planted_engine

    src, _ = planted_engine()
    d = tmp_path_factory.mktemp("why")
    env = dict(os.environ, TOKENSLEUTH_DB=str(d / "store.sqlite"))
    out = d / "c.json"
    run(["compare", "--json", str(out), "--arm", f"a={src}", "--arm", f"b={src}", "--env", "b:TOKENSLEUTH_SPIN_US=20000",
         "--model", str(dense_model), "-w", "tg16", "--max-pairs", "5", "--profile", "--", "-r", "3", "-t", "1"], env)
    doc = json.loads(out.read_text())
    (entry,) = doc["profile"]
    assert entry.get("study") and "skipped" not in entry, entry
    diff_json = d / "diff.json"
    run(["report", entry["study"], "--json", str(diff_json)], env)
    (diffed,) = json.loads(diff_json.read_text())["diffs"]
    return {"dir": d, "env": env, "compare": doc["study"], "entry": entry, "diff": diffed, "model": str(dense_model)}


def _section(html: str) -> str:
    """The page's why section, as written."""
    m = re.search(r'<section id="why">(.*?)</section>', html, re.S)
    assert m, "no why section on the page"
    return m.group(1)


@pytest.mark.needs("browser")
def test_a_compare_profile_page_has_both_arms_op_bars_and_the_shares_with_intervals(profiled: dict[str, Any]) -> None:
    d = profiled["diff"]
    assert "graph_share" in d and "shares_withheld" not in d, d.get("shares_withheld")
    page = profiled["dir"] / "compare.html"
    run(["report", profiled["compare"], "--html", str(page)], profiled["env"])
    seen = open_page(page, "why-compare-profile", ids=("why", "why-1"))
    assert_clean(seen, page)
    text, figures = seen.by_id["why"]
    # the bars: one figure, drawn, in the section; beside the verdict, the header links to it
    assert len(figures) == 1 and figures[0][2] > 10, figures
    assert "#why" in seen.links
    # both arms' bars: a bar of each colour per op row drawn, and each arm's column of numbers
    shown = d["rows"][:16]
    svg = _section(page.read_text())
    for colour in ("#0969da", "#bf3989"):  # plots.ARM_COLOURS: A, then B
        assert svg.count(f"fill: {colour}\"") == len(shown) + 1, colour  # + its legend patch
    assert "A: a" in text and "B: b" in text
    for r in shown:  # every op of the bars, by name, with both arms' ms/token
        assert r["op"] in text and f"{r['ms_per_token'][0]:.4f}" in text and f"{r['ms_per_token'][1]:.4f}" in text
    # the shares, each with its interval, as the diff computed them; the sentence from them
    for label, key in (("the graph's nodes", "graph_share"), ("the time outside the graph", "outside_share")):
        s = d[key]
        lo, hi = s["ci"]
        assert f"{label} {s['share']:.1%} [{lo:.1%}, {hi:.1%}]" in text, (label, text)
    assert d["sentence"] in text
    # the planted wait is outside the graph: most of the difference lies there
    assert d["outside_share"]["ci"][0] > 0.5, d["outside_share"]


def _plant_withheld(profiled: dict[str, Any], tmp_path: Path, how: str) -> tuple[dict[str, str], str]:
    """A copy of the store whose compare has beside its verdict a diff that must be withheld:
    ``kernels``: a kernel trace whose candidate lost records; ``ops``: an op profile of one process
    a side (no interval on the measured difference)."""
    from tokensleuth.analysis.kernels import ProcessKernels
    from tokensleuth.core.records import spec_hash
    from tokensleuth.drivers.slower import kernels as kdriver
    from tokensleuth.drivers.slower import ops as pdriver
    from tokensleuth.store import Store
    from tokensleuth.studies import kind_of

    db = tmp_path / "store.sqlite"
    shutil.copy(profiled["env"]["TOKENSLEUTH_DB"], db)
    model, workload = profiled["model"], "tg16"
    spec: dict[str, Any] = {"engines": ["a", "b"], "models": [model], "workloads": [workload], "band": 0.02}
    runs: list[dict[str, Any]] = []
    if how == "kernels":
        spec["tracers"] = {"a": "cupti", "b": "cupti"}
        for i in range(6):
            e = "ab"[i % 2]
            p = ProcessKernels(16, 16_000_000, 16_000_000, calls={k: 16 for k in PLANTED_KERNELS},
                               busy_ns={PLANTED_KERNELS[0]: 9_000_000 + (3_000_000 if e == "b" else 0) + i * 1000,
                                        PLANTED_KERNELS[1]: 2_000_000 + i * 1000},
                               union_ns=11_000_000, span_ns=12_000_000, lost=7 if (e, i) == ("b", 1) else 0)
            runs.append({"engine": e, "model": model, "workload": workload, "process": i, "kernels": p.to_state(),
                         "untraced_ms_per_token": 1.0 if e == "a" else 1.2})
    else:
        for i, e in enumerate("ab"):
            runs.append({"engine": e, "model": model, "workload": workload, "process": i,
                         "rows": [{"rep": r, "test": workload, "tokens": 16, "wall_ns": 48_000_000 + e_ns,
                                   "graph_ns": 44_800_000 + e_ns,
                                   "ops": [["PLANTED_OP", "f32 [4]", 16, 44_800_000 + e_ns]]}
                                  for r in range(3) for e_ns in [(r + 1) * 1000 + (4_000_000 if e == "b" else 0)]]})
    with Store(db) as store:
        kind = "kernels" if how == "kernels" else "profile"
        sid = store.writes.begin_study(kind, spec, spec_hash(spec), resume=False).id
        store.state.put(sid, kdriver.RUNS_STATE if how == "kernels" else pdriver.RUNS_STATE, runs)
        if how != "kernels":
            store.state.put(sid, pdriver.BENCH_STATE, [])
        store.writes.finish_study(sid)
        _, obj = kind_of(kind).render_stored(store, sid)
        summary = hook_summary(sid, obj, how)
        entry = dict(profiled["entry"], **summary)
        store.state.put(profiled["compare"], pdriver.PROFILES_STATE, [entry])
    return dict(profiled["env"], TOKENSLEUTH_DB=str(db)), sid


def hook_summary(sid: str, obj: dict[str, Any], how: str) -> dict[str, Any]:
    """What the profile hook stores of a diff beside a verdict (its summary)."""
    from tokensleuth.studies.kernels import summary as kernel_summary
    from tokensleuth.studies.profile import summary as op_summary

    return kernel_summary(sid, obj) if how == "kernels" else op_summary(sid, obj)


@pytest.mark.needs("browser")
@pytest.mark.parametrize(("how", "reason"), [
    ("kernels", "B: 7 records were lost by the tracer — the kernel table is withheld: trace again"),
    ("ops", "fewer than 2 profiler processes of an engine: the measured difference has no interval"),
])
def test_a_withheld_diff_shows_its_reason_and_no_name_no_bar_no_share(profiled: dict[str, Any], tmp_path: Path,
                                                                       how: str, reason: str) -> None:
    env, sid = _plant_withheld(profiled, tmp_path, how)
    page = tmp_path / "withheld.html"
    run(["report", profiled["compare"], "--html", str(page)], env)
    seen = open_page(page, f"why-withheld-{how}", ids=("why",))
    assert seen.console_errors == [] and seen.scripts == 0
    text, figures = seen.by_id["why"]
    assert reason in text, text
    html = _section(page.read_text())
    assert figures == [] and "<svg" not in html  # no bars
    assert 'class="shares"' not in html and "%" not in text  # no share, no table of them
    names = PLANTED_KERNELS if how == "kernels" else ("PLANTED_OP",)
    for name in names:
        assert name not in text
    if how == "kernels":  # a withheld table names no kernel anywhere on the page
        for name in names:
            assert name not in seen.text and name not in page.read_text()
    assert f"tokensleuth report {sid}" in text


@pytest.mark.needs("browser")
def test_the_site_and_the_issue_link_to_the_why_section(profiled: dict[str, Any]) -> None:
    env, sid, diff_sid = profiled["env"], profiled["compare"], profiled["entry"]["study"]
    site = profiled["dir"] / "site"
    run(["site", str(site)], env)
    index = open_page(site / "index.html", "why-site-index")
    assert index.console_errors == [] and index.scripts == 0
    # the compare's row links to its page's why section; the profile study has none to link to
    assert f"studies/{sid}.html#why" in index.links
    assert not [u for u in index.links if u.startswith(f"studies/{diff_sid}") and "#" in u]
    seen = open_page(site / "studies" / f"{sid}.html", "why-site-study", ids=("why",))
    assert_clean(seen, site / "studies" / f"{sid}.html")
    assert "#why" in seen.links and len(seen.by_id["why"][1]) == 1
    # the issue: a link to the section where the page is written beside it, else the command that writes it
    page = profiled["dir"] / "issue.html"
    md = run(["report", sid, "--issue", "--html", str(page)], env).stdout
    assert f"[{page}#why]({page}#why)" in md.split("### First Bad Commit")[0]
    assert 'id="why"' in page.read_text()
    md = run(["report", sid, "--issue"], env).stdout
    assert f"`tokensleuth report {sid} --html report.html` writes it, at report.html#why" in md
    assert "#why" not in run(["report", diff_sid, "--issue"], env).stdout  # no diff beside a verdict: no link


def test_each_kind_lists_the_diffs_it_stored_beside_its_verdicts() -> None:
    """compare (--profile), bisect (its culprit), scan (its steps) and decompose (its steps) say
    which diffs stand beside which verdict; a diff that did not run is listed with its reason."""
    from tokensleuth.studies import kind_of

    ran = {"study": "p1", "headline": "h", "model": "/m/moe.gguf", "workload": "tg16"}
    skipped = {"skipped": "a bin: folder has no profiler", "model": "/m/moe.gguf", "workload": "tg16"}
    got = {
        "compare": kind_of("compare").beside({"profile": [dict(ran, candidate="b"), dict(skipped, candidate="c")]}),
        "bisect": kind_of("bisect").beside({"first_bad": "abc123", "profile": ran}),
        "scan": kind_of("scan").beside({"steps": [{"first_bad": "s1", "parent": "s0"},
                                                   {"first_bad": "s2", "parent": "s1", "profile": ran}]}),
        "decompose": kind_of("decompose").beside({"steps": [{"patch": "p.diff", "decision": "kept", "profile": ran},
                                                            {"patch": "q.diff", "decision": "dropped"}]}),
    }
    assert [(e["label"], e.get("study"), e.get("skipped")) for e in got["compare"]] == [
        ("b, moe tg16", "p1", None), ("c, moe tg16", None, skipped["skipped"])]
    assert [e["label"] for e in got["bisect"]] == ["the culprit abc123 against its parent"]
    assert [e["label"] for e in got["scan"]] == ["step 2: s2 against s1"]
    assert [e["label"] for e in got["decompose"]] == ["p.diff (kept) against the state before it"]
    assert kind_of("bisect").beside({"first_bad": "abc123"}) == [] and kind_of("bench").beside({}) == []
