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


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: the run stops, the study is marked ``interrupted``.

    A BaseException (like KeyboardInterrupt) so that no ``except Exception`` in a driver
    swallows it. Exit code 128 + the signal number (130 for SIGINT, 143 for SIGTERM).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def show(text: str, limit: int = 60) -> str:
    """A piece of untrusted input, fit for a one-line message: quoted, ASCII, short."""
    shown = ascii(text[:limit])
    return shown + "…" if len(text) > limit else shown
