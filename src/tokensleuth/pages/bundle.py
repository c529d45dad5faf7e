"""A stored study as one self-contained file that anyone can import or re-run: its rows
(``store/bundle.py``), the machine its trials ran on, its models' facts and its verdicts as
rendered — without the writer's home or secrets (``core/redact.py``)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokensleuth import __version__
from tokensleuth.core.errors import UserError
from tokensleuth.core.hostenv import hardware
from tokensleuth.core.redact import redact
from tokensleuth.models.info import SAME_MODEL, model_info
from tokensleuth.store import Store
from tokensleuth.store.bundle import BUNDLE_FORMAT, BUNDLE_SCHEMA_VERSION, digest, study_rows
from tokensleuth.studies import kind_of


def machines(trials: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The machines the finished trials ran on (one, unless a fleet ran them), in order of first use."""
    out: list[dict[str, Any]] = []
    for t in trials:
        if t["status"] == "done" and isinstance(t.get("env"), dict):
            hw = hardware(t["env"])
            if hw not in out:
                out.append(hw)
    return out


def model_entry(path: str) -> dict[str, Any]:
    """A model as the bundle names it: its path, file name and, where the file is here, its facts."""
    entry: dict[str, Any] = {"path": path, "file": Path(path).name}
    try:
        info = model_info(Path(path)).to_json()
    except (UserError, OSError):
        return entry  # (gone since the study ran: the path alone)
    return dict(entry, **{k: info[k] for k in SAME_MODEL})


def bundle_of(store: Store, study_id: str, rendered: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """The study ``study_id`` as a bundle (``rendered``: its Markdown and JSON, as `report` renders them)."""
    row = store.reads.study(study_id)
    if not kind_of(row.kind).bundles:
        raise UserError(f"a {row.kind} study cannot be bundled yet — bundles hold compare and bench studies "
                        "(bundle the compare studies it ran instead)")
    rows = study_rows(store, row.id)
    md, obj = rendered
    found = machines(rows["trials"])
    body = {**rows, "machine": found[0] if found else None, **({"machines": found} if len(found) > 1 else {}),
            "models": [model_entry(str(m)) for m in rows["study"]["spec"].get("models") or []],
            "verdicts": obj, "report": md}
    clean, counts = redact(body)
    return {"format": BUNDLE_FORMAT, "schema_version": BUNDLE_SCHEMA_VERSION, "tokensleuth": __version__,
            "written_at": time.time(), "digest": digest(clean), "redacted": counts, **clean}
