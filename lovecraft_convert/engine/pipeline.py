"""What goes with the loop every command runs (source -> output plan -> sink; the plan's steps are
:mod:`lovecraft_convert.transforms.plan`'s, the read-ahead thread
:mod:`lovecraft_convert.runtime.readahead`'s): gathering a wide table's small batches, and progress
on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

from ..schema import WIDE_COLUMNS, Batch


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
