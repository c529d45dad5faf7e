"""The hostile user's table (tests/faults/bad_inputs.py), counted per category.

Every case runs in-process through tokensleuth.cli.main against a store holding one
imported study; a clean exit is exit code 2, one `error:` line on stderr naming the bad
input, and the store's bytes unchanged. The cases listed in SUBPROCESS run once more
through the installed `tokensleuth` program. Needs the default engine's build (a few cases
read its --help; nothing is measured).

    python bench/bad_inputs.py > bench/results/bad_inputs.txt
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import default_engine, tokensleuth_cmd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests package

from tests.faults.bad_inputs import (  # noqa: E402
    CATEGORIES,
    SUBPROCESS,
    Result,
    cases,
    make_files,
    run_case,
    store_digest,
)


def main() -> int:
    default_engine()  # the build whose --help the "flags" cases read
    with tempfile.TemporaryDirectory(prefix="ts-bad-inputs-") as td:
        files = make_files(Path(td))
        table = cases(files)
        tried: Counter[str] = Counter()
        clean: Counter[str] = Counter()
        failures: list[str] = []
        t0 = time.monotonic()
        for c in table:
            why = run_case(c, files.db).failure(c.expect)
            tried[c.category] += 1
            if why is None:
                clean[c.category] += 1
            else:
                failures.append(f"[{c.category}] {c.name}: {why}")
        in_process_s = time.monotonic() - t0
        for name in SUBPROCESS:
            (c,) = [x for x in table if x.name == name]
            before = store_digest(files.db)
            p = subprocess.run([*tokensleuth_cmd(), *c.argv], capture_output=True, text=True, timeout=120,
                               env={**os.environ, "TOKENSLEUTH_DB": str(files.db)})
            why = Result(p.returncode, p.stderr, store_digest(files.db) == before).failure(c.expect)
            tried["(subprocess)"] += 1
            if why is None:
                clean["(subprocess)"] += 1
            else:
                failures.append(f"[subprocess] {c.name}: {why}")

    print(f"# bad inputs through the CLI — {platform.node()}, python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print("# clean = exit 2, one `error:` line naming the bad input, no traceback, store bytes unchanged")
    print()
    print(f"| {'category':<13} | tried | clean |")
    print(f"| {'-' * 13} | ----: | ----: |")
    for cat in [*CATEGORIES, "(subprocess)"]:
        print(f"| {cat:<13} | {tried[cat]:>5} | {clean[cat]:>5} |")
    print(f"| {'total':<13} | {sum(tried.values()):>5} | {sum(clean.values()):>5} |")
    print()
    print(f"{len(table)} in-process cases in {in_process_s:.1f} s")
    for f in failures:
        print("NOT CLEAN", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
