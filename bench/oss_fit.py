"""The memory guard's prediction for gpt-oss-120b's shape against the H200's load logs.

bench/device_oss.sh ran llama-bench -v on the shape (MXFP4 experts, 63.4 GB) at -ngl 99 and
-ngl 18 (-fa 1, pp2048 and tg32) and kept the logs in bench/results/h200-oss; this writes the
same shape here header-only (its data a hole of its size) and prints, per device and buffer,
what tokensleuth predicted and what llama.cpp allocated.

    .venv/bin/python bench/oss_fit.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tokensleuth.engines.llamabench.settings import settings_from_flags
from tokensleuth.engines.placement import parse_load_log
from tokensleuth.models.shapes import write_shape
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache
from tokensleuth.trials.memory import MIB, predict, tests_of

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        m = write_shape("gpt-oss-120b", Path(d) / "oss120.gguf", "MXFP4", BuildCache().llama_tree(DEFAULT_ENGINE),
                        sparse=True)
        print(f"{'-ngl':>4s} {'device':7s} {'predicted MiB':>13s} {'allocated MiB':>13s} {'error':>7s}  parts (predicted / allocated)")
        for ngl in (99, 18):
            s = settings_from_flags(["-ngl", str(ngl), "-fa", "1"], tests_of(["pp2048", "tg32"]))
            n = predict(m, s, gpu=True)
            got = parse_load_log((ROOT / f"bench/results/h200-oss/oss_{ngl}.err").read_text())
            gpu = (n.total("gpu") / MIB, got.model_mib.get("CUDA0", 0) + got.kv_mib.get("CUDA0", 0)
                   + got.compute_mib.get("CUDA0", 0))
            # the host: what is resident (weights read through the mapping, KV, compute); the load
            # log's CPU_Mapped is the file range mapped, which spans the output layer the GPU holds
            host = ((n.weights_mapped + n.total("host")) / MIB, got.model_mib.get("CPU_Mapped", 0)
                    + got.kv_mib.get("CPU", 0) + got.compute_mib.get("CUDA_Host", 0))
            for dev, (p, a), parts in (
                    ("CUDA0", gpu, f"weights {n.weights.get('gpu', 0) / MIB:.0f}/{got.model_mib.get('CUDA0', 0):.0f}, "
                                   f"KV {n.kv.get('gpu', 0) / MIB:.1f}/{got.kv_mib.get('CUDA0', 0):.1f}, "
                                   f"compute {n.compute.get('gpu', 0) / MIB:.1f}/{got.compute_mib.get('CUDA0', 0):.1f}"),
                    ("host", host, f"mapped {n.weights_mapped / MIB:.0f}/{got.model_mib.get('CPU_Mapped', 0):.0f}, "
                                   f"KV {n.kv.get('host', 0) / MIB:.1f}/{got.kv_mib.get('CPU', 0):.1f}, "
                                   f"compute {n.compute.get('host', 0) / MIB:.1f}/{got.compute_mib.get('CUDA_Host', 0):.1f}")):
                print(f"{ngl:4d} {dev:7s} {p:13.0f} {a:13.0f} {100 * (p - a) / a:+6.1f}%  {parts}")


if __name__ == "__main__":
    main()
