"""Typed specs of what the user asked for, validated up front."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tokensleuth.errors import UserError
from tokensleuth.models.info import check_gguf


def spec_hash(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def model_paths(models: list[str] | list[Path]) -> list[str]:
    """Absolute paths of the models, each checked to be a GGUF file."""
    if not models:
        raise UserError("no model given — pass --model PATH (make one with `tokensleuth model synth`)")
    out = []
    for m in models:
        p = Path(m).expanduser().resolve()
        check_gguf(p)
        out.append(str(p))
    return out


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``2h`` or plain seconds -> seconds."""
    t = text.strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], None)
    try:
        value = float(t[:-1]) * mult if mult else float(t)
    except ValueError:
        raise UserError(f"cannot read duration {text!r} — write e.g. 90s, 30m or 2h") from None
    if value <= 0:
        raise UserError(f"duration {text!r} must be positive")
    return value


def parse_percent(text: str) -> float:
    """``1%`` or ``0.01`` -> 0.01."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise UserError(f"cannot read {text!r} as a band — write e.g. 1% or 0.01") from None
    if not 0 < value < 0.5:
        raise UserError(f"band {text!r} is out of range — use a value between 0.1% and 50%")
    return value
