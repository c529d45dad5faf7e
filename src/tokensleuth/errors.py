"""User-facing errors: one base class, caught once by the CLI."""

from __future__ import annotations


class UserError(Exception):
    """The user's input is wrong. Rendered as one line, exit code 2.

    Messages follow the house form ``<what> — <how to fix>``.
    """

    exit_code = 2


class EngineError(Exception):
    """The engine or a measurement failed (build failure, no samples). Exit code 1."""

    exit_code = 1
