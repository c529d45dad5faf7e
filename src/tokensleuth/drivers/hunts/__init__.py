"""The hunts: where in a history, or in a patch series, the speed went.

- ``bisect/``: the first slower commit (or release), with proof; its ``__init__`` is the bisect
  command's entry;
- ``scan/``: every change across a history, found, bisected and explained; its ``__init__`` is
  the scan command's entry;
- ``decompose/``: a patch series measured one patch at a time; its ``__init__`` is the
  decompose command's entry.

Each asks ``verdicts.judge`` for its paired comparisons.
"""
