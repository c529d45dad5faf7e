"""Window edges on the real engine: a trial with the load log on (-v) and a probe as slow as a
driver read still gives every repetition a window within the edge limit (issue 39, item 1)."""

from __future__ import annotations

import time
from pathlib import Path

from tokensleuth.engines import llamabench
from tokensleuth.monitor.attribute import EDGE_ERROR_LIMIT, edge_error
from tokensleuth.monitor.sampler import Monitor
from tokensleuth.monitor.sources import NullSource
from tokensleuth.sources.build import EngineBuild

PROBE_S = 0.005  # a slow driver read at every probe


def test_a_verbose_multi_test_trial_keeps_every_window_within_the_edge_limit(
        engine: EngineBuild, dense_model: Path) -> None:
    mon = Monitor([NullSource()], interval_s=0)
    calls = 0

    def probe(pid: int) -> dict[str, float]:
        nonlocal calls
        calls += 1
        time.sleep(PROBE_S)
        return mon.edge(pid)

    try:
        # four tests of 3 repetitions, each repetition ~100 ms or more on this machine's tiny model
        res = llamabench.run_trial(Path(engine.bin_dir) / "llama-bench", str(dense_model),
                                   ["-v", "-p", "512,1024", "-n", "64,128", "-r", "3", "-t", "1"],
                                   timeout_s=600, probe=probe)
    finally:
        mon.stop()
    out = llamabench.outcome_from(res, {}, {})
    assert out.status == "done" and out.message == "", (out.status, out.message)
    log = [ln for ln in res.lines if not llamabench.is_edge(ln.stream, ln.text)]
    # the premise: the load log is there, and probing every line of it would have put the reader
    # seconds behind (what run_process did before it took ``edges``)
    assert len(log) * PROBE_S > 1.0, len(log)
    assert calls == len(res.lines) - len(log)  # probed at the edges only
    own = {(r.test_idx, s.rep): s.duration_ns for r in out.results for s in r.samples}
    assert len(out.windows) == len(own) == 12
    errors = [edge_error(w.end_ns - w.start_ns, own[(w.test_idx, w.rep)]) for w in out.windows]
    assert max(e for e in errors if e is not None) <= EDGE_ERROR_LIMIT, errors
    # CPU read at both edges of each window; the process's last one may close after its exit, when
    # nothing can be read (then it has none, and the cell's CPU figures leave it out)
    assert all(w.cpu_ms is not None and w.cpu_ms > 0 for w in out.windows[:-1])
