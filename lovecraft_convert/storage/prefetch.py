"""Fetching the pieces one reader will read next, in its order, a few ahead of it.

A loader's order of an epoch is a pure function of (seed, epoch, reader, position), so the pieces
(whole files, or byte ranges of their blocks) one reader will read from a position on are known
before it reads them. A :class:`Prefetcher` walks that sequence in background threads, keeping the
pieces from the reader's current one up to ``ahead_bytes`` (and ``ahead_pieces``) further fetched
and pinned in the :class:`~.cache.Cache`. The reader says where it is by asking for a piece
(:meth:`Prefetcher.take`); the pieces before it are released, marked done (the first the cache
evicts), once they are ``behind_bytes`` behind it (a reader goes back now and then: to a
memmap's next column, to HDF5's metadata). The cache holds what is being read, what comes next,
and what others still use. Pieces can be grouped in *units* (a Parquet row group's column chunks,
read in any order), released together.

A prefetch never makes the cache go over its limit (it waits for room instead); the piece the
reader needs now is fetched by the reader itself when no prefetch brought it yet.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable

from ..runtime import background
from .cache import Cache, Held, Piece

SEARCH = 64  # slots ahead in which a piece the reader asks for is looked for
RECENT = 16  # pieces released lately that a reader going back finds (when the cache still holds them)
NO_ROOM_WAIT = 0.05  # seconds a fetcher waits for room before it looks again
LISTING_WAIT = 1.0  # seconds a reader ahead of the listing waits for it before fetching itself


class Opening:
    """An item of a prefetch's source: the files the source reads (opens) until its next item, to
    list what comes next (a footer, an index). Those reads are not the reader's: they are fetched
    as asked, and do not move the reader's place in the sequence."""

    __slots__ = ("uris",)

    def __init__(self, uris) -> None:
        self.uris = frozenset(uris)


class _Slot:
    __slots__ = ("piece", "unit", "state", "held", "error")

    def __init__(self, piece: Piece, unit: int) -> None:
        self.piece = piece
        self.unit = unit  # pieces of one unit (a block) are read in any order, and released together
        self.state = "new"  # new -> busy -> held | failed; new again when there was no room
        self.held: Held | None = None
        self.error: BaseException | None = None


def _refused(slot: _Slot) -> None:
    """Raise the error of a piece whose bytes were refused (a digest that does not match after a
    second fetch, an object shorter than the manifest says): the reader fetching the same bytes
    itself may ask for a range of them, which no digest covers, and read the damaged bytes as good
    (a flipped byte in a memmap file came back in an epoch without a word). Other errors (the
    network) leave the reader to fetch it itself, once more."""
    from ..errors import DatasetError

    if slot.state == "failed" and isinstance(slot.error, DatasetError):
        raise slot.error


