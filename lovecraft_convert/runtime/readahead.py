"""Reading ahead: an iterator run in a thread of its own, a bounded number of items (or bytes)
ahead of its consumer, stopped however the consumer leaves (:class:`Prefetch`, :func:`prefetch`).
Inputs, commands and loaders all read this way; the waits are :mod:`.interrupts`' safe ones."""

from __future__ import annotations

import queue
from collections.abc import Iterator

from .background import started
from .interrupts import get_polled, put_while


class _Ahead(queue.Queue):
    """The queue of :class:`Prefetch`: room for ``depth`` items, and for more (``depth`` 2 or more)
    while those it holds total fewer than ``max_bytes`` (items' ``nbytes``; a put may go past it by
    its own size)."""

    def __init__(self, depth: int, max_bytes: int) -> None:
        super().__init__(maxsize=depth)
        self.max_bytes = max_bytes
        self.held = 0

    def _qsize(self) -> int:
        # what put() compares with maxsize (full at maxsize) and get() with 0 (empty): below
        # maxsize while the items are small, never 0 with any item in
        n = len(self.queue)
        return min(n, max(1, self.maxsize - 1)) if n and self.held < self.max_bytes else n

    def _put(self, item) -> None:
        size = getattr(item[0], "nbytes", 0)  # (batch, None), (done, None) or (None, error)
        self.queue.append((item, size))
        self.held += size

    def _get(self):
        item, size = self.queue.popleft()
        self.held -= size
        return item


class Prefetch:
    """``it`` run in a background thread from the moment this is made, at most ``depth`` batches
    ahead, or more while those waiting hold fewer than ``max_bytes`` (bounded memory either way);
    iterate it once. Use it as a context manager (or call :meth:`close`): the thread stops at the
    exit however the consumer left, even before iterating.

    Parsing and decompression (pyarrow, zlib, zstd, NumPy) release the GIL, so reading the next
    batch overlaps with transforming and writing this one, and the first batch with whatever the
    consumer does before it asks (a writer creating its file). A writer that works in bursts (HDF5
    writes a wide table's chunks of all columns at once) is caught up with by a reader that kept
    going meanwhile: ``max_bytes`` lets small batches (a wide table's come a few rows at a time)
    fill the bytes that ``depth`` large ones would.
    """

    def __init__(self, it: Iterator, depth: int = 2, max_bytes: int = 0) -> None:
        import threading

        self.q: queue.Queue = _Ahead(depth, max_bytes)
        self.stop = threading.Event()
        self.done = object()
        self.it = it
        self.t = threading.Thread(target=self._work, name="lovecraft-reader", daemon=True)
        self.t.start()
        self._bg = started(self.close)  # stopped before the interpreter exits, if still running then

    def _put(self, x) -> bool:
        return put_while(self.q, x, lambda: not self.stop.is_set())

    def _work(self) -> None:
        try:
            for item in self.it:
                if not self._put((item, None)):
                    break
            else:
                self._put((self.done, None))
            closing = getattr(self.it, "close", None)
            if closing is not None:  # left early: the source's files are released here, at once
                closing()
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._put((None, e))

    def __iter__(self) -> Iterator:
        while True:
            item, err = get_polled(self.q)
            if err is not None:
                raise err
            if item is self.done:
                return
            yield item

    def close(self) -> None:
        # Every put of the reader gives up once ``stop`` is set, so it needs no draining (draining
        # from here could block on a queue lock an interrupt left taken). It reads only; should it be
        # stuck in a read, it is a daemon thread and does not keep the process alive.
        self.stop.set()
        self.t.join(10.0)
        self._bg.end()

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prefetch(it: Iterator, depth: int = 2, max_bytes: int = 0) -> Iterator:
    """The items of ``it`` (batches), read by a :class:`Prefetch` from the first one asked for."""
    with Prefetch(it, depth, max_bytes) as p:
        yield from p
