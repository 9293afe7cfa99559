"""What a reader of a remote dataset will read, in its order, for the prefetch (storage/prefetch.py).

The order of an epoch is a pure function of (seed, epoch, reader, position) (:mod:`.order`), so
the bytes a cursor will read from its position on are known before it reads them:

* **in order** (no shuffle): the parts from the one holding the position, each part's bytes from
  that row on: a file no larger than the dataset's ``whole_max`` whole (checked against the
  manifest's digest), a larger one in ranges of ``piece_bytes``, the files of one part (a memmap's
  columns) interleaved as the reader reads them;
* **blocks**: the blocks of the epoch's block order from the window holding the position, each by
  the byte ranges of its files the format says reading it reads (a Parquet row group's column
  chunks, a TFRecord block's records, a memmap block's rows); formats that cannot say fetch whole
  files no larger than ``whole_max``, and leave larger ones to be read as asked;
* **exact** (random rows of every file at once): the files that fit half the cache whole, kept for
  the epoch; the rows of the others are read as asked, by ranged GETs.

:func:`attach` gives a cursor its prefetch; closing the cursor stops it.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator

from .common import Group, Parts
from .order import BlockCursor, Cursor, ExactCursor


class Fetching(Cursor):
    """A cursor whose reads are fetched ahead by a prefetch; closing it stops the prefetch."""

    def __init__(self, inner: Cursor, remote, pf) -> None:
        self.inner, self.remote, self.pf = inner, remote, pf

    def rows(self, lo: int, hi: int):
        return self.inner.rows(lo, hi)

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            if self.pf is not None:
                self.remote.stop(self.pf)
                self.pf = None


def attach(ds: Parts, g: Group, cursor: Cursor, start: int) -> Cursor:
    """``cursor`` with a prefetch of what it will read from position ``start`` on (a remote
    dataset's), or ``cursor`` itself."""
    remote = getattr(ds, "remote", None)
    if remote is None:
        return cursor
    if isinstance(cursor, ExactCursor):
        # every batch reads rows of every file: the files that fit half the cache are fetched whole
        # and kept for the epoch, the rows of the others read as asked (storage/remote_array.py)
        files, room, left = [], remote.limit // 2, []
        for f in (remote.file(u) for p in g.parts for u in _uris(ds, p)):
            if f.size <= room or remote.ranged is False:
                files.append(f)
                room -= f.size
            else:
                left.append(f)
        if left and not remote.warned:
            remote.warned = True
            _warn_exact(ds, remote.limit, left)
        if not files:
            return cursor
        pf = remote.prefetch((f.piece() for f in files), keep_all=True)
    elif isinstance(cursor, BlockCursor):
        windows = _wanted_windows(cursor, start)
        first = next(windows, None)
        opened: set = set()
        if first is not None:  # its files opened now, before the reader reads (a footer each, at once)
            _open_parts(ds, g, _new_parts(g, cursor.layout, first, opened))
        pf = remote.prefetch(_block_pieces(ds, g, cursor.layout, first, windows, opened))
    else:
        pf = remote.prefetch(_ordered_pieces(ds, g, start))
    return Fetching(cursor, remote, pf)


def _warn_exact(ds: Parts, limit: int, left: list) -> None:
    """Say (once per dataset opened) that an exact shuffle will read rows of files the cache
    cannot keep by ranged GETs (measured about 100x slower than a block shuffle streaming the same
    bytes)."""
    import warnings

    from ..errors import SlowReadWarning

    nbytes = sum(f.size for f in left)
    warnings.warn(
        f"{ds.path}: an exact shuffle reads the rows of {len(left)} file{'' if len(left) == 1 else 's'} "
        f"({nbytes} bytes) that do not fit half the cache limit ({limit} bytes) by ranged GETs, one per run of "
        "nearby rows: far slower than streaming; shuffle='blocks' streams them, or raise cache_limit to twice "
        "the dataset's size",
        SlowReadWarning,
        stacklevel=_callers_level(),
    )


def _callers_level() -> int:
    """The ``stacklevel`` of the first frame outside this package (the line of the user's loop
    that asked for the batch), so that the warning names it, not ours."""
    import sys

    f, level = sys._getframe(2), 2  # the warn call's caller is level 1 from _warn_exact
    while f is not None and str(f.f_globals.get("__name__", "")).startswith("lovecraft_convert"):
        f, level = f.f_back, level + 1
    return level


LIST_THREADS = 16  # parts whose blocks are listed at once (a Parquet footer each: one GET)


def list_blocks(ds: Parts, g: Group) -> None:
    """Make every part of ``g`` know its blocks, several parts at once, before a block order is
    made of them (a remote dataset's: a Parquet part's row groups are in its footer, one GET each,
    which one after another would delay the first batch by a round trip per file)."""
    remote = getattr(ds, "remote", None)
    if remote is None or (os.getpid(), g.index) in remote.listed:
        return
    readers = [ds.reader(g, p) for p in g.parts]
    if len(readers) < 2 or not any(r.opens_at == "tail" for r in readers):
        return
    _each(lambda r: r.block_starts(), readers)
    remote.listed.add((os.getpid(), g.index))


def _uris(ds: Parts, part) -> list[str]:
    from ..storage import child_path

    return [child_path(ds.path, rel) for rel in part.files]


def _small_files(ds: Parts, part) -> Iterator:
    """The part's files no larger than ``whole_max``, whole (larger ones are read as asked)."""
    remote = ds.remote
    for u in _uris(ds, part):
        f = remote.file(u)
        if f.size <= remote.whole_max:
            yield f.piece()


def _split(f, a: int, b: int, step: int) -> list:
    return [f.piece(x, min(b, x + step)) for x in range(a, b, step)]


def _range_pieces(ds: Parts, ranges: list[tuple[str, int, int]], through: bool) -> Iterator:
    """Pieces of byte ``ranges`` (in reading order). ``through``: the reader reads them through
    (in order), so a small file is fetched whole and a large one in ranges of ``piece_bytes``,
    interleaved across files as a reader of several files at once reads them."""
    remote = ds.remote
    step = remote.piece_bytes
    lists = []
    for uri, a, b in ranges:
        f = remote.file(uri)
        if b <= a:
            continue
        if remote.ranged is False or (f.size <= remote.whole_max and (through or b - a >= f.size // 2)):
            lists.append([f.piece()])
        else:
            lists.append(_split(f, a, b, step if through else 4 * step))  # a block: one piece unless large
    if len(lists) == 1:
        yield from lists[0]
        return
    seen = set()
    keyed = [
        [((p.start - lst[0].start) / max(1, lst[-1].stop - lst[0].start), i, p) for p in lst]
        for i, lst in enumerate(lists)
    ]
    for _, _, p in heapq.merge(*keyed, key=lambda t: (t[0], t[1])):
        if p.key not in seen or not p.whole:
            seen.add(p.key)
            yield p


def _opening(reader, files: list) -> list:
    """The ranges opening the part's files reads (a header, a footer), as unplanned reads fetch
    them: listed with the part, they stay pinned while its readers (in any process) open it."""
    if reader.opens_at == "head":
        return [f.demand_piece(0) for f in files]
    if reader.opens_at == "tail":
        return [f.demand_piece(max(0, f.size - 1)) for f in files]
    return []


def _ordered_pieces(ds: Parts, g: Group, start: int) -> Iterator:
    """In order: the parts from the one holding ``start``, each from that row on: one unit of its
    files whole when they are small, else a unit per block (what is read at once) of its ranges.
    What listing a part reads (its footer, its headers) is marked (:class:`Opening`)."""
    import numpy as np

    from ..storage.prefetch import Opening

    remote = ds.remote
    k = int(np.searchsorted(g.starts, start, side="right")) - 1
    unit = 0
    for p in g.parts[max(0, k) :]:
        a = max(0, start - p.start)
        if a >= p.rows:
            continue
        uris = _uris(ds, p)
        files = [remote.file(u) for u in uris]
        unit += 1
        if remote.ranged is False or all(f.size <= remote.whole_max for f in files):
            for f in files:
                yield unit, f.piece()
            continue
        yield Opening(uris)
        r = ds.reader(g, p)
        starts = np.asarray(r.block_starts(), dtype=np.int64)
        first = int(np.searchsorted(starts, a, side="right")) - 1
        blocks = []
        for b in range(max(0, first), len(starts) - 1):
            ranges = r.block_ranges(b) if b > first or a == starts[b] else r.byte_ranges(a, int(starts[b + 1]))
            if ranges is None:  # the format cannot say: its files through, from their start
                blocks = None
                break
            blocks.append(ranges)
        yield Opening(())
        for piece in _opening(r, files):  # what opening it reads, kept with its first block
            yield unit, piece
        if blocks is None:
            for piece in _range_pieces(ds, [(f.uri, 0, f.size) for f in files], through=True):
                unit += 1
                yield unit, piece
            continue
        for ranges in blocks:
            unit += 1
            for piece in _range_pieces(ds, ranges, through=True):
                yield unit, piece


def _wanted_windows(cursor: BlockCursor, start: int) -> Iterator[int]:
    """The windows of the epoch's block order this reader reads, from the one holding ``start``."""
    layout, wanted = cursor.layout, cursor.wanted
    for w in range(max(0, layout.window_of(start)), layout.windows):
        if _wants(wanted, int(layout.starts[w]), int(layout.starts[w + 1])):
            yield w  # (a window of none of this reader's rows: the cursor skips it)


def _block_pieces(ds: Parts, g: Group, layout, first: int | None, rest: Iterator[int], opened: set) -> Iterator:
    """The blocks of the windows ``first`` and ``rest``, in order. The files of a window's parts
    not met before are opened (what opening reads: a Parquet footer, when the manifest listed the
    row groups) once the window before it is listed, all at once, while the reader is still on
    that window: reads of a file being opened are not the reader's (:class:`Opening`), so a
    window's files are opened before the reader can reach them; ``first``'s by :func:`attach`."""
    from ..storage.prefetch import Opening

    w = first
    while w is not None:
        yield from _window_pieces(ds, g, layout, w)
        w = next(rest, None)
        if w is not None:
            parts = _new_parts(g, layout, w, opened)
            if parts:
                yield Opening([u for p in parts for u in _uris(ds, p)])
                _open_parts(ds, g, parts)
                yield Opening(())


def _new_parts(g: Group, layout, w: int, opened: set) -> list:
    """The parts of window ``w`` not in ``opened`` (which then holds them)."""
    out = []
    for j in range(int(layout.first[w]), int(layout.first[w + 1])):
        p = g.parts[int(layout.part[j])]
        if p.key not in opened:
            opened.add(p.key)
            out.append(p)
    return out


def _open_parts(ds: Parts, g: Group, parts: list) -> None:
    """Open ``parts`` (what listing their blocks reads: a Parquet footer each), at once."""
    readers = [r for r in (ds.reader(g, p) for p in parts) if r.opens_at is not None]
    _each(lambda r: r.open_listing(), readers)


def _wants(wanted, lo: int, hi: int) -> bool:
    """Does the reader ask for any position of ``[lo, hi)`` (batches ``index`` of every ``count``)?"""
    a = max(lo, wanted.start)
    if a >= hi:
        return False
    if wanted.count == 1:
        return True
    first = (a - wanted.start) // wanted.batch  # the batch holding ``a``
    if first % wanted.count == wanted.index:
        return True
    k = first + (wanted.index - first) % wanted.count  # the reader's next batch
    return wanted.start + k * wanted.batch < hi


def _window_pieces(ds: Parts, g: Group, layout, w: int) -> Iterator:
    from ..storage.prefetch import Opening

    for j in range(int(layout.first[w]), int(layout.first[w + 1])):
        p = g.parts[int(layout.part[j])]
        uris = _uris(ds, p)
        yield Opening(uris)
        ranges = ds.reader(g, p).block_ranges(int(layout.block[j]))
        yield Opening(())
        pieces = _small_files(ds, p) if ranges is None else _range_pieces(ds, ranges, through=False)
        for piece in pieces:  # one unit: a block's pieces are read in any order (a row group's columns)
            yield j, piece


def _each(fn, items: list) -> None:
    """``fn`` of every item, ``LIST_THREADS`` at once (a GET each, at most), errors raised here."""
    from ..runtime.interrupts import run_each

    run_each(fn, items, LIST_THREADS, "lovecraft-list")
