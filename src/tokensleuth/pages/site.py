"""A static site of every study in the store: an index, one page per study (the HTML
report), and per (model, workload) a history of tokens/s over engine versions or commits.

Incremental: each study page is rewritten only when the study changed since the last run
(its status, trial count, last trial end and warnings, hashed into ``site.json``), and
history pages only when one of their points did. Pure reads of the store.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokensleuth.core.paths import write_atomic
from tokensleuth.pages.html import TEMPLATES
from tokensleuth.report import plots
from tokensleuth.store import Store


@dataclass(frozen=True, slots=True)
class SiteStats:
    studies: int
    written: int
    histories: int


def _fingerprint(store: Store, sid: str) -> str:
    row = store.reads.study(sid)
    agg, nwarn, state = store.reads.activity(sid)
    from tokensleuth import __version__

    blob = json.dumps([row["status"], row["finished_at"], list(agg), nwarn, list(state), __version__])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:80] or "x"


def history_points(store: Store) -> dict[tuple[str, str], list[tuple[str, float, bool, str]]]:
    """Per (model file, workload): (engine version, mean t/s, changed, study) for every
    bench/compare arm in the store, in engine order (build number, else first seen)."""
    from tokensleuth.studies import kind_of

    acc: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    where: dict[tuple[str, str, str], str] = {}
    order: dict[str, tuple[int, float]] = {}
    for s in store.reads.studies():
        if not kind_of(str(s["kind"])).history:
            continue
        engines = store.reads.engines(s["id"])
        for r in store.reads.trial_stats(s["id"]):
            e = engines.get(str(r["arm"]), {})
            ver = (f"b{e['build_number']}" if e.get("build_number") else str(e.get("commit") or "")[:9]) or "?"
            key = (Path(str(r["model"])).name, str(r["test"]))
            acc[key][ver].append(float(r["mean_ts"]))
            where[(key[0], key[1], ver)] = str(s["id"])
            order.setdefault(ver, (int(e.get("build_number") or 0), float(s["created_at"])))
    changed = _changed_versions(store)
    out: dict[tuple[str, str], list[tuple[str, float, bool, str]]] = {}
    for key, per in acc.items():
        vers = sorted(per, key=lambda v: order[v])
        out[key] = [(v, sum(per[v]) / len(per[v]), (key[0], key[1], v) in changed, where[(key[0], key[1], v)])
                    for v in vers]
    return out


def _changed_versions(store: Store) -> set[tuple[str, str, str]]:
    """(model, workload, candidate version) where a finished study's verdict said faster or slower."""
    from tokensleuth.studies import kind_of

    out: set[tuple[str, str, str]] = set()
    for s in store.reads.studies():
        kind = kind_of(str(s["kind"]))
        if s["status"] != "done" or not kind.history:
            continue
        _, obj = kind.render_stored(store, s["id"])
        engines = store.reads.engines(s["id"])
        for candidate, model, workload in kind.changes(obj):
            e = engines.get(candidate, {})
            ver = (f"b{e['build_number']}" if e.get("build_number") else str(e.get("commit") or "")[:9]) or "?"
            out.add((Path(model).name, workload, ver))
    return out


def build_site(store: Store, dest: Path) -> SiteStats:
    """A static site of every study in the store under ``dest``: an index and one page per study
    (its kind's page, figures and explanation), written anew; returns what it wrote."""
    from tokensleuth.pages.explain import explain
    from tokensleuth.pages.html import WHY, render_html
    from tokensleuth.studies import kind_of

    dest.mkdir(parents=True, exist_ok=True)
    (dest / "studies").mkdir(exist_ok=True)
    (dest / "history").mkdir(exist_ok=True)
    manifest_path = dest / "site.json"
    try:
        manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    pages = dict(manifest.get("pages") or {})
    index_rows = []
    written = 0
    for s in store.reads.studies():
        sid = str(s["id"])
        kind = kind_of(str(s["kind"]))
        spec = s.spec
        fp = _fingerprint(store, sid)
        page = dest / "studies" / f"{sid}.html"
        old = pages.get(sid) or {}
        if old.get("fp") != fp or not page.exists() or "why" not in old:
            why = False
            try:
                md, obj = kind.render_stored(store, sid)
                headline = kind.headline(obj, md)
                sections = [sec for sec, _ in explain(store, sid, obj)]
                why = any(sec.key == WHY for sec in sections)
                html = render_html(store, sid, nav="../index.html", rendered=(md, obj), sections=sections)
            except Exception as exc:  # noqa: BLE001 - one unreadable study must not take the site down
                from tokensleuth.core.errors import UserError

                if not isinstance(exc, UserError):
                    raise
                headline, html = f"not rendered: {exc}", None
            if html is not None:
                write_atomic(page, html)
                written += 1
            old = {"fp": fp, "headline": headline, "rendered": html is not None, "why": why and html is not None}
            pages[sid] = old
        engines = sorted({str(a["source"]) for a in store.reads.arms(sid)})
        index_rows.append({"id": sid, "kind": str(s["kind"]), "status": str(s["status"]),
                           "created": _day(s["created_at"]), "what": kind.describe(spec)[:120],
                           "engines": ", ".join(engines)[:200], "headline": old.get("headline", ""),
                           "href": f"studies/{sid}.html" if old.get("rendered") else None,
                           "why": f"studies/{sid}.html#{WHY}" if old.get("why") else None})
    hist_rows = []
    hist_fp = dict(manifest.get("history") or {})
    for (model, workload), pts in sorted(history_points(store).items()):
        name = f"{_slug(model)}--{_slug(workload)}.html"
        fp = hashlib.sha256(json.dumps(pts).encode()).hexdigest()[:16]
        if hist_fp.get(name) != fp or not (dest / "history" / name).exists():
            svg = plots.history([(v, t, ch) for v, t, ch, _ in pts], f"{model} · {workload}")
            write_atomic(dest / "history" / name, TEMPLATES.get_template("history.html.j2").render(
                model=model, workload=workload, svg=svg, points=pts))
            hist_fp[name] = fp
            written += 1
        hist_rows.append({"model": model, "workload": workload, "href": f"history/{name}", "n": len(pts),
                          "last": f"{pts[-1][1]:.2f}"})
    write_atomic(dest / "index.html", TEMPLATES.get_template("index.html.j2").render(
        studies=sorted(index_rows, key=lambda r: r["created"], reverse=True), histories=hist_rows))
    write_atomic(manifest_path, json.dumps({"pages": pages, "history": hist_fp}, indent=1))
    return SiteStats(len(index_rows), written, len(hist_rows))


def _day(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M")


