"""The results of the serving benchmarks people already run, NVIDIA's AIPerf and llama-benchy,
read into the store as an ``import`` study: a user's own runs stand in a report beside
tokensleuth's, each figure under the definition of the tool that measured it.

Read, and nothing else (a file of another tool or version is refused with one line):

- **AIPerf** (``aiperf profile``; version 0.13, export schema 1.x): its artifact folder, its
  summary ``profile_export_aiperf.json`` or its per-request ``profile_export.jsonl`` (the
  default ``--export-level records`` writes both). Every request of the profiling phase is
  one sample; the warm-up phase is left out, as AIPerf leaves it out.
- **llama-benchy** (``--format json --save-result``; version 0.4): every run of every test is
  one sample, with the TTFTs of its own requests. The file lists every request's TTFT in one
  list: where it cannot say which run each came from (a request failed), no run keeps one, and
  a note says so.

A workload is named as tokensleuth names its own: ``pp512+tg128xc4`` is a 512-token prompt,
128 generated tokens, 4 requests at once. The definitions differ from tokensleuth's, and
``DEFINITIONS`` names them; the result's ``raw`` carries the tool's own summary figures, so
nothing the tool printed is lost. ``bench/peer_check.py`` measures where the definitions
part, on one server.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import UserError, show
from tokensleuth.core.records import ResultRow, SampleRow, TrialOutcome, spec_hash

if TYPE_CHECKING:
    from tokensleuth.store import Store

AIPERF_VERSIONS = ("0.13.",)  # the versions whose export this reader was checked against
AIPERF_SCHEMA = "1."
BENCHY_VERSIONS = ("0.4.",)
SUMMARY = "profile_export_aiperf.json"
RECORDS = "profile_export.jsonl"

DEFINITIONS: dict[str, dict[str, str]] = {
    "aiperf": {
        "tokens_per_s": "one request's output tokens (the server's usage count) over its whole latency "
                        "(request sent to last token, client clock); AIPerf's own e2e_output_token_throughput "
                        "counts its tokenizer's tokens unless run with --use-server-token-count",
        "ttft_ms": "request sent to the first streamed token, client clock (time_to_first_token)",
        "itl_ms": "the intervals between streamed chunks (inter_chunk_latency); AIPerf's own "
                  "inter_token_latency is one mean per request, (latency - TTFT) / (tokens - 1)",
        "client_tg_tokens_per_s": "1 / that per-request mean (output_token_throughput_per_user)",
        "tokens": "the server's usage count where AIPerf read it, else AIPerf's tokenizer's count "
                  "of the returned text",
    },
    "llama-benchy": {
        "tokens_per_s": "tokens after the first over the first-to-last token time, client clock, "
                        "per run (tg_throughput; all requests together at concurrency > 1)",
        "ttft_ms": "request sent to the first content token, client clock (e2e_ttft)",
        "itl_ms": "not reported by llama-benchy",
        "client_tg_tokens_per_s": "tg_req_throughput (one request's decode rate)",
        "tokens": "its tokenizer's count of the prompt; --exact-tg asks the server for exactly tg",
    },
}


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(errors="replace"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{show(str(path))} is not JSON ({exc.msg} at line {exc.lineno}) — "
                        f"give AIPerf's {SUMMARY} or llama-benchy's --format json file") from None


def tool_of(path: Path) -> str | None:
    """``aiperf`` or ``llama-benchy`` for a file (or AIPerf artifact folder) either tool wrote;
    None for anything else (llama-bench's output is told apart by its own reader)."""
    if path.is_dir():
        return "aiperf" if (path / SUMMARY).is_file() or (path / RECORDS).is_file() else None
    try:
        with path.open("rb") as f:
            head = f.read(4096).decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    except OSError:
        return None
    if not head.startswith("{"):
        return None
    if '"aiperf_version"' in head or '"metadata"' in head and '"benchmark_phase"' in head:
        return "aiperf"
    if '"latency_mode"' in head or '"benchmarks"' in head and '"prompt_size"' in head:
        return "llama-benchy"
    return None


def _workload(isl: float, osl: float, depth: float, conc: int) -> str:
    name = "+".join(p for p in (f"pp{round(isl)}" if isl else "", f"tg{round(osl)}" if osl else "") if p)
    name += f"@d{round(depth)}" if depth else ""
    return name + (f"xc{conc}" if conc > 1 else "")


def _check_version(tool: str, version: Any, accepted: tuple[str, ...], where: str) -> str:
    v = str(version or "")
    if not v.startswith(accepted):
        raise UserError(f"{show(where)} was written by {tool} {v or 'of an unknown version'}; tokensleuth "
                        f"reads {tool} {', '.join(a + 'x' for a in accepted)} — rerun it with that version, "
                        "or import the figures by hand")
    return v


def _aiperf_files(path: Path) -> tuple[Path, Path]:
    """(summary, records) of an AIPerf run named by its folder or either file."""
    d = path if path.is_dir() else path.parent
    if path.is_file() and path.suffix == ".jsonl":
        prefix = path.name.removesuffix(".jsonl")
        return d / f"{prefix}_aiperf.json" if prefix != "profile_export" else d / SUMMARY, path
    if path.is_file():
        prefix = path.name.removesuffix("_aiperf.json").removesuffix(".json")
        return path, d / f"{prefix}.jsonl"
    return d / SUMMARY, d / RECORDS


def _mean_sd(samples: Sequence[SampleRow]) -> tuple[float, float]:
    """The samples' mean t/s and its standard deviation (0 for one sample), as llama-bench reports them."""
    tps = [s.tokens_per_s for s in samples]
    return statistics.fmean(tps), statistics.stdev(tps) if len(tps) > 1 else 0.0


def _metric(m: dict[str, Any], name: str) -> Any:
    got = m.get(name)
    return got.get("value") if isinstance(got, dict) else None


def _aiperf_sample(i: int, rec: dict[str, Any], isl: float, t0: int) -> SampleRow | None:
    m, meta = rec.get("metrics") or {}, rec.get("metadata") or {}
    ttft, lat = _metric(m, "time_to_first_token"), _metric(m, "request_latency")
    n = _metric(m, "usage_completion_tokens") or _metric(m, "output_sequence_length")
    if not isinstance(lat, (int, float)) or lat <= 0 or not isinstance(n, (int, float)) or n <= 0:
        return None
    icl = _metric(m, "inter_chunk_latency")
    itl = _metric(m, "inter_token_latency")
    metrics: dict[str, Any] = {"ttft_ms_all": [round(float(ttft), 4)] if isinstance(ttft, (int, float)) else [],
                               "itl_ms_all": [round(float(x), 4) for x in icl] if isinstance(icl, list) else [],
                               "aiperf_inter_token_latency_ms": itl}
    if isinstance(itl, (int, float)) and itl > 0:
        metrics["client_tg_ts"] = 1000.0 / itl
    start, end = meta.get("request_start_ns"), meta.get("request_end_ns")
    start_ns = int(start) - t0 if isinstance(start, int) else None
    end_ns = int(end) - t0 if isinstance(end, int) else None
    return SampleRow(i, int(lat * 1e6), int(n), int(_metric(m, "usage_prompt_tokens") or isl), int(n),
                     start_ns, end_ns, int(ttft * 1e6) if isinstance(ttft, (int, float)) else None, metrics)


def _summary_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """AIPerf's own aggregates, as it printed them (kept beside the samples)."""
    keep = ("time_to_first_token", "inter_token_latency", "output_token_throughput",
            "output_token_throughput_per_user", "request_throughput", "request_latency", "total_token_throughput")
    return {k: {f: v for f, v in summary[k].items() if f in ("unit", "avg", "p50", "p90", "p99", "std")}
            for k in keep if isinstance(summary.get(k), dict)}


def _aiperf(path: Path) -> tuple[str, dict[str, Any], str, list[ResultRow], list[str]]:
    summary_path, records_path = _aiperf_files(path)
    if not summary_path.is_file():
        raise UserError(f"no AIPerf summary beside {show(str(path))} (looked for {summary_path.name}) — "
                        "give the artifact folder of one aiperf profile run")
    summary = _load(summary_path)
    if not isinstance(summary, dict) or "aiperf_version" not in summary:
        raise UserError(f"{show(str(summary_path))} is not an AIPerf summary — give {SUMMARY}")
    version = _check_version("AIPerf", summary.get("aiperf_version"), AIPERF_VERSIONS, str(summary_path))
    if not str(summary.get("schema_version", "")).startswith(AIPERF_SCHEMA):
        raise UserError(f"{show(str(summary_path))} has export schema {summary.get('schema_version')}; "
                        f"tokensleuth reads schema {AIPERF_SCHEMA}x — rerun with AIPerf 0.13")
    if not records_path.is_file():
        raise UserError(f"AIPerf's per-request records are missing ({records_path.name} beside "
                        f"{summary_path.name}) — rerun aiperf profile with --export-level records")
    cfg = summary.get("input_config") or {}
    ds = (cfg.get("datasets") or [{}])[0].get("prompts") or {}
    isl, osl = float((ds.get("isl") or {}).get("mean") or 0), float((ds.get("osl") or {}).get("mean") or 0)
    prof = [p for p in cfg.get("phases") or [] if p.get("kind") == "profiling"] or [{}]
    conc = int(prof[0].get("concurrency") or 1)
    notes = []
    if float((ds.get("isl") or {}).get("stddev") or 0) or float((ds.get("osl") or {}).get("stddev") or 0):
        notes.append("prompt or output lengths varied per request (a stddev was set): the name gives their means")
    endpoint = cfg.get("endpoint") or {}
    if not endpoint.get("streaming"):
        notes.append("not streamed: AIPerf measured no time to first token or inter-token latency")
    recs = []
    for n, line in enumerate(records_path.read_text(errors="replace").splitlines(), 1):
        if line.strip():
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:
                raise UserError(f"line {n} of {show(str(records_path))} is not JSON — is the run complete?") from None
    recs = [r for r in recs if isinstance(r, dict) and (r.get("metadata") or {}).get("benchmark_phase") != "warmup"]
    starts = [int(s) for r in recs if isinstance(s := (r.get("metadata") or {}).get("request_start_ns"), int)]
    t0 = min(starts, default=0)
    samples = [s for i, r in enumerate(recs) if (s := _aiperf_sample(i, r, isl, t0)) is not None]
    if len(samples) < len(recs):
        notes.append(f"{len(recs) - len(samples)} of {len(recs)} requests failed or returned nothing: left out")
    if not samples:
        raise UserError(f"{show(str(records_path))} holds no completed request — nothing to import")
    mean, sd = _mean_sd(samples)
    name = _workload(isl, osl, 0, conc)
    raw = {"tool": "aiperf", "version": version, "definitions": DEFINITIONS["aiperf"],
           "endpoint": {k: endpoint.get(k) for k in ("type", "streaming", "extra")},
           "concurrency": conc, "aiperf": _summary_figures(summary), "notes": notes}
    row = ResultRow(0, name, round(isl), round(osl), 0, mean, sd, raw, tuple(samples))
    model = str(((cfg.get("models") or {}).get("items") or [{}])[0].get("name") or "unknown")
    return model, raw, version, [row], notes


def _benchy_ttfts(b: dict[str, Any], conc: int, runs: int) -> list[list[float]] | None:
    """Each run's requests' TTFTs (ms), in run order, or None where the file cannot tell which run
    a TTFT came from. llama-benchy 0.4 writes one TTFT per request that got a first token, all
    runs in one list, and one generation rate per run that got one (at concurrency > 1, one
    prefill rate per run that got a first token). The runs are told apart only where every run
    with a first token gave a rate and all its ``conc`` requests gave a TTFT: as many TTFTs as
    ``conc`` times the rates and, at concurrency > 1, as many prefill rates as generation rates;
    then they come in blocks of ``conc``. At concurrency 1 a rate implies a TTFT, so equal
    counts suffice."""
    got = (b.get("e2e_ttft") or {}).get("values") or []
    if not all(isinstance(x, (int, float)) for x in got) or len(got) != conc * runs:
        return None
    if conc > 1:
        pp = (b.get("pp_throughput") or {}).get("values")
        if not isinstance(pp, list) or len(pp) != runs:
            return None
    return [[float(x) for x in got[i * conc:(i + 1) * conc]] for i in range(runs)]


def _benchy(path: Path) -> tuple[str, dict[str, Any], str, list[ResultRow], list[str]]:
    obj = _load(path)
    if not isinstance(obj, dict) or not isinstance(obj.get("benchmarks"), list):
        raise UserError(f"{show(str(path))} is not llama-benchy --format json output")
    version = _check_version("llama-benchy", obj.get("version"), BENCHY_VERSIONS, str(path))
    rows: list[ResultRow] = []
    notes: list[str] = []
    for b in obj["benchmarks"]:
        if not isinstance(b, dict) or b.get("is_context_prefill_phase"):
            continue
        conc = int(b.get("concurrency") or 1)
        tg = (b.get("tg_throughput") or {}).get("values") or []
        ttft = (b.get("e2e_ttft") or {}).get("values") or []
        req = (b.get("tg_req_throughput") or {}).get("values") or []
        n_gen, n_prompt = int(b.get("response_size") or 0), int(b.get("prompt_size") or 0)
        per_run = _benchy_ttfts(b, conc, len(tg))
        if per_run is None and ttft:
            notes.append(f"test pp{n_prompt} tg{n_gen} c{conc}: {len(ttft)} TTFTs for {len(tg)} runs of {conc} "
                         "requests, and the file does not say which run each came from (a request failed or "
                         "gave no first token): no run's TTFT kept; llama-benchy's own mean is in raw")
        samples = []
        for i, v in enumerate(tg):
            if not isinstance(v, (int, float)) or v <= 0 or n_gen <= 1:
                continue
            tokens = (n_gen - 1) * conc  # tokens after the first, every request of the run
            mine = per_run[i] if per_run is not None else []  # this run's own requests' TTFTs
            metrics: dict[str, Any] = {"ttft_ms_all": mine}
            if i < len(req) and isinstance(req[i], (int, float)) and conc == 1:
                metrics["client_tg_ts"] = float(req[i])
            samples.append(SampleRow(i, int(tokens * 1e9 / v), tokens, n_prompt, n_gen, None, None,
                                     int(min(mine) * 1e6) if mine else None, metrics))
        if not samples:
            notes.append(f"test pp{n_prompt} tg{n_gen} c{conc}: no run with a generation rate, left out")
            continue
        mean, sd = _mean_sd(samples)
        name = _workload(n_prompt, n_gen, float(b.get("context_size") or 0), conc)
        raw = {"tool": "llama-benchy", "version": version, "definitions": DEFINITIONS["llama-benchy"],
               "concurrency": conc, "latency_mode": obj.get("latency_mode"),
               "llama_benchy": {k: {f: b[k].get(f) for f in ("mean", "std")} for k in
                                ("pp_throughput", "tg_throughput", "tg_req_throughput", "e2e_ttft", "est_ppt")
                                if isinstance(b.get(k), dict)}}
        rows.append(ResultRow(len(rows), name, n_prompt, n_gen, int(b.get("context_size") or 0), mean, sd, raw,
                              tuple(samples)))
    if not rows:
        raise UserError(f"{show(str(path))} holds no llama-benchy test with a generation rate — nothing to import")
    return str(obj.get("model") or "unknown"), rows[0].raw, version, rows, notes


def import_file(store: Store, path: Path) -> tuple[str, int]:
    """Store one AIPerf run or llama-benchy result file as an ``import`` study: (id, results)."""
    shown = os.fsencode(path).decode("utf-8", "replace")
    tool = tool_of(path)
    if tool is None:
        raise UserError(f"{show(shown)} is neither AIPerf's nor llama-benchy's output — give AIPerf's artifact "
                        f"folder (or its {SUMMARY}) or a llama-benchy --format json file")
    model, raw, version, rows, notes = _aiperf(path) if tool == "aiperf" else _benchy(path)
    now = time.time()
    ends = [s.end_ns for r in rows for s in r.samples if s.end_ns is not None]
    name = Path(shown).name
    engine: dict[str, Any] = {"source": f"import:{name}", "tool": tool, "tool_version": version,
                              "definitions": DEFINITIONS[tool], "backends": []}
    outcome = TrialOutcome("done", 0, f"imported from {name} ({tool} {version})", "", now, now, 0, max(ends, default=0),
                           {"imported_from": str(path.resolve()), "tool": tool},
                           tuple(rows), (), (), tuple(("peer-definition", n) for n in notes))
    spec = {"file": str(path.resolve()), "format": tool, "tool_version": version, "n": len(rows)}
    study = store.writes.import_study("import", spec, spec_hash(spec), ("imported", engine["source"], engine),
                               [(model, outcome)])
    return study, len(rows)
