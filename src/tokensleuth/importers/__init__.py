"""Importers: files that other tools, or tokensleuth elsewhere, wrote, stored as studies here.

One registry. Each importer knows its files by their first bytes (``sniff``), stores one
(``read``: the study's id and how many results or trials it stored) and says what it stored
(``said``). `tokensleuth import` asks the registry which importer a file is for and never names
a format itself. A new format is one object with these four members plus its line in
``IMPORTERS``.

Floor 10: imports studies, engines, store and below; never pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tokensleuth.core.writes import check_readable_file
from tokensleuth.engines import importer_for, peers, sniffer_for
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.importers.bundle import BUNDLE

if TYPE_CHECKING:
    from tokensleuth.store import Store

FLOOR = 10  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)


class Importer(Protocol):
    """What `tokensleuth import` asks of a format."""

    @property
    def name(self) -> str:
        """The format, as the messages name it."""
        ...

    @property
    def folders(self) -> bool:
        """Whether its files may be a folder (AIPerf's artifact folder)."""
        ...

    def sniff(self, path: Path) -> bool:
        """Whether ``path`` is this format's, by its first bytes (a folder: by its files)."""
        ...

    def read(self, store: Store, path: Path) -> tuple[str, int]:
        """Store the file as a study: (its id, how many results or trials were stored; 0: none, it
        was there already). Whole or not at all; one line for a file it cannot read."""
        ...

    def said(self, study: str, n: int) -> str:
        """The line `tokensleuth import` prints once ``read`` returned."""
        ...


@dataclass(frozen=True)
class EngineOutput:
    """An engine kind's own output (llama-bench's -o json, jsonl or sql), read by its engine."""

    name: str
    folders: bool = False

    def sniff(self, path: Path) -> bool:
        return sniffer_for(self.name)(path)

    def read(self, store: Store, path: Path) -> tuple[str, int]:
        return importer_for(self.name)(store, path)

    def said(self, study: str, n: int) -> str:
        return f"imported {n} results as study {study}"


@dataclass(frozen=True)
class PeerOutput:
    """A serving benchmark's results (AIPerf, llama-benchy), each figure under the tool's definitions."""

    name: str  # the tool, as engines.peers.tool_of names it
    folders: bool = False

    def sniff(self, path: Path) -> bool:
        return peers.tool_of(path) == self.name

    def read(self, store: Store, path: Path) -> tuple[str, int]:
        return peers.import_file(store, path)

    def said(self, study: str, n: int) -> str:
        return (f"imported {n} {self.name} result{'s' if n != 1 else ''} as study {study} (under {self.name}'s "
                "definitions: report shows them)")


LLAMA_BENCH = EngineOutput(DEFAULT_KIND)
# in the order they are asked; a file none of them knows goes to FALLBACK, whose reader names
# what `import` reads in its one-line error
IMPORTERS: tuple[Importer, ...] = (BUNDLE, PeerOutput("aiperf", folders=True), PeerOutput("llama-benchy"),
                                   LLAMA_BENCH)
FALLBACK: Importer = LLAMA_BENCH


def importer_of(path: Path) -> Importer:
    """The importer of ``path``: a folder only where an importer takes folders; a file once it is
    one that can be read (a FIFO or /dev/zero would never end), by the first whose sniff knows it."""
    if path.is_dir():
        found = next((i for i in IMPORTERS if i.folders and i.sniff(path)), None)
        if found is not None:
            return found
    check_readable_file("a result file", path)
    return next((i for i in IMPORTERS if i.sniff(path)), FALLBACK)
