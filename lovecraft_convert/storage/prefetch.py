"""Fetching the pieces one reader will read next, in its order, a few ahead of it.

A loader's order of an epoch is a pure function of (seed, epoch, reader, position), so the pieces
(whole files, or byte ranges of their blocks) one reader will read from a position on are known
before it reads them. A :class:`Prefetcher` walks that sequence in background threads, keeping the
pieces from the reader's current one up to ``ahead_bytes`` (and ``ahead_pieces``) further fetched
and pinned in the :class:`~.cache.Cache`. The reader says where it is by asking for a piece
(:meth:`Prefetcher.take`); the pieces before it are then released, marked done (the first the cache
evicts), so the cache holds what is being read, what comes next, and what others still use.

A prefetch never makes the cache go over its limit (it waits for room instead); the piece the
reader needs now is fetched by the reader itself when no prefetch brought it yet.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

from .cache import Cache, Held, Piece

SEARCH = 64  # slots ahead in which a piece the reader asks for is looked for
NO_ROOM_WAIT = 0.05  # seconds a fetcher waits for room before it looks again
_local = threading.local()  # .filling: this thread is listing a prefetch's pieces


class _Slot:
    __slots__ = ("piece", "state", "held", "error")

    def __init__(self, piece: Piece) -> None:
        self.piece = piece
        self.state = "new"  # new -> busy -> held | failed; new again when there was no room
        self.held: Held | None = None
        self.error: BaseException | None = None


class Prefetcher:
    """Pieces of ``pieces`` (an iterable, in the order the reader reads them) fetched ahead of the
    reader by ``threads`` threads (with ``advance=False``, all of them, kept pinned until the end: a
    reader that reads in every piece at once, such as an exact shuffle). Close it (or use it as a context manager) to stop them and
    release what they hold."""

    def __init__(
        self,
        cache: Cache,
        pieces: Iterable[Piece],
        *,
        ahead_bytes: int | None = None,
        ahead_pieces: int = 16,
        threads: int = 2,
        advance: bool = True,
    ) -> None:
        self.cache = cache
        self.advance = advance  # False: every piece is kept until close (a reader that reads them all at once)
        self.ahead_bytes = max(1, int(ahead_bytes if ahead_bytes is not None else cache.limit // 4))
        self.ahead_pieces = max(1, int(ahead_pieces))
        self._src = iter(pieces)
        self._src_done = False
        self._src_lock = threading.Lock()
        self._slots: deque[_Slot] = deque()
        self._prev: _Slot | None = None  # the piece read before the current one, kept until the next
        self._cv = threading.Condition()
        self._closed = False
        self.taken = 0  # pieces handed to the reader from the prefetch
        self._threads = [
            threading.Thread(target=self._work, name="lovecraft-prefetch", daemon=True) for _ in range(max(1, threads))
        ]
        for t in self._threads:
            t.start()

    # -- the sequence -------------------------------------------------------------------------

    def _fill(self, n: int, wait: bool = True) -> None:
        """Make the first ``n`` slots exist (pulling from the source; without ``wait``, only if no
        other thread is pulling); called without the condition held. The source may read (a
        footer, an index): those reads are not served by this prefetch (:data:`_local`)."""
        if not self._src_lock.acquire(blocking=wait):
            return
        _local.filling = True
        try:
            while not self._src_done:
                with self._cv:
                    if len(self._slots) >= n or self._closed:
                        return
                try:
                    piece = next(self._src)
                except StopIteration:
                    self._src_done = True
                    return
                except Exception:  # noqa: BLE001 - the reader meets the same problem when it reads
                    self._src_done = True
                    return
                with self._cv:
                    self._slots.append(_Slot(piece))
                    self._cv.notify_all()
        finally:
            _local.filling = False
            self._src_lock.release()

    def _window(self) -> int:
        """How many slots from the current one are to be fetched now: the current one, and those
        after it within ``ahead_bytes`` and ``ahead_pieces`` (at least one more)."""
        total = 0
        for i, s in enumerate(self._slots):
            if i > self.ahead_pieces:
                return i
            if i:
                total += s.piece.nbytes
                if i > 1 and total > self.ahead_bytes:
                    return i
        return len(self._slots)

    # -- the fetchers -------------------------------------------------------------------------

    def _next_job(self) -> _Slot | None:
        while True:
            self._fill(self.ahead_pieces, wait=False)  # (another thread listing: fetch what is listed)
            with self._cv:
                if self._closed:
                    return None
                for i in range(self._window()):
                    s = self._slots[i]
                    if s.state == "new":
                        s.state = "busy"
                        return s
                self._cv.wait(NO_ROOM_WAIT)

    def _work(self) -> None:
        while True:
            slot = self._next_job()
            if slot is None:
                return
            try:
                held = self.cache.get(slot.piece, demand=False)
                err = None
            except BaseException as e:  # noqa: BLE001 - kept for the reader, which fetches it itself
                held, err = None, e
            with self._cv:
                gone = self._closed or not (slot in self._slots or slot is self._prev)
                if err is not None:
                    slot.state, slot.error = "failed", err
                elif held is None:
                    slot.state = "new"  # no room yet: looked at again when the reader moves on
                elif gone:
                    slot.state = "failed"
                else:
                    slot.state, slot.held = "held", held
                    held = None
                self._cv.notify_all()
                if held is None and err is None and slot.state == "new":
                    self._cv.wait(NO_ROOM_WAIT)
            if held is not None:
                held.release(done=False)

    # -- the reader ---------------------------------------------------------------------------

    def _find(self, uri: str, pos: int) -> int | None:
        for i, s in enumerate(self._slots):
            if i >= SEARCH and self.advance:
                return None
            p = s.piece
            if p.uri == uri and p.start <= pos < p.stop:
                return i
        return None

    def holds(self, uri: str, start: int, stop: int) -> bool:
        """Is a fetched piece of the sequence holding bytes ``[start, stop)`` of ``uri`` (nothing moves)?"""
        with self._cv:
            slots = list(self._slots) + ([self._prev] if self._prev is not None else [])
        if self.advance:
            slots = slots[:SEARCH] + slots[-1:]
        return any(s.state == "held" and s.piece.uri == uri and s.piece.covers(start, stop) for s in slots)

    def take(self, uri: str, pos: int) -> Held | None:
        """The reader reads byte ``pos`` of ``uri`` now: the pinned piece of the sequence that holds
        it (waiting for its fetch; the prefetcher keeps the pin: do not release it), the pieces
        before it released as read. None when the sequence does not have it next (the reader
        fetches it itself)."""
        if getattr(_local, "filling", False):
            return None  # a read made to list the pieces (a footer): not one of them
        with self._cv:
            prev = self._prev
            p = prev.piece if prev is not None and prev.held is not None else None
            if p is not None and p.uri == uri and p.start <= pos < p.stop:
                return prev.held
            i = self._find(uri, pos)
        if i is None:  # not listed yet (the reader may be ahead of the listing): list further
            self._fill(SEARCH if self.advance else self.ahead_pieces)
        with self._cv:
            i = self._find(uri, pos)
            if i is None:
                return None
            if not self.advance:
                slot = self._slots[i]
                while slot.state == "busy":
                    self._cv.wait()
                if slot.state == "held" and slot.held is not None:
                    self.taken += 1
                    return slot.held
                return None
            done = []
            for _ in range(i):
                done.append(self._slots.popleft())
            if done:
                if self._prev is not None:
                    done.insert(0, self._prev)
                self._prev = done.pop()
            self._cv.notify_all()
            slot = self._slots[0]
            own = False
            while True:
                if slot.state == "new":  # not fetched (no room for a prefetch): the reader fetches it
                    slot.state, own = "busy", True
                    break
                if slot.state != "busy":
                    break
                self._cv.wait()
        for s in done:
            if s.held is not None:
                s.held.release(done=True)
                s.held = None
        if own:  # not fetched yet (no room for a prefetch): the reader needs it now
            try:
                held = self.cache.get(slot.piece, demand=True)
            except BaseException:
                with self._cv:
                    slot.state = "failed"
                    self._cv.notify_all()
                raise
            with self._cv:
                slot.state, slot.held = "held", held
                self._cv.notify_all()
        if slot.state == "failed" or slot.held is None:
            return None  # the reader fetches it itself (and meets the error, if there is one)
        self.taken += 1
        return slot.held

    def close(self) -> None:
        """Stop fetching and release every piece held (not marked read)."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            slots = list(self._slots) + ([self._prev] if self._prev is not None else [])
            self._slots.clear()
            self._prev = None
            self._cv.notify_all()
        for t in self._threads:
            t.join(30.0)
        for s in slots:
            if s.held is not None:
                s.held.release(done=False)
                s.held = None

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