class Prefetcher:
    """Pieces of ``pieces`` (an iterable, in the order the reader reads them; or of ``(unit, piece)``
    pairs, where the pieces of one unit may be read in any order) fetched ahead of the reader by
    ``threads`` threads (with ``advance=False``, all of them, kept pinned until the end: a
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
        behind_bytes: int | None = None,
    ) -> None:
        self.cache = cache
        self.advance = advance  # False: every piece is kept until close (a reader that reads them all at once)
        self.ahead_bytes = max(1, int(ahead_bytes if ahead_bytes is not None else cache.limit // 4))
        self.ahead_pieces = max(1, int(ahead_pieces))
        self._src = iter(pieces)
        self._src_done = False
        self._units = 0
        self._opening: frozenset[str] = frozenset()  # files the source is reading to list pieces
        self._src_lock = threading.Lock()
        self._slots: deque[_Slot] = deque()
        self._behind: deque[_Slot] = deque()  # pieces read lately, kept while within behind_bytes
        self._behind_bytes = 0
        self.behind_bytes = max(0, int(behind_bytes if behind_bytes is not None else self.ahead_bytes // 2))
        self._recent: deque[Piece] = deque(maxlen=RECENT)  # pieces released lately (a reader may go back)
        self._cv = threading.Condition()
        self._closed = False
        self.taken = 0  # pieces handed to the reader from the prefetch
        self._threads = [
            threading.Thread(target=self._work, name="lovecraft-prefetch", daemon=True) for _ in range(max(1, threads))
        ]
        for t in self._threads:
            t.start()
        self._bg = background.started(self.close, background.FETCHER)  # stopped before the interpreter exits

    # -- the sequence -------------------------------------------------------------------------

    def _fill(self, n: int, wait: bool = True) -> None:
        """Make the first ``n`` slots exist (pulling from the source; without ``wait``, only if no
        other thread is pulling); called without the condition held."""
        if not self._src_lock.acquire(blocking=wait):
            return
        try:
            while not self._src_done:
                with self._cv:
                    if len(self._slots) >= n or self._closed:
                        return
                try:
                    item = next(self._src)
                except StopIteration:
                    self._src_done = True
                    return
                except Exception:  # noqa: BLE001 - the reader meets the same problem when it reads
                    self._src_done = True
                    return
                with self._cv:
                    if isinstance(item, Opening):
                        self._opening = item.uris
                        continue
                    self._units += 1
                    unit, piece = item if isinstance(item, tuple) else (self._units, item)
                    self._slots.append(_Slot(piece, unit))
                    self._cv.notify_all()
        finally:
            with self._cv:
                self._opening = frozenset()
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
                gone = self._closed or not (slot in self._slots or slot in self._behind)
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

    def recent(self, uri: str, pos: int) -> Piece | None:
        """A piece of the sequence released lately that holds byte ``pos`` of ``uri`` (the cache
        may have evicted it since)."""
        with self._cv:
            for p in reversed(self._recent):
                if p.uri == uri and p.start <= pos < p.stop:
                    return p
        return None

    def _next_unit(self) -> int | None:
        """The unit after the current one (the condition held)."""
        cur = self._slots[0].unit
        for s in self._slots:
            if s.unit != cur:
                return s.unit
        return None

    def holds(self, uri: str, start: int, stop: int) -> bool:
        """Is a fetched piece of the sequence holding bytes ``[start, stop)`` of ``uri`` (nothing moves)?"""
        with self._cv:
            slots = list(self._behind) + list(self._slots)[: SEARCH if self.advance else None]
        return any(s.state == "held" and s.piece.uri == uri and s.piece.covers(start, stop) for s in slots)

    def take(self, uri: str, pos: int) -> Held | None:
        """The reader reads byte ``pos`` of ``uri`` now: the pinned piece of the sequence that holds
        it (waiting for its fetch; the prefetcher keeps the pin: do not release it), the pieces
        before it released as read. None when the sequence does not have it next (the reader
        fetches it itself)."""
        with self._cv:
            if uri in self._opening:
                return None  # a read made to list the pieces (a footer, from any thread): not one of them
            for b in reversed(self._behind):  # a reader going back a little (another column)
                p = b.piece
                if b.held is not None and p.uri == uri and p.start <= pos < p.stop:
                    return b.held
            i = self._find(uri, pos)
        if i is None:  # not listed yet (the reader may be ahead of the listing): list further
            self._fill(SEARCH if self.advance else self.ahead_pieces, wait=False)
        with self._cv:
            i = self._find(uri, pos)
            deadline = time.monotonic() + LISTING_WAIT
            while i is None and not self._src_done and len(self._slots) < SEARCH and time.monotonic() < deadline:
                self._cv.wait(0.01)  # another thread is listing (a footer to read first): a moment
                i = self._find(uri, pos)
            if i is None:
                return None
            if not self.advance:  # nothing moves: every piece is kept
                slot = self._slots[i]
                while slot.state == "busy":
                    self._cv.wait()
                if slot.state == "held" and slot.held is not None:
                    self.taken += 1
                    return slot.held
                if slot.state != "new":
                    _refused(slot)
                    return None
                slot.state = "busy"
                return self._fetch_own(slot)
            unit = self._slots[i].unit
            if unit != self._slots[0].unit and unit != self._next_unit():
                # further ahead than the next unit: a stray read (a reader's read-ahead past its
                # block), which must not release what the reader has yet to read
                slot = self._slots[i]
                return slot.held if slot.state == "held" else None
            while self._slots[0].unit != unit:  # the units before this one are read: kept a while
                b = self._slots.popleft()
                self._behind.append(b)
                self._behind_bytes += b.piece.nbytes
                i -= 1
            done = []
            while len(self._behind) > 1 and self._behind_bytes > self.behind_bytes:
                b = self._behind.popleft()
                self._behind_bytes -= b.piece.nbytes
                done.append(b)
            self._cv.notify_all()
            slot = self._slots[i]
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
                self._recent.append(s.piece)
        if own:  # not fetched yet (no room for a prefetch): the reader needs it now
            return self._fetch_own(slot)
        if slot.state == "failed" or slot.held is None:
            _refused(slot)
            return None  # the reader fetches it itself (and meets the error, if there is one)
        self.taken += 1
        return slot.held

    def _fetch_own(self, slot: _Slot) -> Held:
        """Fetch a slot marked busy by the reader, which needs it now (over the limit if need be)."""
        try:
            held = self.cache.get(slot.piece, demand=True)
        except BaseException:
            with self._cv:
                slot.state = "failed"
                self._cv.notify_all()
            raise
        with self._cv:
            slot.state, slot.held = "held", held
            self.taken += 1
            self._cv.notify_all()
        return held

    def close(self) -> None:
        """Stop fetching and release every piece held (not marked read)."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            slots = list(self._slots) + list(self._behind)
            self._slots.clear()
            self._behind.clear()
            self._cv.notify_all()
        for t in self._threads:
            t.join(30.0)
        for s in slots:
            if s.held is not None:
                s.held.release(done=False)
                s.held = None
        self._bg.end()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
