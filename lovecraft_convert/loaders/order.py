"""The order of an epoch, as a pure function of (seed, epoch, position), and cursors that read the
rows at any run of positions ``[lo, hi)`` of it.

* No shuffle: position ``i`` is row ``i`` of the group (its parts one after the other).
* ``exact`` (random-access formats): position ``i`` is row ``perm[i]`` of a seeded permutation of
  the group's rows (:class:`~.common.Permutation`); a run of positions is one gather.
* ``blocks`` (any format; the shuffle of Parquet and TFRecord): the group's blocks (Parquet row
  groups, TFRecord blocks of its index, runs of rows otherwise) are permuted by a generator seeded
  with (seed, epoch); consecutive blocks of that order form *windows* of about ``window`` rows,
  and the rows of each window are permuted exactly, with a generator seeded with (seed, epoch,
  window). Position ``i`` is found without reading anything before it: its window (a binary search
  in the windows' row counts), then the window's permutation. A reader holds the window it is in
  (and builds the next one in a background thread): the memory of two windows.

A cursor is asked for runs of positions in increasing order. ``wanted`` says which positions of the
epoch its reader will ask for (every ``J``-th batch): a window's blocks are then decoded only for
those rows where the format allows it (TFRecord), and windows with none are skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np

from ..runtime import background
from ..runtime.readahead import prefetch
from ..schema import Batch, VarColumn
from .common import Group, Parts, Permutation, take_rows_of, text_arrays, text_as_objects

CHUNK_BYTES = 8 << 20  # rows read per call when reading in order: large contiguous reads
GATHER_BYTES = 2 << 20  # rows of a window gathered at once (in the window's bytes), then sliced into batches


def chunk_bytes(ds: Parts) -> int:
    """:data:`CHUNK_BYTES`, or less for a dataset read through a small cache (storage/dataset.py)."""
    remote = getattr(ds, "remote", None)
    return CHUNK_BYTES if remote is None else min(CHUNK_BYTES, remote.read_bytes)


class Wanted:
    """The positions of an epoch one reader asks for: from ``start`` on, the ``B``-row batches
    ``j, j + J, j + 2J, ...`` (every position from ``start`` when ``J == 1``)."""

    def __init__(self, start: int, batch: int, index: int, count: int) -> None:
        self.start, self.batch, self.index, self.count = start, batch, index, count

    @property
    def everything(self) -> bool:
        return self.count == 1

    def mask(self, lo: int, hi: int) -> np.ndarray:
        """Which positions of ``[lo, hi)`` are asked for (bool)."""
        x = np.arange(lo, hi, dtype=np.int64) - self.start
        m = x >= 0
        if self.count > 1:
            m &= (x // self.batch) % self.count == self.index
        return m


ALL = Wanted(0, 1, 0, 1)


def gather(b: Batch, idx: np.ndarray, text: dict | None = None) -> Batch:
    """Rows ``idx`` of ``b`` (np.take for arrays: faster than fancy indexing); the columns in
    ``text`` (Arrow arrays of :func:`.common.text_arrays`) as object arrays of their rows."""
    cols = {}
    for k, c in b.columns.items():
        if text and k in text:
            cols[k] = take_rows_of(text[k], idx)
        else:
            cols[k] = c.take(idx) if isinstance(c, VarColumn) else np.take(c, idx, axis=0)
    return Batch(cols, len(idx))


def read_range(ds: Parts, g: Group, lo: int, hi: int) -> Batch:
    """Rows ``[lo, hi)`` of group ``g`` (random-access formats), across its parts."""
    pieces = []
    k = int(np.searchsorted(g.starts, lo, side="right")) - 1
    while lo < hi:
        p = g.parts[k]
        b = min(hi, p.start + p.rows)
        if b > lo:
            pieces.append(ds.reader(g, p).read(lo - p.start, b - p.start))
        lo = max(lo, b)
        k += 1
    return Batch.concat(pieces) if pieces else ds.reader(g, g.parts[0]).read(0, 0)


class Cursor:
    """Reads runs of positions of one group's epoch order, in increasing order."""

    def rows(self, lo: int, hi: int) -> Batch:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ExactCursor(Cursor):
    def __init__(self, ds: Parts, g: Group, perm: Permutation) -> None:
        self.ds, self.g, self.perm = ds, g, perm
        if len(g.parts) == 1:
            self.take = ds.reader(g, g.parts[0]).take
        else:
            self.take = lambda idx: ds.take_rows(g, idx)

    def rows(self, lo: int, hi: int) -> Batch:
        return self.take(self.perm[lo:hi])


