"""The records a store holds and returns: plain frozen data, imported without the store."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JSON_SCHEMA_VERSION = 1  # every JSON export carries it (pyperf's _JSON_VERSION); bumped when a key changes meaning


def spec_hash(spec: dict[str, Any]) -> str:
    """A study's identity in the store: the hash of what it measures (its spec)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


TRIAL_STATUSES = ("planned", "running", "done", "failed", "crashed", "timeout", "garbage")
# running: being run (or its runner died); interrupted: stopped by SIGINT/SIGTERM; both resume.
STUDY_STATUSES = ("running", "interrupted", "done", "failed")
UNFINISHED = ("running", "interrupted")
MACHINE_LOST = "machine-lost"
NODE_LOST = "node-lost"  # a worker machine died during the trial; the trial runs again
HANDED_OUT = "handed-out"  # a trial handed to a worker never came back before the driver stopped


@dataclass(frozen=True, slots=True)
class LostTrial:
    """A trial left ``running`` under another boot: the machine froze or rebooted during it."""

    trial_id: int
    seq: int
    arm: str
    model: str
    workload: str
    started_at: float | None
    boot_id: str
    readings: dict[str, float]  # its last stored timeline values ({} when none were stored)

    def detail(self) -> str:
        when = ("at " + dt.datetime.fromtimestamp(self.started_at).strftime("%Y-%m-%d %H:%M:%S")
                if self.started_at else "")
        last = (", ".join(f"{k} {v:g}" for k, v in sorted(self.readings.items()))
                if self.readings else "none stored")
        return (f"machine lost during this trial (trial {self.seq}, {Path(self.model).name} "
                f"{self.workload or 'all tests'}, started {when} under boot {self.boot_id[:8]}, "
                f"which has ended); last readings: {last}; the trial is run again")


@dataclass(frozen=True, slots=True)
class StudyHandle:
    """What :meth:`Writes.begin_study` (a Store's writes) found or made."""

    id: str
    resumed: bool  # an unfinished study of this spec goes on
    finished: bool  # this spec's latest study already finished: read it, there is nothing to run
    status: str


@dataclass(frozen=True, slots=True)
class Lease:
    """The study lock held by this process; ``lost`` were found on taking it."""

    study_id: str
    lost: tuple[LostTrial, ...] = ()


@dataclass(frozen=True, slots=True)
class SampleRow:
    """One timed unit: a llama-bench repetition, or a request (or a group of concurrent ones)."""

    rep: int
    duration_ns: int
    tokens: int  # the tokens the rate counts: tokens / duration is the sample's t/s
    n_prompt: int | None = None
    n_gen: int | None = None
    start_ns: int | None = None  # monotonic clock (trials.t0_ns's): request sent
    end_ns: int | None = None  # last token received
    ttft_ns: int | None = None  # time to first token, client side
    metrics: dict[str, Any] = field(default_factory=dict)  # itl_ms percentiles, server timings …

    @property
    def tokens_per_s(self) -> float:
        return self.tokens * 1e9 / self.duration_ns


@dataclass(frozen=True, slots=True)
class WindowRow:
    test_idx: int
    rep: int
    start_ns: int
    end_ns: int
    cpu_ms: float | None = None
    counters: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResultRow:
    test_idx: int
    test: str
    n_prompt: int
    n_gen: int
    n_depth: int
    avg_ts: float | None
    stddev_ts: float | None
    raw: dict[str, Any]
    samples: tuple[SampleRow, ...]


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """Everything a finished trial leaves behind; written in one transaction."""

    status: str
    exit_code: int | None
    message: str
    stderr_tail: str
    started_at: float
    ended_at: float
    t0_ns: int
    t1_ns: int
    env: dict[str, Any]
    results: tuple[ResultRow, ...] = ()
    windows: tuple[WindowRow, ...] = ()
    timeline: tuple[tuple[int, dict[str, float]], ...] = ()
    warnings: tuple[tuple[str, str], ...] = ()  # (code, detail)

    def __post_init__(self) -> None:
        if self.status not in TRIAL_STATUSES or self.status in ("planned", "running"):
            raise ValueError(f"not a final trial status: {self.status!r}")
        if self.t1_ns < self.t0_ns:
            raise ValueError("trial ends before it starts")


@dataclass(frozen=True, slots=True)
class PlannedTrial:
    arm: str
    model: str
    workload: str
    argv: tuple[str, ...]
    pair: int = -1


@dataclass(frozen=True, slots=True)
class StudyRow:
    """A study as the store returns it (``row["kind"]`` reads like the column, too)."""

    id: str
    kind: str
    spec_hash: str
    spec_json: str
    status: str
    created_at: float
    finished_at: float | None = None
    n_trials: int | None = None  # Store.studies() counts its trials
    n_done: int | None = None

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def keys(self) -> tuple[str, ...]:
        return tuple(f for f in self.__slots__ if f not in ("n_trials", "n_done") or getattr(self, f) is not None)

    @property
    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.spec_json)
        return out


@dataclass(frozen=True, slots=True)
class ArmRow:
    """An arm of a study as the store returns it."""

    id: int
    study_id: str
    name: str
    source: str
    engine_json: str
    flags_json: str
    env_json: str
    kind: str

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def keys(self) -> tuple[str, ...]:
        return tuple(self.__slots__)

    @property
    def engine(self) -> dict[str, Any]:
        """Its build's manifest ({} before it was built)."""
        out: dict[str, Any] = json.loads(self.engine_json or "{}")
        return out

    @property
    def flags(self) -> list[str]:
        return list(json.loads(self.flags_json or "[]"))
