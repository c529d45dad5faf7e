"""crosshost studies: one compare per machine of a fleet, in one table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.drivers.verdicts.crosshost import HOSTS_STATE
from tokensleuth.report.figures import Figure
from tokensleuth.report.markdown import table
from tokensleuth.store import Store
from tokensleuth.studies import KindBase
from tokensleuth.studies.compare import render_stored_compare


def render_crosshost(store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
    """The table: a row per machine x model x workload (ratio, interval, verdict, hardware)."""
    hosts = store.state.get(study_id, HOSTS_STATE)
    if hosts is None:
        raise UserError(f"cross-host study {study_id} has not finished — rerun it with --resume")
    spec = store.reads.study(study_id).spec
    band = float(spec["compare"].get("band", 0.01))
    rows, out_hosts = [], []
    for h in hosts:
        if "study" not in h:
            out_hosts.append(h)
            rows.append([h["node"], "—", "—", "—", "—", f"not measured: {h.get('error', '')[:80]}", "—", "—", "—"])
            continue
        _, obj = render_stored_compare(store, h["study"])
        hw = h.get("hardware") or {}
        out_hosts.append(dict(h, comparisons=obj["comparisons"]))
        for c in obj["comparisons"]:
            ci = c.get("ci")
            rows.append([h["node"], Path(c["model"]).stem, c["workload"], f"{c['candidate']}/{c['baseline']}",
                         f"{c['ratio']:.4f}" if c.get("ratio") else "—",
                         f"[{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "—", f"{c['verdict']} ({c['pairs']} pairs)",
                         ", ".join(filter(None, [hw.get("cpu"), hw.get("gpu")])) or "?",
                         ",".join(h.get("backends") or []) or "cpu"])
    md = (f"## Cross-host compare {study_id} (band ±{band:.1%})\n\n"
          + table(["machine", "model", "workload", "arms", "ratio", "99% CI", "verdict", "hardware", "backend"],
                  rows, [False, False, False, False, True, True, False, False, False]))
    lost = [h for h in hosts if h.get("lost_at")]
    for h in lost:
        md += f"\n\n- {h['node']} was lost during the study: {h.get('error', '')}"
    return md, {"study": study_id, "kind": "crosshost", "band": band, "hosts": out_hosts}


class CrossHostKind(KindBase):
    name = "crosshost"

    def describe(self, spec: dict[str, Any]) -> str:
        return "on " + ", ".join(str(h) for h in spec.get("hosts", []))

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        return render_crosshost(store, study_id)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return []  # each machine's compare page has its figures


KIND = CrossHostKind()
