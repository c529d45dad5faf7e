"""The CUDA kernel tracer: CUPTI's activity API injected into the engine's process.

The CUDA driver loads the library named by ``CUDA_INJECTION64_PATH`` into every process that
initialises CUDA and calls its ``InitializeInjection``; ours (cupti_inject.c) enables activity
records and writes them at exit: in mode ``kernels`` every kernel (one record per kernel node of
a CUDA graph), memcpy and memset; in ``sample:N`` the kernels of one graph launch in N, with a
marker per launch; in ``graphs`` one record per graph execution. Nothing in the engine changes,
no synchronisation is added, and nothing is written while the engine runs.

The library is compiled once per machine and CUPTI, with the C compiler, into the cache (like
the exit drain), against the CUDA toolkit's CUPTI (``$CUDA_HOME``, the ``nvcc`` on PATH,
/usr/local/cuda*) or the ``nvidia-cuda-cupti`` wheels; where there is none, tracing is refused
in one line that says what to install.

The file one process writes (``kernels-<pid>.bin``, little-endian): the magic ``TSKTRC2\\0``;
u32 format version (2), u32 mode (0 kernels, 1 graphs, 2 sample; bit 8: kernel records on
outside graphs), u32 CUPTI version at run time and at build time; i64 CUPTI's clock less the
monotonic clock at start and at exit (ns); u64 records dropped (CUPTI's buffers full, or memory
out) and records given without a start or an end; u32 N of sample:N, u32 record size (88),
u32 names, u32 records; each name as u32 length and bytes; then the records (``RECORD``).
"""

from __future__ import annotations

import glob
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.paths import cache_dir
from tokensleuth.kernels import (
    GRAPH,
    KERNEL,
    LAUNCH,
    MEMCPY,
    MEMSET,
    Trace,
    demangle,
    short_name,
    trace_of,
)

SOURCE = Path(__file__).with_name("cupti_inject.c")
MAGIC = b"TSKTRC2\0"
HEADER = 72  # magic, u32 x4, i64 x2, u64 x2, u32 x4
RECORD = np.dtype([("start", "<u8"), ("end", "<u8"), ("graph_node", "<u8"), ("bytes", "<u8"), ("name", "<u4"),
                   ("stream", "<u4"), ("graph", "<u4"), ("correlation", "<u4"), ("grid", "<i4", (3,)),
                   ("block", "<i4", (3,)), ("static_smem", "<i4"), ("dynamic_smem", "<i4"), ("registers", "<u2"),
                   ("kind", "u1"), ("flags", "u1"), ("device", "<u4")])
assert RECORD.itemsize == 88
INSTALL = ("install the CUDA toolkit (its CUPTI) or `pip install nvidia-cuda-cupti-cu12 nvidia-cuda-runtime-cu12 "
           "nvidia-cuda-nvcc-cu12`, or point CUDA_HOME at a toolkit")
# the record structs, newest first: the newest a CUPTI's headers define is compiled in (12.0-12.7
# have no CUpti_ActivityMemcpy6, 13.0 adds CUpti_ActivityKernel10, before 12.3 no GraphTrace2)
RECORD_TYPES = {"TS_KERNEL": ("CUpti_ActivityKernel10", "CUpti_ActivityKernel9", "CUpti_ActivityKernel8"),
                "TS_MEMCPY": ("CUpti_ActivityMemcpy6", "CUpti_ActivityMemcpy5"),
                "TS_MEMSET": ("CUpti_ActivityMemset4", "CUpti_ActivityMemset3"),
                "TS_GRAPH": ("CUpti_ActivityGraphTrace2", "CUpti_ActivityGraphTrace")}
MODES = ("kernels", "graphs")  # and sample:N (kernels/cupti_inject.c)
C_KINDS = {0: KERNEL, 1: MEMCPY, 2: MEMSET, 3: GRAPH, 4: LAUNCH}  # the file's kinds -> a Trace's


@dataclass(frozen=True, slots=True)
class Cupti:
    """Where this machine's CUPTI is: the include folders (cupti.h, cuda.h and what it includes)
    and the library file."""

    includes: tuple[str, ...]
    library: str


def _roots() -> list[Path]:
    out: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if os.environ.get(var):
            out.append(Path(os.environ[var]))
    nvcc = shutil.which("nvcc")
    if nvcc:
        out.append(Path(nvcc).resolve().parent.parent)
    out += [Path("/usr/local/cuda"), *sorted(map(Path, glob.glob("/usr/local/cuda-*")), reverse=True),
            Path("/opt/cuda")]
    for site in sys.path:  # the pip wheels: nvidia/cuda_cupti (12.x), nvidia/cu13 (13.x)
        nv = Path(site) / "nvidia"
        if nv.is_dir():
            out += [nv / "cu13", nv / "cuda_cupti"]
    return [r for r in dict.fromkeys(out) if r.is_dir()]


