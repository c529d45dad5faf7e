"""Study kinds are looked up by name; the CLI never branches on them."""

from __future__ import annotations

import pytest

from tokensleuth.core.errors import UserError
from tokensleuth.studies import _MODULES, kind_of


def test_every_registered_kind_loads_and_describes_its_spec() -> None:
    assert kind_of("compare").describe({"arms": [{"name": "base"}, {"name": "t1"}]}) == "base, t1"
    assert kind_of("bisect").describe({"candidates": ["git:r@a", "git:r@b", "git:r@c"]}) == "git:r@a .. git:r@c"
    assert kind_of("bench").describe({"engine": "pypi:x==1"}) == "pypi:x==1"
    assert kind_of("import").describe({"file": "/tmp/old.jsonl"}) == "/tmp/old.jsonl"
    for name in _MODULES:
        k = kind_of(name)
        assert callable(k.render_stored) and callable(k.describe)


def test_an_unknown_kind_is_one_line() -> None:
    with pytest.raises(UserError, match="study kind 'future' is not known"):
        kind_of("future")
