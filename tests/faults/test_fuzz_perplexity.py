"""Fuzzing the llama-perplexity KL-divergence parsers: a result or one EngineError, nothing else.

Examples per property: ``TOKENSLEUTH_FUZZ_EXAMPLES`` (default 300).
"""

from __future__ import annotations

import math
import os

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import GOLDEN
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.engines.perplexity import KldStats, parse_base_ppl, parse_kld, perplexity_flags

EXAMPLES = int(os.environ.get("TOKENSLEUTH_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

LINES = ((GOLDEN / "perplexity-b11434-kld-ctk-q8_0.stdout").read_text()
         + (GOLDEN / "perplexity-b11434-kld-ctk-q8_0.stderr").read_text()).splitlines(keepends=True)
BASE = (GOLDEN / "perplexity-b11434-kld-base.stderr").read_text()


def _check(stats: KldStats) -> None:
    event("parsed")
    assert math.isfinite(stats.mean_kld) and math.isfinite(stats.kld_99)
    assert 0.0 <= stats.same_top_p <= 100.0


def _refused(exc: Exception) -> None:
    event("refused")
    assert str(exc) and "\n" not in str(exc)


mutated_line = st.one_of(
    st.sampled_from(LINES),
    st.text(max_size=120),
    st.sampled_from(LINES).map(lambda s: s.replace("0", "9")),
    st.sampled_from(LINES).map(lambda s: s[: len(s) // 2]),
    st.sampled_from(LINES).map(lambda s: s.replace("0.0000", "nan")),
    st.sampled_from(LINES).map(lambda s: s.replace("96.", "-96.")),
    st.sampled_from(LINES).map(lambda s: s.replace("1", "1" * 400)),
)


@FUZZ
@given(st.lists(mutated_line, max_size=len(LINES) + 10))
def test_kld_output_parses_or_is_refused(lines: list[str]) -> None:
    try:
        _check(parse_kld("".join(lines)))
    except EngineError as exc:
        _refused(exc)


@FUZZ
@given(st.text(max_size=2000))
def test_arbitrary_text_parses_or_is_refused(text: str) -> None:
    for parse in (parse_kld, parse_base_ppl):
        try:
            parse(text)
        except EngineError as exc:
            _refused(exc)


@FUZZ
@given(st.integers(0, len(BASE)))
def test_truncated_base_run_is_refused_cleanly(cut: int) -> None:
    try:
        assert parse_base_ppl(BASE[:cut]) == 34679.0516
    except EngineError as exc:
        _refused(exc)


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(["-ctk", "-ctv", "-fa", "-ts", "-nkvo", "--repack", "-t", "-ot",
                                           "--progress", "-ctk=q8_0,f16", "--cache-type-k="]),
                          st.text(max_size=12)), max_size=12))
def test_any_bench_flags_translate_or_are_refused(flags: list[str]) -> None:
    try:
        out = perplexity_flags(flags)
        assert all(isinstance(f, str) for f in out)
        event("translated")
    except UserError as exc:
        _refused(exc)
