"""Study kinds: one small unit per kind, looked up by the name stored with the study.

The CLI's ``report`` and ``studies`` commands ask the kind; they never branch on it.
A new kind is one module here with a ``KIND`` object, plus its line in ``_MODULES``.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from tokensleuth.errors import UserError
from tokensleuth.report.figures import Figure
from tokensleuth.store import Store

# kind name -> module of this package that defines it (imported on first use)
_MODULES = {"bench": "bench", "import": "bench", "compare": "compare", "bisect": "bisect", "decompose": "decompose",
            "crosshost": "crosshost"}


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


class DriverKind(StudyKind, Protocol):
    """A kind whose driver (bisect, decompose) ends with one result object: the command
    prints and exports it through the kind, as `report` does from the store."""

    def render(self, result: dict[str, Any]) -> str:
        ...

    def to_json(self, result: dict[str, Any]) -> dict[str, Any]:
        ...


def kind_of(name: str) -> StudyKind:
    module = _MODULES.get(name)
    if module is None:
        raise UserError(f"study kind {name!r} is not known to this tokensleuth — upgrade it to read this store")
    kind: StudyKind = importlib.import_module(f"{__name__}.{module}").KIND
    return kind


def driver_kind(name: str) -> DriverKind:
    """A kind whose driver ends with one result object (bisect, decompose)."""
    kind: DriverKind = importlib.import_module(f"{__name__}.{_MODULES[name]}").KIND
    return kind


def stored_result(store: Store, study_id: str, kind: str) -> dict[str, Any]:
    """The result a driver stored when it ended (bisect, decompose); one line if it has not."""
    obj = store.get_state(study_id, "result")
    if obj is None:
        raise UserError(f"{kind} {study_id} has not finished — resume it with the same command and --resume")
    return dict(obj)
