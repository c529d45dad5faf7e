"""What a study asks and how one trial runs: the validated spec (spec), one engine process under
the monitors (runner), the memory guard that refuses what cannot fit (memory) and the output
checks (outputs). Floor 4: imports engines and the floors below; never an executor, a driver or
a renderer.
"""

FLOOR = 4  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)
