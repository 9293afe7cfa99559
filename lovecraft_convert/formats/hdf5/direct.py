"""HDF5 written from one thread of its own, and uncompressed fixed-size columns written chunk by
chunk without HDF5's chunk cache.

Each such column gathers rows in a chunk-sized buffer (two, alternating); a full buffer gets its
fletcher32 appended (fletcher.py) and goes to the HDF5 thread, which writes it with
``write_direct_chunk`` while the caller fills the other buffer. The file is the one a cached
write makes (the same chunks and checksums), but every byte is copied once, the checksum is
vectorised, and checksums and writes overlap with reading and statistics on the other core.
Every ``SYNC_EVERY`` bytes the file is flushed to disk in the background, so the final fsync
finds little left.
"""

from __future__ import annotations

import queue
import threading
from functools import partial

import numpy as np

from ...engine.interrupts import join, put_while, wait_event
from ...engine.writer import BackgroundSync
from .fletcher import fletcher32


class Hdf5Thread:
    """The one thread that makes every HDF5 call of a file being written, in the order they are
    handed over: resizes, cached writes and full chunks (checksummed here). HDF5 lays the file out
    in the order of its calls, so the bytes depend only on the data, never on timing; and HDF5
    is not thread-safe (h5py's own lock is taken for each call). An error stops the work; the
    caller's next call raises it."""

    SYNC_EVERY = 64 << 20

    def __init__(self, path: str) -> None:
        from h5py._objects import phil  # the lock h5py holds around its calls

        self.lock = phil
        self.path = path
        self.q: queue.Queue = queue.Queue(maxsize=3)
        self.error: BaseException | None = None
        self.sync: BackgroundSync | None = None
        self.unsynced = 0
        self.t = threading.Thread(target=self._run, name="lovecraft-hdf5", daemon=True)
        self.t.start()

    def _run(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            fn, free = item
            try:
                if self.error is None:
                    with self.lock:
                        fn()
            except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
                self.error = e
            finally:
                if free is not None:
                    free.set()

    def chunk(self, dsid, coord: tuple, buf: bytearray) -> None:
        """Write ``buf`` (a chunk and its checksum) as the chunk at ``coord``."""
        dsid.write_direct_chunk(coord, buf)
        self.unsynced += len(buf)
        if self.unsynced >= self.SYNC_EVERY:
            if self.sync is None:
                self.sync = BackgroundSync(self.path)
            self.sync.kick()
            self.unsynced = 0

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def submit(self, fn, free: threading.Event | None = None) -> None:
        """Run ``fn()`` on the thread after everything submitted before; ``free`` is set when done."""
        self.check()
        if free is not None:
            free.clear()
        put_while(self.q, (fn, free), self.t.is_alive)

    def close(self) -> None:
        """Wait for everything handed over to be done; raise the first error."""
        if self.t.is_alive():
            put_while(self.q, None, self.t.is_alive)
            join(self.t)
        if self.sync is not None:
            s, self.sync = self.sync, None
            s.close()
        self.check()

    def abort(self) -> None:
        """Stop without raising: what is still queued is dropped."""
        self.error = self.error or RuntimeError("aborted")
        try:
            self.close()
        except BaseException:  # noqa: BLE001 - already failing
            pass


class DirectColumn:
    """A fixed-size column's rows, gathered into whole chunks for the :class:`ChunkWriter`. The
    last chunk is zero-padded, as HDF5 stores an edge chunk."""

    def __init__(self, ds, rows_per_chunk: int, out: Hdf5Thread) -> None:
        self.out = out
        self.dsid = ds.id
        self.dtype = ds.dtype
        self.rows = rows_per_chunk
        self.tail = (0,) * (len(ds.shape) - 1)
        self.shape = (rows_per_chunk, *ds.shape[1:])
        self.nbytes = int(np.prod(self.shape)) * ds.dtype.itemsize
        # two buffers, each a chunk and room for its checksum: one filled here, one being written
        self.bufs = [bytearray(self.nbytes + 4) for _ in range(2)]
        self.free = [threading.Event(), threading.Event()]
        for e in self.free:
            e.set()
        self.cur = 0
        self.held = 0  # rows in the current buffer
        self.start = 0  # the first row of the chunk being filled

    def _view(self) -> np.ndarray:
        return np.frombuffer(self.bufs[self.cur], dtype=self.dtype, count=int(np.prod(self.shape))).reshape(self.shape)

    def add(self, col: np.ndarray) -> None:
        col = np.ascontiguousarray(col, dtype=self.dtype)
        i, n = 0, len(col)
        while i < n:
            if self.held == 0:
                wait_event(self.free[self.cur])  # written out since it was last handed over
            k = min(self.rows - self.held, n - i)
            self._view()[self.held : self.held + k] = col[i : i + k]
            self.held += k
            i += k
            if self.held == self.rows:
                self._emit()

    def finish(self) -> None:
        if self.held:
            self._view()[self.held :] = 0
            self._emit()

    def _emit(self) -> None:
        c = self.cur
        buf = self.bufs[c]
        # the checksum here, the write there: the two take about as long, and so the HDF5 thread
        # writes while this one reads, checks and sums the next chunk
        buf[self.nbytes :] = fletcher32(memoryview(buf)[: self.nbytes]).to_bytes(4, "little")
        self.out.submit(partial(self.out.chunk, self.dsid, (self.start, *self.tail), buf), self.free[c])
        self.start += self.rows
        self.held = 0
        self.cur = 1 - c
