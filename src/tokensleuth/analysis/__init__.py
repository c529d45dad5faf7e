"""Statistics over stored samples: the paired intervals, sequential verdicts, stalls and cold
repetitions (stats), the cells a study's trials make (results), the noise of a cell (noise) and
the confounders read off the monitors (confounders). Floor 2: imports core and floor 1 (models,
monitor, sources, store); never an engine or a driver.
"""

FLOOR = 2  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)
