"""Output equivalence: does a candidate build compute the same logits as the baseline?

The baseline build saves its logits over a corpus the tool generates
(``--kl-divergence-base``); each candidate is run against that file
(``--kl-divergence``). The baseline is also run against its own file in a separate
process: that run is the noise floor (the saved logits are rounded to 16 bits, and a
GPU may not be bit-reproducible), and a candidate is judged against it:

- ``identical``: the candidate printed exactly what the floor printed — every chunk's
  PPL(Q) to ~11 significant digits, the KLD percentiles and "Same top p" — so its logits
  equal the baseline's to the precision the engine reports;
- ``equivalent``: Mean KLD and the 99th-percentile KLD no higher than the floor's plus
  ``Tolerance.kld`` and "Same top p" no lower than the floor's minus
  ``Tolerance.top_p_pct``;
- ``changed``: anything else.

Base files and floors are cached in ``workdir`` per (base build, model, flags,
settings), so a series of candidates against one base pays for them once.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.paths import write_atomic
from tokensleuth.engines import exitdrain
from tokensleuth.engines import perplexity as ppl
from tokensleuth.engines.proc import ProcResult, run_process
from tokensleuth.sources.build import DEFAULT_TARGETS, EngineBuild

# Build targets of a source whose outputs are checked: llama-perplexity from the same
# build as llama-bench, so a state or commit is configured and compiled once.
CHECK_TARGETS = (*DEFAULT_TARGETS, ppl.BINARY)

OutputVerdict = Literal["identical", "equivalent", "changed"]
Runner = Callable[..., ProcResult]

CORPUS_VERSION = 1
# Common English words: every tokenizer splits them into a few tokens each, so the
# corpus has enough tokens for several chunks under any vocabulary.
_WORDS = (
    "the of and to in is was for on that with as by at from his her it an were are which this be "
    "or had not but their one all also its have after first new more who when two been they time "
    "other into only has most over would some she may three there while where during many these "
    "such both under then year city later before between river small house water light early "
    "village music world people called known great school state north south east west long"
).split()


def corpus_text(n_words: int = 4000, seed: int = 0) -> str:
    """Deterministic text from a fixed word list and seed: no download, same every run."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_words // 16):
        words = [rng.choice(_WORDS) for _ in range(16)]
        lines.append(" ".join(words).capitalize() + ".")
    return "\n".join(lines) + "\n"


