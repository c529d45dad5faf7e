"""CUPTI's headers and library of three CUDA releases, from NVIDIA's wheels on PyPI, unpacked into
the cache for the tests that compile the CUDA kernel tracer against each (12.1: the oldest
record structs it reads; 12.9: CUpti_ActivityMemcpy6; 13.0: CUpti_ActivityKernel10). Idempotent.

    python scripts/cuda_headers.py [DEST]   # default: <cache>/cuda-headers
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

RELEASES = {  # what a tracer build needs: cupti.h and libcupti, cuda.h, crt/host_defines.h
    "12.1": ["nvidia-cuda-cupti-cu12==12.1.105", "nvidia-cuda-runtime-cu12==12.1.105",
             "nvidia-cuda-nvcc-cu12==12.1.105"],
    "12.9": ["nvidia-cuda-cupti-cu12==12.9.79", "nvidia-cuda-runtime-cu12==12.9.79", "nvidia-cuda-nvcc-cu12==12.9.86"],
    "13.0": ["nvidia-cuda-cupti==13.0.85", "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-crt==13.0.88"],
}
KEEP = ("/include/", "/lib/libcupti.so")  # what is unpacked of each wheel


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from tokensleuth.core.paths import cache_dir

    dest = Path(sys.argv[1]) if len(sys.argv) > 1 else cache_dir() / "cuda-headers"
    for release, wheels in RELEASES.items():
        root = dest / release
        if (root / ".done").exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            for w in wheels:
                done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                                       "--disable-pip-version-check", "-d", tmp, w], capture_output=True, text=True)
                if done.returncode != 0:
                    print(f"cannot download {w}: {(done.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
                    return 1
            shutil.rmtree(root, ignore_errors=True)
            for whl in Path(tmp).glob("*.whl"):
                with zipfile.ZipFile(whl) as z:
                    for name in z.namelist():
                        if any(k in name for k in KEEP):
                            z.extract(name, root)
        (root / ".done").touch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
