"""Workload names, shared by every engine kind.

llama-bench's names (``pp512``, ``tg128``, ``pp512+tg128``, each optionally ``@d4096``)
mean the same for every engine; a server adds concurrency: ``tg128xc4`` is four
streams at once. An engine refuses what it cannot run (llama-bench: concurrency). The plan
names workloads only: each engine composes its own argv from the names (Engine.argv_for).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tokensleuth.core.errors import UserError, show

# llama-bench's counts (tokens, depth) are C ints.
INT32_MAX = 2**31 - 1


def bench_test_name(n_prompt: int, n_gen: int, n_depth: int) -> str:
    """llama-bench's name for a test: pp512, tg128, pp512+tg128, with @d4096 when deep."""
    if n_prompt and n_gen:
        name = f"pp{n_prompt}+tg{n_gen}"
    elif n_prompt:
        name = f"pp{n_prompt}"
    else:
        name = f"tg{n_gen}"
    return f"{name}@d{n_depth}" if n_depth else name


# pp<N>, tg<N> or pp<N>+tg<N>, each optionally @d<N>; ASCII digits only, at most 10 of
# them (a longer number is out of llama-bench's int range anyway).
WORKLOAD_RE = re.compile(
    r"(?:pp(?P<p>[0-9]{1,10}))?(?P<plus>\+)?(?:tg(?P<g>[0-9]{1,10}))?(?:@d(?P<d>[0-9]{1,10}))?"
)


def parse_workload(name: str) -> tuple[int, int, int]:
    """``pp512`` / ``tg128`` / ``pp512+tg128``, each optionally ``@d4096`` -> (n_prompt, n_gen, n_depth)."""
    m = WORKLOAD_RE.fullmatch("".join(name.split()))
    both = bool(m and m["p"] and m["g"])
    if not m or not (m["p"] or m["g"]) or bool(m["plus"]) != both:
        raise UserError(
            f"unknown workload {show(name)} — use llama-bench's names: pp512, tg128, pp512+tg128, pp2048@d4096"
        )
    n_prompt, n_gen, n_depth = (int(m[k] or 0) for k in ("p", "g", "d"))
    if (m["p"] and not n_prompt) or (m["g"] and not n_gen):
        raise UserError(f"workload {show(name)} times no tokens — give a count above 0, e.g. pp512 or tg128")
    if max(n_prompt, n_gen, n_depth) > INT32_MAX:
        raise UserError(f"workload {show(name)} is larger than llama-bench can run — use counts below 2^31")
    return n_prompt, n_gen, n_depth


def canonical_workload(name: str) -> str:
    """The one name a workload is planned, stored and matched under: llama-bench's own.

    ``tg128@d0`` -> ``tg128``, ``pp0512`` -> ``pp512``: results come back under the
    name :func:`bench_test_name` gives them, so a study keyed by anything else finds
    no cells for its workload.
    """
    return bench_test_name(*parse_workload(name))

MAX_CONCURRENCY = 256
_XC = re.compile(r"^(?P<w>.*?)xc(?P<c>[0-9]{1,4})$")


@dataclass(frozen=True, slots=True)
class Workload:
    n_prompt: int
    n_gen: int
    n_depth: int
    concurrency: int = 1

    @property
    def name(self) -> str:
        base = bench_test_name(self.n_prompt, self.n_gen, self.n_depth)
        return base if self.concurrency == 1 else f"{base}xc{self.concurrency}"


def parse(name: str) -> Workload:
    """``pp512``, ``tg128@d4096``, ``pp512+tg128xc4`` -> a Workload (UserError otherwise)."""
    text = "".join(name.split())
    conc = 1
    if (m := _XC.match(text)) is not None:
        text, conc = m["w"], int(m["c"])
        if not 1 <= conc <= MAX_CONCURRENCY:
            raise UserError(f"workload {show(name)}: concurrency must be 1 to {MAX_CONCURRENCY} — e.g. tg128xc4")
    return Workload(*parse_workload(text), concurrency=conc)


def canonical(name: str) -> str:
    """The one name a workload is planned, stored and matched under (``tg128@d0xc1`` -> ``tg128``)."""
    return parse(name).name


# A trial that runs several workloads in one engine process is stored under their names
# joined by this (no workload name holds it); its results are matched to them by test name.
JOINED = ","


def cell_of(workload: str, test: str, test_idx: int) -> tuple[str, int]:
    """The workload and index a stored result counts under: a joined trial's tests under their
    own names (each once in it, so index 0, as when it runs alone); any other trial's results
    under its workload and their index (a shared process's instances, a bench trial's tests)."""
    return (test, 0) if JOINED in workload else (workload, test_idx)


def trial_workloads(stored: str) -> list[str]:
    """The workloads a stored trial ran: one name, or several joined (one process ran them all)."""
    return stored.split(JOINED) if JOINED in stored else [stored]
