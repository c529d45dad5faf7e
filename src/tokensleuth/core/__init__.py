"""The ground every floor stands on: errors (one-line user and engine errors), limits, paths and the
file lock, the host's environment, the plain records passed between floors (records), the
workload-name grammar (workloads), the command-line argument helpers (cliargs) and the order of a
pair's arms (plan). Floor 0: imports nothing of tokensleuth outside itself.
"""

FLOOR = 0  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)
