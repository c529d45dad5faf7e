"""The sentences a compare's verdicts are said in: the summary, the settings nobody asked to change,
the shared processes, the cold repetitions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tokensleuth.analysis import stats
from tokensleuth.analysis.cold import Cold
from tokensleuth.drivers.verdicts.comparisons import Comparison
from tokensleuth.engines.base import per_instance


def unasked_diffs_sentence(comps: list[Comparison]) -> str:
    """Settings that differ between arms without the user asking: the likely cause."""
    seen: dict[str, list[str]] = {}
    for c in comps:
        labels = [d.label() for d in c.param_diffs if not d.requested]
        if labels and c.candidate not in seen:
            seen[c.candidate] = labels
    if not seen:
        return ""
    base = comps[0].baseline
    parts = [f"{cand}'s llama-bench ran with other settings than {base}'s ({', '.join(labels)})"
             for cand, labels in seen.items()]
    return (" Not asked for: " + "; ".join(parts) + " — likely part of the difference; rerun with "
            "--pin-params to give every arm the baseline's values.")


def summary_sentence(comps: list[Comparison], band: float, names: Mapping[str, str] | None = None) -> str:
    """One paragraph a maintainer can read first. ``names``: how to call each arm (its name with
    what sets it apart, trials.arms.ArmDifferences.label); else its name."""
    parts = []
    names = names or {}
    for c in comps:
        model = Path(c.model).stem
        e = c.estimate
        cand, base = names.get(c.candidate, c.candidate), names.get(c.baseline, c.baseline)
        if c.steered:
            parts.append(f"{cand} vs {base} on {c.workload} for {model} is not decided after {c.pairs} "
                         f"pairs: {c.confounder_note()}")
            continue
        if e is None:
            parts.append(f"{cand} vs {base} on {c.workload} for {model}: no complete pairs")
            continue
        pct = (e.ratio - 1) * 100
        ci = f"[{(e.lo - 1) * 100:+.1f}%, {(e.hi - 1) * 100:+.1f}%]"
        if c.verdict in ("faster", "slower"):
            parts.append(f"{cand} is {abs(pct):.1f}% {c.verdict} than {base} on {c.workload} "
                         f"for {model} {ci}")
        elif c.verdict == "same":
            parts.append(f"{cand} is the same as {base} within ±{band * 100:g}% on {c.workload} "
                         f"for {model} ({pct:+.1f}% {ci})")
        else:
            need = stats.pairs_for_same(e, band)
            hint = (f"; at this noise ±{band * 100:g}% takes about {need} pairs" if need and need > c.pairs
                    else "")
            parts.append(f"{cand} vs {base} on {c.workload} for {model} is unresolved after "
                         f"{c.pairs} pairs ({pct:+.1f}% {ci}; the interval straddles the ±{band * 100:g}% band"
                         f"{hint})")
    return "; ".join(parts) + "." + shared_sentence(comps) + cold_sentence(comps) + unasked_diffs_sentence(comps)


def shared_sentence(comps: Sequence[Comparison]) -> str:
    if not any(c.shared for c in comps):
        return ""
    return (" Each pair ran in one engine process (A, B, B, A on one load; --separate-processes for a "
            "process per trial).")


def cold_sentence(comps: Sequence[Comparison]) -> str:
    """Which cells left cold leading repetitions out of every trial, and how slow they ran."""
    seen: dict[str, Cold] = {}
    for c in comps:
        if c.cold is not None and c.cold.count and c.workload not in seen:
            seen[c.workload] = c.cold
    if not seen:
        return ""
    return cold_words(seen, shared=any(c.shared for c in comps))


def cold_words(seen: Mapping[str, Cold], *, shared: bool = False, added: bool = True) -> str:
    """The sentence compare and bench both say of cold repetitions (``seen``: per workload).

    ``added``: whether they were added to -r (a bench of one process has no later one to add them to).
    """
    def first(k: Cold) -> str:
        n = per_instance(k.count) if shared else k.count
        return ("the first " + ("repetition" if n == 1 else f"{n} repetitions")
                + (" of each instance" if shared else ""))

    parts = [f"{w}: {first(k)} ran {(1 - (k.ratio or 1)) * 100:.1f}% slower than the rest" for w, k in seen.items()
             if k.count]
    if not parts:
        return ""
    return (" Cold repetitions left out of every trial (" + ("and added to -r" if added else "not added to -r: "
            "no later process") + "): " + "; ".join(parts) + ".")
