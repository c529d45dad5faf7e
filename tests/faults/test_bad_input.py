"""Every CLI command and option given bad input: exit 2, one `error:` line, store unchanged.

The table lives in tests/faults/bad_inputs.py (bench/bad_inputs.py counts it per category).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import tokensleuth_bin
from tests.faults.bad_inputs import (
    CATEGORIES,
    SUBPROCESS,
    Case,
    Files,
    Result,
    cases,
    make_files,
    run_case,
    store_digest,
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return make_files(tmp_path_factory.mktemp("bad-inputs"))


def test_every_category_has_cases(files: Files) -> None:
    got = {c.category for c in cases(files)}
    assert got == set(CATEGORIES)
    assert len(cases(files)) >= 200
    names = [(c.category, c.name) for c in cases(files)]
    assert len(names) == len(set(names))  # each case named once


@pytest.mark.parametrize("category", CATEGORIES)
def test_bad_input_is_one_line_exit_2_store_unchanged(files: Files, category: str,
                                                      request: pytest.FixtureRequest) -> None:
    table = [c for c in cases(files) if c.category == category]
    if any(c.engine for c in table):
        request.getfixturevalue("engine")  # the default build's --help is read (nothing is measured)
    before = store_digest(files.db)
    failures = []
    for c in table:
        why = run_case(c, files.db).failure(c.expect)
        if why:
            failures.append(f"{c.name}: {why}")
    assert failures == []
    assert store_digest(files.db) == before


@pytest.mark.parametrize("name", SUBPROCESS)
def test_through_the_installed_program(files: Files, name: str) -> None:
    (case,) = [c for c in cases(files) if c.name == name]
    before = store_digest(files.db)
    p = subprocess.run([tokensleuth_bin(), *case.argv], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "TOKENSLEUTH_DB": str(files.db)})
    result = Result(p.returncode, p.stderr, store_digest(files.db) == before)
    assert result.failure(case.expect) is None, p.stderr


def test_the_store_under_test_holds_a_study(files: Files) -> None:
    # "unchanged" is only worth asserting on a store with something in it
    r = run_case(Case("good", "report", ("report", files.study), ""), files.db)
    assert r.exit_code == 0, r.stderr
