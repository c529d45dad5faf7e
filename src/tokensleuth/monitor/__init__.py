"""Resource monitors sampled beside a trial: CPU and its processes (cpu), NVIDIA through NVML
(nvidia), amdgpu sysfs (amdgpu), RAPL (rapl), memory bandwidth (membw), the sampling thread
(sampler), the sources behind one protocol (sources) and the attribution of counters to a
repetition's window (attribute). Floor 1: imports core only.
"""

FLOOR = 1  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)
