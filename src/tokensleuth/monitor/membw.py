"""This machine's CPU memory read bandwidth: a short probe, run once and cached.

Decode on the CPU streams the model's active weights from memory for every token, so the
read bandwidth of all cores together is its ceiling (the roofline's peak). The probe sums a
buffer much larger than the caches from one thread per CPU (numpy's reductions release the
GIL, so the threads read in parallel) and keeps the best of a few passes.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np

from tokensleuth.core.paths import write_atomic

BUFFER_BYTES = 512 << 20  # far beyond any L3 cache


def probe_gbs(buffer_bytes: int = BUFFER_BYTES, passes: int = 3, threads: int | None = None) -> float:
    n = threads or len(os.sched_getaffinity(0))
    a = np.ones(buffer_bytes // 8, dtype=np.float64)
    parts = np.array_split(a, n)
    best = 0.0
    for _ in range(passes):
        barrier = threading.Barrier(n + 1)

        def read(x: np.ndarray, b: threading.Barrier = barrier) -> None:
            b.wait()
            float(x.sum())

        ts = [threading.Thread(target=read, args=(p,)) for p in parts]
        for t in ts:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        best = max(best, a.nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def cpu_peak_gbs(cache: Path) -> float:
    """The probe's figure for this machine, from ``cache`` when it was measured before."""
    from tokensleuth.core.hostenv import host_environment

    env = host_environment()
    key = f"{env.get('cpu_model')}|{env.get('cpu_count')}|{len(os.sched_getaffinity(0))}"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        known[key] = round(probe_gbs(), 1)
        write_atomic(cache, json.dumps(known))
    return float(known[key])
