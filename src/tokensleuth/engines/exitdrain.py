"""Hold an engine's exit until its logger thread has written what it was given.

llama.cpp's tools print through a logger thread of their own (common/log.cpp): a line
given to ``LOG()`` is queued, and that thread writes it. The logger is never stopped at
exit (ggml-org/llama.cpp#22142), so when ``main()`` returns before the thread was
scheduled, the queued lines die with the process. On a busy machine that is not rare:
llama-perplexity's whole statistics block (and llama-batched-bench's result lines) go
missing in 17 of 20 runs made on one core beside a busy process in the same scheduling
group (``bench/lost_tail.py``), and a run made again is lost again while the load lasts.

The engine is not changed. A small shared library, preloaded into the engine's process
(``LD_PRELOAD``), registers an exit handler that runs after ``main()`` returned — the
engine's work and its own timings are over — and waits, in 1 ms steps and at most
``WAIT_MS``, until every other thread of the process is blocked in a system call that
is not a write: a logger that has written its queue waits on its condition variable; one
with lines left is running, runnable, or blocked writing them. Two such checks in a row
end the wait (on a quiet machine a run took 212 ms instead of 204).

The library is compiled once per machine with the C compiler that builds the engines
and kept in the cache. Where it cannot be (no compiler, not Linux) or cannot act (a
statically linked engine), callers still detect a lost tail and run again.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tokensleuth.core.paths import cache_dir

WAIT_MS = 5000

SOURCE = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long read_small(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    long n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0) return -1;
    buf[n] = 0;
    return n;
}

/* 1 when thread `tid` may still have output to write: runnable, or blocked in a write. */
static int busy(const char *tid) {
    char path[96], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%.32s/stat", tid);
    if (read_small(path, buf, sizeof buf) <= 0) return 0; /* gone */
    const char *close_paren = strrchr(buf, ')');
    if (!close_paren || close_paren[1] != ' ') return 0;
    if (close_paren[2] == 'R') return 1;
    snprintf(path, sizeof path, "/proc/self/task/%.32s/syscall", tid);
    if (read_small(path, buf, sizeof buf) <= 0) return 0;
    if (strncmp(buf, "running", 7) == 0) return 1;
    long nr = strtol(buf, NULL, 10);
    return nr == SYS_write || nr == SYS_writev || nr == SYS_pwrite64 || nr == SYS_pwritev;
}

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

static void drain(void) {
    char self[32];
    snprintf(self, sizeof self, "%ld", (long) syscall(SYS_gettid));
    const long deadline = now_ms() + WAIT_MS;
    int quiet = 0;
    const struct timespec step = {0, 1000000};
    while (quiet < 2 && now_ms() < deadline) {
        DIR *d = opendir("/proc/self/task");
        if (!d) return;
        int any = 0;
        struct dirent *e;
        while (!any && (e = readdir(d)) != NULL) {
            if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && strcmp(e->d_name, self) != 0) {
                any = busy(e->d_name);
            }
        }
        closedir(d);
        quiet = any ? 0 : quiet + 1;
        nanosleep(&step, NULL);
    }
}

__attribute__((constructor)) static void tokensleuth_exit_drain(void) {
    atexit(drain);
}
"""


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            found = shutil.which(name)
            if found:
                return found
    return None


_unbuildable: set[Path] = set()  # tried once in this process, and could not be built


def library() -> Path | None:
    """The preload library for this machine: built now unless cached; None where it cannot be.

    A cached file is looked for at each call (a stat): one removed since is built again, never
    preloaded while missing (the loader would print an error line into the engine's output)."""
    if not sys.platform.startswith("linux"):
        return None
    key = hashlib.sha256(f"{SOURCE}\0{WAIT_MS}\0{platform.machine()}".encode()).hexdigest()[:16]
    out = cache_dir() / "helpers" / f"exitdrain-{key}.so"
    if out.exists():
        return out
    cc = _compiler()
    if out in _unbuildable or cc is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_name(f"{out.stem}.{os.getpid()}.c")
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    try:
        src.write_text(SOURCE)
        done = subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-DWAIT_MS={WAIT_MS}", "-o", str(tmp), str(src)],
                              capture_output=True, text=True, timeout=120)
        if done.returncode == 0 and tmp.exists():
            tmp.replace(out)
            return out
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        src.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    _unbuildable.add(out)
    return None


def env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (the engine's own environment additions) with the library preloaded, when there is one.

    A preload the user set (in ``base`` or in this process's environment) is kept after ours."""
    merged = dict(base or {})
    lib = library()
    if lib is None:
        return merged
    theirs = merged.get("LD_PRELOAD", os.environ.get("LD_PRELOAD", ""))
    merged["LD_PRELOAD"] = f"{lib}:{theirs}" if theirs else str(lib)
    return merged
