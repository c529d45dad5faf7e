"""The output check of a decompose: each kept state's perplexity against the base's, on every model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokensleuth.drivers.hunts.decompose.steps import OutputCheck
from tokensleuth.sources.build import EngineBuild

_RANK = {"identical": 0, "equivalent": 1, "changed": 2}


def perplexity_check(models: Sequence[str], flags: Sequence[str], workdir: Path,
                     timeout_s: float = 1800.0) -> OutputCheck:
    """An output check for :func:`run_decompose` through llama-perplexity's KL divergence.

    The states' builds carry llama-perplexity beside llama-bench (the decomposer builds
    :data:`CHECK_TARGETS` when it checks outputs); every model is checked, and the worst
    verdict stands for the step, with that model's figures.
    """
    from tokensleuth.engines import perplexity as ppl
    from tokensleuth.trials.outputs import OutputChecker

    checker = OutputChecker(workdir, timeout_s=timeout_s)
    pflags = ppl.perplexity_flags(flags)

    def check(base: EngineBuild, cand: EngineBuild) -> dict[str, Any] | None:
        worst: dict[str, Any] | None = None
        for m in models:
            got = dict(checker.check(base, cand, m, pflags).to_json(), model=m)
            if worst is None or _RANK[got["verdict"]] > _RANK[worst["verdict"]]:
                worst = got
        return worst

    return check
