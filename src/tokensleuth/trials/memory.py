"""What a llama-bench run will need in memory, per device, before it starts — and whether it fits.

A model larger than the memory it is loaded into does not fail politely: the MoE field
report's gpt-oss-120b froze the whole machine on load. So before any trial the need is
predicted from the model's header and the flags, and compared with what is free:

- **weights**, tensor by tensor (exact sizes from the header): llama.cpp counts the output
  layer as the last layer and offloads from the top, so ``-ngl N`` puts the output and the
  last N − 1 repeating layers on the GPU, never the input embedding; ``-ncmoe N`` keeps the experts of the first N layers on the host; ``-ot
  PATTERN=BUFT`` moves what it matches. Host weights read through mmap are page cache
  (reclaimable); without mmap (``-lm none``, ``-mmp 0``) they are the process's own memory.
  A host weight the CPU backend repacks (with AVX2: Q4_0, Q4_K, IQ4_NL and MXFP4 matrices,
  gpt-oss's experts among them) is copied into a buffer of the process's own as well — in a
  CPU-only build (a GPU build's host weights stay in its host buffer: none was repacked for
  gpt-oss-120b at -ngl 18 on the H200).
- **KV cache**: context cells × layers × (KV heads × head dim) × (K + V bytes per element,
  from ``-ctk``/``-ctv``), on the device of its layer (the host with ``-nkvo``). llama-bench
  makes a context of prompt + generated + depth tokens, padded to 256 cells. A sliding-window
  layer (gpt-oss: every other one, 128 tokens) holds the window plus a batch, padded to 256.
- **compute buffer**: the graph's worst case, reserved for ``n_ubatch`` tokens: their logits
  (vocabulary wide), hidden state and FFN activation in f32 — 4 · n_ubatch · (n_vocab +
  n_embd + FFN width) bytes, where the FFN width is ``n_ff`` or ``n_expert_used · n_ff_exp``;
  n_ubatch is capped by the test's own tokens (llama-bench sizes each test's context to
  it). Within 3% of what llama.cpp reserved for an 8 B dense, a 20 M dense and a 0.6 B MoE
  model on the CPU and a 1 B MoE model on the H200 (their load logs). It lives on the GPU when the build has
  one (it offloads large operations even at ``-ngl 0``, and then copies the output weights in
  for each batch: their size is added), else on the host.

Available: host MemAvailable, or less where the memory limit less usage of this process's
cgroup, or of one above it, is smaller; NVIDIA free memory from NVML; on AMD, VRAM and GTT
(the system memory an APU's GPU allocates) from the amdgpu driver's sysfs. A prediction over
what is free is refused before anything runs; one within 10% of it is warned about.

The flags are the engine's to read (Engine.guard: llama-bench's in engines.llamabench.settings);
this module sizes the load they describe (:data:`Settings`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.engines.placement import LoadSettings, override_regex
from tokensleuth.models.info import read_header
from tokensleuth.trials.memory_free import Free, gpu_free, host_free

Settings = LoadSettings  # what a load's memory depends on, as the engine reads it from its flags (Engine.guard)
MIB = 1 << 20
WARN_WITHIN = 0.10
# The host side errs on the safe side: a refusal missed there is the freeze the field report
# describes, a refusal too many costs a flag. Against llama.cpp's load log the host buffers were
# predicted within 1.9% (under) on the H200; the process's own memory beside its buffers (the
# runtime's: the CUDA context and its pinned staging, the tokenizer, the graph) is not in the
# log at all. So the guard adds 5% of the host buffers and a fixed runtime share.
HOST_MARGIN = 0.05
HOST_RUNTIME_GPU = 0.5e9  # a GPU runtime's host memory (CUDA context, pinned staging buffers)
HOST_RUNTIME_CPU = 0.1e9
MEMORY_STATE = "memory_prediction"  # a compare's predictions: {arm: {model: Need.to_json()}}
# bytes per element of a KV cache type
KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
            "q5_0": 22 / 32, "q5_1": 24 / 32, "iq4_nl": 18 / 32}
_LAYER = re.compile(r"^blk\.(\d+)\.")
_EXPERTS = re.compile(r"_exps\.")


@dataclass(slots=True)
class Need:
    """Bytes per place: 'host' and each GPU ('gpu' when the build has one)."""

    weights: dict[str, float] = field(default_factory=dict)
    weights_mapped: float = 0.0  # host weights read through mmap (page cache, not the process's own)
    repacked: float = 0.0  # of the host weights: the CPU backend's repacked copies (in weights["host"])
    kv: dict[str, float] = field(default_factory=dict)
    compute: dict[str, float] = field(default_factory=dict)

    def total(self, where: str) -> float:
        """llama.cpp's own buffers here: what its load log reports, the prediction's measured part."""
        return self.weights.get(where, 0.0) + self.kv.get(where, 0.0) + self.compute.get(where, 0.0)

    def margin(self, where: str, gpu: bool) -> float:
        """What the guard adds on the host to the buffers (:data:`HOST_MARGIN`); none on a GPU."""
        if where != "host":
            return 0.0
        return HOST_MARGIN * self.total(where) + (HOST_RUNTIME_GPU if gpu else HOST_RUNTIME_CPU)

    def guarded(self, where: str, gpu: bool) -> float:
        """What the guard holds against free memory: the buffers and, on the host, the margin."""
        return self.total(where) + self.margin(where, gpu)

    def places(self) -> list[str]:
        return sorted(set(self.weights) | set(self.kv) | set(self.compute), key=lambda k: (k != "host", k))

    def to_json(self) -> dict[str, Any]:
        return {w: {"weights_mib": self.weights.get(w, 0.0) / MIB, "kv_mib": self.kv.get(w, 0.0) / MIB,
                    "compute_mib": self.compute.get(w, 0.0) / MIB, "total_mib": self.total(w) / MIB}
                for w in self.places()} | {"host_mapped_weights_mib": self.weights_mapped / MIB}


def _add(d: dict[str, float], k: str, v: float) -> None:
    d[k] = d.get(k, 0.0) + v


# architectures whose layers alternate sliding-window and full attention, by llama.cpp's default
# pattern (every n-th layer full); one without an entry is counted as full everywhere (more)
SWA_PATTERN = {"gpt-oss": 2}


def repack_types(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The weight types this CPU's backend repacks into a layout of its own (ggml-cpu's
    repack.cpp, b11434): with AVX2 Q4_0, Q4_K, IQ4_NL and MXFP4 (Q2_K with AVX-512); on Arm with
    the dot-product extension also Q5_K, Q6_K and Q8_0."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    flags = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.partition(":")[2].split())
            break
    if "avx2" in flags:
        return frozenset({"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"} | ({"Q2_K"} if "avx512f" in flags else set()))
    if "asimddp" in flags:
        return frozenset({"Q4_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "MXFP4", "Q8_0"})
    return frozenset()


def _repacked(t: Any, types: frozenset[str]) -> bool:
    """Whether the CPU backend repacks host tensor ``t``: a matrix multiplication's weight (2-D,
    or an MoE layer's 3-D experts; the input embedding is a row lookup) of a type it repacks,
    rows a multiple of 8."""
    import gguf

    if not types or t.name.startswith("token_embd") or len(t.dims) not in (2, 3) or t.dims[1] % 8:
        return False
    try:
        return gguf.GGMLQuantizationType(t.ttype).name in types
    except ValueError:
        return False


def predict(model: Path, s: Settings, gpu: bool, repack: frozenset[str] | None = None) -> Need:
    """What a run of ``model`` with settings ``s`` will hold, per place (bytes). ``repack``: the
    weight types the CPU backend repacks (default: this machine's, repack_types)."""
    # -ot regexes compiled once, a bad one refused before the model is read (the engine's reading
    # of its flags refused it already; Settings made another way are checked here)
    overrides = [(override_regex(pat), buft) for pat, buft in s.overrides]
    head = read_header(model)
    kv = head.kv
    arch = str(kv.get("general.architecture", ""))

    def num(key: str, default: int = 0) -> int:
        v = kv.get(f"{arch}.{key}", default)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default

    n_layer = num("block_count")
    n_embd = num("embedding_length")
    n_head = num("attention.head_count", 1)
    n_kv = num("attention.head_count_kv", n_head)
    head_k = num("attention.key_length", n_embd // max(n_head, 1))
    head_v = num("attention.value_length", head_k)
    n_ff = num("feed_forward_length")
    n_used, n_ff_exp = num("expert_used_count"), num("expert_feed_forward_length")
    tok = kv.get("tokenizer.ggml.tokens")
    n_vocab = int(getattr(tok, "count", 0)) or num("vocab_size")
    # llama.cpp counts the output layer as layer n_layer and offloads from the top: -ngl N puts
    # the output and the last N - 1 repeating layers on the GPU (-ngl 4 of 12: output + 3 layers)
    ngl = n_layer + 1 if s.ngl < 0 else min(s.ngl, n_layer + 1)
    first_gpu_layer = n_layer + 1 - ngl if gpu else n_layer + 1
    output_on_gpu = gpu and ngl >= 1
    need = Need()
    repack = repack_types() if repack is None else repack
    for t in head.tensors:
        m = _LAYER.match(t.name)
        if m:
            layer = int(m.group(1))
            where = "gpu" if layer >= first_gpu_layer else "host"
            if where == "gpu" and layer < s.ncmoe and _EXPERTS.search(t.name):
                where = "host"
        elif t.name.startswith("token_embd"):
            where = "host"  # the input embedding stays on the host by design
        else:
            where = "gpu" if output_on_gpu else "host"
        for rx, buft in overrides:
            if rx.search(t.name):
                where = "host" if buft.upper().startswith("CPU") else "gpu"
                break
        if where == "host" and s.mmap:
            need.weights_mapped += t.n_bytes
            # read once from the mapping into a buffer of its own; a GPU build keeps host weights
            # in its host buffer type instead (llama-model.cpp's make_cpu_buft_list lists it first)
            if s.repack and not gpu and _repacked(t, repack):
                _add(need.weights, "host", t.n_bytes)
                need.repacked += t.n_bytes
        else:
            _add(need.weights, where, t.n_bytes)
    need.weights.setdefault("host", 0.0)
    per_cell = n_kv * (head_k * KV_BYTES.get(s.type_k, 2.0) + head_v * KV_BYTES.get(s.type_v, 2.0))
    # a sliding-window layer keeps the window and a batch (padded to 256), not the whole context
    # (llama-kv-cache-iswa.cpp); which layers slide is the architecture's pattern
    n_swa = num("attention.sliding_window")
    pattern = num("attention.sliding_window_pattern", SWA_PATTERN.get(arch, 0)) if n_swa else 0
    swa_cells = min(s.n_ctx, -(-min(s.n_ctx, n_swa + min(s.n_ubatch, s.n_batch)) // 256) * 256)
    for layer in range(n_layer):
        where = "gpu" if layer >= first_gpu_layer and not s.nkvo else "host"
        sliding = pattern > 0 and layer % pattern < pattern - 1
        _add(need.kv, where, (swa_cells if sliding else s.n_ctx) * per_cell)
    # llama-bench makes each test's context just large enough for it, and a batch never
    # exceeds the context: a tg16 test reserves for 16 tokens whatever -ub says
    ub = max(1, min(s.n_ubatch, s.n_batch, s.n_tokens))
    width = n_used * n_ff_exp if n_used and n_ff_exp else n_ff
    _add(need.compute, "gpu" if gpu else "host", 4.0 * ub * (n_vocab + n_embd + width))
    if gpu:
        _add(need.compute, "host", 16.0 * ub * n_embd)  # inputs staged on the host
        if not output_on_gpu:  # -ngl 0: the output matmul is offloaded, its weights copied in per batch
            _add(need.compute, "gpu", float(sum(t.n_bytes for t in head.tensors if t.name == "output.weight")))
    return need


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    line: str  # the refusal, the warning, or "" when it fits with room


def _gb(b: float) -> str:
    return f"{b / 1e9:.1f} GB"


def judge(model: Path, need: Need, free: Free, s: Settings) -> Verdict:
    """Refuse a run that cannot fit, warn about one within WARN_WITHIN of filling a place."""
    warn = []
    places = {"host": free.host, "gpu": free.gpu}
    gpu = "gpu" in need.places()
    for where in need.places():
        have = places.get(where)
        want = need.guarded(where, gpu)
        if have is None or need.total(where) <= 0:
            continue
        margin = need.margin(where, gpu)
        parts = (f"{_gb(need.weights.get(where, 0))} weights + {_gb(need.kv.get(where, 0))} KV + "
                 f"{_gb(need.compute.get(where, 0))} compute"
                 + (f" + {_gb(margin)} margin for the runtime" if margin else ""))
        if want > have:
            fix = ("fewer layers on the GPU (-ngl), a smaller -ub, or -ncmoe N to keep experts on the host"
                   if where == "gpu" else
                   f"--repack 0 (the CPU backend copies {_gb(need.repacked)} of weights to repack them), "
                   "more layers on the GPU (-ngl), or a smaller -ub" if need.repacked > 0.1 * want else
                   "mmap on (drop -lm none / -mmp 0), more layers on the GPU (-ngl), or a smaller -ub"
                   if not s.mmap else "more layers on the GPU (-ngl), or a smaller -ub")
            return Verdict(False, f"{model.name} needs {_gb(want)} of {where} memory ({parts}) but {_gb(have)} "
                                  f"is free — it would not fit (a load past memory can freeze the machine): {fix}")
        if want > (1 - WARN_WITHIN) * have:
            warn.append(f"{model.name} needs {_gb(want)} of the {_gb(have)} of {where} memory free ({parts}): "
                        "within 10% of full")
    if free.host is not None and need.weights_mapped > free.host:
        warn.append(f"{model.name}'s {_gb(need.weights_mapped)} of host weights are read through mmap but only "
                    f"{_gb(free.host)} is free: they will be read from disk again and again")
    return Verdict(True, "; ".join(warn))


def tests_of(workloads: Sequence[str]) -> list[tuple[int, int, int]]:
    """(prompt, generated, depth) of each workload; llama-bench's defaults when there are none."""
    from tokensleuth.core.workloads import parse

    return [(w.n_prompt, w.n_gen, w.n_depth) for w in map(parse, workloads)] or [(512, 0, 0), (0, 128, 0)]


def load_settings(kind: str, flags: Sequence[str], workloads: Sequence[str]) -> Settings | None:
    """What a run of ``kind`` with these flags and workloads loads, as the engine reads its own
    flags (Engine.guard); None where the kind loads nothing the guard sizes."""
    return engine_for(kind).guard(flags, tests_of(workloads))


def guard(models: Sequence[str], flags: Sequence[str], workloads: Sequence[str], backends: Sequence[str],
          warn: Any = None, free: Free | None = None, *, kind: str = DEFAULT_KIND) -> list[tuple[str, Need]] | None:
    """Refuse (UserError, before anything runs) a run that cannot fit; ``warn`` each one close
    to full. Returns each model's prediction (recorded with the study); None where ``kind`` (the
    arm's engine; the default: the profiler's, which runs llama-bench) has no load to guard."""
    from tokensleuth.engines.placement import GPU_BACKENDS

    gpu = any(b in GPU_BACKENDS for b in backends)
    s = load_settings(kind, flags, workloads)
    if s is None:
        return None
    if free is None:
        h, hs = host_free()
        g, gs = gpu_free() if gpu else (None, "")
        free = Free(h, g, (hs, gs))
    out = []
    for m in models:
        need = predict(Path(m), s, gpu)
        v = judge(Path(m), need, free, s)
        if not v.ok:
            raise UserError(v.line)
        if v.line and warn is not None:
            warn(f"memory: {v.line}")
        out.append((m, need))
    return out
