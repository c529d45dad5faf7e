"""Typed specs of what the user asked for, validated up front."""

from __future__ import annotations

import math
import shlex
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tokensleuth.core.errors import UserError
from tokensleuth.core.limits import MAX_BAND, MAX_BUDGET_S, MAX_TIMEOUT_S, MIN_BAND
from tokensleuth.core.records import spec_hash as spec_hash  # where it was
from tokensleuth.core.workloads import canonical as canonical_workload
from tokensleuth.core.workloads import parse as parse_workload
from tokensleuth.engines import KINDS, engine_for, kind_for, served
from tokensleuth.engines.base import DEFAULT_KIND, JoinedFlags
from tokensleuth.models.info import check_gguf


def arm_argv(kind: str, common: Sequence[str], own: Sequence[str]) -> JoinedFlags:
    """The one place an arm's argv is built: the common flags and the arm's own, as the arm's engine
    joins them (Engine.join_flags: an option given in both is passed once, with the arm's value;
    what was overridden is said). Compare, the judge of the hunts, the kernel trace and the doctor
    all ask here."""
    return engine_for(kind).join_flags(common, own)



def model_paths(models: list[str] | list[Path]) -> list[str]:
    """Absolute paths of the models, each checked to be a GGUF file."""
    if not models:
        raise UserError("no model given — pass --model PATH (make one with `tokensleuth model synth`)")
    out = []
    for m in models:
        try:
            p = Path(m).expanduser().resolve()
        except (RuntimeError, OSError, ValueError):  # ~nosuchuser, a symlink loop, a NUL byte
            raise UserError(f"cannot resolve the model path {str(m)!r} — write the full path") from None
        check_gguf(p)
        out.append(str(p))
    return out


def parse_duration(text: str) -> float:
    """``500ms``, ``90s``, ``30m``, ``2h`` or plain seconds -> seconds (finite, > 0)."""
    t = text.strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], None)
    try:
        value = float(t[:-2]) / 1000 if t.endswith("ms") else float(t[:-1]) * mult if mult else float(t)
    except ValueError:
        raise UserError(f"cannot read duration {text!r} — write e.g. 500ms, 90s, 30m or 2h") from None
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"duration {text!r} must be a positive number of seconds — write e.g. 90s or 30m")
    return value


def check_seconds(value: float, what: str, most: float) -> float:
    """A number of seconds that is finite, positive and at most ``most``."""
    if not math.isfinite(value) or not 0 < value <= most:
        raise UserError(f"{what} {value!r} is out of range — give seconds above 0 and at most {most:g}")
    return float(value)


