"""Model files: GGUF facts read from the header (info), the real shapes the field runs (shapes) and
synthetic models written tensor by tensor (synth). Floor 1: imports core only.
"""

FLOOR = 1  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)
