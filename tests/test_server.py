"""llama-server arms: the real server, timed requests, engine-neutral samples, faults as outcomes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests import workers
from tests.conftest import tokensleuth_bin
from tokensleuth.core.errors import UserError
from tokensleuth.core.workloads import canonical, parse
from tokensleuth.engines.llamaserver import parse_sse
from tokensleuth.engines.serving import split_flags
from tokensleuth.engines.streams import RequestFailed, Stream
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import EngineBuild

FAKE = Path(__file__).parent / "fakes" / "fake_llama_server.py"


def test_workload_names_add_concurrency_to_llama_bench_names() -> None:
    assert canonical("tg128@d0xc1") == "tg128"
    assert canonical("pp512+tg128xc4") == "pp512+tg128xc4"
    w = parse("tg32@d256xc2")
    assert (w.n_prompt, w.n_gen, w.n_depth, w.concurrency) == (0, 32, 256, 2)
    for bad in ("tg128xc0", "tg128xc999", "xc4", "tg128xc"):
        with pytest.raises(UserError):
            parse(bad)


def test_repetitions_are_tokensleuths_and_the_rest_goes_to_the_server() -> None:
    assert split_flags(["-r", "3", "-t", "1"]) == (3, ["-t", "1"])
    assert split_flags(["--repetitions=2", "--poll", "0"]) == (2, ["--poll", "0"])
    assert split_flags(["-ngl", "99"]) == (5, ["-ngl", "99"])
    with pytest.raises(UserError):
        split_flags(["-r", "x"])


def test_sse_stream_counts_tokens_from_the_server_not_from_chunks() -> None:
    s = Stream(0)
    lines = [": ping", "", 'data: {"content":"a","tokens":[1],"tokens_predicted":1}', "",
             'data: {"content":"bc","tokens":[3],"tokens_predicted":3}', "",  # a held-back token merged
             'data: {"content":"","stop":true,"timings":{"prompt_n":1}}']
    parse_sse(lines, s)
    assert [n for _, n in s.chunks] == [1, 3] and s.final["stop"] is True
    assert len(s.itl_ms()) == 2  # the merged interval counts as two tokens
    for bad, status in ((["data: {oops"], "garbage"), (["hello"], "garbage"),
                        (['data: {"error":{"message":"boom"}}'], "failed"), (['data: {"content":"a"}'], "crashed")):
        with pytest.raises(RequestFailed) as e:
            parse_sse(bad, Stream(0))
        assert e.value.status == status, bad


def _bench(args: list[str], env: dict[str, str], tmp_path: Path, timeout: int = 600) -> tuple[
        subprocess.CompletedProcess[str], dict[str, object]]:
    out = tmp_path / "b.json"
    p = subprocess.run([tokensleuth_bin(), "bench", "--json", str(out), *args], env=env, capture_output=True,
                       text=True, timeout=timeout)
    return p, (json.loads(out.read_text()) if out.exists() else {})


@pytest.mark.slow
def test_bench_a_real_llama_server(server_engine: EngineBuild, dense_model: Path, cli_env: dict[str, str],
                                   tmp_path: Path) -> None:
    p, doc = _bench(["--kind", "llama-server", "--model", str(dense_model), "-w", "pp64", "-w", "tg32",
                     "-w", "tg16@d128", "-w", "tg16xc2", "--", "-r", "3", "-t", "1"], cli_env, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    res = {r["workload"]: r for r in doc["results"]}  # type: ignore[attr-defined]
    assert set(res) == {"pp64", "tg32", "tg16@d128", "tg16xc2"}
    for w, r in res.items():
        assert r["tokens_per_s"]["mean"] > 0 and len(r["samples"]) == 3, w
        assert r["resources"]["cpu_ms_per_token"] > 0, (w, r["resources"])
        lat = r["latency"]
        assert lat["ttft_ms"]["p50"] > 0 and lat["ttft_ms"]["p50"] <= lat["ttft_ms"]["p99"], w
    assert res["tg32"]["latency"]["itl_ms"]["n"] == 3 * 31  # every inter-token interval of every request
    assert res["tg16xc2"]["latency"]["requests"] == 3 * 2  # two streams per repetition
    assert res["pp64"]["latency"]["itl_ms"] is None  # one generated token: no interval
    assert "TTFT ms" in p.stdout
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    con.row_factory = sqlite3.Row
    rows = con.execute("SELECT s.*, r.test FROM samples s JOIN results r ON r.id=s.result_id").fetchall()
    by: dict[str, list[sqlite3.Row]] = {}
    for r in rows:
        by.setdefault(r["test"], []).append(r)
    assert all(r["start_ns"] < r["end_ns"] and r["ttft_ns"] > 0 for r in rows)
    assert {(r["n_prompt"], r["n_gen"], r["tokens"]) for r in by["pp64"]} == {(64, 0, 64)}
    assert {(r["n_prompt"], r["n_gen"]) for r in by["tg16xc2"]} == {(0, 32)}  # two streams of 16
    deep = json.loads(by["tg16@d128"][0]["metrics_json"])["server"]
    assert deep["cache_n"] == 128  # the prefix was in the KV cache: how depth is checked
    assert con.execute("SELECT kind FROM arms").fetchone()[0] == "llama-server"
    assert not _real_servers()


@pytest.mark.needs("browser")
@pytest.mark.slow
def test_compare_llama_bench_with_llama_server_on_the_same_build(
        server_engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    p = subprocess.run([tokensleuth_bin(), "compare", "--arm", f"bench={DEFAULT_ENGINE}", "--arm",
                        f"server={DEFAULT_ENGINE}", "--kind", "server=llama-server", "--model", str(dense_model),
                        "-w", "tg32", "--min-pairs", "2", "--max-pairs", "2", "--band", "50%", "--json", str(out),
                        "--", "-r", "2", "-t", "1"], env=cli_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    c = json.loads(out.read_text())["comparisons"][0]
    assert c["pairs"] == 2 and c["ratio"] is not None
    assert c["latency"]["baseline"] is None and c["latency"]["candidate"]["itl_ms"]["p50"] > 0
    assert c["resources"]["candidate"]["cpu_ms_per_token"] > 0
    assert "Latency (client side" in p.stdout
    # a server study's page: the same figures, with the latency table in its report
    from tests.browser import assert_clean, open_page

    page = tmp_path / "server.html"
    sid = json.loads(out.read_text())["study"]
    r = subprocess.run([tokensleuth_bin(), "report", sid, "--html", str(page)], env=cli_env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    seen = open_page(page, "server-compare")
    assert_clean(seen, page)
    assert "Latency (client side" in seen.text and f"{c['ratio']:.4f}" in seen.text


# -- faults: a fake server for what a real one cannot be made to do ---------------------------


@pytest.fixture()
def fake_bin(engine: EngineBuild, tmp_path: Path) -> Path:
    d = tmp_path / "fakebin"
    d.mkdir()
    (d / "llama-bench").symlink_to(Path(engine.bin_dir) / "llama-bench")  # a bin: folder is named by its llama-bench
    shutil.copy(FAKE, d / "llama-server")
    (d / "llama-server").chmod(0o755)
    return d


def _fakes() -> list[psutil.Process]:
    out = []
    for pr in psutil.process_iter(["cmdline"]):
        try:
            if any("fakebin/llama-server" in a for a in pr.info["cmdline"] or []):
                out.append(pr)
        except (psutil.NoSuchProcess, TypeError):
            pass
    return out


@pytest.mark.parametrize(("mode", "status", "words"), [
    ("ok", "done", ""),
    ("never", "crashed", "never became healthy"),
    ("exit", "failed", "exited with code 1 before it was ready"),
    ("http500", "failed", "HTTP 500"),
    ("garbage", "garbage", "malformed JSON"),
    ("die", "crashed", "killed by SIGSEGV"),
    ("stall", "timeout", "stalled"),
    ("short", "crashed", "ended before its final event"),
])
def test_server_faults_are_trial_outcomes(mode: str, status: str, words: str, fake_bin: Path, dense_model: Path,
                                          cli_env: dict[str, str], tmp_path: Path) -> None:
    env = dict(cli_env, FAKE_SERVER_MODE=mode)
    p, _ = _bench(["--engine", f"bin:{fake_bin}", "--kind", "llama-server", "--model", str(dense_model),
                   "-w", "tg4", "--timeout", "4", "--", "-r", "2"], env, tmp_path, timeout=120)
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    st, msg = con.execute("SELECT status, message FROM trials").fetchone()
    assert (st, p.returncode) == (status, 0 if status == "done" else 1), (msg, p.stderr[-1500:])
    assert words in msg, msg
    if status != "done":
        assert "Traceback" not in p.stderr
    assert not _fakes()  # the server is always stopped


def test_killing_the_tool_never_leaves_a_server(fake_bin: Path, dense_model: Path, cli_env: dict[str, str],
                                                tmp_path: Path) -> None:
    env = dict(cli_env, FAKE_SERVER_MODE="stall")
    for sig, rc in ((signal.SIGINT, 130), (signal.SIGKILL, -9)):
        proc = subprocess.Popen([tokensleuth_bin(), "bench", "--engine", f"bin:{fake_bin}", "--kind", "llama-server",
                                 "--model", str(dense_model), "-w", "tg4", "--timeout", "60", "--", "-r", "1"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not _fakes() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # the server is up and a request is stalled in it
        assert _fakes()
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == rc
        deadline = time.monotonic() + 10
        while _fakes() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _fakes(), sig


def test_bad_server_arms_are_one_line(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str]) -> None:
    cases = [
        ["bench", "--kind", "nope", "--model", str(dense_model)],
        ["bench", "--kind", "llama-server", "--model", str(dense_model), "--", "--port", "9"],
        ["bench", "--kind", "llama-server", "--model", str(dense_model), "-w", "tg8xc0"],
        ["bench", "--model", str(dense_model), "-w", "tg8xc2"],  # llama-bench runs one stream
        ["compare", "--arm", f"a={DEFAULT_ENGINE}", "--arm", f"b={DEFAULT_ENGINE}", "--kind", "c=llama-server",
         "--model", str(dense_model)],
        ["compare", "--arm", f"a={DEFAULT_ENGINE}", "--arm", f"b={DEFAULT_ENGINE}", "--kind", "b=vllm",
         "--model", str(dense_model)],
    ]
    for args in cases:
        p = subprocess.run([tokensleuth_bin(), *args], env=cli_env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("error: "), (args, p.stderr)
    assert not Path(cli_env["TOKENSLEUTH_DB"]).exists()


def test_no_orphan_from_an_earlier_test() -> None:
    assert os.environ.get("FAKE_SERVER_MODE") is None and not _fakes()


# -- url: arms: any OpenAI-compatible server, attached ----------------------------------------


def _real_servers() -> list[psutil.Process]:
    """The real llama-servers on this test process's models (another worker's are its own)."""
    mine = str(workers.models_dir())
    return [pr for pr in psutil.process_iter(["name", "cmdline"])
            if pr.info["name"] == "llama-server" and any(mine in a for a in pr.info["cmdline"] or [])]


@pytest.fixture()
def attached(server_engine: EngineBuild, dense_model: Path) -> Iterator[str]:
    """The real llama-server, started by the test with an API key (tokensleuth only attaches)."""
    from tokensleuth.engines.serving import free_port

    port = free_port()
    proc = subprocess.Popen([str(Path(server_engine.bin_dir) / "llama-server"), "-m", str(dense_model),
                             "--host", "127.0.0.1", "--port", str(port), "-t", "1", "-c", "1024",
                             "--api-key", "s3cret-key", "--no-webui"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, "llama-server exited before it was ready"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def test_an_attached_openai_server_is_measured_and_its_key_never_stored(
        attached: str, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    env = dict(cli_env, TS_KEY="s3cret-key")
    args = ["--engine", f"url:{attached}", "--model", str(dense_model), "-w", "pp64", "-w", "tg8",
            "--api-key-env", "TS_KEY", "--", "-r", "2"]
    p, doc = _bench(args, env, tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    res = {r["workload"]: r for r in doc["results"]}  # type: ignore[attr-defined]
    assert set(res) == {"pp64", "tg8"}
    for w, r in res.items():
        assert r["tokens_per_s"]["mean"] > 0 and len(r["samples"]) == 2, w
    assert res["tg8"]["latency"]["itl_ms"]["n"] == 2 * 7  # every inter-token interval of both requests
    assert res["pp64"]["resources"]["cpu_ms_per_token"] is None  # no local process to measure
    assert any("attached server" in n for n in res["pp64"]["resources"]["notes"]), res["pp64"]["resources"]["notes"]
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    assert con.execute("SELECT kind FROM arms").fetchone()[0] == "openai"
    con.close()
    blob = Path(cli_env["TOKENSLEUTH_DB"]).read_bytes() + p.stdout.encode() + p.stderr.encode()
    assert b"s3cret-key" not in blob and b"TS_KEY" in Path(cli_env["TOKENSLEUTH_DB"]).read_bytes()
    # without the key: a failed trial that says so, and no traceback
    p, _ = _bench([a for a in args if a not in ("--api-key-env", "TS_KEY")], env, tmp_path, timeout=300)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    msgs = [m for (m,) in con.execute("SELECT message FROM trials WHERE status='failed'")]
    assert msgs and all("HTTP 401" in m for m in msgs), msgs


def test_a_server_study_reads_each_model_file_once(attached: str, dense_model: Path, cli_env: dict[str, str],
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The model's facts are read once per study, not once per trial (each read parsed the
    whole file inside the trial's window: 10 s a trial on the qwen2 vocabulary)."""
    from tokensleuth import cli
    from tokensleuth.models import info

    facts = info.ModelFacts()  # this study's reads alone
    monkeypatch.setattr(info, "FACTS", facts)
    for k, v in cli_env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("TS_KEY", "s3cret-key")
    rc = cli.main(["bench", "--engine", f"url:{attached}", "--model", str(dense_model), "-w", "tg8", "-w", "pp32",
                   "--trials", "3", "--api-key-env", "TS_KEY", "--", "-r", "2"])
    assert rc == 0, capsys.readouterr().err[-2000:]
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    done = con.execute("SELECT COUNT(*) FROM trials WHERE status='done'").fetchone()[0]
    assert done == 6  # 3 processes x 2 workloads
    assert facts.reads == 1


def test_a_cmd_arm_starts_its_own_server_and_stops_it(dense_model: Path, server_engine: EngineBuild,
                                                     cli_env: dict[str, str], tmp_path: Path) -> None:
    server = Path(server_engine.bin_dir) / "llama-server"
    p, doc = _bench(["--engine", f"cmd:{server} -m {{model}} --host 127.0.0.1 --port {{port}} -t 1 -c 512",
                     "--model", str(dense_model), "-w", "tg8", "--", "-r", "2"], cli_env, tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r = doc["results"][0]  # type: ignore[index]
    assert r["tokens_per_s"]["mean"] > 0 and len(r["samples"]) == 2
    assert r["resources"]["cpu_ms_per_token"] > 0  # the server it started is measured
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    argv = json.loads(con.execute("SELECT env_json FROM trials").fetchone()[0])["argv"]
    assert argv[0] == str(server) and str(dense_model) in argv and "{port}" not in " ".join(argv)
    assert con.execute("SELECT kind FROM arms").fetchone()[0] == "llama-server"
    assert not _real_servers()
