"""Typed specs of what the user asked for, validated up front."""

from __future__ import annotations

import hashlib
import json
import shlex
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tokensleuth.engines.llamabench import parse_workload
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
    """``500ms``, ``90s``, ``30m``, ``2h`` or plain seconds -> seconds."""
    t = text.strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], None)
    try:
        value = float(t[:-2]) / 1000 if t.endswith("ms") else float(t[:-1]) * mult if mult else float(t)
    except ValueError:
        raise UserError(f"cannot read duration {text!r} — write e.g. 500ms, 90s, 30m or 2h") from None
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


# -- compare -------------------------------------------------------------------------

WORKLOAD_FLAGS = {"-p", "--n-prompt", "-n", "--n-gen", "-d", "--n-depth", "-pg"}


class ArmSpec(BaseModel):
    """One arm: an engine source, llama-bench flags and environment, under a name."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    source: str
    flags: list[str] = []
    env: dict[str, str] = {}
    cmake: list[str] = []

    @field_validator("flags", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        return shlex.split(v) if isinstance(v, str) else v


class CompareSpec(BaseModel):
    """A compare study: arms x models x workloads, with its statistics settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    arms: list[ArmSpec]
    models: list[str]
    workloads: list[str] = ["pp512", "tg128"]
    baseline: str | None = None
    band: float = 0.01
    max_pairs: int = Field(40, ge=2, le=10000)
    min_pairs: int = Field(5, ge=2, le=1000)
    budget_s: float | None = None
    common_flags: list[str] = []
    timeout_s: float = 1800
    sample_interval_s: float = Field(0.2, ge=0.02, le=60)

    @field_validator("band", mode="before")
    @classmethod
    def _band(cls, v: object) -> object:
        return parse_percent(v) if isinstance(v, str) else v

    @field_validator("budget_s", "sample_interval_s", mode="before")
    @classmethod
    def _budget(cls, v: object) -> object:
        return parse_duration(v) if isinstance(v, str) else v

    @field_validator("common_flags", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        return shlex.split(v) if isinstance(v, str) else v

    def baseline_name(self) -> str:
        return self.baseline or self.arms[0].name

    def candidates(self) -> list[str]:
        return [a.name for a in self.arms if a.name != self.baseline_name()]

    def check(self) -> None:
        """Cross-field checks, each a one-line UserError."""
        names = [a.name for a in self.arms]
        if len(names) < 2:
            raise UserError("compare needs at least two arms — pass --arm NAME=SOURCE twice (the same source twice is an A/A test)")
        if len(set(names)) != len(names):
            raise UserError(f"arm names must be unique, got {names} — rename one")
        if self.baseline and self.baseline not in names:
            raise UserError(f"--baseline {self.baseline} is not an arm — choose one of {names}")
        for w in self.workloads:
            parse_workload(w)
        if not self.workloads:
            raise UserError("no workload — pass --workload pp512 (or tg128, pp2048@d4096)")
        for f in [*self.common_flags, *(f for a in self.arms for f in a.flags)]:
            if f.split("=", 1)[0] in WORKLOAD_FLAGS:
                raise UserError(f"llama-bench flag {f} conflicts with --workload — give workloads with --workload")
        if self.min_pairs > self.max_pairs:
            raise UserError(f"--max-pairs {self.max_pairs} is below the first round of {self.min_pairs} pairs — raise it")


def load_compare_toml(path: Path) -> CompareSpec:
    """Read a TOML study file; one clear line for any mistake in it."""
    if not path.is_file():
        raise UserError(f"study file {path} does not exist — check the path")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path} is not valid TOML ({exc}) — fix the line it names") from exc
    return build_compare_spec(data, str(path))


def build_compare_spec(data: dict[str, Any], where: str) -> CompareSpec:
    try:
        spec = CompareSpec.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        raise UserError(f"{where}: {loc}: {e['msg']} — see `tokensleuth compare --help`") from None
    spec.check()
    return spec
