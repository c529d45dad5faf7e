"""Bounds of the values a user may give (shared by the CLI options and the study spec).

A band below 0.1% is below what any engine run resolves; a watchdog beyond a week is a
typo (and threading.Timer cannot wait for inf); more trials than 10,000 per model would
only exhaust memory planning them. A module of its own so the CLI can use them without
importing the spec's dependencies at start-up.
"""

from __future__ import annotations

MIN_BAND, MAX_BAND = 0.001, 0.5
MAX_TIMEOUT_S = 7 * 86400.0
MAX_BUDGET_S = 365 * 86400.0
MAX_TRIALS = 10_000
