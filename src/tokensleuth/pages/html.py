"""One self-contained HTML page per study: figures as inline SVG, the numbers behind each,
the arms, the machine, the warnings and the paste-ready Markdown. No scripts, no fetches:
the page opens from a file, on a phone, in print, and offline.

A pure function of the store (``render_html``): a copied database renders the same page
anywhere. Every string from the engine or the user (commit subjects, model paths, log
lines, flags) goes through jinja2's autoescaping; only the SVG that matplotlib wrote (which
escapes its own text) is inserted as markup.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import jinja2

from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.report.figures import Figure
from tokensleuth.store import Store, stored_json

TEMPLATES = jinja2.Environment(loader=jinja2.PackageLoader("tokensleuth.pages", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


WHY = "why"  # the anchor of the page's section on which op or kernel changed: the site and the issue link to it


@dataclass(frozen=True, slots=True)
class Part:
    """A piece of a section under a heading of its own: a figure with the numbers it draws, then
    lines and a table (the why section has one per diff beside a verdict)."""

    key: str
    title: str
    figure: Figure | None = None
    lines: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Section:
    """A text section of the page (placement, depth, roofline …): lines, then a table, then its parts."""

    key: str
    title: str
    lines: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = field(default_factory=tuple)
    pre: str = ""  # preformatted text after the table (a diff)
    parts: tuple[Part, ...] = ()


def _when(t: float | None) -> str:
    return "—" if t is None else dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def arms_table(store: Store, study_id: str, apart: dict[str, list[str]] | None = None) -> list[dict[str, str]]:
    """A row per arm; ``apart``: what sets each arm apart (the kind's JSON "differences"), a column
    of its own where the kind names it."""
    out = []
    for a in store.reads.arms(study_id):
        eng = a.engine
        flags = a.flags
        row = {"name": str(a["name"]), "kind": str(a["kind"] if "kind" in a.keys() else DEFAULT_KIND),
               "source": str(a["source"]), "commit": str(eng.get("commit") or eng.get("build_number") or "—"),
               "backends": ",".join(eng.get("backends") or []) or "—", "flags": " ".join(map(str, flags))}
        if apart is not None:
            row["apart"] = ", ".join(apart.get(row["name"]) or []) or "—"
        out.append(row)
    return out


def first_env(store: Store, study_id: str) -> dict[str, Any]:
    """The environment the study's first finished trial recorded (host, CPU, GPUs, argv)."""
    for t in store.reads.trials(study_id):
        if t["status"] == "done" and t["env_json"]:
            return dict(stored_json(t, "env_json"))
    return {}


def host_rows(env: dict[str, Any]) -> list[tuple[str, str]]:
    """The machine, as rows of the page's table."""
    rows = [(k, str(env[k])) for k in ("host", "cpu_model", "cpu_count", "kernel", "governor",
                                          "mem_available_mb") if env.get(k) is not None]
    gpus = ((env.get("monitor") or {}).get("nvidia") or {})
    if gpus.get("devices"):
        rows.append(("GPU", ", ".join(str(d.get("name")) for d in gpus["devices"]) + f" (driver {gpus.get('driver')})"))
    return rows


def render_html(store: Store, study_id: str, nav: str | None = None, sections: list[Section] | None = None,
                rendered: tuple[str, dict[str, Any]] | None = None) -> str:
    """The study's page. ``rendered``: the kind's (Markdown, JSON) when the caller has them."""
    from tokensleuth import __version__
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.studies import kind_of

    row = store.reads.study(study_id)
    sid = str(row["id"])
    kind = kind_of(str(row["kind"]))
    md, obj = rendered or kind.render_stored(store, sid)
    warn_md = render_warnings(store.reads.warnings(sid))
    figures: list[Figure] = kind.figures(store, sid, obj)
    summary = obj.get("summary") or (md.strip().splitlines() or [""])[0]
    warnings = [ln[2:] for ln in warn_md.splitlines() if ln.startswith("- ")]
    differences = obj.get("differences") or {}  # absent: the arms differ in their source only, or no arms
    shared = "; ".join(differences.get("shared") or [])
    why = next((s for s in sections or [] if s.key == WHY), None)
    return TEMPLATES.get_template("study.html.j2").render(
        title=f"tokensleuth {row['kind']} · {kind.describe(row.spec)}"[:200],
        kind=str(row["kind"]), study_id=sid, status=str(row["status"]), created=_when(row["created_at"]),
        engine_s=f"{store.reads.engine_seconds(sid):.1f}", summary=summary,
        arms=arms_table(store, sid, differences.get("arms")), shared=shared,
        host=host_rows(first_env(store, sid)), figures=figures, extra_sections=sections or [], warnings=warnings,
        why=why,
        markdown=md + warn_md, version=__version__, nav=nav)
