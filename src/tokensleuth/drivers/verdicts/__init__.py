"""The verdicts: two or more arms measured in paired trials until each cell is decided.

- ``compare.py``: the compare command's request run to its outcome (the entry);
- ``pairs.py``: the sequential paired design, round by round (``run_compare``), and ``reps.py``
  the repetitions a process runs;
- ``comparisons.py``: the stored trials read back into comparisons, and ``sentences.py`` the
  sentences they are said in;
- ``judge.py``: A against B for the hunts (both built through the cache, compared, stored);
- ``crosshost.py``: the same compare on every machine of a fleet, one table;
- ``diagnose.py``: why a verdict stayed open and the cheapest fix, from ``causes.py``'s
  classification of the study's processes.
"""
