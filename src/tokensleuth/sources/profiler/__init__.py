"""tokensleuth's per-op profiler, built as an extra target of an engine's own CMake build.

``tokensleuth-profile`` (profile.cpp) is added to llama.cpp's top-level project by
profile.cmake (CMAKE_PROJECT_INCLUDE), so it is compiled with the build's own flags and
backends, linked to its llama library, and cached with the build. The llama.h API it uses
changed over the releases; :func:`api_defines` reads the tree's header and names the calls
this version has.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tokensleuth.core.errors import UserError

TARGET = "tokensleuth-profile"
HERE = Path(__file__).resolve().parent

# macro -> the functions of its call, in the order profile.cpp numbers them (TS_X=1 is the first):
# the first that the header declares is the one this version has
_CALLS: dict[str, tuple[str, ...]] = {
    "TS_MEMORY": ("llama_memory_clear", "llama_kv_self_clear", "llama_kv_cache_clear"),
    "TS_LOAD": ("llama_model_load_from_file", "llama_load_model_from_file"),
    "TS_CONTEXT": ("llama_init_from_model", "llama_new_context_with_model"),
    "TS_VOCAB": ("llama_vocab_n_tokens", "llama_n_vocab"),
    "TS_FREE": ("llama_model_free", "llama_free_model"),
}
NEEDS = ("cb_eval", "llama_batch_get_one", "ggml_op_desc", "ggml_n_dims")


def api_defines(header: str, ggml_header: str = "") -> list[str]:
    """The compile definitions that fit profile.cpp to this llama.h (UserError: this version
    lacks a call it needs, named)."""
    text = header + "\n" + ggml_header
    missing = [n for n in NEEDS if not re.search(rf"\b{n}\b", text)]
    if missing:
        raise UserError(f"this llama.cpp cannot be profiled: its headers have no {missing[0]} — profile a newer "
                        "version")
    out = []
    for macro, names in _CALLS.items():
        found = next((i for i, name in enumerate(names, 1) if re.search(rf"\b{name}\s*\(", header)), None)
        if found is None:
            raise UserError(f"this llama.cpp cannot be profiled: its llama.h has none of {', '.join(names)} — "
                            "profile a newer version")
        out.append(f"{macro}={found}")
    # the decode path llama-bench takes where the version has it (llama_process with an extended
    # batch: a plant or a change there is inside the profile too), else llama_decode
    ext = all(re.search(rf"\b{n}\s*\(", header) for n in ("llama_process", "llama_batch_ext_add_token",
                                                             "llama_batch_ext_set_pos"))
    out.append(f"TS_PROCESS={1 if ext else 0}")
    return out


def source_id() -> str:
    """The profiler's own source, hashed: a build with it is rebuilt when it changes."""
    h = hashlib.sha256()
    for name in ("profile.cpp", "profile.cmake", "__init__.py"):
        h.update((HERE / name).read_bytes())
    return h.hexdigest()[:16]


def cmake_args(tree: Path) -> list[str]:
    """The configure arguments that add the profiler target to the build of ``tree``."""
    header = (tree / "include" / "llama.h").read_text(errors="replace")
    ggml = tree / "ggml" / "include" / "ggml.h"
    defs = api_defines(header, ggml.read_text(errors="replace") if ggml.exists() else "")
    return [f"-DCMAKE_PROJECT_INCLUDE={HERE / 'profile.cmake'}", "-DTOKENSLEUTH_PROFILE_DEFS=" + ";".join(defs)]