def write_corpus(workdir: Path) -> Path:
    p = workdir / f"corpus-v{CORPUS_VERSION}.txt"
    if not p.exists():
        write_atomic(p, corpus_text())
    return p


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far above the floor a candidate may be and still be ``equivalent``.

    KLD is printed with 6 decimals: 2e-6 nats is two units of that resolution (the floor
    and the candidate are each rounded once). 0.5 percentage points of "Same top p" is
    about one flipped top token in the ~250 tokens the default settings score.
    """

    kld: float = 2e-6
    top_p_pct: float = 0.5

    def to_json(self) -> dict[str, float]:
        return {"kld": self.kld, "top_p_pct": self.top_p_pct}


def classify(cand: ppl.KldStats, floor: ppl.KldStats, tol: Tolerance = Tolerance()) -> OutputVerdict:
    """identical / equivalent / changed, judged against the base-vs-base floor."""
    if cand.fingerprint() == floor.fingerprint():
        return "identical"
    if (cand.mean_kld <= floor.mean_kld + tol.kld and cand.kld_99 <= floor.kld_99 + tol.kld
            and cand.same_top_p >= floor.same_top_p - tol.top_p_pct):
        return "equivalent"
    return "changed"


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """One candidate's outputs against the baseline's, with the floor it was judged by."""

    verdict: OutputVerdict
    mean_kld: float
    kld_99: float
    same_top_p: float
    ppl_ratio: float | None
    max_kld: float | None
    floor: ppl.KldStats
    tolerance: Tolerance
    settings: ppl.KldSettings
    seconds: float  # wall time of this check, base file and floor included when made now
    stats: ppl.KldStats = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "mean_kld": self.mean_kld, "kld_99": self.kld_99,
                "same_top_p": self.same_top_p, "ppl_ratio": self.ppl_ratio, "max_kld": self.max_kld,
                "floor": {"mean_kld": self.floor.mean_kld, "kld_99": self.floor.kld_99,
                          "same_top_p": self.floor.same_top_p},
                "tolerance": self.tolerance.to_json(), "settings": self.settings.to_json(),
                "seconds": round(self.seconds, 3)}


def _model_id(model: str) -> str:
    p = Path(model)
    try:
        st = p.stat()
    except OSError as exc:
        raise UserError(f"model {model} cannot be read ({exc.strerror}) — give an existing GGUF file") from exc
    return f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def _stem(base: EngineBuild, model: str, flags: Sequence[str], settings: ppl.KldSettings) -> str:
    blob = json.dumps([base.key, _model_id(model), list(flags), settings.to_json(), CORPUS_VERSION])
    return f"{base.key}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def _run(run: Runner, argv: list[str], timeout_s: float) -> str:
    # The statistics go through llama.cpp's logger thread: the process is held at exit until
    # they are written (engines/exitdrain.py); _run_parsed still runs a lost tail again.
    res = run(argv, timeout_s=timeout_s, env=exitdrain.env())
    text = res.text("out") + "\n" + res.text("err")
    if res.spawn_error:
        raise EngineError(f"{res.spawn_error} — check the engine build")
    if res.timed_out:
        raise EngineError(f"llama-perplexity ran past {timeout_s:.0f} s and was killed — "
                          "raise the timeout or use a smaller model")
    if res.returncode != 0:
        hint = ppl.error_line(text) or res.tail("err", 1)
        raise EngineError(f"llama-perplexity exited with {res.returncode}: {hint} — "
                          "check the model and the engine build")
    return text


# llama.cpp's logger prints from a thread of its own and is never flushed at exit (its
# singleton is leaked on purpose: ggml-org/llama.cpp#22142), so on a busy machine a run that
# went through can exit 0 before its last lines (the statistics) are printed. Such a run —
# exit 0, no error line, the statistics missing — is run again, up to this many times in all,
# after a pause that grows by LOST_TAIL_PAUSE_S a time (0.5, 1, 1.5, 2 s: a burst of load on the
# machine passes). The suite once lost them in three runs back to back, twice, while the other
# test process ran engines of its own. The exit drain (engines/exitdrain.py) now holds the exit
# until those lines are written; this stays for engines it cannot reach (no C compiler to build
# it, a statically linked engine).
LOST_TAIL_RUNS = 5
LOST_TAIL_PAUSE_S = 0.5
T = TypeVar("T")


def _run_parsed(run: Runner, argv: list[str], timeout_s: float, parse: Callable[[str], T]) -> T:
    """``parse`` of one llama-perplexity run's output, run again when its tail was lost."""
    for attempt in range(1, LOST_TAIL_RUNS + 1):
        text = _run(run, argv, timeout_s)
        try:
            return parse(text)
        except EngineError as exc:
            if ppl.error_line(text) or attempt == LOST_TAIL_RUNS:
                if attempt > 1:
                    raise EngineError(f"{exc} (in {attempt} runs; llama.cpp's logger can drop the last lines "
                                      "at exit, ggml-org/llama.cpp#22142)") from None
                raise
            time.sleep(LOST_TAIL_PAUSE_S * attempt)
    raise AssertionError("unreachable")


