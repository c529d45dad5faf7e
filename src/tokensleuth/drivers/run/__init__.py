"""Each measuring command's request run to its outcome: ``run(request, say)``, one module a study
kind (compare, bench, bisect, decompose, scan), above the drivers they orchestrate."""
