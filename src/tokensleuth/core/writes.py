"""Every file a command will write, checked before any work: that it can be written, and that it
is none of what the same command reads or stores.

A command names its outputs (``--json``, ``--html``, ``--out`` …), its inputs (models, patches,
a study file, a bundle) and its store, and calls :func:`check_writes` first, before it builds,
measures, downloads or packs anything. An output that is the store (or its journal), an input,
or another output of the same command is refused in one line: writing there would destroy what
the command reads or what earlier studies stored. So is an output that cannot be written where
it is (under a file, in a read-only folder, a folder itself), and one that exists where the
option writes only new files.

Floor 0: imports nothing of tokensleuth's but the errors.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tokensleuth.core.errors import UserError

SIDECARS = ("", "-wal", "-shm", "-journal")  # SQLite's files beside a store
# what a file holds, by its first bytes: never replaced by an output of another kind
PRECIOUS = ((b"GGUF", "a GGUF model"), (b"SQLite format 3\0", "a SQLite database (a study store?)"),
            (b"# v2 git bundle\n", "a git bundle"), (b"# v3 git bundle\n", "a git bundle"))


def holds(path: Path) -> str | None:
    """What precious kind of file ``path`` is (a model, a database, a bundle), or None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(20)
    except OSError:
        return None
    return next((what for magic, what in PRECIOUS if head.startswith(magic)), None)


def file_path(option: str) -> Callable[[str], Path]:
    """A typer parser for an option that names a file: the text as given, refused when it ends
    in a slash (which names a folder; ``Path`` would drop the slash and write a file there)."""
    def parse(text: str) -> Path:
        if text.endswith(("/", os.sep)) and text.strip("/" + os.sep):
            import typer

            raise typer.BadParameter(f"{text} ends in '/', which names a folder — give a file path "
                                     f"(e.g. {text.rstrip('/' + os.sep)})", param_hint=option)
        return Path(text)

    return parse


