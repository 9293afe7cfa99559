"""What goes with the loop every command runs (source -> output plan -> sink; the plan's steps are
:mod:`lovecraft_convert.transforms.plan`'s): gathering a wide table's small batches, the
read-ahead thread, and progress on stderr."""

from __future__ import annotations

import queue
import sys
import time
from collections.abc import Iterator

from ..schema import WIDE_COLUMNS, Batch
from .interrupts import get_polled, put_while


def coalesce(batches: Iterator[Batch], target_bytes: int) -> Iterator[Batch]:
    """The batches of a wide table gathered into batches of about ``target_bytes``.

    A reader's batch is sized by bytes, so a table thousands of columns wide comes in batches of
    a few rows, and every per-column step of every batch (statistics, conversions, a writer's call
    per column) is paid per few rows: gathered, it is paid once per ``target_bytes``. Narrow
    tables, batches of half the target already, and batches that are one ``[columns, rows]``
    matrix (:meth:`Batch.from_matrix`: every step takes it whole, so gathering would only copy
    it, and hold the copies in flight) pass through as they are."""
    parts: list[Batch] = []
    size = 0
    for b in batches:
        if (
            len(b.columns) < WIDE_COLUMNS
            or (not parts and 2 * b.nbytes >= target_bytes)
            or (not parts and b.whole_matrix is not None)
        ):
            yield b
            continue
        parts.append(b)
        size += b.nbytes
        if size >= target_bytes:
            yield Batch.concat(parts)
            parts, size = [], 0
    if parts:
        yield Batch.concat(parts)


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

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prefetch(it: Iterator[Batch], depth: int = 2, max_bytes: int = 0) -> Iterator[Batch]:
    """The batches of ``it``, read by a :class:`Prefetch` from the first one asked for."""
    with Prefetch(it, depth, max_bytes) as p:
        yield from p


class Progress:
    """Input bytes read, with rate and ETA, on stderr when it is a terminal (or when asked)."""

    def __init__(self, reader, enabled: bool | None) -> None:
        self.reader = reader
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.bar = None
        if enabled:
            self.bar = byte_bar(reader.progress_total())
        self.last = 0.0

    def update(self) -> None:
        if self.bar is None:
            return
        now = time.monotonic()
        if now - self.last < 0.1:
            return
        self.last = now
        self.bar.n = self.reader.progress_done()
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.n = self.reader.progress_done()
            self.bar.close()


class _NoBar:
    """The bar of a run that shows none."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def unit_bar(progress: bool | None, total: int, desc: str, noun: str = "unit"):
    """A bar counting units of work, as ``noun``s (``progress`` None: only on a terminal)."""
    import sys

    enabled = sys.stderr.isatty() if progress is None else progress
    if not enabled or total == 0:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=f"{desc} {noun}s", unit=f" {noun}", file=sys.stderr, leave=False, dynamic_ncols=True)


def byte_bar(total: int | None, initial: int = 0, desc: str | None = None):
    """A tqdm bar of input bytes on stderr (rate and ETA), cleared when it closes."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        file=sys.stderr,
        dynamic_ncols=True,
        leave=False,
    )
