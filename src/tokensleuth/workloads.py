"""Workload names, shared by every engine kind.

llama-bench's names (``pp512``, ``tg128``, ``pp512+tg128``, each optionally ``@d4096``)
mean the same for every engine; a server adds concurrency: ``tg128xc4`` is four
streams at once. An engine refuses what it cannot run (llama-bench: concurrency).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tokensleuth.engines.llamabench import bench_test_name, parse_workload, show
from tokensleuth.errors import UserError

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


def planned_argv(name: str) -> list[str]:
    """The argv a trial of this workload is planned with: llama-bench's flags for it.

    Engines other than llama-bench read the trial's workload and ignore these; a
    concurrent workload (which llama-bench cannot run) is planned with none.
    """
    from tokensleuth.engines.llamabench import workload_flags

    w = parse(name)
    return [] if w.concurrency > 1 else workload_flags(w.name)
