"""bench/break_tests.sh stays a check: each breakage still applies, once, to the code it breaks,
and names a test that is there. (The script runs those tests against the broken code itself: the
real engine's, so a bench run, not the suite's.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_breakage_still_applies() -> None:
    p = subprocess.run(["bash", "bench/break_tests.sh", "--check"], cwd=ROOT, capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, PY=sys.executable))
    assert p.returncode == 0, p.stdout + p.stderr