@dataclass(slots=True)
class OutputChecker:
    """Runs output checks, caching base logits and noise floors in ``workdir``."""

    workdir: Path
    settings: ppl.KldSettings = field(default_factory=ppl.KldSettings)
    tolerance: Tolerance = field(default_factory=Tolerance)
    timeout_s: float = 1800.0
    run: Runner = run_process

    def _base_path(self, base: EngineBuild, model: str, flags: Sequence[str]) -> Path:
        return self.workdir / f"{_stem(base, model, flags, self.settings)}.kld"

    def base_file(self, base: EngineBuild, model: str, flags: Sequence[str] = ()) -> Path:
        """The base build's saved logits for ``model`` (made now unless cached)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        out = self._base_path(base, model, flags)
        if out.exists():
            return out
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        argv = ppl.base_argv(base.binary(ppl.BINARY), model, write_corpus(self.workdir), tmp,
                             self.settings, flags)
        try:
            _run_parsed(self.run, argv, self.timeout_s, ppl.parse_base_ppl)
            if not tmp.exists() or tmp.stat().st_size == 0:
                raise EngineError(f"llama-perplexity wrote no base logits to {tmp} — check free disk space")
            tmp.replace(out)
        finally:
            tmp.unlink(missing_ok=True)
        return out

    def kld(self, base: EngineBuild, cand: EngineBuild, model: str, flags: Sequence[str] = (),
            cand_flags: Sequence[str] | None = None) -> ppl.KldStats:
        """One ``--kl-divergence`` run of ``cand`` against the base file."""
        base_file = self.base_file(base, model, flags)
        argv = ppl.kld_argv(cand.binary(ppl.BINARY), model, write_corpus(self.workdir), base_file,
                            self.settings, flags if cand_flags is None else cand_flags)
        return _run_parsed(self.run, argv, self.timeout_s, ppl.parse_kld)

    def floor(self, base: EngineBuild, model: str, flags: Sequence[str] = ()) -> ppl.KldStats:
        """Base against its own file in a separate process (cached)."""
        p = self.workdir / f"{_stem(base, model, flags, self.settings)}.floor.json"
        if p.exists():
            try:
                return ppl.KldStats.from_json(json.loads(p.read_text()))
            except (ValueError, TypeError, EngineError):
                pass  # a torn or stale file: measure again
        try:
            stats = self.kld(base, base, model, flags)
        except EngineError:
            # The base cannot read its own file: the file is suspect, never reuse it.
            self._base_path(base, model, flags).unlink(missing_ok=True)
            raise
        write_atomic(p, json.dumps(stats.to_json()))
        return stats

    def check(self, base: EngineBuild, cand: EngineBuild, model: str, flags: Sequence[str] = (),
              cand_flags: Sequence[str] | None = None) -> OutputCheck:
        """``cand``'s outputs on ``model`` against ``base``'s: verdict and KLD figures."""
        t0 = time.monotonic()
        floor = self.floor(base, model, flags)
        stats = self.kld(base, cand, model, flags, cand_flags)
        return OutputCheck(classify(stats, floor, self.tolerance), stats.mean_kld, stats.kld_99,
                           stats.same_top_p, stats.ppl_ratio, stats.max_kld, floor, self.tolerance,
                           self.settings, time.monotonic() - t0, stats)


def check_outputs(base_build: EngineBuild, cand_build: EngineBuild, model: str, *, workdir: Path,
                  flags: Sequence[str] = (), cand_flags: Sequence[str] | None = None,
                  settings: ppl.KldSettings | None = None, run: Runner = run_process) -> OutputCheck:
    """One output check; base logits and floor are cached in ``workdir`` across calls."""
    checker = OutputChecker(workdir, settings or ppl.KldSettings(), run=run)
    return checker.check(base_build, cand_build, model, flags, cand_flags)


def render_output_checks(rows: Sequence[Mapping[str, Any]]) -> str:
    """Lines under the compare table, one per candidate arm and model (``ArmOutputCheck.to_json()``)."""
    if not rows:
        return ""
    out = ["Outputs (llama-perplexity KL divergence against the baseline; floor = baseline vs itself):"]
    for c in rows:
        f = c["floor"]
        out.append(f"- {Path(c['model']).stem}: {c['candidate']} vs {c['baseline']}: **{c['verdict']}** — mean KLD "
                   f"{c['mean_kld']:.6f} (floor {f['mean_kld']:.6f}), 99% KLD {c['kld_99']:.6f} "
                   f"(floor {f['kld_99']:.6f}), same top p {c['same_top_p']:.3f}% (floor {f['same_top_p']:.3f}%)"
                   + ("" if c.get("ppl_ratio") is None else f", PPL ratio {c['ppl_ratio']:.6f}")
                   + f", {c['seconds']:.1f} s")
    return "\n".join(out)


@dataclass(frozen=True, slots=True)
class PlannedCheck:
    """One output check a driver will run: a candidate arm against the baseline on a model."""

    baseline: str
    candidate: str
    model: str
    base_flags: tuple[str, ...]  # llama-perplexity flags (see perplexity_flags)
    cand_flags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ArmOutputCheck:
    """A finished :class:`PlannedCheck`."""

    baseline: str
    candidate: str
    model: str
    check: OutputCheck

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "candidate": self.candidate, "model": self.model,
                **self.check.to_json()}


def run_planned(plan: Sequence[PlannedCheck], builds: Mapping[str, EngineBuild], checker: OutputChecker,
                on_check: Callable[[ArmOutputCheck], None] | None = None) -> list[ArmOutputCheck]:
    """Run each planned check; the base file and floor are made once per baseline and model."""
    done = []
    for p in plan:
        c = ArmOutputCheck(p.baseline, p.candidate, p.model,
                           checker.check(builds[p.baseline], builds[p.candidate], p.model, p.base_flags,
                                         p.cand_flags))
        if on_check is not None:
            on_check(c)
        done.append(c)
    return done
