"""Container arms: a real container (podman + runc) started by a cmd: arm, measured like a native server."""

from __future__ import annotations

import json
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tests.conftest import tokensleuth_bin
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import EngineBuild

pytestmark = pytest.mark.needs("podman")
# runc (crun fails on this hybrid cgroup layout), ulimits within the machine's hard limits
RUN = "podman run --rm --runtime runc --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 --network host"


def _libs(binary: Path) -> list[Path]:
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        for p in parts:
            if p.startswith("/") and Path(p).exists():
                libs.append(Path(p))
    return libs


@pytest.fixture(scope="session")
def image(server_engine: EngineBuild, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An image holding the built llama-server and its shared libraries, made by `podman import`
    of a rootfs tarball (no registry is reachable)."""
    name = f"localhost/tokensleuth-test/llama-server:{server_engine.key}"
    if subprocess.run(["podman", "image", "exists", name]).returncode == 0:
        return name
    server = Path(server_engine.bin_dir) / "llama-server"
    tar = tmp_path_factory.mktemp("rootfs") / "rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(server, arcname="llama-server")
        for lib in _libs(server):
            t.add(lib.resolve(), arcname=str(lib).lstrip("/"))
    subprocess.run(["podman", "import", str(tar), name], check=True, capture_output=True)
    return name


def _containers() -> list[str]:
    out = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    return [n for n in out.split() if n.startswith("tokensleuth-")]


def _cmd(image: str) -> str:
    return (f"cmd:{RUN} -v {{model}}:/model.gguf:ro {image} /llama-server -m /model.gguf --host 127.0.0.1 "
            "--port {port} -np 1 -c 1024 -cram 0 --no-webui")


@pytest.mark.slow
def test_native_against_container_with_the_containers_cgroup_cpu(
        image: str, server_engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    p = subprocess.run([tokensleuth_bin(), "compare", "--arm", f"native={DEFAULT_ENGINE}", "--kind",
                        "native=llama-server", "--arm", f"box={_cmd(image)}", "--model", str(dense_model), "-w", "tg16",
                        "--min-pairs", "2", "--max-pairs", "2", "--band", "50%", "--json", str(out), "--timeout", "120",
                        "--", "-r", "2", "-t", "1"], env=cli_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    c = json.loads(out.read_text())["comparisons"][0]
    assert c["pairs"] == 2 and c["ratio"] is not None
    box = c["resources"]["candidate"]
    # the server in the container is measured: its process tree and its container's cgroup
    assert box["cpu_ms_per_token"] > 0 and box["cgroup_cpu_ms_per_token"] > 0, box
    assert c["resources"]["baseline"]["cgroup_cpu_ms_per_token"] is None  # the native server shares our cgroup
    assert c["latency"]["candidate"]["itl_ms"]["p50"] > 0
    assert not _containers()  # every container removed


@pytest.mark.slow
def test_killing_the_tool_removes_its_container(image: str, dense_model: Path, cli_env: dict[str, str]) -> None:
    proc = subprocess.Popen([tokensleuth_bin(), "bench", "--engine", _cmd(image), "--model", str(dense_model),
                             "-w", "tg256", "--timeout", "300", "--", "-r", "1000", "-t", "1"], env=cli_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not _containers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _containers(), proc.stderr.read().decode() if proc.poll() is not None and proc.stderr else ""
    time.sleep(2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60
    while _containers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _containers()  # the reaper removed it
