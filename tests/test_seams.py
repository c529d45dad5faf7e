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
    found = [f for rel, tree in _modules("engines/") for f in _kind_branches(rel, tree, set(KINDS))]
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


def import_graph(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Module -> the tokensleuth modules it imports: at the top, inside functions, and for type
    checking alike (a lazy import still couples the two modules)."""
    names = set(modules)
    graph: dict[str, set[str]] = {}
    for mod, tree in modules.items():
        deps: set[str] = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "tokensleuth":
                for a in n.names:
                    sub = f"{n.module}.{a.name}"
                    deps.add(sub if sub in names else n.module)
            elif isinstance(n, ast.Import):
                deps.update(a.name for a in n.names if a.name.split(".")[0] == "tokensleuth")
        graph[mod] = {d for d in deps if d in names and d != mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package_modules() -> dict[str, ast.Module]:
    out = {}
    for p in sorted(SRC.rglob("*.py")):
        parts = p.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(p.read_text(), str(p))
    return out


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph(_package_modules())
    assert len(graph) > 70 and sum(map(len, graph.values())) > 250  # the whole package was read
    assert cycles(graph) == []


def test_the_cycle_guard_sees_a_cycle() -> None:
    """A lazy import back (inside a function) and a type-checking one both close a cycle."""
    mods = {
        "tokensleuth.a": ast.parse("from tokensleuth.b import x"),
        "tokensleuth.b": ast.parse("def f():\n    from tokensleuth import c"),
        "tokensleuth.c": ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tokensleuth.a"),
        "tokensleuth.d": ast.parse("from tokensleuth.a import y"),
    }
    assert cycles(import_graph(mods)) == [["tokensleuth.a", "tokensleuth.b", "tokensleuth.c"]]


def _imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``; ``from a import b`` counts as a.b too."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module:
            out += [(n.lineno, n.module)] + [(n.lineno, f"{n.module}.{a.name}") for a in n.names]
        elif isinstance(n, ast.Import):
            out += [(n.lineno, a.name) for a in n.names]
    return out


def _llamabench_imports(rel: str, tree: ast.Module) -> list[str]:
    return [f"{rel}:{line} imports {m}" for line, m in _imports(tree)
            if m.startswith("tokensleuth.engines.llamabench")]


def test_only_engines_import_llamabench_modules() -> None:
    """The core asks engine_for(kind) (settings, pinning, importers); llama-bench's modules are
    its own."""
    found = [f for rel, tree in _modules("engines/") for f in _llamabench_imports(rel, tree)]
    assert found == [], "\n".join(found)


def test_commands_never_import_the_cli() -> None:
    found = [f"{rel}:{line}" for rel, tree in _modules() if rel.startswith("commands/")
             for line, m in _imports(tree) if m == "tokensleuth.cli" or m.startswith("tokensleuth.cli.")]
    assert found == [], "a command module is registered by the CLI, never the other way:\n" + "\n".join(found)


def _kind_branches(rel: str, tree: ast.Module, kinds: set[str]) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                names = [_const(e) for e in side.elts] if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [
                    _const(side)]
                found += [f"{rel}:{node.lineno} compares with {n!r}" for n in names if n in kinds]
    return found


def test_report_never_branches_on_a_study_kind() -> None:
    """report/ asks the kind (tokensleuth.studies.kind_of(name).<capability>), never its name."""
    from tokensleuth.studies import _MODULES

    found = [f for rel, tree in _modules() if rel.startswith("report/")
             for f in _kind_branches(rel, tree, set(_MODULES))]
    assert found == [], "\n".join(found)


# The pipeline's layers, lowest first: a module imports only from its own layer or lower ones
# (DESIGN.md: spec -> plan -> run -> store -> analyze -> report, with the CLI on top). The
# study kinds sit with the renderers: they use report's tables and figures, and report's pages
# ask them what to show.
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


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else parts[0]
    return next((i for i, names in enumerate(LAYERS) if top in names), None)


def back_arrows(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for mod, deps in sorted(graph.items()):
        for d in sorted(deps):
            lm, ld = layer_of(mod), layer_of(d)
            if lm is not None and ld is not None and ld > lm:
                out.append(f"{mod} (layer {lm}) imports {d} (layer {ld})")
    return out


def test_every_module_has_a_layer_and_no_import_runs_back_up() -> None:
    graph = import_graph(_package_modules())
    assert [m for m in graph if layer_of(m) is None] == [], "give the new module's package a layer in LAYERS"
    assert back_arrows(graph) == []


def test_the_seam_guards_see_what_they_look_for() -> None:
    """Each guard finds the thing it forbids, written the forbidden way (they can fail)."""
    t = ast.parse("from tokensleuth.engines import llamabench_params as p\nimport tokensleuth.engines.llamabench")
    assert len(_llamabench_imports("x.py", t)) == 2
    assert _kind_branches("r.py", ast.parse('if row["kind"] != "bisect" or k in ("bench",): pass'),
                          {"bench", "bisect"}) == ["r.py:1 compares with 'bisect'", "r.py:1 compares with 'bench'"]
    assert back_arrows({"tokensleuth.store": {"tokensleuth.report.markdown"}, "tokensleuth.report.markdown": set()}) == [
        "tokensleuth.store (layer 1) imports tokensleuth.report.markdown (layer 6)"]
    assert layer_of("tokensleuth.commands.compare") == layer_of("tokensleuth.commands") == 7
