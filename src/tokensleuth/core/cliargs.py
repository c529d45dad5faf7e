"""The command line's own words apart from the engine's: what comes after `--` is the
engine's, everything before it is tokensleuth's and must be understood, or refused.

Pure functions on argv lists; the CLI calls them before click parses anything.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Options documented as lists of files: one flag may take several (`--patches a b c`, what
# a shell glob expands to), as well as the repeated form. Only the commands that measure.
LIST_OPTIONS = frozenset({"--patches", "--model", "-m", "--control-model", "--bin"})
LIST_COMMANDS = frozenset({"bench", "compare", "bisect", "decompose"})


@dataclass(frozen=True, slots=True)
class EngineArgs:
    """What the CLI handed a command: its own words (before `--`) and the engine's flags."""

    own: tuple[str, ...] = ()
    engine: tuple[str, ...] = ()


def split_engine_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``argv`` split at its first `--`: (tokensleuth's words, the engine's flags)."""
    args = list(argv)
    if "--" not in args:
        return args, []
    i = args.index("--")
    return args[:i], args[i + 1:]


def expand_list_options(own: Sequence[str]) -> list[str]:
    """``--patches a b c`` → ``--patches a --patches b --patches c`` for the list options of
    the measuring commands: the existing files after such an option's value (what a shell
    glob expands to) are its values too."""
    args = list(own)
    command = next((a for a in args if not a.startswith("-")), "")
    if command not in LIST_COMMANDS:
        return args
    out: list[str] = []
    current: str | None = None  # the list option whose values are being read
    taken = 0
    for tok in args:
        name = tok.split("=", 1)[0] if tok.startswith("--") else tok
        if tok.startswith("-"):
            current = name if name in LIST_OPTIONS else None
            taken = 1 if "=" in tok and tok.startswith("--") else 0
            out.append(tok)
            continue
        if current is not None and (taken == 0 or Path(tok).exists()):
            if taken >= 1:
                out.append(current)
            taken += 1
        else:
            current = None  # what a glob expands to exists; anything else is a stray word
        out.append(tok)
    return out


def stray_message(stray: Sequence[str], own: Sequence[str], command: str) -> str:
    """One line for words before `--` that no option of ``command`` takes."""
    tok = stray[0]
    before = list(own)[: list(own).index(tok)] if tok in own else []
    opt = next((t.split("=", 1)[0] for t in reversed(before) if t.startswith("-")), None)
    if opt in LIST_OPTIONS:
        return f"{tok}: unexpected argument — no such file, so not one of {opt}'s; engine flags go after `--`"
    if opt is not None and Path(tok).exists():
        return f"{tok}: unexpected argument — {opt} takes one value; engine flags go after `--`"
    return (f"{tok}: unexpected argument — tokensleuth {command} takes no positional words; "
            f"engine flags go after `--` (tokensleuth {command} … -- -p 512)")


def no_such_option_message(option: str, possibilities: Sequence[str], command: str | None,
                           takes_engine_flags: bool) -> str:
    """One line for an option ``command`` does not have, with the nearest one it has (``None``:
    an option before any command, where only --help and --version are)."""
    if command is None:
        return (f"{option}: not an option of tokensleuth itself — a command's options go after its name "
                f"(tokensleuth COMMAND {option} …; `tokensleuth --help` lists the commands)")
    near = difflib.get_close_matches(option, list(possibilities), n=1, cutoff=0.0)
    if near:
        return f"{option}: no such option — did you mean {near[0]}?"
    if takes_engine_flags:
        return (f"{option}: no such option of tokensleuth {command} — an engine flag goes after `--` "
                f"(tokensleuth {command} … -- {option} …)")
    return f"{option}: no such option — see `tokensleuth {command} --help`"


def flag_values(flags: Sequence[str], *names: str) -> list[str]:
    """The values an engine's flags give ``names`` (``-x V`` or ``-x=V``), in order."""
    out = []
    for i, f in enumerate(flags):
        key, eq, val = f.partition("=")
        if key in names:
            if eq:
                out.append(val)
            elif i + 1 < len(flags):
                out.append(flags[i + 1])
    return out


def int_list(text: str) -> list[int]:
    """The integers of a list value (``512,1024`` or ``1;2/3``), others skipped."""
    return [int(x) for x in re.split(r"[,;/]", text) if x.strip().lstrip("-").isdigit()]
