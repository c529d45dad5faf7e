"""The decompose's steps: each patch applied on the last kept state, judged against it, and kept,
dropped, skipped or failed; its decision rules."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.drivers.slower import Profiler
from tokensleuth.drivers.verdicts.comparisons import Comparison
from tokensleuth.drivers.verdicts.diagnose import Diagnoser
from tokensleuth.drivers.verdicts.judge import Judge, Judgement
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.sources.build import DEFAULT_TARGETS, EngineBuild
from tokensleuth.sources.patches import (
    Patch,
    PatchFailed,
    PrivateRepo,
    build_error,
)
from tokensleuth.store import Store
from tokensleuth.trials.outputs import CHECK_TARGETS

Log = Callable[[str], None]

DECISIONS = ("kept", "dropped", "skipped", "failed")


# (last kept build, new state's build) -> {"verdict": identical|equivalent|changed, ...} or None
OutputCheck = Callable[[EngineBuild, EngineBuild], dict[str, Any] | None]


def classify(verdicts: Sequence[str], keep_neutral: bool = False) -> tuple[str, str] | None:
    """(decision, reason) from the cells' answers (:func:`answer`); None while undecided.

    One slower cell is a regression whatever the others say; a patch is kept when some
    cell is clearly faster and every other is faster, same, or "not slower" (unresolved
    between same and faster); "neutral" needs ``same`` in every cell.
    """
    v = set(verdicts)
    if "slower" in v:
        return "dropped", "regression"
    if "faster" in v and v <= {"faster", "same", "not slower"}:
        return "kept", "faster"
    if v != {"same"}:  # nothing measured, or an answer more pairs may still change
        return None
    return ("kept", "neutral (--keep-neutral)") if keep_neutral else ("dropped", "neutral")


def answer(c: Comparison, band: float) -> str:
    """A cell's answer to decompose's question: its verdict, or "not slower" where it is
    unresolved but its interval already lies above the band's lower edge (a slower
    verdict needs the whole interval below it): unresolved between same and faster, which
    does not change whether a patch faster in another cell is kept."""
    e = c.estimate
    if c.verdict == "unresolved" and e is not None and e.lo >= 1.0 - band:
        return "not slower"
    return c.verdict


def cell_json(c: Comparison) -> dict[str, Any]:
    e = c.estimate
    return {"model": c.model, "workload": c.workload, "ratio": e.ratio if e else None,
            "ci": [e.lo, e.hi] if e else None, "verdict": c.verdict, "pairs": c.pairs,
            "baseline_tokens_per_s": _mean(c.base_ts), "candidate_tokens_per_s": _mean(c.cand_ts),
            # pairs a confounder touched on one side, and whether the answer waits for them
            **({"confounded": c.confounder_note(), "steered": c.steered} if c.confounded else {})}


def _mean(v: Sequence[float]) -> float | None:
    return sum(v) / len(v) if v else None


def headline(cells: Sequence[dict[str, Any]], decision: str, reason: str) -> dict[str, Any] | None:
    """The cell a step's one ratio stands for: the slowest for a regression, else the fastest."""
    have = [c for c in cells if c["ratio"] is not None]
    if not have:
        return None
    if reason == "regression":
        return min(have, key=lambda c: float(c["ratio"]))
    return max(have, key=lambda c: abs(math.log(float(c["ratio"]))))


