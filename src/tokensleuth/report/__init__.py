"""The primitives of every rendering: Markdown tables and warnings (markdown), figures (figures),
plots (plots) and the JSON writer (jsonout). Floor 8: imports the drivers' results and below;
never a study kind, a page or a command.
"""

FLOOR = 8  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)
