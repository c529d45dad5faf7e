"""The peer check, small: one real llama-server, measured by NVIDIA's AIPerf (installed as its
users install it) and by tokensleuth, on one workload. What is asserted is that the definitions
match, never how fast anything ran:

- the workload: AIPerf's requests held the prompt and output lengths tokensleuth's workload name
  says (the server's own usage counts), and so did tokensleuth's;
- ``tokensleuth import`` of AIPerf's artifacts keeps AIPerf's figures: the TTFT and the
  inter-chunk percentiles it prints are the ones the report computes from the imported samples,
  and each request's decode rate is 1 / AIPerf's inter-token latency, (latency - TTFT) / (n - 1);
- a result file of another AIPerf version, and a server that answers with another model, are
  one line and exit 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tokensleuth.analysis.results import load_cells
from tokensleuth.engines.serving import free_port
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from _peers import aiperf, make_tokenizer, wait_health  # noqa: E402

from tests.conftest import tokensleuth_bin  # noqa: E402

ISL, OSL, REQUESTS = 64, 16, 6


@pytest.fixture(scope="module")
def qwen2_vocab_model(engine: EngineBuild, llama_tree: Path) -> Path:
    """The tiny dense model with qwen2's tokenizer: the peers need a Hugging Face tokenizer of the
    model's own vocabulary (the suite's models carry llama-spm's, which _peers cannot rebuild)."""
    from tests import workers
    from tokensleuth.core.paths import cache_dir
    from tokensleuth.models.synth import synth

    p = cache_dir() / "test-models" / f"{engine.key}.qwen2-llama-tiny-Q8_0.gguf"
    with workers.cache_lock("test-models"):
        if not p.exists():
            synth("llama", "tiny", p, "Q8_0", llama_tree, Path(engine.bin_dir) / "llama-quantize", vocab="qwen2")
    return p


@pytest.mark.needs("peers")
def test_aiperf_and_tokensleuth_measure_the_same_thing(server_engine: EngineBuild, qwen2_vocab_model: Path,
                                                        dense_model: Path, tmp_path: Path) -> None:
    model = qwen2_vocab_model  # the model the server serves
    tok, _ = make_tokenizer(model, tmp_path / "tok", _text(tmp_path / "t.txt"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([str(Path(server_engine.bin_dir) / "llama-server"), "-m", str(model),
                               "--port", str(port), "-t", "1", "-np", "1", "-c", "1024", "--no-webui"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = tmp_path / "s.db"
    try:
        wait_health(url, server)
        art = aiperf(url, tok, tmp_path / "aiperf", ISL, OSL, 1, REQUESTS, extra=("temperature:0",))
        ts = subprocess.run([tokensleuth_bin(), "bench", "--engine", f"url:{url}", "--kind", "llama-server", "-m",
                             str(model), "-w", f"pp{ISL}+tg{OSL}", "--json", str(tmp_path / "ts.json"),
                             "--db", str(db), "--", "-r", "2"], capture_output=True, text=True)
        assert ts.returncode == 0, ts.stderr
        other = subprocess.run([tokensleuth_bin(), "bench", "--engine", f"url:{url}", "--kind", "llama-server",
                                "-m", str(dense_model), "-w", "tg8", "--db", str(db)], capture_output=True, text=True)
        assert httpx.get(url + "/health", timeout=5).status_code == 200
    finally:
        server.terminate()
        server.wait(10)
    # a server that answers with another model than -m names: one line, exit 2, before any request
    assert other.returncode == 2 and "serves another model" in other.stderr and "Traceback" not in other.stderr

    # the workload: both tools' requests held ISL prompt and OSL output tokens, by the server's count
    records = [json.loads(line) for line in (art / "profile_export.jsonl").read_text().splitlines() if line.strip()]
    # (a request AIPerf's client lost, "Server disconnected" on a reused connection, carries an error
    # and no metrics: AIPerf's figures leave it out, and so does the import, saying so)
    timed = [r for r in records if r["metadata"]["benchmark_phase"] == "profiling" and "error" not in r]
    assert len(timed) >= 2
    assert {r["metrics"]["usage_prompt_tokens"]["value"] for r in timed} == {ISL}
    assert {r["metrics"]["usage_completion_tokens"]["value"] for r in timed} == {OSL}
    bench = json.loads((tmp_path / "ts.json").read_text())
    assert [r["workload"] for r in bench["results"]] == [f"pp{ISL}+tg{OSL}"]
    with Store(db) as store:  # a sample's tokens are the server's prompt_n + predicted_n
        tokens = {t for (t,) in store.db.execute(
            "SELECT s.tokens FROM samples s JOIN results r ON r.id=s.result_id JOIN trials t ON t.id=r.trial_id"
            " WHERE t.study_id=?", (bench["study"],))}
    assert tokens == {ISL + OSL}

    # the import keeps AIPerf's own figures, under its definitions
    imp = subprocess.run([tokensleuth_bin(), "import", str(art), "--db", str(db)], capture_output=True, text=True)
    assert imp.returncode == 0, imp.stderr
    study = imp.stdout.split("as study ")[1].split()[0]
    summary = json.loads((art / "profile_export_aiperf.json").read_text())
    with Store(db) as store:
        (cell,) = load_cells(store, study)
    assert cell.test == f"pp{ISL}+tg{OSL}" and len(cell.client_tg_ts) == len(timed)
    lat = cell.latency()
    assert lat is not None
    for ours_key, theirs in (("ttft_ms", "time_to_first_token"), ("itl_ms", "inter_chunk_latency")):
        for p in ("p50", "p90", "p99"):
            # (the store keeps latencies to 0.1 µs, as it keeps its own)
            assert lat[ours_key][p] == pytest.approx(summary[theirs][p], abs=1e-4), (ours_key, p)
    for r in timed:
        m = r["metrics"]
        itl = (m["request_latency"]["value"] - m["time_to_first_token"]["value"]) / (OSL - 1)
        assert m["inter_token_latency"]["value"] == pytest.approx(itl, rel=1e-9)  # AIPerf's definition
    assert sorted(cell.client_tg_ts) == pytest.approx(sorted(1000 / r["metrics"]["inter_token_latency"]["value"]
                                                             for r in timed), rel=1e-9)

    # another AIPerf version's file: one line, exit 2, the store untouched
    old = tmp_path / "old"
    old.mkdir()
    (old / "profile_export_aiperf.json").write_text(json.dumps({**summary, "aiperf_version": "0.9.0"}))
    (old / "profile_export.jsonl").write_text((art / "profile_export.jsonl").read_text())
    before = db.read_bytes()
    bad = subprocess.run([tokensleuth_bin(), "import", str(old), "--db", str(db)], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "AIPerf 0.9.0" in bad.stderr
    assert db.read_bytes() == before


def _text(p: Path) -> Path:
    p.write_text("The quick brown fox jumps over the lazy dog. " * 50)
    return p