def parse_percent(text: str) -> float:
    """``1%`` or ``0.01`` -> 0.01 (between 0.1% and 50%)."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise UserError(f"cannot read {text!r} as a band — write e.g. 1% or 0.01") from None
    return check_band(value, text)


def check_band(value: float, text: object = None) -> float:
    """A band as a fraction, between 0.1% and 50% (nan and inf fail the comparison)."""
    if not MIN_BAND <= value <= MAX_BAND:
        shown = text if text is not None else value
        raise UserError(f"band {shown!r} is out of range — use a value between 0.1% and 50% (0.001 to 0.5)")
    return float(value)


def _number(v: object, what: str) -> float | None:
    """``v`` as a float when it is a plain number, None for other types (pydantic's to refuse)."""
    if isinstance(v, bool):  # pydantic would read true as 1.0
        raise UserError(f"{what} is {str(v).lower()} — give a number")
    if not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:  # an integer too large for a float
        raise UserError(f"{what} {v} is out of range") from None


# -- compare -------------------------------------------------------------------------

WORKLOAD_FLAGS = engine_for(DEFAULT_KIND).workload_flags  # llama-bench's: refused beside --workload for every arm


class ArmSpec(BaseModel):
    """One arm: an engine source, llama-bench flags and environment, under a name."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    source: str
    flags: list[str] = []
    env: dict[str, str] = {}
    cmake: list[str] = []
    kind: str = DEFAULT_KIND  # the engine kind that runs this arm (tokensleuth.engines.KINDS)
    # url: arms: the environment variable that holds the API key (its name is stored, never the key)
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @model_validator(mode="before")
    @classmethod
    def _url_kind(cls, v: object) -> object:
        # an arm on a running server (url:) is measured over its OpenAI-compatible API
        # (a command that starts a server speaks llama-server's API unless its kind says openai)
        if isinstance(v, dict) and "kind" not in v:
            return dict(v, kind=kind_for(str(v.get("source", "")), None))
        return v

    @model_validator(mode="after")
    def _kind_fits_source(self) -> ArmSpec:
        if self.kind not in KINDS:
            return self  # named by the arm check (engine_for), with the kinds there are
        engine = engine_for(self.kind)
        if served(self.source) and not engine.attaches:
            raise ValueError("a url: or cmd: source is a server — give the arm kind "
                             + " or ".join(sorted(k for k in KINDS if engine_for(k).attaches)))
        if not engine.builds and not served(self.source):
            raise ValueError(f"kind {self.kind} measures a server at a url: or started by a cmd: — give such a source")
        return self

    @field_validator("flags", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        return shlex.split(v) if isinstance(v, str) else v

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        from tokensleuth.engines import KINDS

        if v not in KINDS:
            raise ValueError(f"unknown engine kind {v!r} (choose one of {', '.join(KINDS)})")
        return v


class HostSpec(BaseModel):
    """A ``[[hosts]]`` entry: the fleet's machines a study runs on, by label (``on = "gpu=H200"``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    on: str = Field(min_length=1)


class Settings(BaseModel):
    """What every study that runs paired comparisons is measured with (models, workloads, band,
    pairs, flags, watchdog), validated once: a compare's spec is these and its arms; a bisect's,
    a decompose's and a scan's are checked as these (:func:`check_settings`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    models: list[str]
    workloads: list[str] = ["pp512", "tg128"]
    band: float = 0.01
    max_pairs: int = Field(40, ge=2, le=10000)
    common_flags: list[str] = []
    timeout_s: float = 1800

    @field_validator("band", mode="before")
    @classmethod
    def _band(cls, v: object) -> object:
        if isinstance(v, str):
            return parse_percent(v)
        number = _number(v, "band")
        return v if number is None else check_band(number)

    @field_validator("budget_s", "timeout_s", "sample_interval_s", mode="before", check_fields=False)
    @classmethod
    def _seconds(cls, v: object, info: ValidationInfo) -> object:
        most = {"budget_s": MAX_BUDGET_S, "timeout_s": MAX_TIMEOUT_S}.get(info.field_name or "", 60.0)
        number = parse_duration(v) if isinstance(v, str) else _number(v, str(info.field_name))
        # (the sample interval's own bounds, 0.02 to 60 s, are the Field's)
        return v if number is None else check_seconds(number, str(info.field_name), most)

    @field_validator("common_flags", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        return shlex.split(v) if isinstance(v, str) else v

    @field_validator("workloads")
    @classmethod
    def _canonical(cls, v: list[str]) -> list[str]:
        # One name per workload, llama-bench's (tg128@d0 -> tg128): trials are planned and
        # stored under it and results come back under it, so the cells match.
        return list(dict.fromkeys(canonical_workload(w) for w in v))

    def check_settings(self, flags: Sequence[str] = ()) -> None:
        """Cross-field checks of the settings (``flags``: the arms' own too), each a one-line UserError."""
        for w in self.workloads:
            parse_workload(w)
        if not self.workloads:
            raise UserError("no workload — pass --workload pp512 (or tg128, pp2048@d4096)")
        for f in [*self.common_flags, *flags]:
            if f.split("=", 1)[0] in WORKLOAD_FLAGS:
                raise UserError(f"llama-bench flag {f} conflicts with --workload — give workloads with --workload")


class CompareSpec(Settings):
    """A compare study: arms x models x workloads, with its statistics settings."""

    arms: list[ArmSpec]
    baseline: str | None = None
    min_pairs: int = Field(5, ge=2, le=1000)
    budget_s: float | None = None
    # A one-sided question (a bisect step: like good, or like bad?): a cell is decided once
    # its interval lies wholly on one side of this ratio, whatever the band's verdict says.
    edge: float | None = Field(None, gt=0)
    sample_interval_s: float = Field(0.2, ge=0.02, le=60)
    hosts: list[HostSpec] = []  # with --cluster: the machines (by label) it runs on
    # two arms that differ in one llama-bench context setting run each pair in one process
    # (Engine.sharing) unless this asks for a process per trial
    separate_processes: bool = False
    in_process: bool = False  # share a process for any context setting and for an A/A (Engine.sharing)
    # pairs whose trials carried a confounder the monitor saw: "said" beside the verdict (compare),
    # or "wait": an answer holds only where the pairs no confounder touched give it too
    # (comparisons.guard; the automatic decisions of bisect, decompose and scan)
    confounders: Literal["said", "wait"] = "said"

    def baseline_name(self) -> str:
        return self.baseline or self.arms[0].name

    def joined(self, arm: ArmSpec) -> JoinedFlags:
        """The arm's argv (:func:`arm_argv`): an option given in both is passed once, with the arm's value."""
        return arm_argv(arm.kind, self.common_flags, arm.flags)

    def flags_of(self, arm: ArmSpec) -> list[str]:
        """The flags the arm runs and is checked with (:meth:`joined`)."""
        return list(self.joined(arm).argv)

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
        self.check_settings([f for a in self.arms for f in a.flags])
        for a in self.arms:  # one trial is one test: a list of values is arms of its own
            try:
                engine_for(a.kind).check_one_test(self.flags_of(a))
            except UserError as exc:
                raise UserError(f"arm {a.name}: {exc}") from None
        if self.min_pairs > self.max_pairs:
            raise UserError(f"--max-pairs {self.max_pairs} is below the first round of {self.min_pairs} pairs — raise it")


def read_toml(path: Path) -> dict[str, Any]:
    """The table of a TOML study file; one clear line for any mistake in it."""
    if path.is_dir():
        raise UserError(f"study file {path} is a folder — give the path of a .toml file")
    if not path.is_file():
        raise UserError(f"study file {path} does not exist — check the path")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read study file {path}: {exc.strerror or exc} — check its permissions") from None
    return parse_toml(raw, str(path))


def parse_toml(raw: bytes, where: str) -> dict[str, Any]:
    """The table in the bytes of a TOML file (``where`` names it in messages)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{where} is not UTF-8 text (byte {exc.start}) — save it as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{where} is not valid TOML ({exc}) — fix the line it names") from None
    except RecursionError:  # tomllib recurses once per nesting level
        raise UserError(f"{where} nests arrays or tables too deeply — a study file is two levels deep") from None


def load_compare_toml(path: Path) -> CompareSpec:
    """Read a TOML compare study; one clear line for any mistake in it."""
    return build_compare_spec(read_toml(path), str(path))


def parse_compare_toml(raw: bytes, where: str) -> CompareSpec:
    """A compare study from the bytes of a TOML file (``where`` names it in messages)."""
    return build_compare_spec(parse_toml(raw, where), where)


class ScanFile(BaseModel):
    """A scan in a TOML file: its keys are scan's options, with `from`, `models`, `workloads`,
    `control_models`, `flags` (the engine flags), `profile = false` (--no-profile), `cluster`
    and `on` (the machines)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    repo: str | None = None
    source: str | None = None
    from_: str | None = Field(None, alias="from", min_length=1)
    to: str | None = Field(None, min_length=1)
    models: list[str] = []
    control_models: list[str] = []
    workloads: list[str] = []
    band: str | None = None
    max_pairs: int | None = Field(None, ge=2, le=5000)
    samples: int | None = Field(None, ge=1, le=1000)
    rounds: int | None = Field(None, ge=1, le=50)
    max_gap: int | None = Field(None, ge=1)
    budget: str | None = None
    cmake: list[str] = []
    flags: list[str] = []
    timeout_s: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S)
    pin_params: bool = False
    check_outputs: bool = False
    profile: bool = True
    cluster: str | None = None
    on: list[str] = []


def _invalid(exc: ValidationError, where: str, command: str) -> UserError:
    """A validation error of a study's table as one line: the key and what is wrong with it."""
    e = exc.errors()[0]
    loc = ".".join(str(x) for x in e["loc"])
    if e["type"] == "extra_forbidden":
        return UserError(f"{where}: unknown key {loc!r} — see `tokensleuth {command} --help` for the keys")
    return UserError(f"{where}: {loc}: {e['msg']} — see `tokensleuth {command} --help`")


def load_scan_toml(path: Path) -> ScanFile:
    """Read a TOML scan file; one clear line for any mistake in it."""
    try:
        return ScanFile.model_validate(read_toml(path))
    except ValidationError as exc:
        raise _invalid(exc, str(path), "scan") from None


def check_settings(data: dict[str, Any], where: str, command: str) -> Settings:
    """The settings of a study that runs paired comparisons (a bisect's, a decompose's, a scan's),
    validated as a compare's are, before any build; one line for any mistake."""
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, where, command) from None
    settings.check_settings()
    return settings


def build_compare_spec(data: dict[str, Any], where: str) -> CompareSpec:
    try:
        spec = CompareSpec.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, where, "compare") from None
    except RecursionError:
        raise UserError(f"{where}: values nest too deeply — a study is arms, models and settings") from None
    spec.check()
    return spec
