"""bench/ reads as a suite: every script there is listed in its index (bench/README.md, or
bench/gpu/README.md for the GPU runbooks), so no figure's script is left unnamed."""

from __future__ import annotations

from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_every_bench_script_is_in_the_index() -> None:
    index = (BENCH / "README.md").read_text() + (BENCH / "gpu" / "README.md").read_text()
    scripts = [p for p in [*BENCH.glob("*.py"), *BENCH.glob("*.sh"), *(BENCH / "gpu").glob("*.*")]
               if p.name not in ("README.md", "_common.py")]
    missing = sorted(str(p.relative_to(BENCH)) for p in scripts if f"`{p.name}`" not in index)
    assert not missing, f"not in bench/README.md: {missing}"
