"""llama-perplexity's KL-divergence mode: command lines and a pure parser of its report.

``--kl-divergence-base FILE`` (without ``--kl-divergence``) runs the model over a corpus
and saves every scored token's logits to FILE; ``--kl-divergence`` with the same FILE
runs another build (or other flags) over the same tokens and prints how far its token
distributions are from the saved ones (tools/perplexity/perplexity.cpp,
``kl_divergence()``). Nothing outside this module knows these flags or field names.

The saved logits are stored rounded to 16 bits (perplexity.cpp ``process_logits``
keeps a per-token min and scale), so even the same build against its own file shows a
KLD of about 1e-6: that is the floor a candidate is judged against, not zero.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import EngineError, UserError

BINARY = "llama-perplexity"

_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf)"
# A value counts only when what follows it was printed too ("±" or the end of its line):
# output cut mid-number ("Same top p: 9") must not read as 9 (found by fuzzing).
_PM = r"(?=[ \t]*±)"
_EOL = r"(?=[ \t]*\r?\n)"
_FIELDS: dict[str, str] = {
    "mean_ppl_q": rf"Mean PPL\(Q\)\s*:\s*{_NUM}{_PM}",
    "mean_ppl_base": rf"Mean PPL\(base\)\s*:\s*{_NUM}{_PM}",
    "mean_ln_ratio": rf"Mean ln\(PPL\(Q\)/PPL\(base\)\)\s*:\s*{_NUM}{_PM}",
    "ppl_ratio": rf"Mean PPL\(Q\)/PPL\(base\)\s*:\s*{_NUM}{_PM}",
    "mean_kld": rf"Mean\s+KLD:\s*{_NUM}{_PM}",
    "max_kld": rf"Maximum KLD:\s*{_NUM}{_EOL}",
    "kld_99": rf"99\.0%\s+KLD:\s*{_NUM}{_EOL}",
    "median_kld": rf"Median\s+KLD:\s*{_NUM}{_EOL}",
    "same_top_p": rf"Same top p:\s*{_NUM}{_PM}",
}
# Only these must be present: the rest appear in every release since the KLD report
# gained percentiles, but a missing one is a value we can do without (None).
_REQUIRED = ("mean_ppl_q", "mean_kld", "kld_99", "same_top_p")
# One row of the per-chunk table: "   3    34998.8104 ±  773.4743   0.00000 ± …"
_CHUNK = re.compile(r"^\s*(\d+)\s+" + _NUM + r"\s+±", re.MULTILINE)
_FINAL = re.compile(r"Final estimate: PPL = " + _NUM + r"\s+\+/-")
_ERROR_LINE = re.compile(r"^(?:[\d.]+ E |error:|.*\bfailed\b|.*does not look like)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class KldStats:
    """What one ``--kl-divergence`` run printed. KLD in nats, ``same_top_p`` in percent."""

    mean_ppl_q: float
    mean_ppl_base: float | None
    mean_ln_ratio: float | None
    ppl_ratio: float | None
    mean_kld: float
    max_kld: float | None
    kld_99: float
    median_kld: float | None
    same_top_p: float
    chunk_ppl: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for name in _REQUIRED:
            v = getattr(self, name)
            if not math.isfinite(v):
                raise EngineError(f"llama-perplexity reported {name} = {v} — the run is broken; "
                                  "check the model and the engine build")
        if not 0.0 <= self.same_top_p <= 100.0:
            raise EngineError(f"llama-perplexity reported 'Same top p' {self.same_top_p}% (not 0..100) — "
                              "its output format may have changed")

    @property
    def chunks(self) -> int:
        return len(self.chunk_ppl)

    def fingerprint(self) -> tuple[Any, ...]:
        """Everything printed that a change of any logit would move.

        PPL(Q) is printed with ~11 significant digits per chunk and overall: two runs
        whose fingerprints match computed the same logits to that precision.
        """
        return (self.chunk_ppl, self.mean_ppl_q, self.mean_kld, self.max_kld, self.kld_99,
                self.median_kld, self.same_top_p)

    def to_json(self) -> dict[str, Any]:
        return {"mean_ppl_q": self.mean_ppl_q, "mean_ppl_base": self.mean_ppl_base,
                "mean_ln_ratio": self.mean_ln_ratio, "ppl_ratio": self.ppl_ratio,
                "mean_kld": self.mean_kld, "max_kld": self.max_kld, "kld_99": self.kld_99,
                "median_kld": self.median_kld, "same_top_p": self.same_top_p,
                "chunk_ppl": list(self.chunk_ppl)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> KldStats:
        return KldStats(**{**d, "chunk_ppl": tuple(d.get("chunk_ppl", ()))})


def _float(text: str) -> float:
    # "nan"/"-nan"/"inf" are accepted by float() too; + 0.0 turns a printed "-0.000000" into 0.0
    return float(text) + 0.0


def parse_kld(text: str) -> KldStats:
    """Parse llama-perplexity ``--kl-divergence`` output (stdout and stderr together)."""
    got: dict[str, float | None] = {}
    for name, pattern in _FIELDS.items():
        m = re.search(pattern, text)
        got[name] = _float(m.group(1)) if m else None
    missing = [n for n in _REQUIRED if got[n] is None]
    if missing:
        hint = error_line(text)
        raise EngineError(
            "llama-perplexity printed no KL-divergence statistics (missing "
            + ", ".join(missing) + ")" + (f": {hint}" if hint else "")
            + " — check the model, the base logits file and that this build's llama-perplexity works"
        )
    chunk_ppl = tuple(_float(m.group(2)) for m in _CHUNK.finditer(text))
    mean_ppl_q, mean_kld, kld_99, same_top_p = (got[n] for n in _REQUIRED)
    assert mean_ppl_q is not None and mean_kld is not None and kld_99 is not None and same_top_p is not None
    return KldStats(mean_ppl_q=mean_ppl_q, mean_ppl_base=got["mean_ppl_base"],
                    mean_ln_ratio=got["mean_ln_ratio"], ppl_ratio=got["ppl_ratio"], mean_kld=mean_kld,
                    max_kld=got["max_kld"], kld_99=kld_99, median_kld=got["median_kld"],
                    same_top_p=same_top_p, chunk_ppl=chunk_ppl)


def parse_base_ppl(text: str) -> float:
    """The final PPL of a ``--kl-divergence-base`` run: proof that it went through."""
    m = _FINAL.search(text)
    if m is None:
        hint = error_line(text)
        raise EngineError("llama-perplexity did not finish saving base logits"
                          + (f": {hint}" if hint else "")
                          + " — check the model and that this build's llama-perplexity works")
    return _float(m.group(1))


def error_line(text: str) -> str:
    """The engine's own error line, if it printed one (shown in our one-line error)."""
    for line in reversed(text.splitlines()):
        s = line.strip()
        if s and _ERROR_LINE.match(s):
            return re.sub(r"^[\d.]+ E ", "", s)[:300]
    return ""


