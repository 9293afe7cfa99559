"""HDF5 written from one thread of its own, and uncompressed fixed-size columns written chunk by
chunk without HDF5's chunk cache.

Each such column gathers rows in a chunk-sized buffer; a full buffer gets its fletcher32 appended
(fletcher.py) and is handed to the HDF5 thread, which writes it with ``write_direct_chunk`` while
the caller fills the next one (buffers come back to a pool). Calls are handed over in lists of
up to 4 MiB of chunks, so that a table of thousands of columns (thousands of small chunks per
batch) pays for a thread hand-over per list, not per chunk. The file is the one a cached
write makes (the same chunks and checksums), but every byte is copied once, the checksum is
vectorised, and checksums and writes overlap with reading and statistics on the other core.
Every ``SYNC_EVERY`` bytes the file is flushed to disk in the background, so the final fsync
finds little left.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from functools import partial

import numpy as np

from ...engine.interrupts import join, put_while
from ...engine.writer import BackgroundSync
from .fletcher import fletcher32

QUEUED = 3  # lists waiting for the thread


class Hdf5Thread:
    """The one thread that makes every HDF5 call of a file being written, in the order they are
    handed over: resizes, cached writes and full chunks. HDF5 lays the file out in the order of its
    calls, so the bytes depend only on the data, never on timing; and HDF5 is not thread-safe
    (h5py's own lock is taken around each list). An error stops the work; the caller's next call
    raises it.

    The lock: h5py's own (see native.py) where the library calls may be used, held around each
    list, so that no other thread's h5py call runs inside HDF5 between them; otherwise none of
    ours (each h5py call takes h5py's)."""

    SYNC_EVERY = 64 << 20

    def __init__(self, path: str, memory: int, threaded: bool = True) -> None:
        """``memory``: what the calls in flight may hold, about half the writer's share.
        ``threaded`` False: every call made at once, in the caller's thread. For small chunks (a
        wide table's): a thread that takes the GIL back after every one of thousands of short
        HDF5 calls waits out the interpreter's switch interval behind the caller each time."""
        from . import native

        self.threaded = threaded
        lock = native.h5py_lock()
        self.locked = lock is not None  # h5py's lock: the library calls may be used
        self.lock = lock if lock is not None else contextlib.nullcontext()
        self.path = path
        self.q: queue.Queue = queue.Queue(maxsize=QUEUED)
        self.error: BaseException | None = None
        self.sync: BackgroundSync | None = None
        self.unsynced = 0
        # bytes per hand-over: with QUEUED lists waiting, one running and one being gathered
        self.batch_bytes = max(64 << 10, min(4 << 20, memory // (QUEUED + 2)))
        self.ops: list = []  # calls not yet handed over
        self.op_bytes = 0
        self.pools: dict[int, deque] = {}
        self.t = threading.Thread(target=self._run, name="lovecraft-hdf5", daemon=True)
        if threaded:
            self.t.start()
        self.before: _Before | None = None  # calls made in a thread of their own, before all others

    def _run(self) -> None:
        while True:
            ops = self.q.get()
            if ops is None:
                return
            try:
                if self.error is None:
                    with self.lock:
                        for fn in ops:
                            fn()
            except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
                self.error = e

    def first(self, fn) -> None:
        """Run ``fn`` (HDF5 calls, each under the lock) in a thread of its own from now on: every
        call added after it waits for it to end, and raises its error. For an unthreaded writer's
        thousands of dataset creations (a wide table's: ~0.1 s), made while the caller gathers
        the first chunks, which need no HDF5 call; the file is the one made in the caller's
        thread, as nothing else calls HDF5 meanwhile."""
        assert not self.threaded and self.before is None
        self.before = _Before(fn)

    def _ready(self) -> None:
        """Wait for :meth:`first`'s thread (raising its error, and again on every call after).
        It is let go only once ended: interrupted while waiting, :meth:`abort` waits again, so the
        file is never touched while the thread is still calling HDF5."""
        if self.before is not None:
            self.before.wait()
            self.before = None

    def add(self, fn, nbytes: int = 0) -> None:
        """Run ``fn()`` on the thread after everything added before."""
        self._ready()
        if not self.threaded:
            with self.lock:
                fn()
            return
        self.ops.append(fn)
        self.op_bytes += nbytes
        if self.op_bytes >= self.batch_bytes:
            self.flush()

    def flush(self) -> None:
        """Hand over the calls added so far."""
        self._ready()
        self.check()
        if self.ops:
            ops, self.ops, self.op_bytes = self.ops, [], 0
            put_while(self.q, ops, self.t.is_alive)

    def buffer(self, size: int) -> bytearray:
        pool = self.pools.setdefault(size, deque())
        try:
            return pool.pop()
        except IndexError:
            return bytearray(size)

    def chunk(self, dsid, coord: tuple, buf: bytearray) -> None:
        """Write ``buf`` (a chunk and its checksum) as the chunk at ``coord``; the buffer goes
        back to the pool, which keeps what the calls in flight could need."""
        dsid.write_direct_chunk(coord, buf)
        pool = self.pools[len(buf)]
        if len(pool) * len(buf) < (QUEUED + 2) * self.batch_bytes:
            pool.append(buf)
        self.wrote(len(buf))

    def wrote(self, nbytes: int) -> None:
        """``nbytes`` more were written to the file: every ``SYNC_EVERY`` bytes, they are flushed
        to disk in the background."""
        self.unsynced += nbytes
        if self.unsynced >= self.SYNC_EVERY:
            if self.sync is None:
                self.sync = BackgroundSync(self.path)
            self.sync.kick()
            self.unsynced = 0

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Wait for everything added to be done; raise the first error."""
        self.flush()
        self._stop()
        self.check()

    def _stop(self) -> None:
        """End the thread (after what it was handed) and the background flushes."""
        if self.t.is_alive():
            put_while(self.q, None, self.t.is_alive)
            join(self.t)
        if self.sync is not None:
            s, self.sync = self.sync, None
            s.close()

    def abort(self) -> None:
        """Stop without raising: what is still queued is dropped (the thread skips it), and the
        thread has ended before the caller touches the file."""
        self.error = self.error or RuntimeError("aborted")
        self.ops = []
        try:
            self._ready()
        except BaseException:  # noqa: BLE001 - already failing
            pass
        try:
            self._stop()
        except BaseException:  # noqa: BLE001 - already failing
            pass


class _Before:
    """``fn()`` run in a thread of its own; :meth:`wait` for it and raise its error."""

    def __init__(self, fn) -> None:
        self.error: BaseException | None = None
        self.t = threading.Thread(target=self._run, args=(fn,), name="lovecraft-hdf5-create", daemon=True)
        self.t.start()

    def _run(self, fn) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - raised in the waiting thread
            self.error = e

    def wait(self) -> None:
        join(self.t)
        if self.error is not None:
            raise self.error


class DirectColumn:
    """A fixed-size column's rows, gathered into whole chunks for the :class:`Hdf5Thread`. The
    last chunk is zero-padded, as HDF5 stores an edge chunk."""

    def __init__(self, ds, rows_per_chunk: int, io: Hdf5Thread) -> None:
        self.io = io
        self.dsid = ds.id
        self.dtype = ds.dtype
        self.rows = rows_per_chunk
        self.tail = (0,) * (len(ds.shape) - 1)
        self.shape = (rows_per_chunk, *ds.shape[1:])
        self.count = int(np.prod(self.shape))
        self.nbytes = self.count * ds.dtype.itemsize
        self.buf: bytearray | None = None  # the chunk being filled, and room for its checksum
        self.view: np.ndarray | None = None
        self.held = 0  # rows in it
        self.start = 0  # its first row

    def add(self, col: np.ndarray) -> None:
        col = np.ascontiguousarray(col, dtype=self.dtype)
        i, n = 0, len(col)
        while i < n:
            if self.buf is None:
                self.buf = self.io.buffer(self.nbytes + 4)
                self.view = np.frombuffer(self.buf, dtype=self.dtype, count=self.count).reshape(self.shape)
            k = min(self.rows - self.held, n - i)
            self.view[self.held : self.held + k] = col[i : i + k]
            self.held += k
            i += k
            if self.held == self.rows:
                self._emit()

    def finish(self) -> None:
        if self.held:
            self.view[self.held :] = 0
            self._emit()

    def _emit(self) -> None:
        buf = self.buf
        # the checksum here, the write there: the two take about as long, and so the HDF5 thread
        # writes while this one reads, checks and sums the next chunk
        buf[self.nbytes :] = fletcher32(memoryview(buf)[: self.nbytes]).to_bytes(4, "little")
        self.io.add(partial(self.io.chunk, self.dsid, (self.start, *self.tail), buf), len(buf))
        self.start += self.rows
        self.held = 0
        self.buf = self.view = None


class DirectGroup:
    """Scalar columns of one dtype and chunk length (a wide table's), gathered together
    (:class:`ColumnBlock`): a full block's checksums are computed for every column at once
    (:func:`fletcher32_rows`), and its chunks written one per dataset. Only with an unthreaded
    :class:`Hdf5Thread` (its calls are made at once, so the buffers are reused).

    The datasets are not kept open: an open HDF5 dataset holds about 11 KiB (2,000 columns: 22 MiB
    of a 64 MiB budget), and opening one costs ~30 us, paid once per block of chunks. Each is
    resized to ``target`` when its next chunk is written past its end (the writer grows
    datasets of unknown length by doubling). The opens, writes and closes are made through the
    library's C functions with the GIL released where they can be (``native``: the calls bound to
    this file, see native.py; None: h5py's): h5py holds it through each call, ~1 s of a
    2,000-column run during which the reading thread stood still."""

    def __init__(
        self, fid, names: list[str], dtype: np.dtype, rows_per_chunk: int, io: Hdf5Thread, extent: int, native=None
    ) -> None:
        from ..base import ColumnBlock

        assert not io.threaded
        self.io = io
        self.fid = fid
        self.native = native
        self.names = [n.encode() for n in names]
        self.rows = rows_per_chunk
        self.nbytes = nbytes = rows_per_chunk * dtype.itemsize
        # each chunk gathered in place, its checksum after it (rows 8-byte aligned): one buffer
        self.out = np.empty((len(names), nbytes + 8), dtype=np.uint8)
        data = self.out[:, :nbytes].view(dtype)
        self.block = ColumnBlock(len(names), rows_per_chunk, dtype, self._emit, buf=data)
        self.start = 0
        self.extent = self.target = extent  # the datasets' length, and the one they should have

    def finish(self, attrs: list[list[tuple[bytes, bytes]]], text: tuple) -> None:
        """Write the last (zero-padded) chunks, leave every dataset at ``target`` rows, and write
        the datasets' attributes (``attrs[i]``: (name, UTF-8 value) pairs of column ``i``;
        ``text``: their type and space, see :func:`text_attributes`) as they are opened for that:
        once their chunks are written (held through the writing, 2,000 datasets' attributes made
        HDF5 keep ~8 MiB), with no pass of their own (2,000 more opens and closes)."""
        last = (self.start,) if self.block.held else None
        if self.block.held:
            self.block.buf[:, self.block.held :] = 0
            self._sum()
        self.io.add(partial(self._write, last, (attrs, text)))

    def _sum(self) -> None:
        from .fletcher import fletcher32_rows

        n = self.nbytes
        self.out[:, n : n + 4] = fletcher32_rows(self.out[:, :n]).astype("<u4").view(np.uint8).reshape(-1, 4)

    def _emit(self) -> None:
        self._sum()
        self.io.add(partial(self._write, (self.start,)))
        self.start += self.rows
        self.block.held = 0

    def _write(self, coord: tuple | None, attrs: tuple | None = None) -> None:
        """Each dataset opened, resized if it must be, its chunk at ``coord`` written (none: no
        chunk), its attributes written (``attrs``: those of :meth:`finish`), closed."""
        from h5py import h5d

        resize = (self.target,) if self.target != self.extent else None
        chunks = self.out[:, : self.nbytes + 4]
        pairs, text = attrs or (None, None)
        start = 0
        if self.native is not None:  # without the GIL
            ids = (0, 0) if text is None else (text[0].id, text[1].id)
            start = self.native.write_chunks(self.names, chunks, coord and coord[0], resize and resize[0], pairs, ids)
            start = len(self.names) if start < 0 else start  # else made again below, for its error
        for i in range(start, len(self.names)):
            dsid = h5d.open(self.fid, self.names[i])
            try:
                if resize is not None:
                    dsid.set_extent(resize)
                if coord is not None:
                    dsid.write_direct_chunk(coord, chunks[i])
                if pairs is not None:
                    text_attributes(dsid, pairs[i], text)
            finally:
                dsid.close()
        self.extent = self.target
        if coord is not None:
            self.io.wrote(chunks.shape[0] * chunks.shape[1])


def text_attributes(dsid, pairs: list[tuple[bytes, bytes]], text) -> None:
    """Attributes ``pairs`` ((name, UTF-8 value)) of dataset ``dsid``, through h5py's low-level
    calls (a quarter of ``ds.attrs[k] = v``'s cost); ``text``: the type and space of a text
    attribute (a variable-length UTF-8 scalar, as h5py stores a ``str``), made once for all."""
    import h5py

    tid, space = text
    st = h5py.string_dtype("utf-8")
    for name, value in pairs:
        h5py.h5a.create(dsid, name, tid, space).write(np.array(value.decode(), dtype=st))
