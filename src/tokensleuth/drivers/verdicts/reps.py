"""How many repetitions a compare's processes run: the user's -r, else the cheapest for the study's
own noise, damped round to round."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tokensleuth.analysis import noise
from tokensleuth.engines import engine_for
from tokensleuth.store import Store
from tokensleuth.trials.spec import CompareSpec

if TYPE_CHECKING:
    pass


REPS_STATE = "reps-by-round"  # the -r each round chose, before cold repetitions were added


FIRST_REPS = 3  # the first round's repetitions per process when the design is chosen for the user


def user_reps(spec: CompareSpec) -> bool:
    """Whether the user gave an arm its repetitions (``-r``): the design then keeps them."""
    return any(engine_for(a.kind).sets_repetitions(spec.flags_of(a)) for a in spec.arms)


def asked_reps(spec: CompareSpec) -> int | None:
    """The -r every llama-bench arm was given (the last one of its flags counts), None when
    none was, the arms differ or one is a server (its -r is requests per trial)."""
    if not all(engine_for(a.kind).reps_per_process for a in spec.arms):
        return None
    got = {engine_for(a.kind).repetitions(spec.flags_of(a)) for a in spec.arms}
    return got.pop() if len(got) == 1 else None


def adaptive_reps(store: Store, study_id: str, spec: CompareSpec) -> int | None:
    """Repetitions per process for the next round: the user's -r wins (None: keep it), as does
    a server arm (its -r is requests per trial); else FIRST_REPS until the study's own noise
    can be estimated, then the cheapest allocation for it (noise.Noise.best_reps)."""
    if user_reps(spec) or not all(engine_for(a.kind).reps_per_process for a in spec.arms):
        return None
    n = noise.estimate(store, study_id)
    if n is None:
        return FIRST_REPS
    # damped: at most double or halve per round. An early between-process estimate is noisy
    # (from 5 pairs it is often clipped at 0, which alone would send r to its bound)
    prev = ((store.state.get(study_id, REPS_STATE) or [None])[-1]
            or last_reps(store, study_id, engine_for(spec.arms[0].kind).repetitions) or FIRST_REPS)
    return damped(prev, n.best_reps())


def damped(prev: int, best: int) -> int:
    """The step from last round's -r toward the best one: at most double or half, never below R_MIN."""
    return max(noise.R_MIN, prev // 2, min(2 * prev, best))


def last_reps(store: Store, study_id: str, repetitions: Callable[[Sequence[str]], int | None]) -> int | None:
    """The repetitions of the study's most recently planned trial (None: none planned with them),
    as its engine reads its argv: cold repetitions included, so only for a study begun before
    REPS_STATE was kept."""
    argv = store.reads.last_argv(study_id)
    return None if argv is None else repetitions(argv)
