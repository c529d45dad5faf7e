"""One driver per study kind and tool (bench, compare and its paired verdicts in comparisons, judge,
bisect, decompose, crosshost, scan, diagnose, doctor, profile): each takes a request, plans its
trials, runs them through an executor, stores every sample as it exists and decides. Floor 7:
imports executors, fleet, trials, engines and below; never report, studies, pages or commands.
"""

FLOOR = 7  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)
