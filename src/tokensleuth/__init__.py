"""tokensleuth: find out where an LLM inference engine's speed went, and prove it."""

from __future__ import annotations

__version__ = "0.1.0"
