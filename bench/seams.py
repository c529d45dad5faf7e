"""The shape of the code at two revisions: the before/after figures of a restructuring.

For each revision (a git tree of this repository, read with `git archive`, nothing run): source
files per folder and modules loose at the package root; import cycles, imports that run back up
the layers and cycles between folders; the longest command function; the lines of the scan
driver; llama-bench flag literals outside engines/; reads of stored JSON columns and raw SQL
outside store/; branches on an engine kind's or a study kind's name outside their homes; and the
duplicated blocks the `duplicates` command lists, where it is installed. All computed from the
source with ast.

The layers: a revision whose folders say their floor (``FLOOR = n`` in ``__init__.py``) is read
from its folders (tests/test_seams.py:floors); an older one by the table its
tests/test_seams.py had (LAYERS below, as it was before the folders).

    .venv/bin/python bench/seams.py [REV ...]        # default: this restructuring's start and HEAD
    .venv/bin/python bench/seams.py HEAD WORKTREE    # WORKTREE: the files as they are now, uncommitted

llama-bench's flags are tests/test_seams.py's own set (BENCH_FLAGS: the trial flags and the
settings flags), so the figure and the guard count the same thing.
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
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.test_seams import (  # noqa: E402 - after the path
    BENCH_FLAGS,
    OTHER_PROGRAMS,
    cycles,
    floors,
    import_graph,
)

ENGINE_KINDS = {"llama-bench", "llama-server", "openai", "llama-batched-bench"}
STUDY_KINDS = {"bench", "compare", "bisect", "decompose", "crosshost", "import", "profile", "scan"}
FLAGS = BENCH_FLAGS  # the guard's own set: trial flags and settings flags alike
WORKTREE = "WORKTREE"  # a revision name for the working tree as it is (nothing committed)
# tests/test_seams.py's table before the layers were folders (lowest first)
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tokensleuth", "errors", "limits", "paths", "hostenv", "records", "workloads", "cliargs", "stats"),
    ("models", "monitor", "sources", "store", "patches", "plan"),
    ("results", "noise", "confounders"),
    ("engines",),
    ("runner", "memory", "spec", "outputs", "fleet", "executors", "comparisons"),
    ("bench", "compare", "judge", "bisect", "decompose", "crosshost", "diagnose", "doctor", "profile", "scan"),
    ("report", "studies"),
    ("commands",),
    ("cli",),
)


def tree_at(rev: str, dest: Path) -> Path:
    if rev == WORKTREE:
        shutil.copytree(ROOT / "src" / "tokensleuth", dest / "src" / "tokensleuth",
                        ignore=shutil.ignore_patterns("__pycache__"))
        return dest / "src" / "tokensleuth"
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src/tokensleuth"], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        tf.extractall(dest, filter="data")
    return dest / "src" / "tokensleuth"


def modules(src: Path) -> dict[str, tuple[str, ast.Module]]:
    """Dotted name -> (path under the package, tree)."""
    out = {}
    for p in sorted(src.rglob("*.py")):
        parts = p.relative_to(src.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = (
            p.relative_to(src).as_posix(), ast.parse(p.read_text(), str(p)))
    return out


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_table(src: Path) -> tuple[dict[str, int], bool]:
    """(folder or module -> floor, whether the floors are read from the folders)."""
    found = floors(src)
    if len(found) > 2:
        return found, True
    return {name: i for i, names in enumerate(LAYERS) for name in names}, False


def back_arrows(graph: dict[str, set[str]], table: dict[str, int], strict: bool) -> list[str]:
    """Imports up the layers; with floors read from folders a peer on the same floor counts too."""
    out = []
    for mod, deps in graph.items():
        for d in deps:
            lm, ld = table.get(top(mod)), table.get(top(d))
            if top(mod) == top(d) or lm is None or ld is None or ld < 0:
                continue
            if ld > lm or (strict and ld == lm):
                out.append(f"{mod} -> {d}")
    return out


def folder_cycles(graph: dict[str, set[str]]) -> int:
    g: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        g.setdefault(top(mod), set()).update(top(d) for d in deps if top(d) != top(mod))
    for deps in list(g.values()):
        for d in deps:
            g.setdefault(d, set())
    return len(cycles(g))


def kind_branches(mods: dict[str, tuple[str, ast.Module]], names: set[str], home: str,
                  default: bool = False) -> int:
    """Comparisons of something named ``kind`` with a kind's name (``default``: or DEFAULT_KIND)."""
    n = 0
    for mod, (_, tree) in mods.items():
        if top(mod) == home:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if "kind" not in " ".join(ast.unparse(s) for s in sides):
                    continue
                for side in sides:
                    elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                    n += sum(isinstance(e, ast.Constant) and e.value in names for e in elts)
                    n += default * sum(isinstance(e, ast.Name) and e.id == "DEFAULT_KIND" for e in elts)
    return n


