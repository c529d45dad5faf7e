"""The shape of the code at two revisions: issue 21's before/after figures.

For each revision (a git tree of this repository, read with `git archive`, nothing run): source
files and lines; the lines of cli.py, compare.py and the store; import cycles and imports that
run back up the pipeline's layers (the import graph and LAYERS of tests/test_seams.py, computed
from the source with ast); branches on an engine kind's name outside engines/ and on a study
kind's name outside studies/ (a comparison of something named ``kind`` with a kind's name);
and the duplicated blocks the `duplicates` command lists, where it is installed.

    .venv/bin/python bench/seams.py [REV ...]        # default: the session's start and HEAD
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.test_seams import back_arrows, cycles, import_graph  # noqa: E402 - after the path

ENGINE_KINDS = {"llama-bench", "llama-server", "openai", "llama-batched-bench"}
STUDY_KINDS = {"bench", "compare", "bisect", "decompose", "crosshost", "import"}


def tree_at(rev: str, dest: Path) -> Path:
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src/tokensleuth"], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        tf.extractall(dest, filter="data")
    return dest / "src" / "tokensleuth"


def modules(src: Path) -> dict[str, ast.Module]:
    out = {}
    for p in sorted(src.rglob("*.py")):
        parts = p.relative_to(src.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = ast.parse(p.read_text(), str(p))
    return out


def kind_branches(mods: dict[str, ast.Module], names: set[str], home: str) -> list[str]:
    found = []
    for mod, tree in mods.items():
        if mod.startswith(f"tokensleuth.{home}"):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            text = " ".join(ast.unparse(s) for s in sides)
            if "kind" not in text:
                continue
            for side in sides:
                elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                found += [f"{mod}:{node.lineno}" for e in elts
                          if isinstance(e, ast.Constant) and e.value in names]
    return found


def lines(p: Path) -> int:
    return len(p.read_text().splitlines()) if p.exists() else 0


def duplicates(src: Path) -> str:
    if shutil.which("duplicates") is None:
        return "n/a"
    out = subprocess.run(["duplicates", "--repo", str(src), "--most", "200", "--seconds", "120"],
                         capture_output=True, text=True).stdout
    first = out.splitlines()[0] if out else ""
    m = re.match(r"(\d+) pairs?", first)
    return m.group(1) if m else first[:40]


def figures(rev: str) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        src = tree_at(rev, Path(tmp))
        mods = modules(src)
        graph = import_graph(mods)
        store = src / "store.py" if (src / "store.py").exists() else src / "store" / "__init__.py"
        files = sorted(src.rglob("*.py"))
        return {
            "source files": str(len(files)),
            "source lines": str(sum(lines(p) for p in files)),
            "cli.py lines": str(lines(src / "cli.py")),
            "compare.py lines": str(lines(src / "compare.py")),
            "store lines (store.py / store/__init__.py)": str(lines(store)),
            "largest module": max(((lines(p), p.relative_to(src).as_posix()) for p in files))[1]
                              + f" ({max(lines(p) for p in files)})",
            "import edges": str(sum(map(len, graph.values()))),
            "import cycles": str(len(cycles(graph))),
            "back-arrows across the layers": str(len(back_arrows(graph))),
            "engine-kind branches outside engines/": str(len(kind_branches(mods, ENGINE_KINDS, "engines"))),
            "study-kind branches outside studies/": str(len(kind_branches(mods, STUDY_KINDS, "studies"))),
            "duplicated blocks (duplicates, 6+ lines)": duplicates(src),
        }


def main() -> None:
    revs = sys.argv[1:] or ["9e3d141", "HEAD"]
    cols = {rev: figures(rev) for rev in revs}
    keys = list(next(iter(cols.values())))
    width = max(map(len, keys))
    print(f"{'':{width}}  " + "  ".join(f"{r:>28}" for r in revs))
    for k in keys:
        print(f"{k:{width}}  " + "  ".join(f"{cols[r][k]:>28}" for r in revs))


if __name__ == "__main__":
    main()
