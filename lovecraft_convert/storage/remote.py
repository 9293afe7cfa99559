"""The files of a dataset on an object store as its readers see them: read through the node's cache.

A format's reader opens a file of a remote dataset by its URI (``storage.open_input``), and gets a
seekable binary file whose reads are served by pinned pieces of the :class:`~.cache.Cache`:

* a piece a :class:`~.prefetch.Prefetcher` of the loader brought for this read (a whole file,
  checked against the manifest's digest, or the byte range of one of its blocks);
* the whole file, when the cache holds it;
* otherwise (reads no loader planned: a footer, a header, a map-style dataset's rows) a small
  aligned range around the read, fetched there and then (:data:`DEMAND_BLOCK`).

Nothing stays pinned between two reads, so a reader may keep a file open for as long as it likes
without holding the cache's space. :func:`register` makes a dataset's files known (per process);
``open_input``/``input_size`` of a registered URI then go through here.
"""

from __future__ import annotations

import io
import os
import threading
from typing import Any

from .cache import Cache, Held, Piece
from .prefetch import Prefetcher

DEMAND_BLOCK = 256 << 10  # an unplanned read fetches the aligned range of this size around it
TAIL = 64 << 10  # ... or, in the object's last bytes, those (a footer)


class Sessions:
    """The prefetchers reading a dataset in this process (one per cursor)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Prefetcher] = []
        self._pid = os.getpid()

    def add(self, p: Prefetcher) -> None:
        with self._lock:
            self._check()
            self._items.append(p)

    def remove(self, p: Prefetcher) -> None:
        with self._lock:
            if p in self._items:
                self._items.remove(p)

    def _check(self) -> None:
        if self._pid != os.getpid():  # a forked child: its parent's threads are not here
            self._items, self._pid = [], os.getpid()

    def holds(self, uri: str, start: int, stop: int) -> bool:
        with self._lock:
            self._check()
            items = list(self._items)
        return any(p.holds(uri, start, stop) for p in items)

    def take(self, uri: str, pos: int) -> Held | None:
        """The pinned piece of a prefetch holding byte ``pos`` (the prefetch keeps the pin)."""
        with self._lock:
            self._check()
            items = list(self._items)
        for p in items:
            h = p.take(uri, pos)
            if h is not None:
                return h
        return None

    def recent(self, uri: str, pos: int) -> Piece | None:
        """A piece a prefetch released lately that holds byte ``pos`` (maybe still cached)."""
        with self._lock:
            self._check()
            items = list(self._items)
        for p in items:
            piece = p.recent(uri, pos)
            if piece is not None:
                return piece
        return None

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, d: dict) -> None:
        self.__init__()


class RemoteFile:
    """One object of a remote dataset: its URI, size and digest (the manifest's) and the cache its
    bytes come through."""

    def __init__(
        self, uri: str, size: int, digest: tuple[str, str] | None, cache: Cache, sessions: Sessions | None = None
    ) -> None:
        self.uri, self.size, self.digest, self.cache = uri, int(size), digest, cache
        self.sessions = sessions if sessions is not None else Sessions()
        self.block = max(4 << 10, min(DEMAND_BLOCK, cache.limit // 16))  # an unplanned read's range
        self.whole_only = False  # every read through the whole file, checked (open_dataset(ranged=False))

    def __repr__(self) -> str:
        return f"RemoteFile({self.uri!r}, {self.size})"

    def piece(self, start: int = 0, stop: int | None = None) -> Piece:
        """The whole object (no range given, or the range is all of it) or bytes ``[start, stop)``."""
        if stop is None or (start == 0 and stop >= self.size):
            return Piece(self.uri, self.size, self.digest)
        return Piece(self.uri, self.size, self.digest, max(0, start), min(self.size, stop))

    def demand_piece(self, pos: int) -> Piece:
        """The piece an unplanned read at ``pos`` fetches: the whole object when it is no larger
        than :data:`DEMAND_BLOCK` (or 1/16 of the cache's limit, when smaller), else the aligned
        range of that size holding ``pos`` (in the last such range: the object's tail)."""
        if self.size <= self.block or self.whole_only:
            return self.piece()
        if pos >= self.size - TAIL:  # a footer's read (Parquet's reads its last 64 KiB) costs one range
            return self.piece(max(0, self.size - TAIL), self.size)
        a = pos - pos % self.block
        return self.piece(a, min(self.size, a + self.block))

    def hold(self, pos: int) -> tuple[Held, bool]:
        """A pinned piece holding byte ``pos``, and whether the caller must release it."""
        h = self.sessions.take(self.uri, pos)
        if h is not None:
            return h, False
        h = self.cache.peek(self.piece())
        if h is not None:
            return h, True
        back = self.sessions.recent(self.uri, pos)  # a reader going back (HDF5's metadata)
        if back is not None and not back.whole:
            h = self.cache.peek(back)
            if h is not None:
                return h, True
        p = self.demand_piece(pos)
        if not p.whole:
            h = self.cache.peek(p)
            if h is not None:
                return h, True
        return self.cache.get(p), True

    def readinto(self, buf, offset: int) -> int:
        """Fill ``buf`` with the bytes from ``offset`` on (fewer at the end of the object)."""
        mv = memoryview(buf).cast("B")
        end = min(self.size, offset + len(mv))
        pos = offset
        while pos < end:
            held, own = self.hold(pos)
            try:
                stop = min(end, held.piece.stop)
                n = held.readinto(mv[pos - offset : stop - offset], pos)
            finally:
                if own:
                    held.release(done=False)
            if n <= 0:
                raise EOFError(f"{self.uri}: the cached piece ended early")  # a bug: pieces are checked
            pos += n
        return pos - offset

    def cached(self, start: int, stop: int) -> bool:
        """Do the cache or a prefetch hold bytes ``[start, stop)`` now (a hint: it may evict them)?
        Always, for a file read whole only (its rows are then read from the checked file)."""
        if (
            self.whole_only
            or self.sessions.holds(self.uri, start, stop)
            or os.path.exists(self.cache.path_of(self.piece()))
        ):
            return True
        p = self.demand_piece(start)
        return p.covers(start, stop) and os.path.exists(self.cache.path_of(p))

    def read_direct(self, spans: list[tuple[int, int]], threads: int = 16) -> list[bytes]:
        """The bytes of each ``[start, stop)`` of ``spans`` by ranged GETs, ``threads`` at once,
        without the cache (rows read at random: a GET each costs less than fetching the range
        around each into the cache)."""
        from .rangefile import read_range

        if len(spans) <= 1 or threads <= 1:
            return [read_range(self.uri, a, b) for a, b in spans]
        from ..runtime.interrupts import map_daemons

        # (not a pool: on Ctrl-C the GETs under way are not waited for, even at the exit)
        return map_daemons(lambda ab: read_range(self.uri, ab[0], ab[1]), spans, threads, "lovecraft-rows")

    def read_spans(self, spans: list[tuple[int, int]], threads: int = 16) -> list[bytes]:
        """The bytes of each ``[start, stop)`` of ``spans`` (fewer at the end of the object): from
        the cache or a prefetch where they hold them, the others by ranged GETs, ``threads`` at
        once (:meth:`read_direct`), as :class:`~.remote_array.RemoteArray` reads rows at random."""
        got: list[bytes | None] = [None] * len(spans)
        missing = []
        for i, (a, b) in enumerate(spans):
            if b <= a:
                got[i] = b""
            elif self.cached(a, b):
                got[i] = self.read(a, b - a)
            else:
                missing.append(i)
        if missing:
            for i, data in zip(missing, self.read_direct([spans[i] for i in missing], threads), strict=True):
                got[i] = data
        return got  # type: ignore[return-value]

    def read(self, offset: int, n: int) -> bytes:
        buf = bytearray(max(0, min(n, self.size - offset)))
        got = self.readinto(buf, offset) if buf else 0
        return bytes(buf[:got])

    def open(self, buffering: int = -1):
        """A seekable binary file of the object (``buffering=0``: unbuffered)."""
        raw = CachedFile(self)
        return raw if buffering == 0 else io.BufferedReader(raw, buffer_size=1 << 20)


class CachedFile(io.RawIOBase):
    """A seekable, read-only raw file of a :class:`RemoteFile`."""

    def __init__(self, rf: RemoteFile) -> None:
        super().__init__()
        self.rf = rf
        self.name = rf.uri
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.rf.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def size(self) -> int:
        return self.rf.size

    def readinto(self, b) -> int:
        if self.pos >= self.rf.size:
            return 0
        n = self.rf.readinto(b, self.pos)
        self.pos += n
        return n

    def readall(self) -> bytes:
        data = self.rf.read(self.pos, self.rf.size - self.pos)
        self.pos += len(data)
        return data

    def read_buffer(self, n: int) -> bytearray | memoryview:
        """Up to ``n`` bytes from the position, in a buffer of their own (pyarrow's adapter of a
        Python file asks for this when the file has it, and wraps the buffer as it is: one copy out
        of the cache, where ``read`` makes a second)."""
        n = max(0, min(int(n), self.rf.size - self.pos))
        buf = bytearray(n)
        got = self.rf.readinto(buf, self.pos) if n else 0
        self.pos += got
        return buf if got == n else memoryview(buf)[:got]


_FILES: dict[str, RemoteFile] = {}
_FILES_LOCK = threading.Lock()


def register(files: list[RemoteFile]) -> None:
    """Make ``files`` the ones ``open_input`` and ``input_size`` read their URIs through (this process)."""
    with _FILES_LOCK:
        for f in files:
            _FILES[f.uri] = f


def registered(uri: Any) -> RemoteFile | None:
    """The :class:`RemoteFile` of ``uri`` when a remote dataset opened in this process names it."""
    if not isinstance(uri, str):
        return None
    return _FILES.get(uri)