def _first(paths: Sequence[Path], pattern: str) -> Path | None:
    for p in paths:
        hits = sorted(p.glob(pattern)) if p.is_dir() else []
        if hits:
            return hits[0]
    return None


def find_cupti(roots: Sequence[Path] | None = None) -> Cupti | None:
    """The first root with cupti.h, cuda.h (and crt/host_defines.h) and a libcupti.so."""
    nv_sites = [Path(s) / "nvidia" for s in sys.path if (Path(s) / "nvidia").is_dir()]
    for root in (_roots() if roots is None else list(roots)):
        incs = [root / "include", root / "extras" / "CUPTI" / "include", *sorted(root.glob("targets/*/include"))]
        cupti_h = _first(incs, "cupti.h")
        lib = _first([root / "extras" / "CUPTI" / "lib64", root / "lib64", root / "lib",
                      *sorted(root.glob("targets/*/lib"))], "libcupti.so*")
        if cupti_h is None or lib is None:
            continue
        # cuda.h and crt/host_defines.h: the toolkit's own include folder, or the runtime and nvcc wheels
        # (a wheel's own nvidia/ folder first: the runtime and nvcc wheels installed beside it)
        extra = [*incs, *(n / part / "include" for n in (root.parent, *nv_sites)
                          for part in ("cuda_runtime", "cuda_nvcc", "cu13"))]
        cuda_h = _first(extra, "cuda.h")
        defines = _first(extra, "crt/host_defines.h")
        if cuda_h is None or defines is None:
            continue
        folders = dict.fromkeys([str(cupti_h.parent), str(cuda_h.parent), str(defines.parent.parent)])
        return Cupti(tuple(folders), str(lib))
    return None


_built: dict[Cupti, Path] = {}


def library(found: Cupti | None = None) -> Path:
    """The injection library for this machine's CUPTI: built now unless cached."""
    found = found or find_cupti()
    if found is None:
        raise UserError(f"the CUDA kernel tracer needs CUPTI, and none was found: {INSTALL}")
    if found in _built and _built[found].exists():
        return _built[found]
    text = SOURCE.read_text()
    real = os.stat(os.path.realpath(found.library))  # a toolkit upgraded in place is another CUPTI
    key = hashlib.sha256(f"{text}\0{found}\0{real.st_size}\0{real.st_mtime_ns}\0{platform.machine()}".encode()
                         ).hexdigest()[:16]
    out = cache_dir() / "helpers" / f"cupti-inject-{key}.so"
    if not out.exists():
        cc = next((shutil.which(c) for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)),
                  None)
        if cc is None:
            raise UserError("the CUDA kernel tracer is compiled with a C compiler, and none was found: install gcc")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
        lib = Path(found.library)
        types = record_types(cc, found)
        if "TS_KERNEL" not in types:
            raise UserError(f"the CUPTI headers in {found.includes[0]} define no kernel record this tracer reads "
                            f"(CUpti_ActivityKernel8 or later: CUDA 11.6 or later): {INSTALL}")
        cmd = [cc, "-O2", "-shared", "-fPIC", "-fvisibility=hidden", *(f"-I{i}" for i in found.includes),
               *(f"-D{k}={v}" for k, v in types.items()),
               "-o", str(tmp), str(SOURCE), f"-L{lib.parent}", f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}",
               "-lpthread"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as e:
            raise UserError(f"the CUDA kernel tracer could not be compiled ({e}): {INSTALL}") from None
        if done.returncode != 0 or not tmp.exists():
            tmp.unlink(missing_ok=True)
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise UserError(f"the CUDA kernel tracer could not be compiled against {found.includes[0]} "
                            f"({last[:200]}): {INSTALL}")
        tmp.replace(out)
    _built[found] = out
    return out


def record_types(cc: str, found: Cupti) -> dict[str, str]:
    """The newest record struct of each kind that this CUPTI's headers define (RECORD_TYPES),
    each found by compiling a one-line probe; a kind with none is left out."""
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tokensleuth-cupti-") as tmp:
        for macro, names in RECORD_TYPES.items():
            for name in names:
                probe = Path(tmp) / f"{name}.c"
                probe.write_text(f"#include <cupti.h>\nunsigned long size = sizeof({name});\n")
                try:
                    done = subprocess.run([cc, "-fsyntax-only", *(f"-I{i}" for i in found.includes), str(probe)],
                                          capture_output=True, timeout=60)
                except (OSError, subprocess.SubprocessError):
                    continue
                if done.returncode == 0:
                    out[macro] = name
                    break
    return out


