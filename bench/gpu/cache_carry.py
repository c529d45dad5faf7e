#!/usr/bin/env python3
"""The compiler cache, carried from one GPU slice to the next.

A lent GPU machine starts bare and reaches no network, so a cache warmed by one slice's builds is
lost with the machine. This packs the cache folder into parts that come back through ``$OUT``
(at most 8 files of 16 MB there) and unpacks them at the start of the next slice:

    python3 bench/gpu/cache_carry.py out .devcache/sccache $OUT --budget-mb 24   # end of a call
    bash-here$ python3 bench/gpu/cache_carry.py take FILES_AT .sccache-in          # back here
    python3 bench/gpu/cache_carry.py in .sccache-in .devcache/sccache            # next call

``out`` keeps the newest cache entries (by modification time) that fit ``--budget-mb`` (the
entries are compressed already), so the carry stays inside the 64 MiB a call may carry beside the
wheels, the engine sdist or the history bundle; a dropped entry is only a miss. Parts are ``cache.tar.NN``
of at most 15 MB each; ``in`` refuses a set with a part missing (one line) and unpacks nothing.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tarfile
from pathlib import Path

PART = 15 * 1000 * 1000
PREFIX = "cache.tar."


def pack(cache: Path, out: Path, budget: int, part: int = PART) -> tuple[int, int, int]:
    """Parts of a tar of the newest entries of ``cache`` within ``budget`` bytes: (entries kept,
    entries dropped, bytes written). sccache and ccache keep their entries compressed (zstd), so
    the tar is not compressed again: its size is known before it is written."""
    files = sorted((p for p in cache.rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime, reverse=True)

    def written(members: int) -> int:  # the members, two zero blocks, padded to whole records
        return -(-(members + 2 * tarfile.BLOCKSIZE) // tarfile.RECORDSIZE) * tarfile.RECORDSIZE

    kept = total = 0
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for p in files:
            info = tar.gettarinfo(p, arcname=str(p.relative_to(cache)))
            head = len(info.tobuf(tar.format, tar.encoding, tar.errors))  # (a pax header included)
            size = head + -(-info.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
            if written(total + size) > budget:
                break
            with p.open("rb") as fh:
                tar.addfile(info, fh)
            kept += 1
            total += size
    data = raw.getvalue()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(PREFIX + "*"):
        old.unlink()
    for i in range(0, len(data), part):
        (out / f"{PREFIX}{i // part:02d}").write_bytes(data[i:i + part])
    return kept, len(files) - kept, len(data)


def unpack(parts_dir: Path, cache: Path) -> int:
    """Unpack the parts into ``cache`` (entries already there are kept): the entries written."""
    parts = sorted(parts_dir.glob(PREFIX + "*"))
    if not parts:
        return 0
    numbers = [int(p.name.removeprefix(PREFIX)) for p in parts]
    if numbers != list(range(len(parts))):
        raise SystemExit(f"error: {parts_dir} lacks part(s) of the cache ({', '.join(p.name for p in parts)}) — "
                         "carry every cache.tar.NN the last call returned, or none")
    data = b"".join(p.read_bytes() for p in parts)
    # the last part(s) missing leave the numbers whole: the tar must still end as a tar ends (two
    # zero blocks) and read through, or nothing is unpacked
    try:
        if len(data) % tarfile.BLOCKSIZE or data[-2 * tarfile.BLOCKSIZE:] != bytes(2 * tarfile.BLOCKSIZE):
            raise tarfile.ReadError("no end of archive")
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            members = tar.getmembers()
    except (tarfile.TarError, EOFError):
        raise SystemExit(f"error: {parts_dir} ends before the cache does (its last part is missing or cut short: "
                         f"{', '.join(p.name for p in parts)}) — carry every cache.tar.NN the last call returned, "
                         "or none") from None
    cache.mkdir(parents=True, exist_ok=True)
    n = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        for m in members:
            if m.isfile() and not (cache / m.name).exists():
                tar.extract(m, cache, filter="data")
                n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("out")
    o.add_argument("cache", type=Path)
    o.add_argument("dest", type=Path)
    o.add_argument("--budget-mb", type=float, default=24.0)
    o.add_argument("--part-mb", type=float, default=PART / 1e6, help="the largest part (at most 16 MB come back)")
    i = sub.add_parser("in")
    i.add_argument("parts", type=Path)
    i.add_argument("cache", type=Path)
    t = sub.add_parser("take")
    t.add_argument("files_at", type=Path)
    t.add_argument("dest", type=Path)
    a = ap.parse_args()
    if a.cmd == "out":
        if not a.cache.is_dir():
            print(f"no cache at {a.cache}: nothing to carry", file=sys.stderr)
            return
        kept, dropped, size = pack(a.cache, a.dest, int(a.budget_mb * 1e6), int(a.part_mb * 1e6))
        print(f"cache carried out: {kept} entries ({dropped} older ones dropped), {size / 1e6:.1f} MB")
    elif a.cmd == "in":
        print(f"cache carried in: {unpack(a.parts, a.cache)} entries")
    else:
        a.dest.mkdir(parents=True, exist_ok=True)
        for old in a.dest.glob(PREFIX + "*"):
            old.unlink()
        got = sorted(a.files_at.rglob(PREFIX + "*"))
        for p in got:
            shutil.copyfile(p, a.dest / p.name)
        print(f"{len(got)} part(s) in {a.dest}: carry it in the next call")


if __name__ == "__main__":
    main()
