"""llama-bench's own settings, as it reports them: diff two arms, pin one to the other.

A comparison of two engine versions measures whatever changed between them, and that
includes llama-bench's defaults: release b9437 turned ``flash_attn`` from false to
auto and ``n_gpu_layers`` from 99 to -1, and a bisect over it then names b9437 as
"faster" for a reason that is not in the engine. Every result row carries the settings
the run used, so the arms' settings are diffed, differences the user did not ask for
are named beside the verdict, and ``--pin-params`` passes the baseline's values to the
candidate explicitly (in the syntax each version's ``--help`` accepts) so the comparison
asks what the engine change alone is worth.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import EngineError
from tokensleuth.engines.base import ParamDiff

__all__ = ["ParamDiff"]  # the record a diff returns (engines.base)

# JSON field -> llama-bench flags that set it (the first is the one passed when pinning).
SETTINGS: dict[str, tuple[str, ...]] = {
    "n_batch": ("-b", "--batch-size"),
    "n_ubatch": ("-ub", "--ubatch-size"),
    "n_threads": ("-t", "--threads"),
    "cpu_mask": ("-C", "--cpu-mask"),
    "cpu_strict": ("--cpu-strict",),
    "poll": ("--poll",),
    "type_k": ("-ctk", "--cache-type-k"),
    "type_v": ("-ctv", "--cache-type-v"),
    "n_gpu_layers": ("-ngl", "--n-gpu-layers"),
    "n_cpu_moe": ("-ncmoe", "--n-cpu-moe"),
    "split_mode": ("-sm", "--split-mode"),
    "main_gpu": ("-mg", "--main-gpu"),
    "no_kv_offload": ("-nkvo", "--no-kv-offload"),
    "flash_attn": ("-fa", "--flash-attn"),
    "use_mmap": ("-mmp", "--mmap"),
    "use_direct_io": ("-dio", "--direct-io"),
    "load_mode": ("-lm", "--load-mode"),
    "lazy_mode": ("-lzm", "--lazy-mode"),
    "fit_target": ("-fitt", "--fit-target"),
    "fit_min_ctx": ("-fitc", "--fit-ctx"),
    "embeddings": ("-embd", "--embeddings"),
    "no_op_offload": ("-nopo", "--no-op-offload"),
    "no_host": ("--no-host",),
    "repack": ("--repack",),
}
# A setting a later version reports under another field: old field -> (new field, old value ->
# new value). b9093 reports use_mmap (set by -mmp 0|1); b11434 reports load_mode (-lm
# auto|none|mmap|…) and has no -mmp. Runs of the two are compared, and pinned, as load_mode;
# a new value the old field cannot say (auto, dio) cannot be given to the old version.
RENAMED: dict[str, tuple[str, dict[Any, Any]]] = {
    "use_mmap": ("load_mode", {True: "mmap", False: "none"}),
}
# Settings reported but not worth a line: which devices ran is the host's business, and a
# tensor split or override list has no single-token flag value to pin.
UNPINNABLE = ("devices", "tensor_split", "tensor_buft_overrides")
FIELDS = (*SETTINGS, *UNPINNABLE)


def show(field: str, v: Any) -> str:
    """A setting as a person reads it (flash_attn -1 is "auto")."""
    if field == "flash_attn" and not isinstance(v, bool) and _fa_state(v) is not None:
        return str(_fa_state(v))
    return str(v).lower() if isinstance(v, bool) else str(v)


def settings(result: Mapping[str, Any]) -> dict[str, Any]:
    """The run settings of one llama-bench result object (other fields dropped)."""
    return {k: result[k] for k in (*SETTINGS, *UNPINNABLE) if k in result}


def flag_fields(flags: Sequence[str]) -> set[str]:
    """Settings that these llama-bench flags set (``-t 1`` sets n_threads; ``-mmp 0`` sets
    use_mmap, which later versions report as load_mode)."""
    by_flag = {f: field for field, fs in SETTINGS.items() for f in fs}
    out = {by_flag[f.split("=", 1)[0]] for f in flags if f.split("=", 1)[0] in by_flag}
    return out | {RENAMED[f][0] for f in out if f in RENAMED}


def _canonical(s: Mapping[str, Any]) -> dict[str, Any]:
    """The settings with a renamed field also under its later name (see RENAMED)."""
    out = dict(s)
    for old, (new, to_new) in RENAMED.items():
        if old in out and new not in out and _hashable(out[old]) and out[old] in to_new:
            out[new] = to_new[out[old]]
    return out


def _hashable(v: Any) -> bool:
    return isinstance(v, (bool, int, float, str))


def diff(base: Mapping[str, Any], cand: Mapping[str, Any], requested: set[str]) -> list[ParamDiff]:
    """Settings present in both runs whose values differ (a field only one version reports
    is a new setting, not a change of one; a renamed one is compared under its later name)."""
    base, cand = _canonical(base), _canonical(cand)
    out = []
    for k in (*SETTINGS, *UNPINNABLE):
        if k in RENAMED and RENAMED[k][0] in base and RENAMED[k][0] in cand:
            continue  # compared under its later name
        if k in base and k in cand and _norm(k, base[k]) != _norm(k, cand[k]):
            out.append(ParamDiff(k, base[k], cand[k], k in requested, (show(k, base[k]), show(k, cand[k]))))
    return out


def _norm(field: str, v: Any) -> Any:
    # flash_attn went from a bool to an int (-1 auto, 0 off, 1 on) to names across versions
    if field == "flash_attn":
        return _fa_state(v)
    return v


def _fa_state(v: Any) -> str | None:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, int):
        return {-1: "auto", 0: "off", 1: "on"}.get(v)
    if isinstance(v, str) and v.lower() in ("on", "off", "auto", "enabled", "disabled"):
        return {"enabled": "on", "disabled": "off"}.get(v.lower(), v.lower())
    return None


def help_line(help_text: str, flag: str) -> str | None:
    """The line of ``--help`` that lists ``flag``; None when this version has no such flag."""
    for line in help_text.splitlines():
        names = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", line.split("<")[0])
        if flag in names:
            return line
    return None


def accepted_values(help_text: str, flag: str) -> list[str] | None:
    """The value choices ``--help`` lists for a flag (``<on|off|auto>``), None if open-ended,
    and [] when this version has no such flag."""
    line = help_line(help_text, flag)
    if line is None:
        return []
    m = re.search(r"<([^>]*)>", line)
    if m and "|" in m.group(1):
        return [c.strip() for c in m.group(1).split("|")]
    return None


def takes_negative(help_text: str, flag: str) -> bool:
    """Whether this version reads a negative number for ``flag``: only where its own help shows
    one (b9437 and later: ``-ngl <n> (default: -1)``, -1 = auto). b9093's number ranges are
    digits only: ``-ngl -1`` is "invalid range format" there (bench/pin_matrix.py found it)."""
    line = help_line(help_text, flag) or ""
    return re.search(r"default: -\d", line) is not None


def render(field: str, value: Any, choices: list[str] | None) -> str | None:
    """The flag value that sets ``field`` to ``value`` in a version whose help lists
    ``choices``; None when that version cannot express it."""
    if field == "flash_attn":
        state = _fa_state(value)
        if state is None:
            return None
        if choices is None or state in choices:
            return state
        if "0" in choices and state in ("on", "off"):  # older: -fa <0|1>
            return "1" if state == "on" else "0"
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float, str)):
        text = str(value)
        return text if choices is None or text in choices else None
    return None


def pin_flags(base: Mapping[str, Any], cand: Mapping[str, Any], cand_help: str,
              requested: set[str]) -> tuple[list[str], list[str]]:
    """Flags that give the candidate the baseline's settings where they differ unasked,
    and the settings that this candidate's version cannot be given (with why)."""
    flags: list[str] = []
    cannot: list[str] = []
    for d in diff(base, cand, requested):
        if d.requested:
            continue
        if d.field in UNPINNABLE:
            cannot.append(f"{d.field} (no single flag value)")
            continue
        field, baseline = d.field, d.baseline
        flag = next((f for f in SETTINGS[field] if accepted_values(cand_help, f) != []), None)
        old = next((o for o, (n, _) in RENAMED.items() if n == field), None)
        if flag is None and old is not None:  # an older version: its own field and flag say it
            flag = next((f for f in SETTINGS[old] if accepted_values(cand_help, f) != []), None)
            back = {v: k for k, v in RENAMED[old][1].items()}
            if flag is not None and baseline not in back:
                cannot.append(f"{field}={show(field, baseline)} (this version does not accept it)")
                continue
            field, baseline = old, back.get(baseline)
        if flag is None:
            cannot.append(f"{d.field} (this version has no flag for it)")
            continue
        value = render(field, baseline, accepted_values(cand_help, flag))
        if value is not None and value.startswith("-") and not takes_negative(cand_help, flag):
            value = None
        if value is None:
            cannot.append(f"{d.field}={show(d.field, d.baseline)} (this version does not accept it)")
            continue
        flags += [flag, value]
    return flags, cannot


def bench(build: Any) -> Path:
    """The llama-bench of a build (an EngineBuild, or anything with its ``bin_dir``)."""
    return Path(build.bin_dir) / "llama-bench"


def help_text(bench_bin: Path) -> str:
    """llama-bench's ``--help`` (the flags and values this version accepts)."""
    from tokensleuth.sources.build import run_in_session

    try:
        text = run_in_session([str(bench_bin), "--help"], 30)
    except OSError as exc:
        raise EngineError(f"{bench_bin} --help failed: {exc}") from exc
    if text is None:
        raise EngineError(f"{bench_bin} --help did not finish in 30 s (its processes were killed)")
    return text


def pin_line(name: str, base: str, flags: Sequence[str], cannot: Sequence[str]) -> str:
    """What pinning did, in one line."""
    return (f"pinned {name} to {base}'s settings: {' '.join(flags) or 'nothing differed'}"
            + (f"; cannot pin {', '.join(cannot)}" if cannot else ""))