def read_file(path: Path) -> Trace:
    """One process's records (the format in the module's docstring), names demangled, on the
    monotonic clock."""
    data = path.read_bytes()
    if data.startswith(b"TSKTRC") and not data.startswith(MAGIC):
        raise UserError(f"{path}: a kernel trace of another version of tokensleuth's CUDA tracer — trace again")
    if not data.startswith(MAGIC) or len(data) < HEADER:
        raise UserError(f"{path} is not a kernel trace of tokensleuth's CUDA tracer (no TSKTRC2 header)")
    version, mode, runtime, built = (int(x) for x in np.frombuffer(data, "<u4", 4, 8))
    start_offset, end_offset = (int(x) for x in np.frombuffer(data, "<i8", 2, 24))
    dropped, invalid = (int(x) for x in np.frombuffer(data, "<u8", 2, 40))
    every, size, n_names, n_records = (int(x) for x in np.frombuffer(data, "<u4", 4, 56))
    if version != 2 or size != RECORD.itemsize:
        raise UserError(f"{path}: kernel trace format {version} ({size}-byte records), this tokensleuth reads 2 "
                        f"({RECORD.itemsize}) — trace again")
    pos, raw = HEADER, []
    try:
        for _ in range(n_names):
            (length,) = np.frombuffer(data, "<u4", 1, pos)
            raw.append(data[pos + 4:pos + 4 + int(length)].decode("utf-8", "replace"))
            pos += 4 + int(length)
        if pos + n_records * RECORD.itemsize > len(data):
            raise ValueError("cut short")
        rec = np.frombuffer(data, RECORD, n_records, pos)
    except ValueError:
        raise UserError(f"{path} is cut short ({len(data)} bytes for {n_names} names and {n_records} records)"
                        " — the engine was killed while writing it: trace again") from None
    names = [short_name(n) for n in demangle(raw)]
    notes = []
    if dropped:
        notes.append(f"{dropped} records were lost (CUPTI's buffers were full): the kernel figures miss them")
    if invalid:
        notes.append(f"{invalid} records came without a start or an end: the kernel figures miss them")
    if abs(end_offset - start_offset) > 1_000_000:
        notes.append(f"CUPTI's clock moved {(end_offset - start_offset) / 1e6:+.1f} ms against the monotonic clock "
                     "while the engine ran (a wall-clock step): records are placed by the offset at its start")
    if runtime and runtime < built:
        notes.append(f"CUPTI {runtime} at run time is older than the {built} the tracer was built for")
    shared = rec["static_smem"].astype(np.int64) + rec["dynamic_smem"]
    kind = np.array([C_KINDS.get(int(k), KERNEL) for k in rec["kind"]], dtype=np.int64)
    is_kernel = kind == KERNEL
    t = trace_of(names, {
        "name": rec["name"], "start": rec["start"].astype(np.int64) - start_offset,
        "end": rec["end"].astype(np.int64) - start_offset, "stream": rec["stream"], "kind": kind,
        "grid": rec["grid"], "block": rec["block"], "device": rec["device"], "flags": rec["flags"],
        "registers": np.where(is_kernel, rec["registers"].astype(np.int64), -1),
        "shared": np.where(is_kernel, shared, -1)}, notes=notes)
    t.mode = ("kernels", "graphs", f"sample:{every}")[mode & 0xFF] if (mode & 0xFF) < 3 else "?"
    t.lost = dropped + invalid
    return t


def check_mode(mode: str, *, kernels: bool = False) -> None:
    """kernels, graphs or sample:N (N a whole number of at least 1); with ``kernels``, a mode that
    records kernels (a kernel diff cannot be read from graph-level records)."""
    n = mode.partition(":")[2]
    ok = mode in MODES or (mode.startswith("sample:") and n.isascii() and n.isdigit() and 1 <= int(n) <= 1_000_000)
    if not ok:
        raise UserError(f"CUDA trace mode {mode!r}: give kernels, graphs or sample:N (one graph launch in N traced)")
    if kernels and mode == "graphs":
        raise UserError("--trace-mode graphs records graph launches, not kernels: no kernel diff can be read from it "
                        "— give kernels or sample:N")


class CuptiTracer:
    name = "cuda"
    changes: str | None = None

    def ready(self) -> None:
        library()

    def env(self, out_dir: Path, mode: str = "kernels") -> dict[str, str]:
        check_mode(mode)
        return {"CUDA_INJECTION64_PATH": str(library()), "TOKENSLEUTH_KERNELS_DIR": str(out_dir),
                "TOKENSLEUTH_CUPTI_MODE": mode}

    def prefix(self, out_dir: Path) -> list[str]:
        return []

    def read(self, out_dir: Path, stderr: Sequence[tuple[int, str]]) -> list[Trace]:
        traces = [read_file(p) for p in sorted(out_dir.glob("kernels-*.bin"))]
        failed = sorted(out_dir.glob("kernels-*.err"))
        if not traces and failed:
            raise EngineError(f"the CUDA kernel tracer could not start: {failed[0].read_text().strip()[:300]}")
        return traces


TRACER = CuptiTracer()
