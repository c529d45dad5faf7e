"""A tokensleuth bundle (``report ID --bundle FILE``) imported as the study it holds: read back
as `report` reads it before it is kept, and kept once."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import UserError, show
from tokensleuth.store import Store
from tokensleuth.store.bundle import HINT, import_rows, provenance, read_bundle, sniff
from tokensleuth.studies import kind_of


def renders(store: Store, study_id: str, where: str) -> None:
    """The imported study rendered as `report` renders it; a bundle whose rows do not render is damaged."""
    kind = kind_of(store.reads.study(study_id).kind)
    try:
        kind.render_stored(store, study_id)
    except UserError as exc:  # a value the spec's own checks refuse
        raise UserError(f"bundle {where} is damaged (its study does not read back: {str(exc).split(' — ')[0]}) "
                        f"— {HINT}") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:  # (pydantic's are ValueErrors)
        first = (str(exc).splitlines() or [""])[0]
        raise UserError(f"bundle {where} is damaged (its study does not read back: "
                        f"{show(f'{type(exc).__name__}: {first}', 80)}) — {HINT}") from None


def import_bundle(store: Store, path: Path, bundle: Mapping[str, Any] | None = None) -> tuple[str, bool]:
    """Store the bundle's study (``bundle``: the file already read): (its id here, whether it was new)."""
    b = read_bundle(path) if bundle is None else bundle
    where = show(str(path))
    if not kind_of(b["study"]["kind"]).bundles:
        raise UserError(f"bundle {where} holds a {b['study']['kind']} study; bundles of that kind are not read "
                        "by this tokensleuth — upgrade it, or import the compare studies it ran")
    return import_rows(store, b, provenance(path, b), check=lambda sid: renders(store, sid, where))


def checked(path: Path) -> dict[str, Any]:
    """The bundle in ``path``, read and imported into a scratch store as `import` would import it
    (rendered as `report` renders it): a command that keeps it later (rerun) knows it reads back
    before anything is stored or run."""
    import tempfile

    bundle = read_bundle(path)
    with tempfile.TemporaryDirectory(prefix="tokensleuth-bundle-") as d, Store(Path(d) / "check.sqlite") as scratch:
        import_bundle(scratch, path, bundle)
    return bundle


class BundleImporter:
    """`tokensleuth import FILE` of a tokensleuth bundle."""

    name = "tokensleuth bundle"
    folders = False

    def sniff(self, path: Path) -> bool:
        return sniff(path)

    def read(self, store: Store, path: Path) -> tuple[str, int]:
        bundle = read_bundle(path)
        sid, new = import_bundle(store, path, bundle)
        return sid, len(bundle["trials"]) if new else 0

    def said(self, study: str, n: int) -> str:
        if n == 0:
            return f"study {study} is in the store already (this bundle's): nothing imported"
        return f"imported the bundle's study as study {study}: {n} trial{'s' if n != 1 else ''} (`tokensleuth " \
               f"report {study}` renders it)"


BUNDLE = BundleImporter()
