"""A pypi: sdist comes straight from the index's JSON file list, its hash checked; where that list
does not give it (no such file, a wrong hash, no http index) pip fetches it as before. A real
HTTP index on a local port serves a small sdist."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tokensleuth.sources import parse_source
from tokensleuth.sources.fetch import IndexMiss, TreeFetcher, sdist_from_index


def _sdist() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = b"int main() { return 0; }\n"
        info = tarfile.TarInfo("demo_pkg-1.2.0/llama.cpp/main.cpp")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class _Index:
    """The index's answers: the file list's entries (name, the hash it states) and who asked what."""

    def __init__(self) -> None:
        self.body = _sdist()
        self.files = [("demo_pkg-1.2.0.tar.gz", hashlib.sha256(self.body).hexdigest()),
                      ("demo_pkg-1.2.0-py3-none-any.whl", "0" * 64)]
        self.asked: list[str] = []


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Index]:
    state = _Index()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            state.asked.append(self.path)
            if self.path == "/simple/demo-pkg/":
                files = [{"filename": n, "url": f"../../files/{n}", "hashes": {"sha256": h}} for n, h in state.files]
                body, kind = json.dumps({"meta": {"api-version": "1.0"}, "files": files}).encode(), \
                    "application/vnd.pypi.simple.v1+json"
            elif self.path.startswith("/files/"):
                body, kind = state.body, "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "1")
    try:
        yield state
    finally:
        server.shutdown()


def test_the_sdist_comes_from_the_index_file_list_with_its_hash_checked(index: _Index, tmp_path: Path) -> None:
    lines: list[str] = []
    fetcher = TreeFetcher(tmp_path / "sdists", tmp_path / "src", tmp_path / "work")
    got = fetcher.sdist(parse_source("pypi:demo-pkg==1.2.0"), lines.append)
    assert got == tmp_path / "sdists" / "demo-pkg-1.2.0" / "demo_pkg-1.2.0.tar.gz"
    assert got.read_bytes() == index.body
    where = os.environ["PIP_INDEX_URL"].split("/")[2]
    assert lines == [f"downloaded sdist demo-pkg==1.2.0 from {where}"]
    assert index.asked == ["/simple/demo-pkg/", "/files/demo_pkg-1.2.0.tar.gz"]  # (no wheel, no pip)
    assert sorted(p.name for p in got.parent.iterdir()) == [got.name]


@pytest.mark.parametrize("fault", ["a wrong hash", "no such version", "no hash stated"])
def test_a_file_list_that_does_not_give_the_sdist_leaves_nothing_and_pip_is_asked(
        index: _Index, tmp_path: Path, fault: str) -> None:
    version = "1.2.0"
    if fault == "a wrong hash":
        index.files[0] = (index.files[0][0], hashlib.sha256(b"other bytes").hexdigest())
    elif fault == "no such version":
        version = "9.9.9"
    else:
        index.files[0] = (index.files[0][0], None)  # type: ignore[assignment]
    with pytest.raises(IndexMiss):
        sdist_from_index("demo-pkg", version, tmp_path)
    assert list(tmp_path.iterdir()) == []  # (no part file, no file that failed its check)
    # the fetcher then asks pip, whose index (the same, which has no such page for pip) fails it:
    # one line, the file list's reason said before pip's
    from tokensleuth.core.errors import UserError

    fetcher = TreeFetcher(tmp_path / "sdists", tmp_path / "src", tmp_path / "work")
    with pytest.raises(UserError, match=f"cannot fetch demo-pkg=={version}"):
        fetcher.sdist(parse_source(f"pypi:demo-pkg=={version}"))
    assert not list((tmp_path / "sdists" / f"demo-pkg-{version}").glob("*.tar.gz"))


def test_an_index_that_is_not_http_is_left_to_pip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "no-index").as_uri())
    with pytest.raises(IndexMiss, match="is not an http index"):
        sdist_from_index("demo-pkg", "1.2.0", tmp_path)