@dataclass(frozen=True, slots=True)
class KldSettings:
    """Context, batches, chunk count and threads: the same for every state compared.

    The defaults keep a check to seconds on the project's tiny models: 4 chunks of 128
    tokens score ~250 tokens (perplexity.cpp scores the second half of each chunk).
    """

    ctx: int = 128
    batch: int = 128
    ubatch: int = 128
    chunks: int = 4
    threads: int = field(default_factory=lambda: min(os.cpu_count() or 1, 8))

    def __post_init__(self) -> None:
        for name in ("ctx", "batch", "ubatch", "chunks", "threads"):
            if getattr(self, name) < 1:
                raise UserError(f"output check {name} must be at least 1 — fix the setting")

    def argv(self) -> list[str]:
        return ["-c", str(self.ctx), "-b", str(self.batch), "-ub", str(self.ubatch),
                "--chunks", str(self.chunks), "-t", str(self.threads)]

    def to_json(self) -> dict[str, int]:
        return {"ctx": self.ctx, "batch": self.batch, "ubatch": self.ubatch, "chunks": self.chunks,
                "threads": self.threads}


def base_argv(binary: Path, model: str, corpus: Path, out: Path, settings: KldSettings,
              flags: Sequence[str] = ()) -> list[str]:
    """Save the base logits of ``model`` over ``corpus`` to ``out``."""
    return [str(binary), "-m", model, "-f", str(corpus), *settings.argv(), *flags,
            "--kl-divergence-base", str(out)]


