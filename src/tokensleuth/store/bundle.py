"""A stored study as one file others can read, and back: a study bundle.

The bundle holds the study's rows, whole: its spec, its arms (sources and builds), every trial
with its environment, raw samples, timed windows, sampled timeline and warnings, and its state;
``pages/bundle.py`` adds the machine, the models and the verdicts as rendered, and leaves out the
writer's home and secrets (``core/redact.py``). Here: the rows out of a store and into one (one
transaction: a study is imported whole or not at all), the file read and checked (a damaged
file, another format or another schema version is one line), and the file written.

One JSON object (gzip when the name ends in ``.gz``)::

    {format: "tokensleuth-bundle", schema_version, tokensleuth, written_at, digest, redacted,
     study: {id, kind, spec_hash, spec, status, created_at, finished_at},
     arms: [{name, source, kind, engine, flags, env}],
     trials: [{seq, pair, arm, model, workload, argv, status, exit_code, message, stderr_tail,
               started_at, ended_at, t0_ns, t1_ns, env, node,
               results: [{test_idx, test, n_prompt, n_gen, n_depth, avg_ts, stddev_ts, raw,
                          samples: [{rep, duration_ns, tokens, tokens_per_s, n_prompt, n_gen,
                                     start_ns, end_ns, ttft_ns, metrics}]}],
               windows: [{test_idx, rep, start_ns, end_ns, cpu_ms, counters}],
               timeline: [[t_ns, {…}]], warnings: [[code, detail]]}],
     state: {key: value}, machine, models, verdicts, report}
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sqlite3
import time
import uuid
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import UserError, show
from tokensleuth.core.paths import write_atomic
from tokensleuth.core.records import UNFINISHED

if TYPE_CHECKING:
    from tokensleuth.store.lifecycle import Store

BUNDLE_FORMAT = "tokensleuth-bundle"
BUNDLE_SCHEMA_VERSION = 1  # bumped when a key changes meaning; a reader refuses any other
GZIP_MAGIC = b"\x1f\x8b"
IMPORTED_PREFIX = "bundle:"  # an imported study's spec_hash: never the identity a run here resumes
FINISHED_TRIALS = ("done", "failed", "crashed", "timeout", "garbage")
FINISHED_STUDIES = ("done", "failed")
HINT = "ask its writer for the file again (`tokensleuth report ID --bundle FILE`)"

_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_INT = (int, type(None))
_OPT_STR = (str, type(None))
_OPT_DICT = (dict, type(None))
_ANY = (dict, list, str, int, float, bool, type(None))
STUDY = {"id": (str,), "kind": (str,), "spec_hash": (str,), "spec": (dict,), "status": (str,),
         "created_at": _NUM, "finished_at": _OPT_NUM}
ARM = {"name": (str,), "source": (str,), "kind": (str,), "engine": (dict,), "flags": (list,), "env": (dict,)}
TRIAL = {"seq": (int,), "pair": (int,), "arm": (str,), "model": (str,), "workload": (str,), "argv": (list,),
         "status": (str,), "exit_code": _OPT_INT, "message": _OPT_STR, "stderr_tail": _OPT_STR,
         "started_at": _OPT_NUM, "ended_at": _OPT_NUM, "t0_ns": _OPT_INT, "t1_ns": _OPT_INT, "env": _OPT_DICT,
         "node": _OPT_STR, "results": (list,), "windows": (list,), "timeline": (list,), "warnings": (list,)}
RESULT = {"test_idx": (int,), "test": (str,), "n_prompt": (int,), "n_gen": (int,), "n_depth": (int,),
          "avg_ts": _OPT_NUM, "stddev_ts": _OPT_NUM, "raw": _ANY, "samples": (list,)}
SAMPLE = {"rep": (int,), "duration_ns": (int,), "tokens": (int,), "tokens_per_s": _NUM, "n_prompt": _OPT_INT,
          "n_gen": _OPT_INT, "start_ns": _OPT_INT, "end_ns": _OPT_INT, "ttft_ns": _OPT_INT, "metrics": _OPT_DICT}
WINDOW = {"test_idx": (int,), "rep": (int,), "start_ns": (int,), "end_ns": (int,), "cpu_ms": _OPT_NUM,
          "counters": _OPT_DICT}
CONTENT = ("study", "arms", "trials", "state")  # what the digest covers: the study, not its rendering


# -- out of a store ------------------------------------------------------------------------------


def _decoded(text: str | None, empty: Any) -> Any:
    return json.loads(text) if text else empty


def study_rows(store: Store, study_id: str) -> dict[str, Any]:
    """The study's rows, whole, as plain JSON values (``study``, ``arms``, ``trials``, ``state``)."""
    db = store.db
    s = db.execute("SELECT * FROM studies WHERE id=?", (study_id,)).fetchone()
    if s is None:
        raise UserError(f"no study {study_id!r} — list them with `tokensleuth studies`")
    if s["status"] in UNFINISHED:
        raise UserError(f"study {study_id} is {s['status']} — finish it (rerun its command with --resume) "
                        "before bundling it")
    study = {"id": s["id"], "kind": s["kind"], "spec_hash": s["spec_hash"], "spec": json.loads(s["spec_json"]),
             "status": s["status"], "created_at": s["created_at"], "finished_at": s["finished_at"]}
    arms = [{"name": a["name"], "source": a["source"], "kind": a["kind"], "engine": _decoded(a["engine_json"], {}),
             "flags": _decoded(a["flags_json"], []), "env": _decoded(a["env_json"], {})}
            for a in db.execute("SELECT * FROM arms WHERE study_id=? ORDER BY id", (study_id,))]
    trials = [_trial(db, t) for t in db.execute(
        "SELECT t.*, a.name AS arm FROM trials t JOIN arms a ON a.id=t.arm_id WHERE t.study_id=? ORDER BY t.seq",
        (study_id,))]
    if not any(t["status"] == "done" for t in trials):
        raise UserError(f"study {study_id} has no finished trial — there is nothing in it to re-check")
    state = {r["key"]: json.loads(r["value_json"]) for r in db.execute(
        "SELECT key, value_json FROM state WHERE study_id=? ORDER BY key", (study_id,))}
    return {"study": study, "arms": arms, "trials": trials, "state": state}


