"""Run a command; print its wall time and its peak RSS on one line (stderr).

    python3 bench/timed.py LABEL CMD [ARG ...]

For machines without /usr/bin/time (the lent GPU machine): the figures come from the kernel's
accounting of the waited-for child (getrusage RUSAGE_CHILDREN).
"""

import resource
import subprocess
import sys
import time

label, cmd = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
rc = subprocess.call(cmd)
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"{label}: exit {rc}, {time.monotonic() - t0:.1f} s, {peak_kib / 1024:.0f} MiB peak RSS", file=sys.stderr)
sys.exit(rc)