class Decomposer:
    """Runs the steps of one decompose study (the store and lease are the caller's)."""

    def __init__(self, store: Store, study: str, repo: PrivateRepo, base: str, patches: Sequence[Patch],
                 spec: dict[str, Any], *, judge: Judge | None = None, log: Log | None = None,
                 check_outputs: OutputCheck | None = None, diagnose: Diagnoser | None = None,
                 profile: Profiler | None = None) -> None:
        self.store, self.study, self.repo, self.base = store, study, repo, base
        self.diagnose = diagnose
        self.profile = profile
        self.patches = list(patches)
        self.spec = spec
        self.log = log or (lambda s: None)
        self.judge = judge or Judge(store, workloads=spec["workloads"], flags=spec["flags"], cmake=spec["cmake"],
                                    timeout_s=spec["timeout_s"], log=self.log,
                                    targets=CHECK_TARGETS if check_outputs is not None else DEFAULT_TARGETS,
                                    kind=spec.get("kind", DEFAULT_KIND))
        self.check_outputs = check_outputs
        self.models = list(spec["models"]) + list(spec.get("control_models") or [])

    def steps(self) -> list[dict[str, Any]]:
        return list(self.store.state.get(self.study, "steps", []))

    def run(self) -> dict[str, Any]:
        if self.judge.build(self.repo.source(self.base)) is None:
            raise EngineError(f"the base does not build ({self.judge.build_errors[self.repo.source(self.base)]})"
                              " — pick a base that builds")
        kept = self.base
        done = self.steps()
        out: list[dict[str, Any]] = []
        for i, p in enumerate(self.patches):
            prev = done[i] if i < len(done) else None
            # Reused only when applied to the same kept state and finished (an unresolved
            # step is judged again: its comparison continues with more pairs).
            if prev is not None and prev["parent"] == kept and not prev["reason"].startswith("unresolved"):
                step = prev
            else:
                step = self.step(p, kept)
                done = out + [step]  # later steps were taken on another kept chain, if any
                self.store.state.put(self.study, "steps", done)
            out.append(step)
            self._log_step(i, step)
            if step["decision"] == "kept":
                kept = step["state"]
        return self.finish(out, kept)

    def step(self, p: Patch, kept: str) -> dict[str, Any]:
        """One patch on top of the last kept state: applied, built, its outputs checked, judged
        against that state until decided (or unresolved, never guessed), and kept or dropped by
        the rule; a step already decided in an earlier run is read back, not measured again."""
        s: dict[str, Any] = {"patch": p.name, "subject": p.subject, "parent": kept, "state": None,
                             "decision": "failed", "reason": "", "cells": [], "ratio": None, "ci": None,
                             "pairs": 0, "build_s": None, "cache_hit": None, "outputs": None, "study": None}
        if self.repo.contained(kept, p):
            up = self.repo.upstream(kept, p)  # the commit that brought it, where its patch id is there
            return dict(s, decision="skipped", reason=f"already upstream as {up[:10]}" if up else "already in base")
        try:
            sha = self.repo.apply(kept, p)
        except PatchFailed as exc:
            # Taken upstream and edited since: it neither applies nor reverse-applies, but
            # its patch id is in the history (git cherry's test).
            if (up := self.repo.upstream(kept, p)) is not None:
                return dict(s, decision="skipped", reason=f"already upstream as {up[:10]} (edited since)")
            return dict(s, reason=str(exc))
        if self.repo.tree(sha) == self.repo.tree(kept):
            # merged to no change (see PrivateRepo.apply); one that still changes the tree is
            # measured even when its patch id is upstream: that commit may have been reverted
            up = self.repo.upstream(kept, p)
            return dict(s, decision="skipped",
                        reason=f"already upstream as {up[:10]} (same patch id)" if up else "changes nothing")
        s["state"] = sha
        src = self.repo.source(sha)
        self.log(f"  {p.name}: building")
        b = self.judge.build(src)
        if b is None:
            return dict(s, reason="does not build: " + build_error(self.judge.build_errors.get(src, "")))
        s["build_s"] = 0.0 if b.cache_hit else b.build_s  # seconds this decompose spent building it
        s["cache_hit"] = b.cache_hit
        if self.check_outputs is not None:
            # Outputs first: a patch that changes them is dropped whatever its speed, so its
            # speed is not measured (seconds, where a comparison takes minutes) unless
            # --allow-output-change could keep it.
            try:
                s["outputs"] = self.outputs(kept, b)
            except EngineError as exc:  # the state's llama-perplexity crashed or hung: the patch's doing
                return dict(s, reason=f"output check failed: {exc}"[:300])
            if s["outputs"] and s["outputs"].get("verdict") == "changed" and not self.spec.get("allow_output_change"):
                return dict(s, decision="dropped", reason="outputs changed")
        j, decided = self.judge_pair(kept, sha)
        s["study"] = j.study
        if (f := j.failed("B")) is not None:
            return dict(s, reason=f"engine {f.status}: {f.message}"[:300])
        if (f := j.failed("A")) is not None:
            return dict(s, reason=f"last kept state failed beside it ({f.status}: {f.message})"[:300],
                        error=True)
        s["cells"] = [cell_json(c) for c in j.comparisons]
        s["pairs"] = max((c.pairs for c in j.comparisons), default=0)
        if decided is None:
            s.update(decision="dropped", reason="unresolved")
            if waited := [c.confounder_note() for c in j.comparisons if c.steered]:
                s["waited"] = waited  # why: pairs a confounder touched on one side answer otherwise
        else:
            s["decision"], s["reason"] = decided
        if (h := headline(s["cells"], s["decision"], s["reason"])) is not None:
            s["ratio"], s["ci"] = h["ratio"], h["ci"]
        if (s["outputs"] or {}).get("verdict") == "changed":  # measured only when it may be kept anyway
            s["reason"] += "; outputs changed (allowed)" if s["decision"] == "kept" else "; outputs changed"
        if self.profile is not None and decided is not None:
            s["profile"] = self.step_profile(kept, src, s["cells"])
        return s

    def step_profile(self, kept: str, src: str, cells: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
        """A decided step's kernel (or op) diff against the state before it, on the cell that moved
        most (None where no cell moved: nothing to explain)."""
        assert self.profile is not None
        moved = [c for c in cells if c.get("verdict") in ("faster", "slower") and c.get("ratio")]
        if not moved:
            return None
        c = max(moved, key=lambda c: abs(math.log(c["ratio"])))
        where = {"model": c["model"], "workload": c["workload"]}
        self.log(f"  profiling the patch against the state before it on {Path(c['model']).name} {c['workload']}")
        try:
            return dict(self.profile(self.repo.source(kept), src, c["model"], c["workload"]), **where)
        except (UserError, EngineError) as exc:
            return dict(where, skipped=str(exc).splitlines()[0][:300])

    def decide(self, comps: Sequence[Comparison]) -> tuple[str, str] | None:
        return classify([answer(c, self.spec["band"]) for c in comps], bool(self.spec.get("keep_neutral")))

    def judge_pair(self, a: str, b: str, fresh: str = "",
                   every_cell: bool = False) -> tuple[Judgement, tuple[str, str] | None]:
        """Compare state b with a; unresolved is measured again at twice the pairs, never guessed.
        Pairs stop once the step is decided (a cell still open that cannot change the decision
        is not measured further), unless ``every_cell`` (the scoreboard: each cell's verdict)."""
        j: Judgement | None = None
        until = None if every_cell else (lambda comps: self.decide(comps) is not None)
        for max_pairs in (self.spec["max_pairs"], 2 * self.spec["max_pairs"]):
            j = self.judge.compare(self.repo.source(a), self.repo.source(b), self.models, self.spec["band"],
                                   max_pairs, fresh=fresh, until=until)
            if j.failures:
                return j, None
            decided = self.decide(j.comparisons)
            if decided is not None:
                return j, decided
        assert j is not None
        return j, None

    def outputs(self, kept: str, b: EngineBuild) -> dict[str, Any] | None:
        assert self.check_outputs is not None
        base_build = self.judge.build(self.repo.source(kept))
        assert base_build is not None  # the last kept state was built to be kept
        return self.check_outputs(base_build, b)

    def finish(self, steps: list[dict[str, Any]], final: str) -> dict[str, Any]:
        kept = [s for s in steps if s["decision"] == "kept"]
        result: dict[str, Any] = {"study": self.study, "base": self.base, "final": final,
                                  "steps": [public(s) for s in steps], "scoreboard": [],
                                  "kept": [s["patch"] for s in kept], "band": self.spec["band"]}
        incomplete = [s["patch"] for s in steps if s["reason"].startswith("unresolved") or s.get("error")]
        if final != self.base:
            self.log("verifying the final state against the base")
            # its own pairs, even where base -> final is one kept step's comparison
            j, _ = self.judge_pair(self.base, final, fresh="decompose-scoreboard", every_cell=True)
            result["scoreboard"] = scoreboard(j.comparisons, kept)
            result["scoreboard_study"] = j.study
            if j.failures or any(c.verdict == "unresolved" for c in j.comparisons):
                incomplete.append("scoreboard")
        result["status"] = "incomplete" if incomplete else "done"
        if incomplete:
            result["reason"] = ("could not decide " + ", ".join(incomplete)
                                + " — rerun with --resume to add pairs, or on a quieter machine")
            undecided = next((s for s in steps if s["reason"] == "unresolved" and s.get("study")), None)
            if undecided is not None and self.diagnose is not None:  # why (the first undecided step)
                builds = {a["name"]: b for a in self.store.reads.arms(undecided["study"])
                          if (b := self.judge.builds.get(a["source"])) is not None}
                if (why := self.diagnose(undecided["study"], builds)) is not None:
                    result["diagnosis"] = dict(why, patch=undecided["patch"])
        return result

    def _log_step(self, i: int, s: dict[str, Any]) -> None:
        r = f" (ratio {s['ratio']:.4f})" if s.get("ratio") else ""
        if s.get("outputs") and "outputs" not in s["reason"]:
            r += f"; outputs {s['outputs'].get('verdict')}"
        self.log(f"[{i + 1}/{len(self.patches)}] {s['patch']} {s['subject']!r}: {s['decision']}"
                 f" — {s['reason']}{r}" + "".join(f"\n    not decided on confounded pairs: {w}"
                                                  for w in s.get("waited", [])))


def public(s: dict[str, Any]) -> dict[str, Any]:
    """A step as the JSON contract shows it (the parent link is the driver's)."""
    return {k: v for k, v in s.items() if k not in ("parent", "error")}


def scoreboard(final: Sequence[Comparison], kept: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model x workload: base and final t/s, the total speedup, each kept patch's step ratio."""
    out = []
    for c in final:
        cell = cell_json(c)
        steps = []
        for s in kept:
            m = next((x for x in s["cells"] if x["model"] == c.model and x["workload"] == c.workload), None)
            steps.append({"patch": s["patch"], "ratio": m["ratio"] if m else None, "ci": m["ci"] if m else None})
        out.append({"model": c.model, "workload": c.workload, "base_tokens_per_s": cell["baseline_tokens_per_s"],
                    "final_tokens_per_s": cell["candidate_tokens_per_s"], "ratio": cell["ratio"],
                    "ci": cell["ci"], "verdict": c.verdict, "pairs": c.pairs, "steps": steps})
    return out
