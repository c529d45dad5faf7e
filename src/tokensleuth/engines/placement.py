"""Where a model's weights and buffers live: parsed from llama.cpp's own load log.

llama-bench ``-v`` prints the loader's log: per device the model, KV-cache and compute
buffer sizes, how many layers were offloaded, which tensors a ``-ot`` override moved and
which could not use the preferred buffer type and fell back (the input embedding,
token_embd, stays in host memory by design). ``capture`` runs that once per arm and model;
``parse_load_log`` is a pure function of the text (tested on logs captured on real
hardware, tests/golden/llamacpp/load/); ``difference`` says in one sentence how two arms'
placements differ. ``check_devices`` refuses a GPU build whose engine finds no GPU: it
would silently run on the CPU and the comparison would be of the wrong thing.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import UserError, show

# the backends that put work on an accelerator (BLAS is a CPU library)
GPU_BACKENDS = ("CUDA", "ROCm", "Vulkan", "Metal", "SYCL", "OpenCL")


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """What decides where a llama.cpp load's memory goes, as the memory guard sizes it
    (tokensleuth.trials.memory): an engine kind reads it from its own flags (Engine.guard;
    llama-bench's: engines.llamabench.settings), defaults as b11434's."""

    ngl: int = -1  # layers on the GPU; -1: every layer (llama-bench's default on a GPU build)
    ncmoe: int = 0  # the experts of the first ncmoe layers kept on the host
    overrides: tuple[tuple[str, str], ...] = ()  # tensor-name regex -> buffer type
    mmap: bool = True
    nkvo: bool = False  # the KV cache kept on the host
    type_k: str = "f16"
    type_v: str = "f16"
    n_batch: int = 2048
    n_ubatch: int = 512
    # the largest test: prompt + generated + depth tokens (n_tokens), in cells padded to 256 (n_ctx)
    n_ctx: int = 512
    n_tokens: int = 512
    repack: bool = True  # off: the CPU backend uses the weights as they are mapped


def shown_regex(text: str) -> str:
    """A regex as typed (show() would double its backslashes), where it is short printable ASCII."""
    return f"'{text}'" if text.isascii() and text.isprintable() and len(text) <= 60 else show(text)


def override_regex(pat: str, value: str | None = None) -> re.Pattern[str]:
    """An ``-ot`` regex, compiled; UserError (naming it and the fix) where it does not compile."""
    try:
        return re.compile(pat)
    except re.error as exc:
        where = f"-ot {shown_regex(value)}: " if value is not None and value != pat else "-ot: "
        raise UserError(f"{where}{shown_regex(pat)} is not a regular expression ({exc.msg} at position {exc.pos}) "
                        "— fix the pattern: llama.cpp searches tensor names (blk.0.ffn_up_exps.weight) with it, "
                        "and a literal '(', '[', '*' or '+' in it needs a '\\' before it") from None

_MODEL = re.compile(r"^load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB", re.M)
_KV = re.compile(r"^llama_kv_cache:\s+(\S+) KV buffer size =\s+([\d.]+) MiB", re.M)
_COMPUTE = re.compile(r"^sched_reserve:\s+(\S+) compute buffer size =\s+([\d.]+) MiB", re.M)
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_FALLBACK = re.compile(r"tensor '(\S+)' \(\S+\) \(and (\d+) others\) cannot be used with preferred buffer type "
                       r"(\S+), using (\S+) instead")
_OVERRIDE = re.compile(r"^tensor (\S+) \(.*\) buffer type overridden to (\S+)", re.M)
_DEVICES = re.compile(r"^Available devices:\n((?:\s+.*\n?)*)", re.M)


@dataclass(frozen=True, slots=True)
class Placement:
    """One arm x model's placement, in MiB per buffer (``CPU_Mapped``, ``CUDA0`` …)."""

    model_mib: dict[str, float] = field(default_factory=dict)
    kv_mib: dict[str, float] = field(default_factory=dict)
    compute_mib: dict[str, float] = field(default_factory=dict)
    layers: tuple[int, int] | None = None  # offloaded, total
    # named tensors and the buffer each ended in: overrides (-ot) and fallbacks
    tensors: dict[str, str] = field(default_factory=dict)
    # a fallback line covers "(and N others)": tensor -> N
    others: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if any(v < 0 for d in (self.model_mib, self.kv_mib, self.compute_mib) for v in d.values()):
            raise ValueError("buffer sizes are never negative")

    def to_json(self) -> dict[str, Any]:
        return {"model_mib": self.model_mib, "kv_mib": self.kv_mib, "compute_mib": self.compute_mib,
                "layers": list(self.layers) if self.layers else None, "tensors": self.tensors,
                "others": self.others}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Placement:
        layers = d.get("layers")
        return cls(dict(d.get("model_mib") or {}), dict(d.get("kv_mib") or {}), dict(d.get("compute_mib") or {}),
                   (int(layers[0]), int(layers[1])) if layers else None, dict(d.get("tensors") or {}),
                   {k: int(v) for k, v in (d.get("others") or {}).items()})

    def devices(self) -> list[str]:
        """The non-host buffers holding model weights (CUDA0, Vulkan0, ROCm0 …)."""
        return [k for k in self.model_mib if not k.startswith("CPU") and not k.endswith("_Host")]


def _first_block(rx: re.Pattern[str], text: str) -> dict[str, float]:
    """Sizes per buffer from the first context only: llama-bench makes one context per test,
    and later ones repeat (or differ by test size)."""
    out: dict[str, float] = {}
    for m in rx.finditer(text):
        if m.group(1) in out:
            break
        out[m.group(1)] = float(m.group(2))
    return out


_SWA_CACHE = re.compile(r"^llama_kv_cache_iswa: creating\s+SWA KV cache", re.M)


def _first_kv(text: str) -> dict[str, float]:
    """The first context's KV buffers per device. A model with sliding-window layers (gpt-oss)
    has two caches per context, the full layers' and then the sliding ones' (each names its
    buffers): both are the context's."""
    out: dict[str, float] = {}
    events = sorted([(m.start(), "swa", "", 0.0) for m in _SWA_CACHE.finditer(text)]
                    + [(m.start(), "kv", m.group(1), float(m.group(2))) for m in _KV.finditer(text)])
    swa_seen = False
    current: dict[str, float] = {}
    for _, kind, dev, mib in events:
        if kind == "swa":
            if swa_seen:
                break  # the next context's caches
            swa_seen, current = True, {}
            continue
        if dev in current:
            break
        current[dev] = mib
        out[dev] = out.get(dev, 0.0) + mib
    return out


def parse_load_log(text: str) -> Placement:
    """A llama.cpp load log (llama-bench -v, or llama-server's own log) -> its Placement."""
    model = _first_block(_MODEL, text)
    layers = None
    if m := _OFFLOADED.search(text):
        layers = (int(m.group(1)), int(m.group(2)))
    tensors: dict[str, str] = {}
    others: dict[str, int] = {}
    for m in _OVERRIDE.finditer(text):
        tensors[m.group(1)] = m.group(2)
    for m in _FALLBACK.finditer(text):
        tensors[m.group(1)] = m.group(4)
        if int(m.group(2)):
            others[m.group(1)] = int(m.group(2))
    return Placement(model, _first_kv(text), _first_block(_COMPUTE, text), layers, tensors, others)


def _buffers(d: dict[str, float]) -> str:
    return " + ".join(f"{k} {v:.0f} MiB" for k, v in d.items()) or "none reported"


def _where(p: Placement, tensor: str) -> str:
    if tensor in p.tensors:
        return p.tensors[tensor]
    # not named in the log: it went with the layers (all on the device when every layer is offloaded)
    devs = p.devices()
    if p.layers and p.layers[0] == p.layers[1] and devs:
        return devs[0]
    return "CPU" if not devs else "with its layer"


def difference(base_name: str, base: Placement, cand_name: str, cand: Placement) -> str:
    """How two arms place the same model, in one sentence (or that they place it alike)."""
    parts = []
    for t in sorted(set(base.tensors) | set(cand.tensors)):
        wb, wc = _where(base, t), _where(cand, t)
        if wb != wc:
            parts.append(f"{cand_name} keeps {t} on {wc}; {base_name} on {wb}")
    if base.layers != cand.layers and base.layers and cand.layers:
        parts.append(f"{base_name} offloads {base.layers[0]}/{base.layers[1]} layers, "
                     f"{cand_name} {cand.layers[0]}/{cand.layers[1]}")
    if set(base.model_mib) != set(cand.model_mib) or any(
            abs(base.model_mib[k] - cand.model_mib[k]) > 0.05 * max(base.model_mib[k], 1.0) for k in base.model_mib):
        parts.append(f"model weights: {base_name} {_buffers(base.model_mib)}, {cand_name} {_buffers(cand.model_mib)}")
    if set(base.kv_mib) != set(cand.kv_mib):
        parts.append(f"KV cache: {base_name} {_buffers(base.kv_mib)}, {cand_name} {_buffers(cand.kv_mib)}")
    if not parts:
        return f"{cand_name} and {base_name} place the model alike ({_buffers(base.model_mib)})."
    return "; ".join(parts) + "."


# -- running the engine --------------------------------------------------------------------


def listed_devices(bench: Path, timeout_s: float = 60) -> list[str] | None:
    """The devices ``llama-bench --list-devices`` names (None: this llama-bench cannot list)."""
    try:
        p = subprocess.run([str(bench), "--list-devices"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _DEVICES.search(p.stdout + "\n" + p.stderr)
    if m is None:
        return None
    names = [ln.strip() for ln in m.group(1).splitlines() if ln.strip()]
    return [n for n in names if n != "(none)"]


def check_devices(arm: str, bench: Path, backends: Sequence[str], flags: Sequence[str]) -> None:
    """Refuse a GPU build whose llama-bench sees no GPU (unless the arm asked for none: -ngl 0)."""
    gpu = [b for b in backends if b in GPU_BACKENDS]
    if not gpu or _asks_no_gpu(flags):
        return
    devices = listed_devices(bench)
    if devices is None:  # an older llama-bench without --list-devices: nothing to check against
        return
    if not devices:
        raise UserError(
            f"arm {arm}: the build has the {'/'.join(gpu)} backend but its llama-bench finds no such device "
            "(`llama-bench --list-devices` lists none), so it would run on the CPU — install the GPU driver "
            "(for Vulkan: the loader and the vendor's ICD, VK_DRIVER_FILES), or give the arm -ngl 0 to measure "
            "the CPU on purpose")


def _asks_no_gpu(flags: Sequence[str]) -> bool:
    for i, f in enumerate(flags):
        if f in ("-ngl", "--n-gpu-layers") and i + 1 < len(flags) and flags[i + 1] == "0":
            return True
    return False
