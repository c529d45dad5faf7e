"""A comparison measured before is read back without building either side: a resumed hunt on a
fresh machine (an empty build cache, the store carried in) builds only what it will run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokensleuth.core.paths import cache_dir
from tokensleuth.drivers.verdicts.judge import Judge
from tokensleuth.sources.build import BuildCache, EngineBuild
from tokensleuth.store import Store


@pytest.mark.slow
def test_a_finished_comparison_is_read_back_on_a_fresh_cache_without_building(
        engine: EngineBuild, moe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.planted import bisect_history

    for var, name in (("CCACHE_DIR", "ccache"), ("SCCACHE_DIR", "sccache")):  # (where this feature is broken,
        monkeypatch.setenv(var, str(cache_dir() / name))  # the fresh cache's builds are compiler-cache hits)

    repo, shas = bisect_history()
    a, b = f"git:{repo}@{shas['base']}", f"git:{repo}@{shas['culprit']}"
    models = [str(moe_model)]
    how = {"workloads": ["tg16"], "flags": ["-r", "2", "-t", "1"], "cmake": [], "timeout_s": 300.0}
    with Store(tmp_path / "s.sqlite") as store:
        # the planted MoE wait (1 ms a MoE layer against 0.55 ms a token) is decided in a few pairs;
        # pairs a busy neighbour touched can leave it open (the judge waits on them), and asked
        # again by a new run it gets more pairs, which a wait this size cannot survive
        for _ in range(4):
            first = Judge(store, **how).compare(a, b, models, 0.05, 6)  # type: ignore[arg-type]
            if [c.verdict for c in first.comparisons] == ["slower"]:
                break
        assert [c.verdict for c in first.comparisons] == ["slower"], first.comparisons
        assert store.reads.study(first.study)["status"] == "done"

        root = tmp_path / "fresh-machine"
        fresh = Judge(store, cache=BuildCache(root), **how)  # type: ignore[arg-type]
        again = fresh.compare(a, b, models, 0.05, 6)
        assert again.study == first.study
        assert [c.to_json() for c in again.comparisons] == [c.to_json() for c in first.comparisons]
        assert fresh.builds == {} and not (root / "builds").exists() and not (root / "work").exists()

        # what would measure more is never read back: a question the stored interval leaves open
        # (one-sided at the ratio it measured), or another model
        est = first.comparisons[0].estimate
        assert est is not None
        assert fresh.answered(a, b, models, 0.05, 6, edge=est.ratio) is None
        assert fresh.answered(a, b, [*models, str(moe_model) + ".other"], 0.05, 6) is None
        # nor one of a build this store never ran (other CMake flags: another key)
        other = Judge(store, cache=BuildCache(root), **{**how, "cmake": ["-DGGML_NATIVE=OFF"]})  # type: ignore[arg-type]
        assert other.answered(a, b, models, 0.05, 6) is None
        assert not (root / "builds").exists()
