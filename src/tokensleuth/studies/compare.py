"""compare studies: paired verdicts per model x workload — their JSON and their stored rendering
(what `compare` prints as it ends and what `report` prints later are one code)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tokensleuth.comparisons import OUTPUTS_STATE, Comparison, analyze, noise_of, stored_spec, summary_sentence
from tokensleuth.report.figures import Figure, compare_figures
from tokensleuth.spec import CompareSpec
from tokensleuth.store import Store


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
    from tokensleuth.outputs import render_output_checks
    from tokensleuth.report.markdown import render_compare

    spec = stored_spec(store, study_id)
    comps = analyze(store, study_id, spec)
    engines = {a["name"]: json.loads(a["engine_json"]) for a in store.arms(study_id)}
    md = render_compare(comps, study_id, spec.band, summary_sentence(comps, spec.band))
    checks = store.get_state(study_id, OUTPUTS_STATE)  # None: outputs were never checked
    if checks:
        md += "\n\n" + render_output_checks(checks)
    obj = compare_json(study_id, spec, comps, engines, checks)
    found = noise_of(store, study_id)
    if found:  # studies made before noise was measured have none
        md += "\n\n" + found[0]
        obj["noise"] = found[1]
    return md, obj


class CompareKind:
    name = "compare"

    def describe(self, spec: dict[str, Any]) -> str:
        return ", ".join(str(a.get("name")) for a in spec.get("arms", []))

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        return render_stored_compare(store, study_id)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return compare_figures(store, study_id)


KIND = CompareKind()
