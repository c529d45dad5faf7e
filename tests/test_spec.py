"""Study specs: durations, bands and the sample interval, and their one-line errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tokensleuth.errors import UserError
from tokensleuth.spec import CompareSpec, parse_duration, parse_percent


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
