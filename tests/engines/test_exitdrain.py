"""The exit drain: a process that queued lines for a thread of its own is held at exit until
they are written, and never held for good.

The program below does what llama.cpp's logger does (common/log.cpp): main hands a line to
a writer thread and returns. Here the writer first needs 200 ms of CPU, so without the
drain the line dies with the process every time; the real engine beside a busy core is in
tests/test_outputs.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tokensleuth.engines import exitdrain

PROGRAM = r"""
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int queued = 0, forever = 0;

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *writer(void *arg) {
    (void) arg;
    pthread_mutex_lock(&mtx);
    while (!queued) pthread_cond_wait(&cv, &mtx);
    pthread_mutex_unlock(&mtx);
    double t0 = cpu_s();
    while (forever || cpu_s() - t0 < 0.2) { }  /* a writer not yet given the CPU it needs */
    const char line[] = "the queued line\n";
    write(1, line, strlen(line));
    pthread_mutex_lock(&mtx);
    queued = 0;
    while (!queued) pthread_cond_wait(&cv, &mtx);  /* waits for more, like the logger */
    pthread_mutex_unlock(&mtx);
    return NULL;
}

int main(int argc, char **argv) {
    forever = argc > 1 && strcmp(argv[1], "forever") == 0;
    pthread_t t;
    pthread_create(&t, NULL, writer, NULL);
    pthread_mutex_lock(&mtx);
    queued = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mtx);
    return 0;  /* the writer is never joined: its line is lost unless the exit waits */
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = exitdrain._compiler()
    assert cc is not None, "no C compiler (cc, gcc or clang): install Debian's build-essential"
    d = tmp_path_factory.mktemp("drain")
    (d / "p.c").write_text(PROGRAM)
    subprocess.run([cc, "-O1", "-pthread", "-o", str(d / "p"), str(d / "p.c")], check=True)
    return d / "p"


def _run(program: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(program), *args], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120)


def test_a_line_queued_for_a_writer_thread_is_written_before_exit(program: Path) -> None:
    lost = _run(program, {})
    assert lost.returncode == 0 and lost.stdout == ""  # the loss the drain is for
    env = exitdrain.env()
    assert "LD_PRELOAD" in env, "the drain library was not built"
    kept = _run(program, env)
    assert kept.returncode == 0 and kept.stdout == "the queued line\n", kept


def test_a_thread_that_never_blocks_holds_the_exit_no_longer_than_the_cap(program: Path) -> None:
    p = _run(program, exitdrain.env(), "forever")
    assert p.returncode == 0 and p.stdout == ""  # exited, with the spinning writer, after WAIT_MS


def test_a_preload_the_user_set_is_kept_after_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = exitdrain.library()
    assert lib is not None and lib.is_file()
    monkeypatch.setenv("LD_PRELOAD", "/opt/theirs.so")
    assert exitdrain.env()["LD_PRELOAD"] == f"{lib}:/opt/theirs.so"
    assert exitdrain.env({"LD_PRELOAD": "/opt/arm.so", "X": "1"}) == {"LD_PRELOAD": f"{lib}:/opt/arm.so", "X": "1"}


def test_no_compiler_means_no_preload_and_nothing_else(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TOKENSLEUTH_CACHE", str(tmp_path))
    monkeypatch.setattr(exitdrain, "_compiler", lambda: None)
    assert exitdrain.library() is None
    assert exitdrain.env({"X": "1"}) == {"X": "1"}
    assert not (tmp_path / "helpers").exists() or not list((tmp_path / "helpers").iterdir())


def test_a_library_removed_from_the_cache_is_built_again_not_preloaded_missing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TOKENSLEUTH_CACHE", str(tmp_path))
    lib = exitdrain.library()
    assert lib is not None and lib.is_relative_to(tmp_path) and lib.is_file()
    lib.unlink()
    assert exitdrain.env()["LD_PRELOAD"] == str(lib) and lib.is_file()