def _trial(db: sqlite3.Connection, t: sqlite3.Row) -> dict[str, Any]:
    tid = t["id"]
    results = []
    for r in db.execute("SELECT * FROM results WHERE trial_id=? ORDER BY test_idx", (tid,)).fetchall():
        samples = [{"rep": s["rep"], "duration_ns": s["duration_ns"], "tokens": s["tokens"],
                    "tokens_per_s": s["tokens_per_s"], "n_prompt": s["n_prompt"], "n_gen": s["n_gen"],
                    "start_ns": s["start_ns"], "end_ns": s["end_ns"], "ttft_ns": s["ttft_ns"],
                    "metrics": _decoded(s["metrics_json"], None)}
                   for s in db.execute("SELECT * FROM samples WHERE result_id=? ORDER BY rep", (r["id"],))]
        results.append({"test_idx": r["test_idx"], "test": r["test"], "n_prompt": r["n_prompt"], "n_gen": r["n_gen"],
                        "n_depth": r["n_depth"], "avg_ts": r["avg_ts"], "stddev_ts": r["stddev_ts"],
                        "raw": json.loads(r["raw_json"]), "samples": samples})
    windows = [{"test_idx": w["test_idx"], "rep": w["rep"], "start_ns": w["start_ns"], "end_ns": w["end_ns"],
                "cpu_ms": w["cpu_ms"], "counters": _decoded(w["counters_json"], None)}
               for w in db.execute("SELECT * FROM windows WHERE trial_id=? ORDER BY test_idx, rep", (tid,))]
    timeline = [[r["t_ns"], json.loads(r["values_json"])]
                for r in db.execute("SELECT t_ns, values_json FROM timeline WHERE trial_id=? ORDER BY t_ns", (tid,))]
    warnings = [[w["code"], w["detail"]]
                for w in db.execute("SELECT code, detail FROM warnings WHERE trial_id=? ORDER BY rowid", (tid,))]
    return {"seq": t["seq"], "pair": t["pair"], "arm": t["arm"], "model": t["model"], "workload": t["workload"],
            "argv": json.loads(t["argv_json"]), "status": t["status"], "exit_code": t["exit_code"],
            "message": t["message"], "stderr_tail": t["stderr_tail"], "started_at": t["started_at"],
            "ended_at": t["ended_at"], "t0_ns": t["t0_ns"], "t1_ns": t["t1_ns"], "env": _decoded(t["env_json"], None),
            "node": t["node"], "results": results, "windows": windows, "timeline": timeline, "warnings": warnings}


