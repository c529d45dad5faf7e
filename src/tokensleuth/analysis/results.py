"""Read a study's stored samples back into plain cells for analysis and reports."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tokensleuth.analysis.cold import Cold, cold_leading
from tokensleuth.analysis.stats import STALL_FACTOR, trial_tokens_per_s
from tokensleuth.core.workloads import cell_of
from tokensleuth.monitor.attribute import (
    EDGE_ERROR_LIMIT,
    attributed_cpu_ms,
    edge_error,
    window_resources,
)
from tokensleuth.store import Store, stored_json

# llama-bench result fields that tell two rows of one test apart.
PARAM_FIELDS = ("n_threads", "n_gpu_layers", "n_batch", "n_ubatch", "flash_attn", "type_k",
                "type_v", "poll", "n_cpu_moe", "cpu_mask", "split_mode")


@dataclass(slots=True)
class Cell:
    """All samples of one (arm, model, test) across the study's trials."""

    arm: str
    model: str
    test: str
    test_idx: int
    meta: dict[str, Any]
    tokens_per_s: list[float] = field(default_factory=list)  # every sample, as llama-bench reported it
    # the samples that did not stall: what the tables' and JSON's t/s mean and sd summarize
    kept_tokens_per_s: list[float] = field(default_factory=list)
    # one entry per trial: its mean t/s over the repetitions that did not stall (the unit
    # of a paired comparison; stats.trial_tokens_per_s says why)
    trial_means: dict[int, float] = field(default_factory=dict)
    trial_seq: dict[int, int] = field(default_factory=dict)
    # per trial: (attributed CPU ms, tokens) over the windows of its repetitions that did not stall
    trial_cpu: dict[int, tuple[float, int]] = field(default_factory=dict)
    # CPU ms attributed to the engine's timed durations, and those durations (ms)
    cpu_ms: float = 0.0
    window_ms: float = 0.0
    window_tokens: int = 0
    # stalled repetitions: {"trial", "rep", "duration_ms", "fastest_ms"}
    stalls: list[dict[str, Any]] = field(default_factory=list)
    # per window with an engine duration: |window - engine duration| / engine duration
    edge_errors: list[float] = field(default_factory=list)
    cpus: int | None = None  # logical CPUs the engine could use (fewest seen over trials)
    avg_ts: float | None = None  # imported results without samples
    stddev_ts: float | None = None
    windows: list[dict[str, Any]] = field(default_factory=list)  # per-window resources
    notes: list[str] = field(default_factory=list)
    spinning: list[int] = field(default_factory=list)  # per trial: spinning thread count
    peak_anon_mb: float | None = None
    peak_file_mb: float | None = None
    gpu_trials: int = 0
    # client-side latencies of streamed requests (server engines): every TTFT and inter-token interval
    ttft_ms: list[float] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)
    client_tg_ts: list[float] = field(default_factory=list)
    cold: Cold | None = None  # leading repetitions every trial of this test leaves out (stats.cold_leading)

    def latency(self) -> dict[str, Any] | None:
        """TTFT and inter-token latency percentiles (ms) over every request; None for llama-bench."""
        if not self.ttft_ms and not self.itl_ms:
            return None
        return {"ttft_ms": percentiles(self.ttft_ms), "itl_ms": percentiles(self.itl_ms),
                "client_tg_tokens_per_s": (sum(self.client_tg_ts) / len(self.client_tg_ts)
                                           if self.client_tg_ts else None),
                "requests": len(self.ttft_ms)}

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.model, self.test, self.test_idx)

    def resources(self) -> dict[str, Any]:
        """The resources object of docs/architecture.md: a figure that could not be measured is None."""
        notes = list(dict.fromkeys(self.notes))
        cpu_ms_per_token = busy = None
        if self.window_tokens and self.window_ms > 0:
            cpu_ms_per_token = self.cpu_ms / self.window_tokens
            busy = self.cpu_ms / self.window_ms
        elif self.edge_errors:
            notes.append("no window within the edge limit carried CPU counters: the CPU figures are withheld")
        elif not any(n.startswith("attached server") for n in notes):
            notes.append("no timed windows with CPU counters (imported or old results)")
        w = self.windows

        def tw_mean(key: str) -> float | None:
            got = [(x[key], x["window_s"]) for x in w if x.get(key) is not None]
            tot = sum(d for _, d in got)
            return sum(v * d for v, d in got) / tot if got and tot > 0 else None

        energy = []
        cross = []
        for x in w:
            e = x.get("gpu_energy_counter_j")
            i = x.get("gpu_energy_integral_j")
            energy.append(e if e is not None else i)
            if e and i and x["window_s"] >= 5:
                cross.append(abs(e - i) / e)
        tokens_with_energy = sum(x["tokens"] for x, e in zip(w, energy, strict=False) if e is not None)
        joules = sum(e for e in energy if e is not None)
        jpt = joules / tokens_with_energy if tokens_with_energy and joules > 0 else None
        if w and all(x.get("power_w") is None for x in w):
            if any(x.get("gpu_energy_counter_j") is not None for x in w):
                notes.append("windows shorter than the power sampling interval: no power samples")
            else:
                notes.append("no GPU power readings (no GPU monitor source on this host)")
        if any(x.get("short_window") for x in w) and jpt is not None:
            notes.append("some windows are shorter than 5 power samples: power means are coarse")
        if self.peak_anon_mb is None:
            notes.append("peak memory: no sample (trial shorter than the sampling interval)")
        power_p95 = tw_mean("power_p95_w")
        # The p95 is of the sampled readings; the mean is the energy counter's where there is one.
        # NVML's power reading is a lagging average (about 1 s on an H200), so on windows of a
        # fraction of a second the samples read the idle power before the burst: their p95 ran
        # below the counter's mean (148 against 324 W). A p95 below the mean of the same windows
        # is impossible as a percentile of the real power: not reported.
        same = [x for x in w if x.get("power_p95_w") is not None and x.get("power_w") is not None]
        mean_same = (sum(x["power_w"] * x["window_s"] for x in same) / sum(x["window_s"] for x in same)
                     if same and sum(x["window_s"] for x in same) > 0 else None)
        if power_p95 is not None and mean_same is not None and power_p95 < mean_same:
            notes.append(f"power p95: the sampled power ({power_p95:.0f} W at p95) lags the energy counter's "
                         f"mean ({mean_same:.0f} W) on these short windows — no p95 reported")
            power_p95 = None
        # CPU package energy is a total: windows without it (a failed RAPL read) would make it low
        with_pkg = [x["cpu_pkg_energy_j"] for x in w if x.get("cpu_pkg_energy_j") is not None]
        pkg_energy = sum(with_pkg) if with_pkg and len(with_pkg) == len(w) else None
        if with_pkg and len(with_pkg) < len(w):
            notes.append(f"CPU package energy: {len(w) - len(with_pkg)} of {len(w)} windows have no reading — "
                         "the total is withheld")
        flags = self.flags(busy, tw_mean("busy_pct"))
        notes += self._flag_notes(flags, busy, tw_mean("busy_pct"))
        return {
            "cpu_ms_per_token": cpu_ms_per_token,
            "busy_cores": busy,
            "spinning_threads": (max(self.spinning) if self.spinning and tw_mean("busy_pct") is not None
                                 else None),
            "gpu_busy_pct": tw_mean("busy_pct"),
            "gpu_clock_mhz": tw_mean("sm_clock_mhz"),
            "gpu_clock_max_mhz": max((x["clock_max_mhz"] for x in w if x.get("clock_max_mhz")), default=None),
            "power_w": tw_mean("power_w"),
            "power_p95_w": power_p95,
            "joules_per_token": jpt,
            "tokens_per_joule": 1 / jpt if jpt else None,
            "energy_source": ("counter" if any(x.get("gpu_energy_counter_j") is not None for x in w)
                              else "integrated power" if jpt else None),
            "energy_counter_vs_integral": max(cross) if cross else None,
            "cpu_pkg_energy_j": pkg_energy,
            "cgroup_cpu_ms_per_token": (
                sum(x["cgroup_cpu_ms"] for x in w if x.get("cgroup_cpu_ms") is not None)
                / max(1, sum(x["tokens"] for x in w if x.get("cgroup_cpu_ms") is not None))
                if any(x.get("cgroup_cpu_ms") is not None for x in w) else None),
            "peak_rss_anon_mb": self.peak_anon_mb,
            "peak_rss_file_mb": self.peak_file_mb,
            "stalled_repetitions": len(self.stalls),
            "stalls": list(self.stalls),
            "edge_error_max": max(self.edge_errors, default=None),
            "windows_over_edge_limit": sum(e > EDGE_ERROR_LIMIT for e in self.edge_errors),
            "flags": flags,
            "notes": notes,
        }

    def flags(self, busy: float | None = None, gpu_busy: float | None = None) -> list[str]:
        """Confounder codes this cell's own samples show (rendered beside its figures)."""
        out = []
        if self.stalls:
            out.append("stall")
        if any(e > EDGE_ERROR_LIMIT for e in self.edge_errors):
            out.append("short-window")
        if (busy is not None and self.cpus and busy > self.cpus) or (gpu_busy is not None and gpu_busy > 100):
            out.append("impossible-figure")
        return out

    def _flag_notes(self, flags: list[str], busy: float | None, gpu_busy: float | None) -> list[str]:
        notes = []
        if "stall" in flags:
            notes.append(f"{len(self.stalls)} repetition(s) took over {STALL_FACTOR:g}x their trial's fastest "
                         "(stalled): left out of t/s and the CPU figures; samples keep them as llama-bench reported")
        if "short-window" in flags:
            bad = sum(e > EDGE_ERROR_LIMIT for e in self.edge_errors)
            notes.append(f"{bad} of {len(self.edge_errors)} windows differ from the engine's own durations by "
                         f"more than {EDGE_ERROR_LIMIT:.0%} (worst {max(self.edge_errors):.0%}): their CPU, power "
                         "and energy are left out" + ("; no window was within the limit, so those figures are "
                                                      "withheld" if bad == len(self.edge_errors) else ""))
        if busy is not None and self.cpus and busy > self.cpus:
            notes.append(f"busy cores {busy:.2f} exceed the {self.cpus} CPUs the engine could use: "
                         "a measurement error (windows too short for their edges), not a real figure")
        if gpu_busy is not None and gpu_busy > 100:
            notes.append(f"GPU busy {gpu_busy:.0f}% exceeds 100%: the driver's reading is wrong")
        return notes


