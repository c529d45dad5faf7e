"""Engines: how to run one, and how to read what it prints.

Engine kinds are looked up by name (:func:`engine_for`); a kind is one module of this
package that defines ``ENGINE`` (see :class:`tokensleuth.engines.base.Engine`), plus its
line in ``KINDS``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tokensleuth.errors import UserError

if TYPE_CHECKING:
    from tokensleuth.engines.base import Engine

# kind name -> module of this package (imported on first use)
KINDS = {"llama-bench": "llamabench", "llama-server": "llamaserver", "openai": "openai"}
# source prefix -> the kind an arm with such a source runs when it names none: a running
# server (url:) over its OpenAI-compatible API, a command that starts one (cmd:) as llama-server
DEFAULT_FOR = {"url:": "openai", "cmd:": "llama-server"}


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