def digest(bundle: Mapping[str, Any]) -> str:
    """What identifies a bundle's study: the hash of its rows as written (not of their rendering,
    nor of when the file was written): the same study bundled twice imports once."""
    content = json.dumps({k: bundle.get(k) for k in CONTENT}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(content.encode()).hexdigest()


def provenance(path: Path, bundle: Mapping[str, Any]) -> dict[str, Any]:
    """Where an imported study came from (its state ``bundle``): the file, its study's id where it
    was written, its writer and machine."""
    return {"file": Path(path).name, "digest": digest(bundle), "study": bundle["study"]["id"],
            "written_at": bundle.get("written_at"), "tokensleuth": bundle.get("tokensleuth"),
            "machine": bundle.get("machine"), "imported_at": time.time()}


# -- into a store --------------------------------------------------------------------------------


def present(store: Store, bundle: Mapping[str, Any]) -> str | None:
    """The study of this bundle where the store already holds it (imported before, or the very
    study it was written from), else None."""
    s = bundle["study"]
    row = store.db.execute("SELECT id FROM studies WHERE spec_hash=? ORDER BY created_at LIMIT 1",
                           (IMPORTED_PREFIX + digest(bundle)[:16],)).fetchone()
    if row is not None:
        return str(row["id"])
    own = store.db.execute("SELECT id FROM studies WHERE id=? AND spec_hash=? AND created_at=?",
                           (s["id"], s["spec_hash"], s["created_at"])).fetchone()
    return None if own is None else str(own["id"])


class _Present(Exception):
    """The bundle's study was stored and read back, and the store holds it already: roll it back."""


def import_rows(store: Store, bundle: Mapping[str, Any], provenance: Mapping[str, Any],
                check: Callable[[str], None] | None = None) -> tuple[str, bool]:
    """Store the bundle's study: (its id here, whether it was new). Once: a bundle whose study the
    store holds already is not stored again. The study keeps its id where this store has no other
    study of it. One transaction; ``check(id)`` runs inside it (the study read back as the report
    reads it) and whatever it raises leaves nothing stored. A bundle the store holds already is
    stored and checked too, then rolled back: a damaged copy of a study here is refused all the same."""
    found = present(store, bundle)
    s = bundle["study"]
    taken = store.db.execute("SELECT 1 FROM studies WHERE id=?", (s["id"],)).fetchone() is not None
    sid = uuid.uuid4().hex[:10] if taken else str(s["id"])
    try:
        _insert(store, sid, bundle, provenance, check, keep=found is None)
    except sqlite3.IntegrityError:  # two rows where the store holds one (a repetition twice, say)
        raise UserError(f"bundle {show(str(provenance.get('file')))} is damaged (a row twice) — {HINT}") from None
    except _Present:
        assert found is not None
        return found, False
    return sid, True


def _insert(store: Store, sid: str, bundle: Mapping[str, Any], provenance: Mapping[str, Any],
            check: Callable[[str], None] | None, keep: bool) -> None:
    s = bundle["study"]
    with store.database.tx() as db:
        db.execute("INSERT INTO studies(id, kind, spec_hash, spec_json, status, created_at, finished_at)"
                   " VALUES (?,?,?,?,?,?,?)",
                   (sid, s["kind"], IMPORTED_PREFIX + digest(bundle)[:16] if keep else f"checking:{sid}",
                    json.dumps(s["spec"], sort_keys=True), s["status"], s["created_at"], s["finished_at"]))
        arm_ids = {}
        for a in bundle["arms"]:
            arm_ids[a["name"]] = db.execute(
                "INSERT INTO arms(study_id, name, source, engine_json, flags_json, env_json, kind)"
                " VALUES (?,?,?,?,?,?,?)", (sid, a["name"], a["source"], json.dumps(a["engine"]),
                                            json.dumps(a["flags"]), json.dumps(a["env"]), a["kind"])).lastrowid
        for t in bundle["trials"]:
            _insert_trial(db, sid, arm_ids[t["arm"]], t)
        for key, value in {**bundle["state"], "bundle": dict(provenance)}.items():
            db.execute("INSERT INTO state(study_id, key, value_json) VALUES (?,?,?)", (sid, key, json.dumps(value)))
        if check is not None:
            check(sid)
        if not keep:
            raise _Present


def _insert_trial(db: sqlite3.Connection, sid: str, arm_id: int | None, t: Mapping[str, Any]) -> None:
    tid = db.execute(
        "INSERT INTO trials(study_id, arm_id, seq, pair, model, workload, argv_json, status, exit_code, message,"
        " stderr_tail, started_at, ended_at, t0_ns, t1_ns, env_json, node) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (sid, arm_id, t["seq"], t["pair"], t["model"], t["workload"], json.dumps(t["argv"]), t["status"],
         t["exit_code"], t["message"], t["stderr_tail"], t["started_at"], t["ended_at"], t["t0_ns"], t["t1_ns"],
         None if t["env"] is None else json.dumps(t["env"]), t["node"])).lastrowid
    for r in t["results"]:
        rid = db.execute("INSERT INTO results(trial_id, test_idx, test, n_prompt, n_gen, n_depth, avg_ts, stddev_ts,"
                         " raw_json) VALUES (?,?,?,?,?,?,?,?,?)",
                         (tid, r["test_idx"], r["test"], r["n_prompt"], r["n_gen"], r["n_depth"], r["avg_ts"],
                          r["stddev_ts"], json.dumps(r["raw"]))).lastrowid
        db.executemany("INSERT INTO samples(result_id, rep, duration_ns, tokens, tokens_per_s, n_prompt, n_gen,"
                       " start_ns, end_ns, ttft_ns, metrics_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                       [(rid, x["rep"], x["duration_ns"], x["tokens"], x["tokens_per_s"], x["n_prompt"], x["n_gen"],
                         x["start_ns"], x["end_ns"], x["ttft_ns"],
                         None if x["metrics"] is None else json.dumps(x["metrics"])) for x in r["samples"]])
    db.executemany("INSERT INTO windows(trial_id, test_idx, rep, start_ns, end_ns, cpu_ms, counters_json)"
                   " VALUES (?,?,?,?,?,?,?)",
                   [(tid, w["test_idx"], w["rep"], w["start_ns"], w["end_ns"], w["cpu_ms"],
                     None if w["counters"] is None else json.dumps(w["counters"])) for w in t["windows"]])
    db.executemany("INSERT INTO timeline(trial_id, t_ns, values_json) VALUES (?,?,?)",
                   [(tid, int(x[0]), json.dumps(x[1])) for x in t["timeline"]])
    db.executemany("INSERT INTO warnings(trial_id, code, detail) VALUES (?,?,?)",
                   [(tid, str(w[0]), str(w[1])) for w in t["warnings"]])