class RangeCursor(Cursor):
    """No shuffle, random access: large contiguous reads, sliced (one reader), or the runs asked
    for (a reader of several, which skips the others' rows)."""

    def __init__(self, ds: Parts, g: Group, wanted: Wanted, row_bytes: int) -> None:
        self.ds, self.g = ds, g
        self.chunk = max(1, chunk_bytes(ds) // row_bytes) if wanted.everything else 0
        self.buf: Batch | None = None
        self.lo = self.hi = 0

    def rows(self, lo: int, hi: int) -> Batch:
        if not self.chunk:
            return read_range(self.ds, self.g, lo, hi)
        pieces = []
        while lo < hi:
            if not self.lo <= lo < self.hi:
                self.lo, self.hi = lo, min(self.g.rows, max(hi, lo + self.chunk))
                self.buf = text_as_objects(read_range(self.ds, self.g, self.lo, self.hi), self.g.schema)
            b = min(hi, self.hi)
            pieces.append(self.buf.slice(lo - self.lo, b - self.lo))
            lo = b
        return pieces[0] if len(pieces) == 1 else Batch.concat(pieces)


class StreamCursor(Cursor):
    """No shuffle, streaming formats: the parts' ``chunks`` from a position on, in a background
    thread; rows the reader does not want are read through, or skipped by starting again further
    on when the gap is large (Parquet starts at a row group, TFRecord at a block of its index)."""

    def __init__(self, ds: Parts, g: Group, row_bytes: int, background: bool) -> None:
        self.ds, self.g = ds, g
        self.chunk = max(1, chunk_bytes(ds) // row_bytes)
        self.background = background
        self.it: Iterator[Batch] | None = None
        self.buf: Batch | None = None
        self.lo = self.hi = 0

    def _start(self, at: int) -> None:
        self.close()
        it = self._chunks(at)
        self.it = prefetch(it, depth=2) if self.background else it
        self.buf, self.lo, self.hi = None, at, at

    def _chunks(self, at: int) -> Iterator[Batch]:
        g = self.g
        k = int(np.searchsorted(g.starts, at, side="right")) - 1
        for p in g.parts[k:]:
            a = max(0, at - p.start)
            if a < p.rows:
                for b in self.ds.reader(g, p).chunks(a, p.rows, self.chunk, None):
                    yield text_as_objects(b, g.schema)

    def rows(self, lo: int, hi: int) -> Batch:
        if self.it is None or lo < self.lo or lo > self.hi + 4 * self.chunk:
            self._start(lo)
        pieces = []
        while lo < hi:
            if lo >= self.hi:
                self.buf = next(self.it)
                self.lo, self.hi = self.hi, self.hi + self.buf.num_rows
                continue
            b = min(hi, self.hi)
            pieces.append(self.buf.slice(lo - self.lo, b - self.lo))
            lo = b
        return pieces[0] if len(pieces) == 1 else Batch.concat(pieces)

    def close(self) -> None:
        if self.it is not None and hasattr(self.it, "close"):
            self.it.close()
        self.it = None


# --------------------------------------------------------------------------------------------
# blocks and windows
# --------------------------------------------------------------------------------------------


class BlockLayout:
    """A group's blocks in the order of one epoch, cut into windows of about ``window`` rows."""

    def __init__(self, ds: Parts, g: Group, rng: np.random.Generator, window: int) -> None:
        parts, blocks, sizes = [], [], []
        for i, p in enumerate(g.parts):
            starts = np.asarray(ds.reader(g, p).block_starts(), dtype=np.int64)
            n = len(starts) - 1
            parts.append(np.full(n, i, dtype=np.int64))
            blocks.append(np.arange(n, dtype=np.int64))
            sizes.append(np.diff(starts))
        part = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        block = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
        size = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
        keep = size > 0
        part, block, size = part[keep], block[keep], size[keep]
        order = rng.permutation(len(size))
        self.part, self.block, self.size = part[order], block[order], size[order]
        before = np.concatenate([[0], np.cumsum(self.size)]).astype(np.int64)
        # a block belongs to the window in which it starts: windows of `window` rows, give or take a block
        wid = before[:-1] // max(1, window)
        cuts = np.flatnonzero(np.diff(wid)) + 1
        self.first = np.concatenate([[0], cuts, [len(self.size)]]).astype(np.int64)  # first block of window w
        self.starts = before[self.first]  # first position of window w; the epoch's rows last
        self.windows = len(self.first) - 1

    def window_of(self, pos: int) -> int:
        return int(np.searchsorted(self.starts, pos, side="right")) - 1


class Window:
    """The rows of one window a reader asks for, decoded, and the window's permutation. A reader
    that wants every position is served from runs of :data:`GATHER_BYTES` of them, gathered at
    once and sliced (one gather and one Arrow take per column for many batches)."""

    __slots__ = ("index", "lo", "hi", "perm", "batch", "where", "text", "run", "run_lo", "run_hi", "run_rows")

    def __init__(
        self, index: int, lo: int, hi: int, perm: np.ndarray, batch: Batch, where: np.ndarray | None, text: dict
    ) -> None:
        self.index, self.lo, self.hi, self.perm, self.batch, self.where = index, lo, hi, perm, batch, where
        self.text = text
        self.run: Batch | None = None
        self.run_lo = self.run_hi = lo
        self.run_rows = max(1, GATHER_BYTES * batch.num_rows // max(1, batch.nbytes))

    def rows(self, lo: int, hi: int) -> Batch:
        if self.where is not None:  # some positions only: those asked for, one batch at a time
            local = self.perm[lo - self.lo : hi - self.lo]
            return gather(self.batch, self.where[local], self.text)
        if not (self.run_lo <= lo and hi <= self.run_hi):
            self.run_lo, self.run_hi = lo, min(self.hi, max(hi, lo + self.run_rows))
            self.run = gather(self.batch, self.perm[lo - self.lo : self.run_hi - self.lo], self.text)
        return self.run.slice(lo - self.run_lo, hi - self.run_lo)


class BlockCursor(Cursor):
    """The ``blocks`` order: windows read whole (or the rows of them the reader wants), the next
    one built in a background thread while this one is served."""

    def __init__(
        self, ds: Parts, g: Group, layout: BlockLayout, seed_key: tuple, wanted: Wanted, background: bool
    ) -> None:
        self.ds, self.g, self.layout, self.key, self.wanted = ds, g, layout, seed_key, wanted
        self.background = background
        self.win: Window | None = None
        self.it: Iterator[Window] | None = None
        self.next_from = -1

    def _perm(self, w: int, n: int) -> np.ndarray:
        return np.random.default_rng([*self.key, w]).permutation(n)

    def build(self, w: int) -> Window | None:
        """Window ``w``: the rows the reader wants of it, or None when it wants none."""
        L = self.layout
        lo, hi = int(L.starts[w]), int(L.starts[w + 1])
        a, b = int(L.first[w]), int(L.first[w + 1])
        perm = self._perm(w, hi - lo)
        sizes = L.size[a:b]
        offs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        wanted: list[tuple[int, np.ndarray | None]] = []  # (block of the layout, rows of it or all)
        if self.wanted.everything and lo >= self.wanted.start:
            wanted = [(j, None) for j in range(a, b)]
            where = None
        else:
            need = np.sort(perm[self.wanted.mask(lo, hi)])  # window-local rows wanted
            if not len(need):
                return None
            cut = np.searchsorted(need, offs)
            for i, j in enumerate(range(a, b)):
                rows = need[cut[i] : cut[i + 1]] - offs[i]
                if len(rows):
                    wanted.append((j, None if len(rows) == sizes[i] else rows))
            where = np.full(hi - lo, -1, dtype=np.int64)
            where[need] = np.arange(len(need), dtype=np.int64)
        pieces = []
        i = 0
        while i < len(wanted):  # consecutive blocks of one part: read (and decoded) together
            part = int(self.layout.part[wanted[i][0]])
            k = i
            while k < len(wanted) and int(self.layout.part[wanted[k][0]]) == part:
                k += 1
            reader = self.ds.reader(self.g, self.g.parts[part], own=True)
            pieces.append(reader.read_blocks([(int(self.layout.block[j]), rows) for j, rows in wanted[i:k]]))
            i = k
        batch = pieces[0] if len(pieces) == 1 else Batch.concat(pieces)
        # text stays as bytes and offsets here (its objects would take several times the bytes the
        # window is sized by), seen by Arrow (UTF-8 checked here, in the builder's thread); each
        # batch's objects are made as it goes out, with one Arrow take per column
        return Window(w, lo, hi, perm, batch, where, text_arrays(batch, self.g.schema))

    def _windows(self, first: int) -> Iterator[Window]:
        for w in range(first, self.layout.windows):
            win = self.build(w)
            if win is not None:
                yield win

    def rows(self, lo: int, hi: int) -> Batch:
        pieces = []
        while lo < hi:
            if self.win is None or not self.win.lo <= lo < self.win.hi:
                self._seek(lo)
            b = min(hi, self.win.hi)
            pieces.append(self.win.rows(lo, b))
            lo = b
        return pieces[0] if len(pieces) == 1 else Batch.concat(pieces)

    def _seek(self, pos: int) -> None:
        w = self.layout.window_of(pos)
        if self.it is None or w < self.next_from:
            self.close()
            it = self._windows(w)
            self.it = handoff(it) if self.background else it
        self.win = None
        while self.win is None or self.win.hi <= pos:
            self.win = next(self.it)
        self.next_from = self.win.index + 1

    def close(self) -> None:
        if self.it is not None and hasattr(self.it, "close"):
            self.it.close()
        self.it = None
        self.win = None


def handoff(it: Iterator[Window]) -> Iterator[Window]:
    """``it`` run in a background thread that builds the next window only once the consumer has
    taken the previous one: at most two windows exist at a time (the one served, the one built)."""
    lock = threading.Semaphore(1)
    slot: list = []
    ready = threading.Semaphore(0)
    stop = threading.Event()
    done = object()

    def work() -> None:
        try:
            while True:
                lock.acquire()  # released when the consumer takes the last window built
                if stop.is_set():
                    return
                w = next(it, done)
                slot.append((w, None))
                ready.release()
                if w is done:
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            slot.append((None, e))
            ready.release()

    def halt() -> None:
        stop.set()
        lock.release()
        t.join(10.0)

    t = threading.Thread(target=work, name="lovecraft-window", daemon=True)
    t.start()
    token = background.started(halt)  # stopped before the interpreter exits, if still running then
    try:
        while True:
            ready.acquire()
            item, err = slot.pop()
            if err is not None:
                raise err
            if item is done:
                return
            lock.release()  # the previous window is dropped by the consumer: build the next
            yield item
    finally:
        halt()
        token.end()
