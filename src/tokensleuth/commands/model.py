"""tokensleuth model synth | fit | info: synthetic models, the memory a run needs, a model's facts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import CmakeOpt, engine_flags, guard_writes, out
from tokensleuth.core.errors import UserError
from tokensleuth.core.writes import file_path
from tokensleuth.sources import DEFAULT_ENGINE, parse_source
from tokensleuth.sources.build import BuildCache


def model_synth(
    out_path: Annotated[Path, typer.Option("--out", parser=file_path("--out"), help="Where to write the .gguf.")],
    arch: Annotated[str, typer.Option(help="llama (dense) or qwen3moe (MoE).")] = "llama",
    size: Annotated[str, typer.Option(help="tiny, small or medium.")] = "tiny",
    quant: Annotated[str, typer.Option(help="Q8_0, Q4_K_M or F16 (with --shape: Q8_0, Q4_0, F16, MXFP4, Q6_K, Q4_K_M or IQ4_XS — the K- and i-quants with llama-quantize's per-tensor mix).")] = "Q8_0",
    engine: Annotated[str, typer.Option(help="Engine whose tokenizer files and llama-quantize to use.")] = DEFAULT_ENGINE,
    seed: Annotated[int, typer.Option(min=0, max=2**63 - 1, help="Random seed of the weights.")] = 0,
    vocab: Annotated[Optional[str], typer.Option(help="Another of llama.cpp's tokenizers than the shape's own (models/ggml-vocab-NAME.gguf: llama-spm, qwen2, gpt-2 …). A smaller one loads and runs faster.")] = None,
    vocab_size: Annotated[Optional[int], typer.Option("--vocab-size", help="Keep the tokenizer's first N tokens (a SentencePiece one, e.g. llama-spm: byte fallback still spells any text): a tiny model loads and runs faster.")] = None,
    shape: Annotated[Optional[str], typer.Option("--shape", help="A real model's exact shape, written straight as quantized blocks (Q8_0, Q4_0, F16, Q6_K, Q4_K_M, IQ4_XS; MXFP4 experts): qwen3-30b-a3b, gpt-oss-120b, llama-3.1-8b, qwen3-moe-mini, gpt-oss-mini.")] = None,
    cmake: CmakeOpt = [],  # noqa: B006
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out (by default an existing file is refused).")] = False,
) -> None:
    """Write a synthetic GGUF model (random weights, real tokenizer)."""
    from tokensleuth.models.info import model_info
    from tokensleuth.models.synth import QUANTS, SHAPES, check_vocab, check_vocab_size, synth

    # (the store: TOKENSLEUTH_DB or the default; --force replaces a model, never another kind of file)
    guard_writes([("--out", out_path)], new=() if force else ("--out",), replaces={"--out": "a GGUF model"},
                 regular=("--out",))  # (written whole and renamed into place: never a device)
    if shape is not None:
        if vocab is not None or vocab_size is not None:
            given = "--vocab" if vocab is not None else "--vocab-size"
            raise UserError(f"{given} is for --arch/--size models; a --shape model has its real model's tokenizer — "
                            "leave out one of them")
        import time as _time

        from tokensleuth.models.shapes import check_shape, write_shape

        check_shape(shape, quant)  # before the engine's tree is fetched (offline: a wrong name says so)
        t0 = _time.monotonic()
        write_shape(shape, out_path, quant, BuildCache().llama_tree(parse_source(engine)), seed=seed)
        i = model_info(out_path)
        out.print(f"{out_path}: {shape} ({i.arch}), {i.n_params / 1e9:.3f} B params, "
                  f"{i.n_active_params / 1e9:.3f} B active, {i.file_bytes / 1e9:.2f} GB, "
                  f"{i.bytes_per_token / 1e9:.3f} GB of weights per generated token · "
                  f"written in {_time.monotonic() - t0:.0f} s", markup=False)
        return
    if (arch, size) not in SHAPES:
        raise UserError(f"no synthetic shape {arch}/{size} — --arch llama|qwen3moe, --size tiny|small|medium")
    if quant not in QUANTS:
        raise UserError(f"unsupported quant {quant!r} — choose from {', '.join(QUANTS)}")
    tree = BuildCache().llama_tree(parse_source(engine))
    if vocab is not None:
        check_vocab(tree, vocab)  # before the build, which may take minutes
    if vocab_size is not None:
        check_vocab_size(tree, vocab or SHAPES[(arch, size)].vocab, vocab_size)
    b = common.get_build(engine, cmake)
    synth(arch, size, out_path, quant, tree, Path(b.bin_dir) / "llama-quantize", seed=seed, vocab=vocab,
          vocab_size=vocab_size)
    i = model_info(out_path)
    out.print(f"{out_path}: {i.arch} {i.n_params / 1e6:.1f} M params, {i.file_bytes / (1 << 20):.1f} MiB")


def model_fit(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A .gguf model.")],
    workload: Annotated[list[str], typer.Option("--workload", "-w", help="pp512, tg128, pp2048@d4096 … (the largest sets the context; default pp512 and tg128).")] = [],  # noqa: B006
    cpu: Annotated[bool, typer.Option("--cpu", help="Predict for a CPU-only build (default: a GPU build when this machine has a GPU).")] = False,
) -> None:
    """What a llama-bench run of MODEL with the flags after `--` will need in memory, per
    device, against what is free here — nothing is run."""
    from tokensleuth.engines.base import DEFAULT_KIND
    from tokensleuth.engines.checks import check_arm
    from tokensleuth.trials.memory import judge, load_settings, predict
    from tokensleuth.trials.memory_free import Free, gpu_free, host_free

    flags = engine_flags(ctx)
    # tokensleuth's own flags, -r, and values llama-bench would not take: refused, not predicted
    check_arm(None, "fit", DEFAULT_KIND, flags, {}, workload)
    h, hs = host_free()
    g, gs = (None, "") if cpu else gpu_free()
    s = load_settings(DEFAULT_KIND, flags, workload or ["pp512", "tg128"])  # the default kind reads its flags
    assert s is not None  # (llama-bench has a load to guard)
    need = predict(path, s, gpu=g is not None)
    rows = []
    gpu = g is not None
    for where in need.places():
        have = h if where == "host" else g
        rows.append([where, f"{need.weights.get(where, 0) / 1e9:.2f}", f"{need.kv.get(where, 0) / 1e9:.2f}",
                     f"{need.compute.get(where, 0) / 1e9:.2f}", f"{need.margin(where, gpu) / 1e9:.2f}",
                     f"{need.guarded(where, gpu) / 1e9:.2f}", "?" if have is None else f"{have / 1e9:.2f}"])
    from tokensleuth.report.markdown import table

    # the margin: the guard's own, on the host (memory.HOST_MARGIN: a missed refusal freezes a machine)
    out.print(table(["memory", "weights GB", "KV GB", "compute GB", "margin GB", "total GB", "free GB"], rows,
                    [False, True, True, True, True, True, True]), markup=False)
    out.print(f"context {s.n_ctx} cells, n_ubatch {min(s.n_ubatch, s.n_batch, s.n_tokens)}, "
              f"{'mmap' if s.mmap else 'no mmap'}: {need.weights_mapped / 1e9:.2f} GB of host weights mapped"
              f" · free: host from {hs}" + (f", GPU from {gs}" if gs else ", no GPU"), markup=False)
    v = judge(path, need, Free(h, g), s)
    if not v.ok:
        raise UserError(v.line)
    out.print(f"fits{': ' + v.line if v.line else ''}", markup=False)


def model_info_cmd(
    path: Annotated[Path, typer.Argument(help="A .gguf model.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print architecture, parameters, active parameters, experts, quant mix, bytes/token."""
    from tokensleuth.models.info import model_info

    i = model_info(path)
    if as_json:
        out.print_json(json.dumps(i.to_json()))
        return
    lines = [
        f"file              {i.path}",
        f"architecture      {i.arch}",
        f"name              {i.name}",
        f"parameters        {i.n_params:,} ({i.n_params / 1e9:.3f} B)",
        f"active/token      {i.n_active_params:,} ({i.n_active_params / 1e9:.3f} B)",
        f"experts           {i.n_expert} ({i.n_expert_used} used per token)" if i.n_expert else "experts           none (dense)",
        f"layers            {i.n_layer}, n_embd {i.n_embd}, vocab {i.n_vocab}",
        f"file size         {i.file_bytes / (1 << 20):.2f} MiB",
        f"bytes/token (tg)  {i.bytes_per_token / (1 << 20):.2f} MiB of weights read per generated token",
        "quant mix         " + ", ".join(f"{k} {v / (1 << 20):.2f} MiB" for k, v in i.quant_mix.items()),
    ]
    out.print("\n".join(lines))
