"""compare studies: paired verdicts per model x workload — their JSON and their stored rendering
(what `compare` prints as it ends and what `report` prints later are one code)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokensleuth.drivers.comparisons import (
    OUTPUTS_STATE,
    Comparison,
    analyze,
    noise_of,
    stored_spec,
    summary_sentence,
)
from tokensleuth.report.figures import Figure, compare_figures
from tokensleuth.store import Store
from tokensleuth.studies import DROP_KEYS, KindBase
from tokensleuth.trials.spec import CompareSpec


def compare_json(study_id: str, spec: CompareSpec, comps: list[Comparison],
                 builds: Mapping[str, dict[str, Any]],
                 outputs: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    from tokensleuth.report.jsonout import JSON_SCHEMA_VERSION

    # "outputs" only when --check-outputs ran: absent means "not checked", never "no change"
    extra = {} if outputs is None else {"outputs": [dict(o) for o in outputs]}
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "study": study_id,
        "band": spec.band,
        "arms": {a.name: {"source": a.source, "flags": a.flags, "env": a.env,
                          "engine": {k: builds[a.name].get(k) for k in
                                     ("source", "commit", "build_number", "backends", "cmake_flags")}}
                 for a in spec.arms},
        "summary": summary_sentence(comps, spec.band),
        "comparisons": [c.to_json() for c in comps],
        **extra,
    }


def render_stored_compare(store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
    from tokensleuth.report.markdown import render_compare
    from tokensleuth.trials.outputs import render_output_checks

    spec = stored_spec(store, study_id)
    comps = analyze(store, study_id, spec)
    engines = {a["name"]: json.loads(a["engine_json"]) for a in store.arms(study_id)}
    md = render_compare(comps, study_id, spec.band, summary_sentence(comps, spec.band))
    checks = store.get_state(study_id, OUTPUTS_STATE)  # None: outputs were never checked
    if checks:
        md += "\n\n" + render_output_checks(checks)
    obj = compare_json(study_id, spec, comps, engines, checks)
    from tokensleuth.drivers.profile import PROFILES_STATE

    profiled = store.get_state(study_id, PROFILES_STATE)  # compare --profile: which op
    if profiled is not None:
        obj["profile"] = profiled
        md += "\n\n" + "\n".join(
            f"Which op ({p['candidate']}, {Path(p['model']).stem} {p['workload']}): "
            + (f"{p['headline']} (`tokensleuth report {p['study']}`)" if p.get("headline") else
               f"not profiled — {p.get('skipped')}") for p in profiled)
    found = noise_of(store, study_id)
    if found:  # studies made before noise was measured have none
        md += "\n\n" + found[0]
        obj["noise"] = found[1]
    return md, obj


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML for {type(v).__name__}")


def compare_study_toml(spec: dict[str, Any]) -> str:
    """A compare study file that reruns this study (tokensleuth compare --study FILE)."""
    lines = [f"{k} = {toml_value(v)}" for k, v in spec.items()
             if k not in DROP_KEYS and k != "arms" and v is not None]
    for arm in spec.get("arms", []):
        lines += ["", "[[arms]]"] + [f"{k} = {toml_value(v)}" for k, v in arm.items() if v not in (None, [], {})]
    return "\n".join(lines)


class CompareKind(KindBase):
    name = "compare"
    history = True
    bandwidth = True
    paired = True

    def describe(self, spec: dict[str, Any]) -> str:
        return ", ".join(str(a.get("name")) for a in spec.get("arms", []))

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        return render_stored_compare(store, study_id)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return compare_figures(store, study_id)

    def changes(self, obj: dict[str, Any]) -> list[tuple[str, str, str]]:
        return [(c["candidate"], c["model"], c["workload"]) for c in obj.get("comparisons", [])
                if c["verdict"] in ("faster", "slower")]

    def ratio_lines(self, obj: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
        out: dict[tuple[str, str], list[str]] = {}
        for c in obj.get("comparisons", []):
            if c["ratio"] is not None:
                out.setdefault((c["candidate"], c["model"]), []).append(
                    f"{c['workload']} {c['ratio']:.3f} [{c['ci'][0]:.3f}, {c['ci'][1]:.3f}]")
        return out

    def reproduce(self, spec: dict[str, Any], study_id: str) -> list[str]:
        return ["```toml", compare_study_toml(spec), "```", "", "```shell", "tokensleuth compare --study study.toml",
                "```", ""]


KIND = CompareKind()