def _same(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same inode where both exist (a hard link, a symbolic
    link), else the same real path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _nearest_existing(path: Path) -> Path:
    folder = path.parent
    while True:
        try:
            folder.lstat()
            return folder
        except FileNotFoundError:
            if folder == folder.parent:
                return folder
            folder = folder.parent
        except OSError:
            return folder


def check_writable(option: str, path: Path, *, new: bool = False, regular: bool = False,
                   replaces: str | None = None) -> None:
    """Refuse ``path`` for ``option`` unless a file can be written there now.

    An existing path must be a writable file (with ``regular``, a plain one; without, a device
    such as /dev/null or /dev/stdout too) in a folder that takes the temporary file an atomic
    write puts beside it; with ``new`` it must not exist at all. A new path needs its nearest
    existing folder to be a writable folder (missing folders are made). With ``regular`` the file
    is written whole and renamed into place, which would replace a symbolic link rather than
    write through it: a link there, to a file or to nothing, is refused."""
    if regular and os.path.islink(path):
        gone = "" if os.path.exists(path) else ", which does not exist"
        raise UserError(f"{option} {path} is a symbolic link to {os.readlink(path)}{gone} — the file is renamed into "
                        f"place and would replace the link; give the target's own path ({os.path.realpath(path)}) "
                        "or a new file")
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise UserError(f"{option} {path}: {_file_above(path)} is a file, not a folder — give a path inside a "
                        "folder") from None
    except OSError as exc:
        raise UserError(f"cannot use {option} {path}: {exc.strerror or exc} — give another path") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise UserError(f"{option} {path} is a folder — give a file path, e.g. {path / _example(option, replaces)}")
        if new:
            raise UserError(f"{option} {path} exists — give a new file, or --force to replace it")
        if regular and not stat.S_ISREG(st.st_mode):
            raise UserError(f"{option} {path} is not a plain file — give the path of a new file")
        kind = holds(path) if stat.S_ISREG(st.st_mode) else None
        if replaces is not None and kind != replaces:  # (--force: a file of its own kind, nothing else)
            raise UserError(f"{option} {path} exists and is not {replaces} — it replaces {replaces} only; give "
                            "another path")
        if kind is not None and kind != replaces:
            raise UserError(f"{option} {path} is {kind} — writing there would destroy it; give another path")
        if not os.access(path, os.W_OK):
            raise UserError(f"{option} {path} is not writable — give another path or change its permissions")
        if stat.S_ISREG(path.lstat().st_mode) and not os.access(path.parent, os.W_OK | os.X_OK):
            raise UserError(f"{option} {path}: its folder {path.parent} is not writable (the file is replaced "
                            "whole, through a temporary file beside it) — give a writable path")
        return
    folder = _nearest_existing(path)
    if not folder.is_dir():
        raise UserError(f"{option} {path}: {folder} is a file, not a folder — give a path inside a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        why = "is on a read-only file system" if _read_only(folder) else "is not writable"
        raise UserError(f"{option} {path}: {folder} {why} — give a writable path")


def _file_above(path: Path) -> Path:
    """The first folder of ``path``'s parents that is a file (what made the path unusable)."""
    for p in reversed(path.parents):
        if p.exists() and not p.is_dir():
            return p
    return path.parent


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _example(option: str, kind: str | None) -> str:
    """A file name to suggest for ``option``: by the kind of file it writes where that is known
    (a bundle, a model), else by the option."""
    by_kind = {"a git bundle": "h.bundle", "a GGUF model": "out.gguf"}
    return by_kind.get(kind or "") or {"--html": "report.html"}.get(option, "result.json")


def check_writes(writes: Iterable[tuple[str, Path | None]], *, reads: Iterable[tuple[str, Path | str | None]] = (),
                 store: Path | None = None, new: Sequence[str] = (), regular: Sequence[str] = (),
                 replaces: dict[str, str] | None = None) -> None:
    """Refuse, in one line and before any work, an output (``writes``: option, path) that is the
    ``store`` (or one of its SQLite files), that cannot be written, that exists where its option
    is in ``new``, that holds a model, a database or a bundle (unless ``replaces`` names that kind
    for its option), that is a file the command reads (``reads``: what, path), or another output."""
    outs = [(o, Path(p)) for o, p in writes if p is not None]
    if store is not None:  # (first: the store's own words are the plainest)
        for option, path in outs:
            for suffix in SIDECARS:
                if _same(path, Path(f"{store}{suffix}")):
                    what = f"the study store's {suffix[1:]} file" if suffix else "the study store"
                    raise UserError(f"{option} {path} is {what} (--db {store}) — writing there would destroy every "
                                    "study in it; give another path")
    inputs = [(w, Path(p)) for w, p in reads if p is not None and str(p)]
    for option, path in outs:
        for what, src in inputs:
            if _same(path, src):
                raise UserError(f"{option} {path} is {what} this command reads — writing there would destroy it; "
                                "give another path")
    for option, path in outs:
        check_writable(option, path, new=option in new, regular=option in regular,
                       replaces=(replaces or {}).get(option))
    for i, (option, path) in enumerate(outs):
        for other, path2 in outs[i + 1:]:
            if _same(path, path2):
                raise UserError(f"{option} and {other} name the same file {path} — give each its own path")


def check_folder(option: str, path: Path, *, reads: Iterable[tuple[str, Path]] = ()) -> None:
    """Refuse an output folder (files are written into it) that is a file, cannot be made or
    written, or holds a file the command reads (its files would be written over them)."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path} is a file — give a folder (made if missing)")
    folder = path if path.is_dir() else _nearest_existing(path / "x")
    if not folder.is_dir():
        raise UserError(f"{option} {path}: {folder} is a file, not a folder — give a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        why = "is on a read-only file system" if _read_only(folder) else "is not writable"
        raise UserError(f"{option} {path}: {folder} {why} — give a writable folder")
    for what, src in reads:
        if _same(Path(src).parent, path):
            raise UserError(f"{option} {path} holds {what} this command reads ({Path(src).name}): the files written "
                            "there would replace it — give another folder")


def check_readable_file(what: str, path: Path) -> None:
    """Refuse an input that is not a plain file that can be read: missing, a folder, a FIFO or a
    device (which would block or never end), unreadable."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{path} does not exist — give the path of {what}") from None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise UserError(f"{path} does not exist ({_file_above(path)} is a file) — give the path of {what}") from None
        raise UserError(f"cannot read {path}: {exc.strerror or exc} — give the path of {what}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path} is a folder — give the path of {what}")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or \
            stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a plain file"
        raise UserError(f"{path} is {kind}, not a file — give the path of {what}")
    if not os.access(path, os.R_OK):
        raise UserError(f"{path} is not readable — change its permissions or give another path")
