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


def engine_for(kind: str) -> Engine:
    module = KINDS.get(kind)
    if module is None:
        raise UserError(f"unknown engine kind {kind!r} — choose one of {', '.join(KINDS)}")
    engine: Engine = importlib.import_module(f"{__name__}.{module}").ENGINE
    return engine
