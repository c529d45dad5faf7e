"""Study kinds: one small unit per kind, looked up by the name stored with the study.

The commands, ``report``, its HTML page, its issue Markdown and the site ask the kind;
they never branch on its name. A new kind is one module here with a ``KIND`` object
(a :class:`KindBase`), plus its line in ``_MODULES``.

Floor 9: imports report, drivers and below; pages ask the kinds, never the other way.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tokensleuth.core.errors import UserError
from tokensleuth.core.records import JSON_SCHEMA_VERSION
from tokensleuth.report.figures import Figure
from tokensleuth.store import Store

FLOOR = 9  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)

# kind name -> (module of this package that defines it, its object there); imported on first use
_MODULES = {"bench": ("bench", "KIND"), "import": ("bench", "IMPORT"), "compare": ("compare", "KIND"),
            "bisect": ("bisect", "KIND"), "decompose": ("decompose", "KIND"), "crosshost": ("crosshost", "KIND"),
            "profile": ("profile", "KIND"), "scan": ("scan", "KIND"), "kernels": ("kernels", "KIND")}
# spec keys that name this machine's caches or another study, not what the study measured
DROP_KEYS = {"build_keys", "host", "rerun_of"}


@dataclass(frozen=True, slots=True)
class Why:
    """What one op or kernel diff says beside a verdict: the two arms' bars and the shares of the
    measured difference, or only why they are withheld (then no op or kernel is named, nothing is
    drawn and no share is given: a withheld figure is withheld everywhere it would show)."""

    title: str
    sentence: str  # computed from the figures; where withheld, the reason
    figure: Figure | None = None
    shares: tuple[tuple[str, str, str], ...] = ()  # (part, share, its 95% interval)
    withheld: bool = False

    def __post_init__(self) -> None:
        if self.withheld and (self.figure is not None or self.shares):
            raise ValueError("a withheld diff shows no bars and no shares, only its reason")
        if not self.withheld and self.figure is None:
            raise ValueError("a diff that is not withheld shows the bars of its two arms")


class StudyKind(Protocol):
    """What the CLI needs of a stored study of one kind."""

    name: str

    def describe(self, spec: dict[str, Any]) -> str:
        """A few words on what the study measured (the `studies` listing)."""
        ...

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        """The study's Markdown report and its JSON object, from the store alone."""
        ...

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        """The plots of its HTML page (``obj``: render_stored's JSON), each with its table."""
        ...

    history: bool  # its arms' t/s belong in the site's history per model and test
    bandwidth: bool  # its cells are arms' measurements whose decode bandwidth is explained
    paired: bool  # its cells are paired comparisons of arms (the depth lines fit them)
    bundles: bool  # `report ID --bundle FILE` writes it whole (its rows alone render it)
    reruns: bool  # `tokensleuth rerun BUNDLE` measures it again here and says, per cell, whether it agrees

    def headline(self, obj: dict[str, Any], md: str) -> str:
        """One line on what it found (the site's index)."""
        ...

    def changes(self, obj: dict[str, Any]) -> list[tuple[str, str, str]]:
        """(candidate arm, model, workload) where its verdict said faster or slower."""
        ...

    def ratio_lines(self, obj: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
        """Per (candidate arm, model): its ratios as text (shown beside where the weights went)."""
        ...

    def reproduce(self, spec: dict[str, Any], study_id: str) -> list[str]:
        """Markdown lines that run it again with tokensleuth (the issue's steps to reproduce)."""
        ...

    def culprit(self, obj: dict[str, Any]) -> tuple[str, str]:
        """The issue's "First Bad Commit" line and the culprit's diff ("" when none)."""
        ...

    def source_changes(self, obj: dict[str, Any]) -> dict[str, Any]:
        """What changed in the source at its culprit ({} when it names none)."""
        ...

    def step_study(self, obj: dict[str, Any], n: int) -> str:
        """The study that found its step ``n`` (1-based): `report ID --step N` renders that one."""
        ...

    def beside(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """The op or kernel diffs stored beside its verdicts (compare --profile's, a culprit's, a
        step's): the profile hook's entries ({study, headline, model, workload, …} or {skipped, …}),
        each with a ``label`` that says which verdict it stands beside."""
        ...

    def why(self, obj: dict[str, Any], model: str, workload: str) -> Why | None:
        """A diff study's answer beside a verdict on ``model`` and ``workload`` (None: not a diff)."""
        ...


class KindBase:
    """What a kind has unless it says otherwise."""

    name = ""
    history = False
    bandwidth = False
    paired = False
    bundles = False
    reruns = False

    def headline(self, obj: dict[str, Any], md: str) -> str:
        if obj.get("summary"):
            return str(obj["summary"])
        return (md.strip().splitlines() or [""])[0]

    def changes(self, obj: dict[str, Any]) -> list[tuple[str, str, str]]:
        return []

    def ratio_lines(self, obj: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
        return {}

    def reproduce(self, spec: dict[str, Any], study_id: str) -> list[str]:
        return ["```json", json.dumps({k: v for k, v in spec.items() if k not in DROP_KEYS}, indent=1), "```",
                "", f"(the settings of {self.name} study `{study_id}`; `tokensleuth report {study_id}` renders it "
                "again)", ""]

    def culprit(self, obj: dict[str, Any]) -> tuple[str, str]:
        return "n/a (not bisected)", ""

    def source_changes(self, obj: dict[str, Any]) -> dict[str, Any]:
        return {}

    def step_study(self, obj: dict[str, Any], n: int) -> str:
        """The study that found its step ``n`` (1-based; `report ID --step N`)."""
        raise UserError(f"--step: a {self.name} study has no steps — drop --step")

    def beside(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        return []

    def why(self, obj: dict[str, Any], model: str, workload: str) -> Why | None:
        return None


class DiffKind(KindBase):
    """A study of engines profiled and diffed against the first (the op profile; the kernel
    trace, studies/kernels.py): its module's stored, render, figures, diff headline and the
    answer of one diff beside a verdict."""

    def __init__(self, name: str, stored: Callable[[Store, str], dict[str, Any]],
                 render: Callable[[str, dict[str, Any]], str], figures: Callable[[dict[str, Any]], list[Figure]],
                 headline: Callable[[dict[str, Any]], str], why: Callable[[dict[str, Any]], Why]) -> None:
        self.name = name
        self._stored, self._render, self._figures, self._headline = stored, render, figures, headline
        self._why = why

    def why(self, obj: dict[str, Any], model: str, workload: str) -> Why | None:
        diffs = obj.get("diffs") or []
        d = next((d for d in diffs if (d.get("model"), d.get("workload")) == (model, workload)), None)
        if d is None and len(diffs) == 1:  # the hook's study holds the one cell it was asked for
            d = diffs[0]
        return None if d is None else self._why(d)

    def describe(self, spec: dict[str, Any]) -> str:
        return " vs ".join(spec.get("engines", [])) + " · " + ", ".join(spec.get("workloads", []))

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        obj = self._stored(store, study_id)
        return self._render(study_id, obj), dict(obj, study=study_id)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return self._figures(obj)

    def headline(self, obj: dict[str, Any], md: str) -> str:
        return "; ".join(self._headline(d) for d in obj.get("diffs", [])) or super().headline(obj, md)


class ResultKind(KindBase):
    """A kind whose driver ends with one result object (bisect, decompose, scan): the command
    prints and exports it through these, and `report` renders the stored one through the same."""

    def render(self, result: dict[str, Any]) -> str:
        """The driver's result as Markdown (the command's output and `report`'s)."""
        raise NotImplementedError

    def to_json(self, result: dict[str, Any]) -> dict[str, Any]:
        """The driver's result as its JSON object (--json, and `report --json`)."""
        return dict(result, schema_version=JSON_SCHEMA_VERSION)

    def stored(self, store: Store, study_id: str) -> dict[str, Any]:
        """The result the driver stored when it ended."""
        return stored_result(store, study_id, self.name)

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        obj = self.stored(store, study_id)
        return self.render(obj), self.to_json(obj)


class DriverKind(StudyKind, Protocol):
    """A kind whose driver (bisect, decompose) ends with one result object: the command
    prints and exports it through the kind, as `report` does from the store."""

    def render(self, result: dict[str, Any]) -> str:
        ...

    def to_json(self, result: dict[str, Any]) -> dict[str, Any]:
        ...


def kind_of(name: str) -> StudyKind:
    where = _MODULES.get(name)
    if where is None:
        raise UserError(f"study kind {name!r} is not known to this tokensleuth — upgrade it to read this store")
    kind: StudyKind = getattr(importlib.import_module(f"{__name__}.{where[0]}"), where[1])
    return kind


def driver_kind(name: str) -> DriverKind:
    """A kind whose driver ends with one result object (bisect, decompose)."""
    module, attr = _MODULES[name]
    kind: DriverKind = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    return kind


def stored_result(store: Store, study_id: str, kind: str) -> dict[str, Any]:
    """The result a driver stored when it ended (bisect, decompose); one line if it has not."""
    obj = store.state.get(study_id, "result")
    if obj is None:
        raise UserError(f"{kind} {study_id} has not finished — resume it with the same command and --resume")
    return dict(obj)
