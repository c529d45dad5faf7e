"""Where tokensleuth keeps its cache and data (overridable by environment)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_dir() -> Path:
    """Root of the build cache, sdists and ccache (``TOKENSLEUTH_CACHE`` overrides)."""
    env = os.environ.get("TOKENSLEUTH_CACHE")
    return Path(env) if env else Path(platformdirs.user_cache_dir("tokensleuth"))


def data_dir() -> Path:
    env = os.environ.get("TOKENSLEUTH_DATA")
    return Path(env) if env else Path(platformdirs.user_data_dir("tokensleuth"))


def default_db() -> Path:
    """The study store (``TOKENSLEUTH_DB`` overrides, ``--db`` overrides both)."""
    env = os.environ.get("TOKENSLEUTH_DB")
    return Path(env) if env else data_dir() / "tokensleuth.sqlite"
