"""Engines: how to run one, and how to read what it prints.

Engine kinds are looked up by name (:func:`engine_for`); a kind is one module of this
package that defines ``ENGINE`` (see :class:`tokensleuth.engines.base.Engine`), plus its
line in ``KINDS``.

Floor 3: imports analysis and the floors below; never trials, a driver or a renderer.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import UserError

if TYPE_CHECKING:
    from tokensleuth.engines.base import ArmRuntime, Engine, SharedRun
    from tokensleuth.store import Store

FLOOR = 3  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)

# kind name -> module of this package (imported on first use)
KINDS = {"llama-bench": "llamabench", "llama-server": "llamaserver", "openai": "openai",
         "llama-batched-bench": "llamabatchedbench"}
# source prefix -> the kind an arm with such a source runs when it names none: a running
# server (url:) over its OpenAI-compatible API, a command that starts one (cmd:) as llama-server
DEFAULT_FOR = {"url:": "openai", "cmd:": "llama-server"}
# kind -> module of this package whose import_file reads that kind's own output files into
# the store and whose sniff knows them (`tokensleuth import`, through tokensleuth.importers)
IMPORTERS = {"llama-bench": "llamabench.import_"}


def kind_for(source: str, kind: str | None) -> str:
    """The engine kind an arm runs: the one it names, else its source prefix's (DEFAULT_FOR),
    else the default kind."""
    from tokensleuth.engines.base import DEFAULT_KIND

    if kind:
        return kind
    return next((k for p, k in DEFAULT_FOR.items() if source.startswith(p)), DEFAULT_KIND)


def served(source: str) -> bool:
    """Whether a source is a server to attach to (url:) or a command that starts one (cmd:)."""
    return source.startswith(tuple(DEFAULT_FOR))


def engine_for(kind: str) -> Engine:
    module = KINDS.get(kind)
    if module is None:
        raise UserError(f"unknown engine kind {kind!r} — choose one of {', '.join(KINDS)}")
    engine: Engine = importlib.import_module(f"{__name__}.{module}").ENGINE
    return engine


def shared_unit(arms: Mapping[str, ArmRuntime], unit: Sequence[Any]) -> SharedRun | None:
    """The unit as one engine process, where it is a pair whose arms' kind can share one
    (``Engine.sharing``) and whose arms may and do fit; else None."""
    if len(unit) != 2:
        return None
    sharing = engine_for(arms[unit[0].arm].kind).sharing
    return None if sharing is None else sharing.shared_unit(arms, unit)


def differing_setting(a: ArmRuntime, b: ArmRuntime, in_process: bool = False) -> tuple[str, str, str] | None:
    """(flag, a's value, b's value) where the arms' kind can run them in one process, else None."""
    sharing = engine_for(a.kind).sharing
    return None if sharing is None else sharing.differing_setting(a, b, in_process)


def importer_for(kind: str) -> Callable[[Store, Path], tuple[str, int]]:
    """The function that imports ``kind``'s output files: (study id, results stored)."""
    module = IMPORTERS.get(kind)
    if module is None:
        raise UserError(f"tokensleuth cannot import {kind} output — it reads {', '.join(IMPORTERS)} output")
    read: Callable[[Store, Path], tuple[str, int]] = importlib.import_module(f"{__name__}.{module}").import_file
    return read


def sniffer_for(kind: str) -> Callable[[Path], bool]:
    """The function that tells ``kind``'s own output files by their first bytes."""
    module = IMPORTERS.get(kind)
    if module is None:
        raise UserError(f"tokensleuth cannot import {kind} output — it reads {', '.join(IMPORTERS)} output")
    sniff: Callable[[Path], bool] = importlib.import_module(f"{__name__}.{module}").sniff
    return sniff


def show_setting(field: str, v: object) -> str:
    """A reported setting as a person reads it, by the kind that reports that setting (a stored
    result names the field, not the kind)."""
    for kind in KINDS:
        settings = engine_for(kind).settings
        if settings is not None and field in settings.FIELDS:
            return settings.show(field, v)
    return str(v)