def percentiles(values: list[float]) -> dict[str, float] | None:
    """p50, p90, p99 and the mean (linear interpolation between order statistics)."""
    if not values:
        return None
    v = sorted(values)

    def q(p: float) -> float:
        k = (len(v) - 1) * p
        lo = int(k)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (k - lo)

    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "mean": sum(v) / len(v), "n": len(v)}


def cold_by_test(rows: list[Any], samples: dict[int, list[Any]]) -> dict[tuple[str, str, int], Cold]:
    """The cold leading repetitions of each (model, test) over every arm's trials
    (stats.cold_leading): one count for all arms, so each arm leaves out the same repetitions."""
    logs: dict[tuple[str, str, int], list[list[float]]] = defaultdict(list)
    for r in rows:
        ss = samples[int(r["id"])]
        if ss and all(float(x["tokens_per_s"]) > 0 for x in ss):
            idx = cell_of(r["workload"], r["test"], int(r["test_idx"]))[1]
            logs[(r["model"], r["test"], idx)].append([math.log(float(x["tokens_per_s"])) for x in ss])
    return {k: cold_leading(v) for k, v in logs.items()}


def load_cells(store: Store, study_id: str) -> list[Cell]:
    """Every finished trial of a study read back into cells (one per arm, model and test): each
    trial's t/s with its cold leading repetitions (one count per cell over every arm) and stalled
    ones left out, and the resources (CPU, power, energy, memory, latency) read at the windows
    whose edges agree with the engine's own durations; the notes and flags of what was left out."""
    cells: dict[tuple[str, str, str, int], Cell] = {}
    timelines: dict[int, Any] = {}
    envs: dict[int, dict[str, Any]] = {}
    windows_cache: dict[int, dict[tuple[int, int], Any]] = {}
    rows = list(store.reads.results(study_id))
    all_samples = {int(r["id"]): list(store.reads.samples(int(r["id"]))) for r in rows}
    colds = cold_by_test(rows, all_samples)
    for r in rows:
        raw = stored_json(r, "raw_json")
        idx = cell_of(r["workload"], r["test"], int(r["test_idx"]))[1]  # (the window's is the row's own)
        key = (r["arm"], r["model"], r["test"], idx)
        cell = cells.get(key)
        if cell is None:
            meta = {k: raw.get(k) for k in ("model_type", "model_size", "model_n_params",
                                              "backends", "build_commit", "build_number",
                                              *PARAM_FIELDS)}
            cell = Cell(r["arm"], r["model"], r["test"], idx, meta)
            cells[key] = cell
        trial_id = int(r["trial_id"])
        samples = all_samples[int(r["id"])]
        if not samples:
            cell.avg_ts, cell.stddev_ts = r["avg_ts"], r["stddev_ts"]
            if r["avg_ts"] is not None:
                cell.trial_means[trial_id] = float(r["avg_ts"])
                cell.trial_seq[trial_id] = int(r["seq"])
            continue
        ts = [float(s["tokens_per_s"]) for s in samples]
        durations = [int(s["duration_ns"]) for s in samples]
        cell.tokens_per_s.extend(ts)
        cold = colds.get((r["model"], r["test"], idx))
        if cold is not None and (cold.count or cold.undecided is not None):
            cell.cold = cold
        rate = trial_tokens_per_s(ts, durations, cold=cold.count if cold else 0)
        left_out = set(rate.stalled) | set(range(rate.cold))
        cell.kept_tokens_per_s.extend(v for i, v in enumerate(ts) if i not in left_out)
        cell.trial_means[trial_id] = rate.tokens_per_s
        cell.trial_seq[trial_id] = int(r["seq"])
        for i in rate.stalled:
            cell.stalls.append({"trial": int(r["seq"]), "rep": int(samples[i]["rep"]),
                                "duration_ms": durations[i] / 1e6, "fastest_ms": min(durations) / 1e6})
        if trial_id not in windows_cache:
            windows_cache[trial_id] = {(int(w["test_idx"]), int(w["rep"])): w
                                       for w in store.reads.windows(trial_id)}
        wins = windows_cache[trial_id]
        if trial_id not in timelines:  # read once per trial, shared by its tests' cells
            timelines[trial_id] = store.reads.timeline(trial_id)
            envs[trial_id] = stored_json(r, "env_json", "{}")
        # one result row per (trial, test): each cell takes the trial's readings once
        env = envs[trial_id]
        cpus = (env.get("monitor") or {}).get("process", {}).get("cpus_allowed") or env.get("cpu_count")
        if cpus:
            cell.cpus = min(cell.cpus or int(cpus), int(cpus))
        cell.notes += env.get("monitor_notes", [])
        if env.get("cpu_note"):  # an engine that has no local process to measure says why
            cell.notes.append(str(env["cpu_note"]))
        cell.spinning.append(len(env.get("spinning_threads", [])))
        mem = env.get("peak_memory_mb") or {}
        if "RssAnon" in mem:
            cell.peak_anon_mb = max(cell.peak_anon_mb or 0.0, mem["RssAnon"])
            cell.peak_file_mb = max(cell.peak_file_mb or 0.0, mem.get("RssFile", 0.0))
        for t in env.get("spinning_threads", []):
            cell.notes.append(f"spinning thread {t['name']}: {t['cores']} cores with "
                              f"{t['voluntary_switches_per_s']} voluntary switches/s while the GPU works")
        interval_s = float(env.get("sample_interval_s", 0.2))
        for i, s in enumerate(samples):
            if s["metrics_json"]:
                m = stored_json(s, "metrics_json")
                cell.ttft_ms += [float(x) for x in m.get("ttft_ms_all", [])]
                cell.itl_ms += [float(x) for x in m.get("itl_ms_all", [])]
                if m.get("client_tg_ts"):
                    cell.client_tg_ts.append(float(m["client_tg_ts"]))
            w = wins.get((int(r["test_idx"]), int(s["rep"])))
            if w is None:
                continue
            window_ns = int(w["end_ns"]) - int(w["start_ns"])
            # a client-timed sample (a server request) owns its whole window: its CPU is the
            # server's over the request, first byte sent to last token received
            engine_ns = window_ns if s["start_ns"] is not None else int(s["duration_ns"])
            err = edge_error(window_ns, engine_ns)
            if err is not None:
                cell.edge_errors.append(err)
            if i in left_out or (err is not None and err > EDGE_ERROR_LIMIT):
                # a stalled or cold repetition is left out of the resources with its t/s; edges off
                # by more than the limit read counters that do not belong to this repetition, so
                # its CPU, power and energy are withheld (its t/s is kept)
                continue
            if w["cpu_ms"] is not None:
                # CPU over llama-bench's own duration, not the window's edges (attribute.py);
                # a stalled (or cold) repetition's CPU is left out with its t/s
                share = attributed_cpu_ms(float(w["cpu_ms"]), window_ns, engine_ns)
                cell.cpu_ms += share.cpu_ms
                cell.window_ms += share.duration_ms
                cell.window_tokens += int(s["tokens"])
                cpu, tokens = cell.trial_cpu.get(trial_id, (0.0, 0))
                cell.trial_cpu[trial_id] = (cpu + share.cpu_ms, tokens + int(s["tokens"]))
            counters = stored_json(w, "counters_json", "{}")
            res = window_resources(int(w["start_ns"]), int(w["end_ns"]), counters, timelines[trial_id],
                                   interval_s)
            res["tokens"] = int(s["tokens"])
            res["engine_s"] = engine_ns / 1e9
            res["edge_error"] = err
            cell.windows.append(res)
    return list(cells.values())
