"""What sets a compare's arms apart, and what they share: the words its reports say beside the
arms' names (the verdict sentence, the arms table, the issue form, the page)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokensleuth.trials.spec import ArmSpec, CompareSpec

# what a build records as its compiler where it compiled nothing (sources/build.py): a url:,
# a cmd: or a bin: arm. Compilers are compared only where every arm was compiled.
NOT_COMPILED = frozenset({"remote", "command", "prebuilt"})
# the ways two arms can differ, in the order the reports name them
ASPECTS = ("source", "kind", "cmake", "compiler", "flags", "env")
_NUMBER = re.compile(r"-\d")


@dataclass(frozen=True, slots=True)
class ArmDifferences:
    """Per arm, what only some arms have (its words, in ASPECTS order); what every arm has alike;
    and the aspects in which the arms differ."""

    own: dict[str, tuple[str, ...]]
    shared: tuple[str, ...]
    differ_in: tuple[str, ...]

    @property
    def source_only(self) -> bool:
        """The arms differ in their source and in nothing else: the source and commit columns say it."""
        return self.differ_in == ("source",)

    @property
    def said(self) -> bool:
        """Whether the reports name the differences: always, but where only the source differs."""
        return not self.source_only

    def label(self, arm: str) -> str:
        """The arm's name with what sets it apart, ``split (GGML_CUDA_DISABLE_FUSION=1)``; its
        name alone where it has nothing of its own or only the source differs."""
        own = self.own.get(arm) or ()
        return f"{arm} ({', '.join(own)})" if own and self.said else arm

    def labels(self) -> dict[str, str]:
        return {arm: self.label(arm) for arm in self.own}

    def shared_line(self) -> str:
        """The one line that says what the arms share ("" where only the source differs, or
        where they share nothing)."""
        if not self.said or not self.shared:
            return ""
        if not self.differ_in:
            return f"The arms are alike (an A/A test): {'; '.join(self.shared)}."
        return f"The arms share: {'; '.join(self.shared)}."

    def to_json(self) -> dict[str, Any]:
        return {"arms": {a: list(v) for a, v in self.own.items()}, "shared": list(self.shared),
                "differ_in": list(self.differ_in)}


def _options(argv: Sequence[str]) -> list[str]:
    """The argv as options, each with its values (``-t 2``), so that one option is one unit."""
    out: list[str] = []
    for word in argv:
        starts = word.startswith("-") and not _NUMBER.match(word)
        if starts or not out:
            out.append(word)
        else:
            out[-1] += " " + word
    return out


def _compiled(engines: Mapping[str, Mapping[str, Any]], arms: Sequence[ArmSpec]) -> bool:
    return all(str((engines.get(a.name) or {}).get("compiler") or "?") not in NOT_COMPILED | {"?"} for a in arms)


def _units(spec: CompareSpec, engines: Mapping[str, Mapping[str, Any]]) -> dict[str, Callable[[ArmSpec], list[str]]]:
    """Per aspect: an arm's units of it (a unit is held by an arm or not)."""
    compiled = _compiled(engines, spec.arms)
    return {
        "source": lambda a: [a.source],
        "kind": lambda a: [a.kind],
        "cmake": lambda a: list(a.cmake),  # what the study asked (the host's own flags are every arm's)
        "compiler": lambda a: [str(engines[a.name]["compiler"])] if compiled else [],
        "flags": lambda a: _options(spec.flags_of(a)),  # after the one join: an arm's override is its own
        "env": lambda a: [f"{k}={v}" for k, v in a.env.items()],
    }


def _command_words(sources: Sequence[str]) -> list[list[str]] | None:
    """cmd: sources of one length, as words (their differing words are what sets them apart:
    the container image), else None."""
    if not all(s.startswith("cmd:") for s in sources):
        return None
    try:
        words = [shlex.split(s[4:]) for s in sources]
    except ValueError:
        return None
    return words if len({len(w) for w in words}) == 1 else None


def arm_differences(spec: CompareSpec, engines: Mapping[str, Mapping[str, Any]] | None = None) -> ArmDifferences:
    """What sets each arm apart from the others, and what every arm shares, from the study's spec
    and its arms' builds (``engines``: each arm's build manifest, for its compiler). The ways:
    the source (a served URL too; of cmd: sources of one length, the words that differ, such as a
    container image: "command"), the engine kind, the build flags asked, the compiler, the
    engine flags as each arm runs them (the common ones joined with its own,
    CompareSpec.flags_of) and the environment. A unit every arm holds is shared; one that only
    some hold is theirs."""
    engines = engines or {}
    own: dict[str, list[str]] = {a.name: [] for a in spec.arms}
    shared: list[str] = []
    differ_in: list[str] = []
    units = _units(spec, engines)
    for aspect in ASPECTS:
        per_arm = {a.name: units[aspect](a) for a in spec.arms}
        common = [u for u in per_arm[spec.arms[0].name] if all(u in v for v in per_arm.values())]
        mine = {n: [u for u in v if u not in common] for n, v in per_arm.items()}
        named = aspect
        if aspect == "source" and any(mine.values()):
            words = _command_words([a.source for a in spec.arms])
            if words is not None:  # the command's words that differ (the table's source column hides them)
                named = "command"
                mine = {a.name: [w for i, w in enumerate(ws) if len({x[i] for x in words}) > 1]
                        for a, ws in zip(spec.arms, words, strict=True)}
        if any(mine.values()):
            differ_in.append(named)
            prefix = f"{aspect} " if aspect in ("cmake", "compiler") else ""
            for n, v in mine.items():
                if v:
                    own[n].append(prefix + " ".join(v))
        if common:
            shared.append(f"{aspect} {' '.join(common)}")
    return ArmDifferences({n: tuple(v) for n, v in own.items()}, tuple(shared), tuple(differ_in))