OTHERS = {(Path(rel).name, flag) for rel, flag in OTHER_PROGRAMS}  # by file name: the old tree had other folders


def flag_literals(mods: dict[str, tuple[str, ast.Module]]) -> list[str]:
    """llama-bench's flags spelt outside engines/, other programs' same spellings (git -o, cc -o,
    pip -d, …: tests/test_seams.py's OTHER_PROGRAMS, matched by file name) aside."""
    out = []
    for mod, (rel, tree) in mods.items():
        if top(mod) == "engines":
            continue
        parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}  # f"-n{limit}"
        out += [f"{rel}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in FLAGS
                and id(n) not in parts and (Path(rel).name, n.value) not in OTHERS]
    return out


def store_reads(mods: dict[str, tuple[str, ast.Module]]) -> tuple[int, int]:
    """(json.loads of a stored ``*_json`` column, raw SQL executed) outside store/."""
    loads = sql = 0
    for mod, (_, tree) in mods.items():
        if top(mod) == "store":
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                text = ast.unparse(n)
                if n.func.attr == "loads" and re.search(r"_json['\"]?\]", text):
                    loads += 1
                if n.func.attr in ("execute", "executemany") and ".db." in f".{ast.unparse(n.func.value)}.":
                    sql += 1
    return loads, sql


def longest_command(mods: dict[str, tuple[str, ast.Module]]) -> str:
    best = (0, "")
    for mod, (rel, tree) in mods.items():
        if top(mod) != "commands":
            continue
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = n.body[1] if (len(n.body) > 1 and isinstance(n.body[0], ast.Expr)
                                      and isinstance(n.body[0].value, ast.Constant)) else n.body[0]
                body = (n.end_lineno or first.lineno) - first.lineno + 1
                best = max(best, (body, f"{rel}:{n.name}"))
    return f"{best[1]} ({best[0]} lines)"


def lines(p: Path) -> int:
    return len(p.read_text().splitlines()) if p.exists() else 0


def scan_lines(src: Path) -> str:
    files = [p for p in src.rglob("*.py") if p.stem == "scan" and "drivers" in p.parts or p == src / "scan.py"
             or "scan" in p.parent.name and p.parent.parent.name in ("drivers", "hunts")]
    files = [p for p in files if "studies" not in p.parts and "commands" not in p.parts]
    if not files:
        return "n/a"
    biggest = max(files, key=lines)
    return f"{sum(map(lines, files))} in {len(files)} (largest {lines(biggest)})"


def duplicates(src: Path) -> str:
    if shutil.which("duplicates") is None:
        return "n/a"
    out = subprocess.run(["duplicates", "--repo", str(src), "--most", "200", "--seconds", "120"],
                         capture_output=True, text=True).stdout
    first = out.splitlines()[0] if out else ""
    m = re.match(r"(\d+) pairs?", first)
    return m.group(1) if m else first[:40]


def long_modules(src: Path, most: int = 400) -> list[str]:
    """Modules over ``most`` lines."""
    return sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if lines(p) > most)