def kld_argv(binary: Path, model: str, corpus: Path, base: Path, settings: KldSettings,
             flags: Sequence[str] = ()) -> list[str]:
    """Compare this build's logits with the saved ``base`` file."""
    return [str(binary), "-m", model, "-f", str(corpus), *settings.argv(), *flags,
            "--kl-divergence-base", str(base), "--kl-divergence"]


# llama-bench flags that can move the numbers, and how llama-perplexity spells them.
# Threads, batch sizes and context are fixed by KldSettings (the same for every state);
# flags that only shape the benchmark (-p, -n, -r, -o, …) do not apply.
_VALUELESS = {"-h", "--help", "--version", "--list-devices", "-v", "--verbose", "--progress",
              "--no-warmup", "--offline"}
_RENAME = {"-ctk": "-ctk", "--cache-type-k": "-ctk", "-ctv": "-ctv", "--cache-type-v": "-ctv",
           "-ngl": "-ngl", "--n-gpu-layers": "-ngl", "-ncmoe": "-ncmoe", "--n-cpu-moe": "-ncmoe",
           "-sm": "-sm", "--split-mode": "-sm", "-mg": "-mg", "--main-gpu": "-mg",
           "-ts": "-ts", "--tensor-split": "-ts", "-dev": "-dev", "--device": "-dev",
           "-ot": "-ot", "--override-tensor": "-ot", "--numa": "--numa"}
_ON_OFF = {"-fa", "--flash-attn"}
_SWITCHES = {"-nkvo": "-nkvo", "--no-kv-offload": "-nkvo", "--repack": "--no-repack",
             "-nopo": "--no-op-offload", "--no-op-offload": "--no-op-offload"}


def perplexity_flags(bench_flags: Sequence[str]) -> tuple[str, ...]:
    """llama-perplexity flags equivalent to the output-relevant part of llama-bench flags.

    A sweep (``-ctk f16,q8_0``) is several configurations; one output check cannot stand
    for them, so it is refused with the fix.
    """
    out: list[str] = []
    args = list(bench_flags)
    i = 0
    while i < len(args):
        flag = args[i]
        name, eq, inline = flag.partition("=")
        if not name.startswith("-") or name in _VALUELESS:
            i += 1
            continue
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(args):
            value = args[i + 1]
            i += 2
        else:
            break
        if name in _RENAME or name in _ON_OFF or name in _SWITCHES:
            sep = ";" if name in ("-ot", "--override-tensor") else ","
            if sep in value:
                raise UserError(f"{name} {value!r} sweeps several settings; an output check needs one — "
                                "give each setting its own arm")
        if name in _RENAME:
            if name in ("-ts", "--tensor-split", "-dev", "--device"):
                value = value.replace("/", ",")
            out += [_RENAME[name], value]
        elif name in _ON_OFF:
            out += ["-fa", {"1": "on", "0": "off"}.get(value, value)]
        elif name in _SWITCHES:
            on = value not in ("0", "off", "false")
            # --repack defaults on: only "--repack 0" needs a flag; the others default off.
            if (name == "--repack" and not on) or (name != "--repack" and on):
                out.append(_SWITCHES[name])
    return tuple(out)
