"""Seconds per `model info`: the whole-file gguf.GGUFReader parse (what every server trial
did before) against the header-only reader, cold and cached, on the tiny models and on a
Qwen3-30B-A3B-shaped file (its real header and vocabulary; sparse data, so it costs no disk).

    .venv/bin/python bench/model_info_cost.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
from _common import default_engine, tiny_model

from tokensleuth.models import info


def reader_parse(path: Path) -> int:
    """The old path: gguf.GGUFReader over the whole header, tokenizer arrays included."""
    r = gguf.GGUFReader(path)
    return sum(int(t.n_elements) for t in r.tensors)


def qwen3_30b_a3b(dest: Path, vocab_from: Path) -> Path:
    """A file with Qwen3-30B-A3B's exact tensor shapes (Q8_0) and the qwen2 vocabulary of
    ``vocab_from``; the tensor data is a hole (truncate), so the header is all that is read."""
    src = gguf.GGUFReader(vocab_from)
    w = gguf.GGUFWriter(str(dest), "qwen3moe")
    w.add_name("qwen3-30b-a3b-shape")
    n_embd, n_layer, n_head, n_kv, hd, n_exp, n_used, ffn, n_vocab = 2048, 48, 32, 4, 128, 128, 8, 768, 151936
    w.add_block_count(n_layer)
    w.add_embedding_length(n_embd)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_expert_count(n_exp)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(ffn)
    w.add_context_length(40960)
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        f = src.fields[key]
        vals = f.contents()
        if key == "tokenizer.ggml.tokens":
            w.add_token_list(vals)
        elif key == "tokenizer.ggml.merges":
            w.add_token_merges(vals)
        else:
            w.add_token_types(vals)
    w.add_tokenizer_model("gpt2")
    q8 = gguf.GGMLQuantizationType.Q8_0

    def t(name: str, shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType = q8) -> None:
        n = int(np.prod(shape))
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        w.add_tensor_info(name, shape, np.dtype(np.float32), n // block * size, raw_dtype=qtype)

    f32 = gguf.GGMLQuantizationType.F32
    t("token_embd.weight", (n_vocab, n_embd))
    t("output_norm.weight", (n_embd,), f32)
    t("output.weight", (n_vocab, n_embd))
    for i in range(n_layer):
        b = f"blk.{i}."
        t(b + "attn_norm.weight", (n_embd,), f32)
        t(b + "attn_q.weight", (n_head * hd, n_embd))
        t(b + "attn_k.weight", (n_kv * hd, n_embd))
        t(b + "attn_v.weight", (n_kv * hd, n_embd))
        t(b + "attn_output.weight", (n_embd, n_head * hd))
        t(b + "attn_q_norm.weight", (hd,), f32)
        t(b + "attn_k_norm.weight", (hd,), f32)
        t(b + "ffn_norm.weight", (n_embd,), f32)
        t(b + "ffn_gate_inp.weight", (n_exp, n_embd), f32)
        t(b + "ffn_gate_exps.weight", (n_exp, ffn, n_embd))
        t(b + "ffn_up_exps.weight", (n_exp, ffn, n_embd))
        t(b + "ffn_down_exps.weight", (n_exp, n_embd, ffn))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    # the data section as a hole: the file has the size its header says, and no blocks
    with open(dest, "r+b") as fh:
        fh.truncate(_data_end(dest))
    return dest


def _data_end(path: Path) -> int:
    import mmap

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return info.parse_header(buf).data_end


def seconds(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    eng = default_engine()
    models = {"tiny dense (llama)": tiny_model(eng, "llama"), "tiny MoE (qwen3moe)": tiny_model(eng, "qwen3moe")}
    with tempfile.TemporaryDirectory() as d:
        models["Qwen3-30B-A3B shape, Q8_0"] = qwen3_30b_a3b(Path(d) / "q30b.gguf", models["tiny MoE (qwen3moe)"])
        print("| model | file GB | params | GGUFReader parse s (before) | header read s, cold | cached s |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for label, p in models.items():
            def whole(p: Path = p) -> object:
                return reader_parse(p)

            def cold(p: Path = p) -> object:
                return info.ModelFacts().info(p)

            before = seconds(whole, a.repeat)
            after = seconds(cold, a.repeat)
            facts = info.ModelFacts()
            facts.info(p)
            cached = seconds(lambda: facts.info(p), a.repeat)
            i = facts.info(p)
            assert i.n_params == reader_parse(p)  # the same model, read either way
            print(f"| {label} | {p.stat().st_size / 1e9:.2f} | {i.n_params / 1e9:.2f} B "
                  f"({i.n_active_params / 1e9:.2f} B active) | {before:.3f} | {after:.4f} | {cached:.6f} |")


if __name__ == "__main__":
    main()