def private_imports(mods: dict[str, tuple[str, ast.Module]]) -> list[str]:
    """``from tokensleuth.X import _name`` (at the top or inside a function), X another module."""
    out = []
    for mod, (_, tree) in mods.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tokensleuth") \
                    and node.module != mod:
                out += [f"{mod}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def largest_class(mods: dict[str, tuple[str, ast.Module]]) -> str:
    """The class with the most methods, its own and its bases' of this package."""
    own = {node.name: (node, mod) for mod, (_, tree) in mods.items() for node in ast.walk(tree)
           if isinstance(node, ast.ClassDef)}

    def methods(name: str, seen: frozenset[str] = frozenset()) -> int:
        node, _ = own[name]
        n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
        return n + sum(methods(b.id, seen | {name}) for b in node.bases
                       if isinstance(b, ast.Name) and b.id in own and b.id not in seen)

    name = max(own, key=methods)
    return f"{name} ({methods(name)} methods)"


def twin_drivers(src: Path) -> int:
    """Command modules with a namesake elsewhere under drivers/ (drivers/x.py beside drivers/x.py)."""
    d = src / "drivers"
    names = Counter([p.stem for p in d.rglob("*.py") if p.stem != "__init__"]
                    + [p.name for p in d.rglob("*") if p.is_dir() and (p / "__init__.py").exists()]) \
        if d.is_dir() else Counter()
    commands = {"bench", "compare", "bisect", "scan", "decompose", "profile", "doctor"}
    return sum(1 for n in commands if names[n] > 1)


def joins_outside(mods: dict[str, tuple[str, ast.Module]]) -> int:
    """Calls of ``.join_flags(`` outside engines/ and trials/spec.py (the one place that joins)."""
    n = 0
    for mod, (_, tree) in mods.items():
        if top(mod) == "engines" or mod.endswith("trials.spec"):
            continue
        n += sum(1 for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Attribute) and node.func.attr == "join_flags")
    return n


def figures(rev: str) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        src = tree_at(rev, Path(tmp))
        mods = modules(src)
        graph = import_graph({m: t for m, (_, t) in mods.items()})
        table, from_folders = layer_table(src)
        files = sorted(src.rglob("*.py"))
        per_folder = Counter(p.relative_to(src).parts[0] if len(p.relative_to(src).parts) > 1 else "(root)"
                             for p in files)
        loads, sql = store_reads(mods)
        return {
            "source files": str(len(files)),
            "source lines": str(sum(lines(p) for p in files)),
            "modules at the package root": str(per_folder["(root)"]),
            "folders": str(len(per_folder) - 1),
            "layers read from": "folders" if from_folders else "a table in a test",
            "import cycles": str(len(cycles(graph))),
            "back-arrows across the layers": str(len(back_arrows(graph, table, from_folders))),
            "folder cycles": str(folder_cycles(graph)),
            "longest command function": longest_command(mods),
            "scan driver lines": scan_lines(src),
            "llama-bench flag literals outside engines/": str(len(flag_literals(mods))),
            "stored JSON decoded outside store/": str(loads),
            "raw SQL outside store/": str(sql),
            "engine-kind tests outside engines/": str(kind_branches(mods, ENGINE_KINDS, "engines", True)),
            "study-kind branches outside studies/": str(kind_branches(mods, STUDY_KINDS, "studies")),
            "duplicated blocks (duplicates, 6+ lines)": duplicates(src),
            "modules over 400 lines": str(len(long_modules(src))),
            "private names imported across modules": str(len(private_imports(mods))),
            "the class with the most methods": largest_class(mods),
            "commands with two driver modules of one name": str(twin_drivers(src)),
            "arm flags joined outside trials/spec.py": str(joins_outside(mods)),
            "files per folder": " ".join(f"{k}:{v}" for k, v in sorted(per_folder.items())),
        }


def main() -> None:
    revs = sys.argv[1:] or ["00aa983", "HEAD"]
    cols = {rev: figures(rev) for rev in revs}
    keys = list(next(iter(cols.values())))
    width = max(map(len, keys))
    for k in keys[:-1]:
        print(f"{k:{width}}  " + "  ".join(f"{cols[r][k]:>34}" for r in revs))
    for r in revs:
        print(f"files per folder at {r}: {cols[r][keys[-1]]}")


if __name__ == "__main__":
    main()
