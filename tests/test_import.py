"""Import of llama-bench's own outputs (json, jsonl, sql) from a real run."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.conftest import GOLDEN
from tokensleuth.analysis.results import load_cells
from tokensleuth.cli import main
from tokensleuth.core.errors import UserError
from tokensleuth.engines.llamabench import result_row
from tokensleuth.engines.llamabench.import_ import import_file, parse_bench_file
from tokensleuth.engines.llamabench.sql import parse_sql
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store, TrialOutcome


@pytest.mark.parametrize("fmt", ["json", "jsonl", "sql"])
def test_import_real_outputs(fmt: str, engine: EngineBuild, dense_model: Path, tmp_path: Path) -> None:
    out = subprocess.run([str(Path(engine.bin_dir) / "llama-bench"), "-m", str(dense_model), "-p", "32",
                          "-n", "8", "-r", "3", "-o", fmt], capture_output=True, text=True, check=True)
    f = tmp_path / f"run.{fmt}"
    f.write_text(out.stdout)
    with Store(tmp_path / "s.db") as s:
        study, n = import_file(s, f)
        assert n == 2
        cells = {c.test: c for c in load_cells(s, study)}
        assert set(cells) == {"pp32", "tg8"}
        if fmt == "sql":
            # SQL carries llama-bench's mean and sd only
            assert cells["tg8"].avg_ts is not None and cells["tg8"].avg_ts > 0
            assert cells["tg8"].tokens_per_s == []
        else:
            objs = [json.loads(ln) for ln in out.stdout.splitlines()] if fmt == "jsonl" else json.loads(out.stdout)
            tg = next(o for o in objs if o["n_gen"] == 8)
            assert cells["tg8"].tokens_per_s == pytest.approx(tg["samples_ts"], abs=0.01)  # llama-bench prints t/s with 2 decimals
        assert [r["kind"] for r in s.reads.studies()] == ["import"]


def test_golden_formats_detected() -> None:
    assert parse_bench_file((GOLDEN / "b11434.json").read_text())[0] == "json"
    assert parse_bench_file((GOLDEN / "b11434-jsonl.stdout").read_text())[0] == "jsonl"
    fmt, rows = parse_bench_file((GOLDEN / "b11434.sql").read_text())
    assert fmt == "sql" and len(rows) == 2 and rows[0]["build_number"] == 11434


# -- hostile inputs: one line, exit 2, nothing stored -----------------------------------

SQL = (GOLDEN / "b11434.sql").read_text()
JSONL = (GOLDEN / "b11434-jsonl.stdout").read_text()
GOOD = json.loads(JSONL.splitlines()[0])


def _jl(**change: object) -> str:
    """One llama-bench JSONL result with some fields changed (None removes nothing: it sets null)."""
    return json.dumps(dict(GOOD, **change))


MALFORMED: dict[str, str | bytes] = {
    "empty": "",
    "prose": "hello world\n",
    "json not an array": '"x"',
    "json array of numbers": "[1, 2]",
    "json empty object": "[{}]",
    "jsonl empty object": "{}\n",
    "jsonl non-object line": JSONL.splitlines()[0] + "\n[1]\n",
    "jsonl number line": "{}\n42\n",
    "jsonl truncated": JSONL[: len(JSONL) // 2],
    "n_prompt null": _jl(n_prompt=None),
    "n_prompt string": _jl(n_prompt="64"),
    "n_gen negative": _jl(n_gen=-1),
    "n_depth float": _jl(n_depth=0.5),
    "n_prompt bool": _jl(n_prompt=True),
    "no tokens": _jl(n_prompt=0, n_gen=0),
    "count beyond int": _jl(n_prompt=2**40),
    "int >= 2^63": _jl(n_prompt=2**63),
    "int 5000 digits": '{"n_prompt": ' + "9" * 5000 + "}",
    "1e400": _jl(avg_ts=1) .replace('"avg_ts": 1', '"avg_ts": 1e400'),
    "NaN": _jl(avg_ts=1).replace('"avg_ts": 1', '"avg_ts": NaN'),
    "-Infinity": _jl(avg_ts=1).replace('"avg_ts": 1', '"avg_ts": -Infinity'),
    "avg_ts string": _jl(avg_ts="fast"),
    "samples_ns string": _jl(samples_ns="12"),
    "samples_ns empty": _jl(samples_ns=[]),
    "samples_ns zero": _jl(samples_ns=[0, 1]),
    "samples_ns negative": _jl(samples_ns=[-5, 1]),
    "samples_ns huge": _jl(samples_ns=[2**64]),
    "samples_ns nested": _jl(samples_ns=[[1]]),
    "samples_ts length mismatch": _jl(samples_ts=[1.0]),
    "lone surrogate": _jl(model_filename="x").replace('"model_filename": "x"', '"model_filename": "\\ud800"'),
    "escaped NUL": _jl(model_filename="a\u0000b"),
    "raw NUL byte": b'{"n_prompt": 1\x00}\n',
    "deep nesting": "[" * 100000 + "]" * 100000,
    "deep nesting in jsonl": '{"a": ' + "[" * 50 + "]" * 50 + "}",
    "invalid utf-8": b"\xff\xfe{\x00",
    "sql attach": "ATTACH DATABASE '{evil}' AS e; CREATE TABLE e.t(a INTEGER);",
    "sql after valid": SQL + "\nATTACH DATABASE '{evil}' AS e; CREATE TABLE e.t(a INTEGER);",
    "sql drop": SQL + "\nDROP TABLE llama_bench;",
    "sql select": "CREATE TABLE llama_bench (n_prompt INTEGER);\nSELECT 1;",
    "sql blob": SQL.replace("'/tmp/m/llama-tiny.gguf'", "X'00ff'", 1),
    "sql huge int": SQL.replace("'64'", "'99999999999999999999'", 1),
    "sql 1e400": SQL.replace("'7896.485348'", "'1e400'"),
    "sql text in integer": SQL.replace("'64'", "'lots'", 1),
    "sql NUL": SQL.replace("'layer'", "'lay\x00er'", 1),
    "sql truncated": SQL[: len(SQL) - 40],
    "sql unknown column": SQL.replace("(build_commit, build_number", "(build_commitx, build_number", 1),
    "sql too few values": SQL.replace("VALUES ('unknown', ", "VALUES (", 1),
    "sql insert before create": SQL[SQL.index("INSERT"):],
    "sql two tables": SQL + "CREATE TABLE other (a INTEGER);",
    "sql no rows": SQL[: SQL.index("INSERT")],
    "sql comment": "-- hi\n" + SQL,
}


def _import_cli(tmp_path: Path, name: str, content: str | bytes) -> tuple[int, str]:
    f = tmp_path / "in.txt"
    evil = tmp_path / "evil.db"
    if isinstance(content, str):
        f.write_text(content.replace("{evil}", str(evil)), errors="surrogatepass")
    else:
        f.write_bytes(content)
    db = tmp_path / "s.db"
    rc = main(["import", str(f), "--db", str(db)])
    assert not evil.exists(), f"{name}: the SQL was executed"
    return rc, str(db)


def test_malformed_imports_are_one_line_and_store_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean = 0
    for name, content in MALFORMED.items():
        d = tmp_path / name.replace(" ", "_")
        d.mkdir()
        rc, db = _import_cli(d, name, content)
        err = capsys.readouterr().err
        assert rc == 2, (name, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), (name, err)
        assert "Traceback" not in err
        with Store(Path(db)) as s:
            assert s.reads.studies() == [], name
            assert s.db.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 0, name
        clean += 1
    assert clean == len(MALFORMED) >= 50


def test_empty_object_is_not_a_tg0_test(tmp_path: Path) -> None:
    f = tmp_path / "e.jsonl"
    f.write_text("{}\n")
    with Store(tmp_path / "s.db") as s, pytest.raises(UserError, match="no n_prompt"):
        import_file(s, f)


def test_a_bad_second_model_leaves_nothing_half_imported(tmp_path: Path) -> None:
    other = dict(GOOD, model_filename="/tmp/m/other.gguf")
    f = tmp_path / "two.jsonl"
    f.write_text(json.dumps(GOOD) + "\n" + json.dumps(dict(other, n_gen=None)) + "\n")
    with Store(tmp_path / "s.db") as s:
        with pytest.raises(UserError, match="result 2 .* n_gen is null"):
            import_file(s, f)
        assert s.reads.studies() == []
        f.write_text(json.dumps(GOOD) + "\n" + json.dumps(other) + "\n")
        study, n = import_file(s, f)
        assert n == 2
        assert [r["status"] for r in s.reads.studies()] == ["done"]
        assert sorted(t["model"] for t in s.reads.trials(study)) == ["/tmp/m/llama-tiny.gguf", "/tmp/m/other.gguf"]
        assert {t["status"] for t in s.reads.trials(study)} == {"done"}


def test_import_is_one_transaction(tmp_path: Path) -> None:
    """A store failure while writing the last model rolls back the study and the earlier models."""
    f = tmp_path / "two.jsonl"
    f.write_text(json.dumps(GOOD) + "\n" + json.dumps(dict(GOOD, model_filename="/tmp/m/b.gguf")) + "\n")
    with Store(tmp_path / "s.db") as s:
        # a trigger makes the second trial's insert fail half-way through the import
        s.db.execute("CREATE TRIGGER boom BEFORE INSERT ON trials WHEN NEW.model = '/tmp/m/b.gguf'"
                     " BEGIN SELECT RAISE(ABORT, 'disk on fire'); END")
        with pytest.raises(sqlite3.IntegrityError, match="disk on fire"):
            import_file(s, f)
        assert s.db.execute("SELECT COUNT(*) FROM studies").fetchone()[0] == 0
        assert s.db.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 0
        assert s.db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 0


def test_import_trial_is_one_transaction(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        study = s.writes.import_study("import", {}, "h", ("a", "import:x", {}), [])
        rows = (result_row(0, GOOD), result_row(0, dict(GOOD, samples_ns=[2**62], samples_ts=[1.0])))
        # the second result reuses test_idx 0: UNIQUE(trial_id, test_idx) fails after the
        # trial row and the first result are written; nothing of the trial may remain
        out = TrialOutcome("done", 0, "", "", 0.0, 0.0, 0, 0, {}, rows, ())
        with pytest.raises(sqlite3.IntegrityError):
            s.writes.import_trial(study, "a", "m", out)
        assert s.reads.trials(study) == []
        assert s.db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 0


def test_sql_is_read_as_data(tmp_path: Path) -> None:
    rows = parse_sql(SQL)
    assert [(r["n_prompt"], r["n_gen"]) for r in rows] == [(64, 0), (0, 16)]
    assert rows[0]["avg_ts"] == pytest.approx(7896.485348) and rows[0]["tensor_split"] == "0.00"
    # older llama-bench builds called the table "test"; '' is SQL's escaped quote
    old = SQL.replace("llama_bench", "test").replace("'/tmp/m/llama-tiny.gguf'", "'/tmp/it''s.gguf'")
    assert parse_sql(old)[1]["model_filename"] == "/tmp/it's.gguf"
    # two runs appended to one file: the header is repeated, rows add up
    assert len(parse_sql(SQL + SQL)) == 4
