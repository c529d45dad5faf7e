"""tokensleuth doctor: what will make measurements noisy here, then this machine's noise."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from tokensleuth.commands import common
from tokensleuth.commands.common import err, out


def doctor(
    aa: Annotated[bool, typer.Option("--aa/--no-aa", help="Also run a short A/A compare (seconds on a tiny model).")] = True,
    model: Annotated[Optional[Path], typer.Option("--model", "-m", help="GGUF model for the A/A run "
                                                  "(default: a tiny synthetic one).")] = None,
) -> None:
    """What will make measurements noisy here, each with its fix; then this machine's noise."""
    import time as _time

    from tokensleuth import doctor as doc
    from tokensleuth.report.markdown import table

    t0 = _time.monotonic()
    found = doc.checks()
    out.print(table(["check", "", "seen", "fix"],
                    [[f.name, "ok" if f.ok else "FIX", f.seen, "" if f.ok else f.fix] for f in found],
                    [False, False, False, False]), markup=False)
    if not aa:
        return
    from tokensleuth.models.synth import synth
    from tokensleuth.paths import cache_dir
    from tokensleuth.sources import DEFAULT_ENGINE
    from tokensleuth.sources.build import BuildCache

    b = common.get_build(DEFAULT_ENGINE, [])
    if model is None:
        model = cache_dir() / "doctor" / f"{b.key}-llama-tiny-Q8_0.gguf"
        if not model.exists():
            model.parent.mkdir(parents=True, exist_ok=True)
            synth("llama", "tiny", model, "Q8_0", BuildCache().llama_tree(DEFAULT_ENGINE),
                  Path(b.bin_dir) / "llama-quantize")
    from tokensleuth.diagnose import allowed_cpus

    err.print(f"A/A: the default engine against itself, {doc.AA_PAIRS} pairs of tg32 …", markup=False)
    got = doc.run_aa(b, model)
    if got.noise is not None:
        out.print(got.noise.sentence(), markup=False)
    if got.diagnosis is not None:
        out.print("diagnosis: " + "; ".join(f.seen for f in got.diagnosis.findings), markup=False)
    out.print(got.line(), markup=False)
    cpus = allowed_cpus()
    if got.threads is not None and cpus >= 2 and got.threads >= cpus:
        # the engine would use every CPU: the same A/A with one thread fewer, measured, not guessed
        fewer = got.threads - 1
        err.print(f"A/A again at -t {fewer} (the engine's default, {got.threads}, uses every CPU) …", markup=False)
        alt = doc.run_aa(b, model, ["-t", str(fewer)])
        out.print(alt.line(), markup=False)
        now, then = got.pairs_needed.get(0.02), alt.pairs_needed.get(0.02)
        better = then is not None and (now is None or then < now)
        out.print(f"threads: -t {fewer} needs {then if then is not None else '> 10000'} pairs for ±2% where the "
                  f"default needs {now if now is not None else '> 10000'} — "
                  + (f"measure with `-- -t {fewer}`" if better else "keep the default"), markup=False)
    out.print(f"doctor took {_time.monotonic() - t0:.0f} s", markup=False)
