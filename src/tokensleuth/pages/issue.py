"""A study as a llama.cpp bug report: the headings of its issue form, filled from the store.

"Name and Version", "Operating systems", "GGML backends", "Hardware", "Models", "Problem
description & steps to reproduce", "First Bad Commit", "Relevant log output" — with the
study's tables and intervals, the confounder warnings, and the commands to reproduce it
with tokensleuth and without (the exact engine command lines the trials ran).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokensleuth.pages.html import Section
from tokensleuth.store import Store, stored_json


def _engine_commands(store: Store, study_id: str) -> list[str]:
    """One engine command line per arm (the first finished trial's argv), as a user types it."""
    seen: dict[str, str] = {}
    for t in store.reads.trials(study_id):
        if t["status"] != "done" or str(t["arm"]) in seen or not t["env_json"]:
            continue
        env = stored_json(t, "env_json")
        argv = env.get("argv") or stored_json(t, "argv_json", "[]")
        if argv and env.get("shared_process"):  # measured beside the other arm, in one process
            from tokensleuth.engines.base import own_argv

            argv = own_argv(argv, env["shared_process"], str(t["arm"]))
        if argv:
            extra = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in (env.get("engine_env") or {}).items())
            seen[str(t["arm"])] = (extra + " " if extra else "") + shlex.join(str(a) for a in argv)
    return [f"# {arm}\n{cmd}" for arm, cmd in seen.items()]


def _log_tail(store: Store, study_id: str) -> str:
    """The stderr tail of the failed trials, else of the last finished one."""
    trials = list(store.reads.trials(study_id))
    bad = [t for t in trials if t["status"] not in ("done", "planned", "running") and t["stderr_tail"]]
    pick = bad[:3] or [t for t in trials if t["status"] == "done" and t["stderr_tail"]][-1:]
    return "\n".join(f"[{t['arm']} trial {t['seq']}: {t['status']}{': ' + t['message'] if t['message'] else ''}]\n"
                     f"{t['stderr_tail']}" for t in pick).strip()


def why_link(study_id: str, page: str | None) -> str:
    """The issue's pointer to the page's why section: a link where the page is written beside it
    (``report --issue --html PAGE``), else the command that writes it."""
    from tokensleuth.pages.html import WHY

    what = ("Which op or kernel changed, drawn per arm with the shares of the measured difference and their "
            "intervals (or why they are withheld)")
    if page:
        return f"{what}: [{page}#{WHY}]({page}#{WHY})"
    return f"{what}: `tokensleuth report {study_id} --html report.html` writes it, at report.html#{WHY}."


def render_issue(store: Store, study_id: str, rendered: tuple[str, dict[str, Any]], why: str = "",
                 sections: Sequence[Section] = (), page: str | None = None) -> str:
    """``rendered``: the kind's (Markdown, JSON); ``why``: the explanations' Markdown; ``sections``:
    the explanations' page sections (the issue links to the why section where there is one, on
    ``page`` where it is written)."""
    from tokensleuth.pages.html import WHY, first_env
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.studies import kind_of

    row = store.reads.study(study_id)
    sid = str(row["id"])
    kind = kind_of(str(row["kind"]))
    md, obj = rendered
    spec = row.spec
    env = first_env(store, sid)
    arms = store.reads.arms(sid)
    engines = {a.name: a.engine for a in arms}
    apart = (obj.get("differences") or {}).get("arms") or {}  # what sets each arm apart (compare)

    out = ["### Name and Version", ""]
    for name, e in engines.items():
        ver = f"version: {e.get('build_number') or '?'} ({str(e.get('commit') or 'unknown')[:9]})"
        out.append(f"- {name}: `{e.get('source') or '?'}` — {ver}, built with {e.get('compiler') or '?'}"
                   + (f", cmake {' '.join(e.get('cmake_flags') or [])}" if e.get("cmake_flags") else "")
                   + (f"; run with {', '.join(apart[name])}" if apart.get(name) else ""))
    out += ["", "### Operating systems", "", f"Linux ({env.get('kernel', 'kernel unknown')})", "",
            "### GGML backends", ""]
    backends = sorted({b for e in engines.values() for b in (e.get("backends") or [])})
    out += [", ".join(backends) or "CPU", "", "### Hardware", ""]
    gpus = ((env.get("monitor") or {}).get("nvidia") or {})
    hw = f"{env.get('cpu_model', '?')} ({env.get('cpu_count', '?')} CPUs)"
    if gpus.get("devices"):
        hw += " + " + ", ".join(str(d.get("name")) for d in gpus["devices"]) + f" (driver {gpus.get('driver')})"
    out += [hw, "", "### Models", ""]
    models = spec.get("models") or []
    for m in models:
        out.append(f"- `{Path(str(m)).name}`")
    out += ["", "### Problem description & steps to reproduce", ""]
    if obj.get("summary") and str(obj["summary"]) not in md:  # the verdict sentence once
        out += [str(obj["summary"]), ""]
    out += [md.strip(), ""]
    if why:
        out += [why, ""]
    if any(s.key == WHY for s in sections):
        out += [why_link(sid, page), ""]
    warn = render_warnings(store.reads.warnings(sid)).strip()
    if warn:
        out += [warn, ""]
    out += ["Measured with tokensleuth: paired engine processes in alternating order, ratios of tokens/s with "
            "99% Student-t intervals on the paired log ratios; *same* means the interval lies inside the band.", ""]
    out += ["Steps to reproduce, with tokensleuth:", ""]
    out += kind.reproduce(spec, sid)
    cmds = _engine_commands(store, sid)
    if cmds:
        out += ["Without tokensleuth (the engine command of one trial per arm; run each several times, "
                "alternating):", "", "```shell", *cmds, "```", ""]
    first_bad, diff = kind.culprit(obj)
    if diff:
        out += ["<details><summary>The culprit's diff (files compiled into this build)</summary>", "",
                "```diff", diff.rstrip(), "```", "</details>", ""]
    out += ["### First Bad Commit", ""]
    out.append(first_bad)
    out += ["", "### Relevant log output", "", "```shell", _log_tail(store, sid) or "(no log captured)", "```"]
    return "\n".join(out)
