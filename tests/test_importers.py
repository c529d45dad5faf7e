"""The importers' registry: `tokensleuth import` asks it which format a file is, by its first bytes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import GOLDEN
from tokensleuth.core.errors import UserError
from tokensleuth.importers import FALLBACK, IMPORTERS, LLAMA_BENCH, importer_of

BENCHY = Path(__file__).resolve().parent / "fixtures" / "benchy" / "c1_c4.json"


def test_each_file_goes_to_the_importer_that_knows_it(tmp_path: Path) -> None:
    aiperf = tmp_path / "artifacts"
    aiperf.mkdir()
    (aiperf / "profile_export_aiperf.json").write_text(json.dumps({"aiperf_version": "0.13.0", "schema_version": "1.0"}))
    bundle = tmp_path / "s.bundle.json"
    bundle.write_text(json.dumps({"format": "tokensleuth-bundle", "schema_version": 1}, indent=1))
    packed = tmp_path / "s.bundle.json.gz"
    packed.write_bytes(gzip.compress(bundle.read_bytes()))
    compact = tmp_path / "c.json"
    compact.write_text(json.dumps({"format": "tokensleuth-bundle"}, separators=(",", ":")))
    unknown = tmp_path / "notes.txt"
    unknown.write_text("hello\n")
    got = {p.name: importer_of(p).name for p in (GOLDEN / "b11434.json", GOLDEN / "b11434-jsonl.stdout",
                                                   GOLDEN / "b11434.sql", BENCHY, aiperf,
                                                   aiperf / "profile_export_aiperf.json", bundle, packed, compact,
                                                   unknown)}
    assert got == {"b11434.json": "llama-bench", "b11434-jsonl.stdout": "llama-bench", "b11434.sql": "llama-bench",
                   "c1_c4.json": "llama-benchy", "artifacts": "aiperf", "profile_export_aiperf.json": "aiperf",
                   "s.bundle.json": "tokensleuth bundle", "s.bundle.json.gz": "tokensleuth bundle",
                   "c.json": "tokensleuth bundle", "notes.txt": "llama-bench"}
    assert not LLAMA_BENCH.sniff(unknown) and FALLBACK is LLAMA_BENCH  # whose reader says what import reads
    assert [i.name for i in IMPORTERS] == ["tokensleuth bundle", "aiperf", "llama-benchy", "llama-bench"]


def test_a_folder_of_no_tools_files_is_refused_as_a_folder(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is a folder"):
        importer_of(tmp_path)


@pytest.mark.parametrize(("importer", "n", "line"), [
    (0, 0, "study s1 is in the store already (this bundle's): nothing imported"),
    (0, 3, "imported the bundle's study as study s1: 3 trials (`tokensleuth report s1` renders it)"),
    (1, 1, "imported 1 aiperf result as study s1 (under aiperf's definitions: report shows them)"),
    (2, 2, "imported 2 llama-benchy results as study s1 (under llama-benchy's definitions: report shows them)"),
    (3, 2, "imported 2 results as study s1"),
])
def test_each_importer_says_what_it_stored_in_the_words_import_always_said(importer: int, n: int, line: str) -> None:
    assert IMPORTERS[importer].said("s1", n) == line
