"""Markdown tables in llama-bench's style, ready to paste into an issue."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokensleuth.analysis.results import PARAM_FIELDS, Cell
from tokensleuth.analysis.stats import summarize


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    widths = [max(3, len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if r else c.ljust(w)
                                 for c, w, r in zip(cells, widths, right, strict=False)) + " |"
    sep = "| " + " | ".join(("-" * (w - 1) + ":") if r else "-" * w
                            for w, r in zip(widths, right, strict=False)) + " |"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def model_label(meta: dict[str, Any], path: str) -> str:
    return str(meta.get("model_type") or Path(path).stem)


def size_label(meta: dict[str, Any]) -> str:
    size = meta.get("model_size")
    return f"{int(size) / (1 << 30):.2f} GiB" if size not in (None, "") else "?"


def params_label(meta: dict[str, Any]) -> str:
    n = meta.get("model_n_params")
    if n in (None, ""):
        return "?"
    n = int(n)
    if n >= 1e9:
        return f"{n / 1e9:.2f} B"
    return f"{n / 1e6:.2f} M"


def varying_params(cells: Sequence[Cell]) -> list[str]:
    """ngl and threads always (as llama-bench shows), other parameters when they vary."""
    out = ["n_gpu_layers", "n_threads"]
    for f in PARAM_FIELDS:
        if f not in out and len({str(c.meta.get(f)) for c in cells}) > 1:
            out.append(f)
    return out


def fmt_ts(values: Sequence[float], avg: float | None = None, sd: float | None = None) -> str:
    if values:
        s = summarize(values)
        return f"{s.mean:.2f} ± {s.sd:.2f}"
    if avg is not None:
        return f"{avg:.2f} ± {(sd or 0):.2f}"
    return "—"


def flags_label(res: dict[str, Any]) -> str:
    """A cell's own confounders in a few characters: ``stall×2, short-window``."""
    out = []
    for code in res.get("flags") or []:
        n = res.get("stalled_repetitions") if code == "stall" else None
        out.append(f"{code}×{n}" if n else code)
    return ", ".join(out)


def lat_cell(lat: dict[str, Any], key: str) -> str:
    p = lat.get(key)
    return "—" if not p else f"{p['p50']:.2f} / {p['p90']:.2f} / {p['p99']:.2f}"


def render_warnings(rows: Sequence[Any]) -> str:
    """Confounder warnings, once each: what was seen, where, and the remedy."""
    from tokensleuth.analysis.confounders import REMEDY

    if not rows:
        return ""
    seen: dict[str, list[str]] = {}
    for r in rows:
        seen.setdefault(r["code"], []).append(f"{r['arm']}: {r['detail']}")
    lines = ["", "Warnings:"]
    for code, details in seen.items():
        uniq = list(dict.fromkeys(details))
        more = f" (+{len(uniq) - 3} more)" if len(uniq) > 3 else ""
        lines.append(f"- {code} in {len(details)} trial(s): {'; '.join(uniq[:3])}{more} — "
                     f"{REMEDY.get(code, 'check the system and rerun')}")
    return "\n".join(lines)
