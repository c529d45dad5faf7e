"""The commands, one module each, and the registry the CLI builds itself from.

A command module parses its options into a spec and hands one request to a driver; it never
imports ``tokensleuth.cli``. A new command is one module plus one line in ``COMMANDS``.

Floor 11: imports everything below; never the CLI.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FLOOR = 11  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)


@dataclass(frozen=True)
class Command:
    """A command, named by where its function is (``module:function`` in this folder): a run
    imports the one module it runs, not all thirteen (`tokensleuth studies`: 0.54 CPU-s, not 0.66)."""

    name: str
    target: str
    group: str = ""  # "" the top level; else its sub-command group (engine, model)
    engine_flags: bool = False  # takes the engine's flags after `--` (click keeps them in ctx.args)
    resumable: bool = False  # takes --resume: an interrupt says to rerun it with --resume

    @property
    def run(self) -> Callable[..., Any]:
        module, _, function = self.target.partition(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), function)  # type: ignore[no-any-return]


GROUPS = {"engine": "Build engines and list the build cache.", "model": "Synthesize and inspect GGUF models.",
          "history": "Carry a release history to a machine that reaches no registry."}

COMMANDS = (
    Command("bench", "bench:bench", engine_flags=True, resumable=True),
    Command("compare", "compare:compare", engine_flags=True, resumable=True),
    Command("bisect", "bisect:bisect", engine_flags=True, resumable=True),
    Command("decompose", "decompose:decompose", engine_flags=True, resumable=True),
    Command("profile", "profile:profile", engine_flags=True, resumable=True),
    Command("scan", "scan:scan", engine_flags=True, resumable=True),
    Command("build", "engine:engine_build", group="engine"),
    Command("list", "engine:engine_list", group="engine"),
    Command("pack", "history:history_pack", group="history"),
    Command("synth", "model:model_synth", group="model"),
    Command("fit", "model:model_fit", group="model", engine_flags=True),
    Command("info", "model:model_info_cmd", group="model"),
    Command("import", "studies:import_cmd"),
    Command("studies", "studies:studies"),
    Command("report", "report:report"),
    Command("rerun", "rerun:rerun", resumable=True),
    Command("doctor", "doctor:doctor", engine_flags=True),
    Command("site", "report:site"),
)
