"""--pin-params across releases, on the real engines: for every ordered pair of the releases
bench/golden_help.py builds, pin the candidate to the baseline's settings, run the candidate
with those flags, and check what it reports against the baseline.

Prints one line per pair: the flags passed, what could not be pinned, and any setting that
still differs (there should be none beyond what could not be pinned). Exit 1 if a pinned run
was refused by the engine or left a difference unnamed.
Run: .venv/bin/python bench/golden_help.py && .venv/bin/python bench/pin_matrix.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from golden_help import SOURCES, label  # beside this script (python puts bench/ on the path)

from tokensleuth.core.errors import EngineError
from tokensleuth.engines.llamabench import params, probe_settings
from tokensleuth.sources.build import BuildCache

MODEL = Path("/tmp/golden-help-llama-tiny.gguf")  # written by bench/golden_help.py


def main() -> int:
    cache = BuildCache()
    benches = {label(s): Path(cache.get(s, targets=["llama-bench"]).bin_dir) / "llama-bench" for s in SOURCES}
    base_flags = ["-t", "1"]
    got = {n: probe_settings(b, str(MODEL), base_flags, 120) for n, b in benches.items()}
    helps = {n: params.help_text(b) for n, b in benches.items()}
    bad = 0
    for a in benches:
        for b in benches:
            if a == b:
                continue
            flags, cannot = params.pin_flags(got[a], got[b], helps[b], params.flag_fields(base_flags))
            try:
                after = probe_settings(benches[b], str(MODEL), [*base_flags, *flags], 120)
            except EngineError as exc:
                print(f"{a} -> {b}: {' '.join(flags)}: REFUSED ({exc})")
                bad += 1
                continue
            named = {c.split("=")[0].split(" ")[0] for c in cannot}
            left = [d.label() for d in params.diff(got[a], after, set()) if d.field not in named]
            bad += bool(left)
            print(f"{a} -> {b}: {' '.join(flags) or '(nothing to pin)'}"
                  + (f"; cannot: {', '.join(cannot)}" if cannot else "")
                  + (f"; STILL DIFFERENT: {', '.join(left)}" if left else ""))
    print(f"{len(benches) * (len(benches) - 1)} pairs, {bad} wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
