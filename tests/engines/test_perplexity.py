"""llama-perplexity KL-divergence parser and flag translation, on golden b11434 output."""

from __future__ import annotations

import pytest

from tests.conftest import GOLDEN
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.engines.perplexity import (
    KldSettings,
    KldStats,
    base_argv,
    error_line,
    kld_argv,
    parse_base_ppl,
    parse_kld,
    perplexity_flags,
)


def golden(name: str) -> str:
    return ((GOLDEN / f"perplexity-b11434-{name}.stdout").read_text() + "\n"
            + (GOLDEN / f"perplexity-b11434-{name}.stderr").read_text())


def test_same_build_against_its_own_logits() -> None:
    s = parse_kld(golden("kld-same"))
    assert s.mean_ppl_q == 34679.051633
    assert s.mean_ppl_base == 34679.046384
    assert s.ppl_ratio == 1.0 and s.mean_ln_ratio == 0.0
    assert (s.mean_kld, s.kld_99, s.max_kld, s.median_kld) == (0.0, 0.000001, 0.000001, 0.0)
    assert s.same_top_p == 100.0
    assert s.chunk_ppl == (35493.4992, 35754.7789, 34998.8104, 34679.0516)
    assert s.chunks == 4


def test_quantized_kv_cache_moves_every_figure() -> None:
    s = parse_kld(golden("kld-ctk-q8_0"))
    assert s.mean_ppl_q == 34643.086999
    assert s.ppl_ratio == 0.998963 and s.mean_ln_ratio == -0.001037
    assert (s.mean_kld, s.kld_99, s.max_kld) == (0.000011, 0.000014, 0.000016)
    assert s.same_top_p == 96.429
    assert s.chunk_ppl[0] == 35446.1972
    assert s.fingerprint() != parse_kld(golden("kld-same")).fingerprint()


def test_kld_run_reads_context_from_the_base_file() -> None:
    # -c 256 against a base saved at -c 128: the engine uses the file's n_ctx, same numbers
    assert parse_kld(golden("kld-ctx-mismatch")).fingerprint() == parse_kld(golden("kld-same")).fingerprint()


def test_bad_base_file_is_an_engine_error_with_the_engines_reason() -> None:
    # llama-perplexity exits 0 here: only the missing statistics tell
    with pytest.raises(EngineError, match="does not look like a file containing log-probabilities"):
        parse_kld(golden("kld-bad-base"))


def test_base_run_reports_its_final_ppl() -> None:
    assert parse_base_ppl(golden("kld-base")) == 34679.0516
    with pytest.raises(EngineError, match="did not finish saving base logits"):
        parse_base_ppl(golden("kld-bad-base"))


@pytest.mark.parametrize("text", ["", "garbage\n", "Mean PPL(Q) : 1.0\n", "\x00" * 50])
def test_unreadable_output_is_one_engine_error(text: str) -> None:
    with pytest.raises(EngineError, match="printed no KL-divergence statistics"):
        parse_kld(text)


def test_a_truncated_report_names_what_is_missing() -> None:
    text = golden("kld-same")
    cut = text[: text.index("Same top p:")]
    with pytest.raises(EngineError, match="missing same_top_p"):
        parse_kld(cut)


def test_nan_figures_are_refused() -> None:
    text = golden("kld-same").replace("Mean    KLD:   0.000000", "Mean    KLD:   -nan")
    with pytest.raises(EngineError, match="mean_kld = nan"):
        parse_kld(text)


def test_top_p_outside_a_percentage_is_refused() -> None:
    text = golden("kld-same").replace("Same top p: 100.000", "Same top p: 250.000")
    with pytest.raises(EngineError, match="not 0..100"):
        parse_kld(text)


def test_stats_round_trip_through_json() -> None:
    s = parse_kld(golden("kld-ctk-q8_0"))
    assert KldStats.from_json(s.to_json()) == s


def test_error_line_strips_the_log_prefix() -> None:
    assert error_line("0.00.5 I fine\n0.00.538.469 E kl_divergence: bad file\n") == "kl_divergence: bad file"
    assert error_line("all good\n") == ""


def test_argv_carries_the_same_settings_for_base_and_candidate() -> None:
    from pathlib import Path

    st = KldSettings(ctx=128, batch=64, ubatch=32, chunks=3, threads=2)
    b = base_argv(Path("/b/llama-perplexity"), "m.gguf", Path("c.txt"), Path("o.kld"), st, ["-ctk", "q8_0"])
    k = kld_argv(Path("/b/llama-perplexity"), "m.gguf", Path("c.txt"), Path("o.kld"), st)
    common = ["-c", "128", "-b", "64", "-ub", "32", "--chunks", "3", "-t", "2"]
    assert b == ["/b/llama-perplexity", "-m", "m.gguf", "-f", "c.txt", *common, "-ctk", "q8_0",
                 "--kl-divergence-base", "o.kld"]
    assert k[-3:] == ["--kl-divergence-base", "o.kld", "--kl-divergence"] and k[5:15] == common
    with pytest.raises(UserError, match="chunks must be at least 1"):
        KldSettings(chunks=0)


def test_bench_flags_that_move_outputs_are_translated() -> None:
    assert perplexity_flags(["-ctk", "q8_0", "--cache-type-v=q8_0", "-fa", "1", "-ngl", "99"]) == (
        "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-ngl", "99")
    assert perplexity_flags(["-ts", "3/1", "-nkvo", "1", "--repack", "0", "-nopo", "0"]) == (
        "-ts", "3,1", "-nkvo", "--no-repack")
    # fixed by KldSettings or benchmark-only: dropped
    assert perplexity_flags(["-t", "4", "-b", "256", "-ub", "64", "-r", "3", "--progress", "-p", "512"]) == ()


def test_a_sweep_has_no_single_output_check() -> None:
    with pytest.raises(UserError, match="sweeps several settings"):
        perplexity_flags(["-ctk", "f16,q8_0"])


def test_output_cut_mid_number_is_not_read_as_a_smaller_number() -> None:
    text = golden("kld-ctk-q8_0")
    stdout_only = (GOLDEN / "perplexity-b11434-kld-ctk-q8_0.stdout").read_text()
    cut = stdout_only[: stdout_only.index("Same top p: 96") + len("Same top p: 9")]
    with pytest.raises(EngineError, match="missing same_top_p"):
        parse_kld(cut)
    assert parse_kld(text).same_top_p == 96.429
    base = (GOLDEN / "perplexity-b11434-kld-base.stderr").read_text()
    with pytest.raises(EngineError):
        parse_base_ppl(base[: base.index("PPL = 3") + len("PPL = 3")])


def test_negative_zero_reads_as_zero() -> None:
    text = golden("kld-same").replace("Mean    KLD:   0.000000", "Mean    KLD:  -0.000000")
    assert str(parse_kld(text).mean_kld) == "0.0"
