"""Whole pages made from a stored study: HTML (html, templates/), the site of many studies (site),
the issue Markdown (issue) and the explanation of a verdict (explain). They ask the study kind
what to show (studies.kind_of). Floor 10: imports studies, report, drivers and below.
"""

FLOOR = 10  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)
