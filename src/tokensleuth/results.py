"""Read a study's stored samples back into plain cells for analysis and reports."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tokensleuth.store import Store

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
    tokens_per_s: list[float] = field(default_factory=list)
    # one entry per trial: the trial's mean t/s (the unit of a paired comparison)
    trial_means: dict[int, float] = field(default_factory=dict)
    trial_seq: dict[int, int] = field(default_factory=dict)
    cpu_ms: float = 0.0
    window_ms: float = 0.0
    window_tokens: int = 0
    avg_ts: float | None = None  # imported results without samples
    stddev_ts: float | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.model, self.test, self.test_idx)

    def resources(self) -> dict[str, Any]:
        notes: list[str] = []
        cpu_ms_per_token = busy = None
        if self.window_tokens and self.window_ms > 0:
            cpu_ms_per_token = self.cpu_ms / self.window_tokens
            busy = self.cpu_ms / self.window_ms
        else:
            notes.append("no timed windows with CPU counters (imported or old results)")
        notes.append("GPU, power and energy figures need a GPU monitor source; none on this host")
        return {
            "cpu_ms_per_token": cpu_ms_per_token,
            "busy_cores": busy,
            "spinning_threads": None,
            "gpu_busy_pct": None,
            "gpu_clock_mhz": None,
            "power_w": None,
            "joules_per_token": None,
            "tokens_per_joule": None,
            "peak_rss_anon_mb": None,
            "notes": notes,
        }


def load_cells(store: Store, study_id: str) -> list[Cell]:
    cells: dict[tuple[str, str, int], Cell] = {}
    windows_cache: dict[int, dict[tuple[int, int], Any]] = {}
    for r in store.results(study_id):
        raw = json.loads(r["raw_json"])
        key = (r["arm"], r["model"], int(r["test_idx"]))
        cell = cells.get(key)
        if cell is None:
            meta = {k: raw.get(k) for k in ("model_type", "model_size", "model_n_params",
                                              "backends", "build_commit", "build_number",
                                              *PARAM_FIELDS)}
            cell = Cell(r["arm"], r["model"], r["test"], int(r["test_idx"]), meta)
            cells[key] = cell
        trial_id = int(r["trial_id"])
        samples = store.samples(int(r["id"]))
        if not samples:
            cell.avg_ts, cell.stddev_ts = r["avg_ts"], r["stddev_ts"]
            if r["avg_ts"] is not None:
                cell.trial_means[trial_id] = float(r["avg_ts"])
                cell.trial_seq[trial_id] = int(r["seq"])
            continue
        ts = [float(s["tokens_per_s"]) for s in samples]
        cell.tokens_per_s.extend(ts)
        cell.trial_means[trial_id] = sum(ts) / len(ts)
        cell.trial_seq[trial_id] = int(r["seq"])
        if trial_id not in windows_cache:
            windows_cache[trial_id] = {(int(w["test_idx"]), int(w["rep"])): w
                                       for w in store.windows(trial_id)}
        wins = windows_cache[trial_id]
        for s in samples:
            w = wins.get((int(r["test_idx"]), int(s["rep"])))
            if w is not None and w["cpu_ms"] is not None:
                cell.cpu_ms += float(w["cpu_ms"])
                cell.window_ms += (int(w["end_ns"]) - int(w["start_ns"])) / 1e6
                cell.window_tokens += int(s["tokens"])
    return list(cells.values())
