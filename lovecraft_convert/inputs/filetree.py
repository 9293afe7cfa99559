"""Directory trees listed in one fixed order, in memory that does not grow with the number of files.

The order is the one a walk gives when every directory's entries are taken sorted by name (code
point order, which is UTF-8 byte order): files compare as the tuples of their path components, so
``a/b`` comes before ``a.txt`` whatever the separator's code. It depends on nothing but the names,
so every process that lists a tree gets the same order, and a part of the listing can start at a
path (:func:`walk` with ``start``) by skipping whole directories that sort before it.

A directory's entries are sorted in memory up to :data:`RUN_NAMES` names; a larger directory's
names are sorted in runs spilled to temporary files and merged as they are read, so a directory of
ten million files is listed with a few megabytes. Names starting with ``.`` (hidden files, ``.git``)
are left out, as are directories reached through symbolic links (as ``os.walk`` leaves them) and
anything that is not a regular file (sockets, pipes: reading a FIFO would block).
"""

from __future__ import annotations

import heapq
import os
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

RUN_NAMES = 1 << 16  # names of one directory sorted in memory before a run is spilled
_REC = struct.Struct("<I")  # a spilled entry: its length in bytes
# An entry is held as one string, its name then NUL then D (a directory) or F: names hold no NUL,
# so these strings sort as the names do, and one string costs half a (name, kind) tuple.
_KINDS = {1: "\0D", 0: "\0F"}


@dataclass(frozen=True)
class Entry:
    """A file of a tree: its path components under the root, its path, its size in bytes and its
    modification time (ns; 0: not known)."""

    rel: tuple[str, ...]
    path: str
    size: int
    mtime_ns: int = 0

    @property
    def relpath(self) -> str:
        """The relative path with ``/`` separators (POSIX), as the ``path`` column holds it."""
        return "/".join(self.rel)


def _kind(e: os.DirEntry, links: bool = False) -> int:
    """1 a directory (not through a link, unless ``links``: a top-level folder), 0 a regular file
    (or a link to one), -1 anything else."""
    try:
        if e.is_dir(follow_symlinks=links):
            return 1
        return 0 if e.is_file() else -1
    except OSError:
        return 0  # a racing removal: reading it will say what happened


def _spill(entries: list[str], tmpdir: str) -> str:
    fd, path = tempfile.mkstemp(prefix="lovecraft-names-", dir=tmpdir)
    with os.fdopen(fd, "wb", buffering=1 << 16) as f:
        for entry in entries:
            raw = entry.encode("utf-8", "surrogateescape")
            f.write(_REC.pack(len(raw)))
            f.write(raw)
    return path


def _run(f) -> Iterator[str]:
    """The entries of a spilled run (an open file, already unlinked), read in pieces."""
    with f:
        while True:
            head = f.read(_REC.size)
            if not head:
                return
            (n,) = _REC.unpack(head)
            yield f.read(n).decode("utf-8", "surrogateescape")


def _opened(path: str):
    f = open(path, "rb", buffering=1 << 16)  # noqa: SIM115 - closed by _run
    os.unlink(path)  # gone from the disk when the last reader closes it, whatever happens
    return f


def sorted_entries(path: str, run_names: int | None = None, links: bool = False) -> Iterator[tuple[str, int]]:
    """``(name, kind)`` of a directory's visible entries sorted by name (kind: 1 directory, 0
    file); at most ``run_names`` names held before the sorted runs are spilled and merged.
    ``links``: a link to a directory is a directory (the root's entries only)."""
    run_names = run_names or RUN_NAMES
    held: list[str] = []
    runs: list[str] = []
    tmpdir = tempfile.gettempdir()
    try:
        with os.scandir(path) as it:
            for e in it:
                if e.name.startswith("."):
                    continue
                kind = _kind(e, links)
                if kind < 0:
                    continue
                held.append(e.name + _KINDS[kind])
                if len(held) >= run_names:
                    held.sort()
                    runs.append(_spill(held, tmpdir))
                    held = []
        held.sort()
        if not runs:
            merged: Iterator[str] = iter(held)
        else:
            files = []
            while runs:
                files.append(_opened(runs.pop()))
            files.reverse()
            merged = heapq.merge(*map(_run, files), iter(held))
        for entry in merged:
            yield entry[:-2], 1 if entry[-1] == "D" else 0
    finally:
        for p in runs:  # spilled but never opened (an error while listing)
            try:
                os.unlink(p)
            except OSError:
                pass


