"""rerun's request run to its outcome: a bundle's compare measured again on this machine, with
the same arms (built here from the same sources, or the sources the user maps them to), the same
models, workloads, flags and stopping rules, then stored beside the original and linked to it.

Everything that can refuse is asked before anything is stored or measured: each arm's source
here, each model here (and whether it is the bundle's model), each engine built. The original is
imported once the re-run's own study exists (``store.bundle.import_rows``: once), and the re-run
study names it in its identity (``rerun_of``: its --resume finds it) and in its state
(``agreement.RERUN_STATE``), where the report reads what agrees.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tokensleuth.core.errors import EngineError, UserError, show
from tokensleuth.core.redact import REDACTED
from tokensleuth.drivers import shared
from tokensleuth.drivers.requests import CompareRequest, RerunRequest, Say
from tokensleuth.drivers.slower import Summarize
from tokensleuth.drivers.verdicts import compare
from tokensleuth.drivers.verdicts.agreement import RERUN_STATE, original_cells
from tokensleuth.drivers.verdicts.compare import CompareOutcome
from tokensleuth.drivers.verdicts.comparisons import RERUN_OF, spec_of
from tokensleuth.models.info import SAME_MODEL, model_info
from tokensleuth.sources import parse_source
from tokensleuth.sources.build import DEFAULT_TARGETS
from tokensleuth.store.bundle import HINT, import_rows, provenance
from tokensleuth.trials.spec import ArmSpec, CompareSpec, model_paths


def _first(exc: BaseException) -> str:
    """An error's what, without its how (the re-run says its own)."""
    return str(exc).split(" — ")[0]


def spec_here(request: RerunRequest) -> CompareSpec:
    """The bundle's compare spec with each arm's source and each model as they are here; one line
    (exit 2) for an arm or a model that is not."""
    try:
        spec = spec_of(request.content["study"]["spec"])
    except ValidationError as exc:
        raise UserError(f"bundle {show(str(request.bundle))} is damaged (its spec: "
                        f"{show(str(exc.errors()[0]['msg']), 60)}) — {HINT}") from None
    names = [a.name for a in spec.arms]
    for name in request.sources:
        if name not in names:
            raise UserError(f"--arm {name}=…: the bundle has no arm {name} — its arms are {', '.join(names)}")
    arms = [_arm_here(a, request.sources.get(a.name)) for a in spec.arms]
    return spec.model_copy(update={"arms": arms, "models": _models_here(request, spec.models)})


def _arm_here(arm: ArmSpec, mapped: str | None) -> ArmSpec:
    source = mapped or arm.source
    fix = f"map it to a source here with --arm {arm.name}=SOURCE (git:PATH@REV, bin:DIR, pypi:NAME==VERSION)"
    try:
        parse_source(source)  # a git: or bin: path that is not here is refused now
    except UserError as exc:
        raise UserError(f"arm {arm.name}'s engine ({show(source, 80)}) is not here: {_first(exc)} — {fix}") from None
    env = dict(arm.env)
    for var, value in arm.env.items():
        if value == REDACTED:  # the writer's secret, left out of the bundle: this machine's own, or none
            if var not in os.environ:
                raise UserError(f"arm {arm.name}'s {var} was left out of the bundle (it names a secret) — export "
                                f"{var} here and run rerun again")
            env[var] = os.environ[var]
    return arm.model_copy(update={"source": source, "env": env})


def _models_here(request: RerunRequest, models: list[str]) -> list[str]:
    """Each model of the bundle as a path here: the one --model gives, else the bundle's path read
    here (``~`` is this machine's home); refused where it is missing or is another model."""
    entries = [e for e in request.content.get("models") or [] if isinstance(e, dict)]
    facts = {str(e.get("path")): e for e in entries}
    names = {Path(m).name: m for m in models}
    for name in request.model_paths:
        if name and name not in names and name not in {Path(m).stem for m in models}:
            raise UserError(f"--model {name}=…: the bundle has no model {name} — its models are {', '.join(names)}")
    out = []
    for m in models:
        name = Path(m).name
        given = (request.model_paths.get(name) or request.model_paths.get(Path(m).stem)
                 or (request.model_paths.get("") if len(models) == 1 else None))
        path = Path(given).expanduser() if given else Path(m).expanduser()
        if not path.is_file():
            raise UserError(f"model {name} ({show(m, 80)}) is not here — give it with --model {name}=PATH")
        here = model_paths([str(path)])[0]
        _same_model(name, Path(here), facts.get(m) or {})
        out.append(here)
    return out


def _same_model(name: str, path: Path, entry: Mapping[str, Any]) -> None:
    info = model_info(path).to_json()
    differ = [k for k in SAME_MODEL if k in entry and entry[k] != info[k]]
    if differ:
        raise UserError(f"{path} is not the bundle's model {name} (its {', '.join(differ)} differ) — give the same "
                        f"model with --model {name}=PATH")


def _build_here(spec: CompareSpec, say: Say) -> None:
    """Every arm's engine built here before anything is stored (a cache hit later); one that cannot
    be is one line, exit 2, naming the arm."""
    done: set[tuple[str, tuple[str, ...]]] = set()
    for a in spec.arms:
        key = (a.source, tuple(a.cmake))
        if key in done:
            continue
        kinds = [x.kind for x in spec.arms if (x.source, tuple(x.cmake)) == key]
        try:
            shared.build(a.source, a.cmake, shared.targets_for(kinds, DEFAULT_TARGETS), say)
        except (EngineError, UserError) as exc:
            why = " ".join(line.strip() for line in _first(exc).splitlines()[:2] if line.strip())
            raise UserError(f"arm {a.name}'s engine ({show(a.source, 80)}) cannot be built here: "
                            f"{why[:300] or 'the build failed'} — map the arm to a source that builds here with "
                            f"--arm {a.name}=SOURCE") from None
        done.add(key)


def run(request: RerunRequest, say: Say, summarize: Summarize) -> CompareOutcome:
    """Check, build, measure the bundle's compare here; store the original beside it, linked."""
    bundle = request.content
    spec = spec_here(request)
    _build_here(spec, say)
    original = str(bundle["study"]["id"])
    outcome = compare.run(CompareRequest(spec=spec, timeout_s=spec.timeout_s, resume=request.resume, db=request.db,
                                         probe=request.probe, identity={RERUN_OF: original}), say, summarize)
    with shared.open_store(request.db) as store:
        origin = provenance(request.bundle, bundle)  # (the bundle's digest, once)
        here, _ = import_rows(store, bundle, origin)
        store.state.put(outcome.study, RERUN_STATE, {
            "original": here, "bundle": {k: origin[k] for k in ("file", "digest", "study", "written_at",
                                                                "tokensleuth", "machine")},
            "models": [[o, h] for o, h in zip(spec_of(bundle["study"]["spec"]).models, spec.models, strict=True)],
            "cells": original_cells(verdicts if isinstance(verdicts := bundle.get("verdicts"), dict) else {})})
    return outcome
