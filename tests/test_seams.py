"""Guards on the seams (computed from the source with ast): the core asks an engine kind what it
can do (tokensleuth.engines.base.Engine), it never compares a kind with its name, and it never
builds an engine binary's path by name outside engines/ (and the build cache, whose targets
are names)."""

from __future__ import annotations

import ast
from pathlib import Path

from tokensleuth.engines import KINDS

SRC = Path(__file__).resolve().parents[1] / "src" / "tokensleuth"
BINARIES = ("llama-bench", "llama-server", "llama-perplexity", "llama-batched-bench")


def _modules(*outside: str) -> list[tuple[str, ast.Module]]:
    out = []
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC).as_posix()
        if not rel.startswith(outside):
            out.append((rel, ast.parse(p.read_text(), rel)))
    return out


def _const(node: ast.AST) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def test_the_core_never_compares_an_engine_kind_with_its_name() -> None:
    found = []
    for rel, tree in _modules("engines/"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    names = [_const(e) for e in side.elts] if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [
                        _const(side)]
                    found += [f"{rel}:{node.lineno} compares with {n!r}" for n in names if n in KINDS]
    assert found == [], "ask the engine (engine_for(kind).<capability>) instead:\n" + "\n".join(found)


def test_the_core_never_builds_an_engine_binarys_path_by_name() -> None:
    found = [f"{rel}:{node.lineno} / {_const(node.right)!r}"
             for rel, tree in _modules("engines/", "sources/") for node in ast.walk(tree)
             if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _const(node.right) in BINARIES]
    assert found == [], "the engine's module knows its binary:\n" + "\n".join(found)


def test_workload_names_and_model_facts_import_no_engine() -> None:
    """Shared by every engine kind, so below them: workloads.py and models/ import nothing from
    engines/ (workload names were llama-bench's module's; the core's now)."""
    found = []
    for rel, tree in _modules():
        if rel == "workloads.py" or rel.startswith("models/"):
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    mods = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                    found += [f"{rel}:{node.lineno} imports {m}" for m in mods if m.startswith("tokensleuth.engines")]
    assert found == [], "\n".join(found)


def test_the_guards_see_what_they_look_for() -> None:
    """The scans find a comparison and a path written the forbidden way (they can fail)."""
    tree = ast.parse('if a.kind == "llama-bench" or k in ("openai",): p = d / "llama-bench"')
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    assert len(compares) == 2 and _const(compares[0].comparators[0]) in KINDS
    divs = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)]
    assert _const(divs[0].right) in BINARIES