# -- the file ------------------------------------------------------------------------------------


def sniff(path: Path) -> bool:
    """Whether the file says it is a tokensleuth bundle (its head names the format; gzip too)."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
        if head.startswith(GZIP_MAGIC):
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 4096)
    except (OSError, zlib.error):
        return False
    text = head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    return text.startswith("{") and f'"format": "{BUNDLE_FORMAT}"' in text.replace('":"', '": "')


def write_bundle(path: Path, bundle: Mapping[str, Any]) -> None:
    """The bundle written whole or not at all (gzip where the name ends in ``.gz``)."""
    text = json.dumps(bundle, indent=1, ensure_ascii=False) + "\n"
    if path.name.endswith(".gz"):
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            tmp.write_bytes(gzip.compress(text.encode(), mtime=0))
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
        return
    write_atomic(path, text)


def read_bundle(path: Path) -> dict[str, Any]:
    """The bundle in ``path``, checked whole (one line for a damaged file, another format or
    another schema version)."""
    where = show(str(path))
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {where}: {exc.strerror or exc} — check the path") from None
    try:
        if raw.startswith(GZIP_MAGIC):
            raw = gzip.decompress(raw)
        obj = json.loads(raw.decode("utf-8"))
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise UserError(f"bundle {where} is damaged ({_why(exc)}) — {HINT}") from None
    if not isinstance(obj, dict) or obj.get("format") != BUNDLE_FORMAT:
        raise UserError(f"{where} is not a tokensleuth bundle (no format {BUNDLE_FORMAT!r}) — give a file that "
                        "`tokensleuth report ID --bundle FILE` wrote")
    version = obj.get("schema_version")
    if version != BUNDLE_SCHEMA_VERSION:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > BUNDLE_SCHEMA_VERSION
        raise UserError(f"bundle {where} has schema version {show(str(version), 20)}; this tokensleuth reads "
                        f"version {BUNDLE_SCHEMA_VERSION} — "
                        + ("upgrade tokensleuth to read it" if newer else "ask its writer for the file again"))
    check_rows(obj, where)
    return obj


def _why(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON: {exc.msg} at line {exc.lineno}"
    if isinstance(exc, EOFError | zlib.error | OSError):
        return "its gzip stream is cut short or corrupt"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return "not UTF-8 text"


def _fields(obj: Any, spec: Mapping[str, tuple[type, ...]], what: str, where: str) -> Mapping[str, Any]:
    if not isinstance(obj, dict):
        raise UserError(f"bundle {where} is damaged ({what} is not an object) — {HINT}")
    for k, types in spec.items():
        v = obj.get(k)
        if k not in obj or not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise UserError(f"bundle {where} is damaged ({what}: {k} is {'missing' if k not in obj else 'wrong'}) "
                            f"— {HINT}")
    return obj


def check_rows(bundle: Mapping[str, Any], where: str) -> None:
    """Every row the bundle stores has its fields, of their types, and refers to what it has."""
    s = _fields(bundle.get("study"), STUDY, "the study", where)
    if s["status"] not in FINISHED_STUDIES or not s["id"]:
        raise UserError(f"bundle {where} is damaged (the study's status is {show(s['status'], 20)}) — {HINT}")
    if not isinstance(bundle.get("arms"), list) or not isinstance(bundle.get("trials"), list) \
            or not isinstance(bundle.get("state"), dict):
        raise UserError(f"bundle {where} is damaged (no arms, trials or state) — {HINT}")
    names = [_fields(a, ARM, "an arm", where)["name"] for a in bundle["arms"]]
    if len(set(names)) != len(names) or not names:
        raise UserError(f"bundle {where} is damaged (its arms' names are not one each) — {HINT}")
    seqs = set()
    for i, t in enumerate(bundle["trials"]):
        _fields(t, TRIAL, f"trial {i + 1}", where)
        if t["arm"] not in names or t["status"] not in FINISHED_TRIALS or t["seq"] in seqs:
            raise UserError(f"bundle {where} is damaged (trial {i + 1}'s arm, status or place) — {HINT}")
        seqs.add(t["seq"])
        for r in t["results"]:
            for x in _fields(r, RESULT, f"a result of trial {i + 1}", where)["samples"]:
                _fields(x, SAMPLE, f"a sample of trial {i + 1}", where)
        for w in t["windows"]:
            _fields(w, WINDOW, f"a window of trial {i + 1}", where)
        if not all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], int) and isinstance(x[1], dict)
                   for x in t["timeline"]) or not all(
                isinstance(x, list) and len(x) == 2 and all(isinstance(y, str) for y in x) for x in t["warnings"]):
            raise UserError(f"bundle {where} is damaged (trial {i + 1}'s timeline or warnings) — {HINT}")