def walk(
    root: str, start: tuple[str, ...] = (), stop: tuple[str, ...] | None = None, run_names: int | None = None
) -> Iterator[Entry]:
    """The files under ``root`` in the tree's order, from the first whose components are ``>=
    start`` to the last ``< stop`` (None: to the end). Sizes come from ``stat`` (following a link
    to a file); a file that vanished meanwhile is listed with size 0 (reading it says so)."""
    for entry in _walk(root, (), start, run_names):
        if stop is not None and entry.rel >= stop:
            return
        yield entry


def _walk(top: str, prefix: tuple[str, ...], start: tuple[str, ...], run_names: int | None) -> Iterator[Entry]:
    first = start[0] if start else None
    # a top-level folder that is a link is read (a class folder linked into a split, as torchvision's
    # ImageFolder follows it); deeper links to directories are left out, as os.walk leaves them
    for name, kind in sorted_entries(top, run_names, links=not prefix):
        if first is not None and name < first:
            continue
        path = os.path.join(top, name)
        rest = start[1:] if name == first else ()
        if kind == 1:
            yield from _walk(path, (*prefix, name), rest, run_names)
            continue
        if name == first and rest:  # ``start`` goes on below a file of that name: it sorts after it
            continue
        try:
            st = os.stat(path)
            size, mtime = st.st_size, st.st_mtime_ns
        except OSError:
            size = mtime = 0
        yield Entry((*prefix, name), path, size, mtime)


def top_directories(root: str) -> list[str]:
    """The visible directories directly under ``root``, sorted (the classes of an ImageFolder
    tree), found in one pass that holds only their names."""
    out = []
    with os.scandir(root) as it:
        for e in it:
            if not e.name.startswith(".") and _kind(e, links=True) == 1:
                out.append(e.name)
    return sorted(out)


def _scanned(root: str) -> Iterator[tuple[os.DirEntry, int | None]]:
    """Every entry of the tree under ``root``, unsorted (a directory's entries as the system lists
    them, directories depth first), with its kind (:func:`_kind`; None: hidden, not looked into)."""
    pending = [root]
    while pending:
        top = pending.pop()
        try:
            with os.scandir(top) as it:
                for e in it:
                    kind = None if e.name.startswith(".") else _kind(e)
                    if kind == 1:
                        pending.append(e.path)
                    yield e, kind
        except OSError:
            continue


def holds_a_file(path: str) -> bool:
    """Does the tree under ``path`` hold a visible file (a directory met through a link at its top
    counted, as the walk reads it)? Stops at the first one (unsorted scans)."""
    return any(kind == 0 for _, kind in _scanned(path))


def holds_data_files(root: str, extensions: set[str], look: int = 1000) -> str | None:
    """The first data file (one whose extension is one of ``extensions``, the kinds recognised by
    name) among the first ``look`` entries of the tree (unsorted), when data files are at least
    half of the files seen; else None. A folder of CSV files is more likely a mistake for a glob
    than a tree of files to read as bytes; a folder of images with a metadata.csv is a tree."""
    files = 0
    found: list[str] = []
    for seen, (e, kind) in enumerate(_scanned(root), 1):
        if seen >= look:
            break
        if kind == 0:
            files += 1
            if os.path.splitext(e.name)[1].lower() in extensions:
                found.append(e.path)
    return found[0] if found and 2 * len(found) >= files else None
