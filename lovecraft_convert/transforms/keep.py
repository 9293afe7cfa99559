"""The keep step: which of a reader's rows go on (``--filter``, and the rows ``--dedup`` dropped),
counted per reason. The output plan's first step (:mod:`.plan`), and ``bucket``'s, whose sequences
are read without a plan (:mod:`lovecraft_convert.jobs.sequences`)."""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..schema import Batch
from .filter import Filter

LOG_BATCHES = 256  # batches whose kept rows :meth:`Keep.read_row` can place (a few are in flight)


@dataclass
class Keep:
    """The filter (None: none) and what the step counted: rows removed per reason (``filter``,
    ``duplicate``) and the rows read. Where rows are removed, the rows kept of the last
    :data:`LOG_BATCHES` batches are logged, so that a later step's error about a kept row names the
    row it was in the input (:meth:`read_row`), not its place among the rows kept."""

    filter: Filter | None = None
    removed: dict[str, int] = field(default_factory=dict)
    rows_read: int = 0
    kept: int = 0
    log: deque = field(default_factory=lambda: deque(maxlen=LOG_BATCHES))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __getstate__(self) -> dict:  # (sent to a worker: the lock and the log stay here)
        return {k: v for k, v in self.__dict__.items() if k not in ("log", "lock")}

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self.log = deque(maxlen=LOG_BATCHES)
        self.lock = threading.Lock()

    def read_row(self, kept_row: int) -> int | None:
        """The row of the part (0-based, every row read counted) that kept row ``kept_row`` was;
        None when its batch is no longer logged."""
        with self.lock:
            entries = list(self.log)
        starts = [e[0] for e in entries]
        k = bisect.bisect_right(starts, kept_row) - 1
        if k < 0:
            return None
        start, rows = entries[k]
        if kept_row - start >= len(rows):
            return None
        return int(rows[kept_row - start])

    def __call__(self, batches: Iterator[Batch], drops=None, part: int = 0) -> Iterator[Batch]:
        """The reader's ``batches`` (of part ``part``, every row as read) without the rows the filter
        removes and those ``drops`` (a :class:`~.dedup.DropSet`) holds; batches left empty are
        skipped."""
        if self.filter is None and drops is None:
            for b in batches:
                self.rows_read += b.num_rows
                yield b
            return
        from .dedup import PART_SHIFT

        base = part << PART_SHIFT
        read = 0  # rows of this part before the batch: the positions the drop set holds
        for b in batches:
            n = b.num_rows
            self.rows_read += n
            mask = self.filter.mask(b) if self.filter is not None else np.ones(n, dtype=bool)
            if self.filter is not None:
                self.removed["filter"] = self.removed.get("filter", 0) + int(n - np.count_nonzero(mask))
            if drops is not None and hasattr(drops, "first_seen"):  # decided here (SeenDigests)
                kept = drops.first_seen(b, mask)
                dropped = int(np.count_nonzero(mask)) - int(np.count_nonzero(kept))
                self.removed["duplicate"] = self.removed.get("duplicate", 0) + dropped
                mask = kept
            elif drops is not None:
                d = drops.between(base + read, base + read + n) - (base + read)
                mask[d] = False
                self.removed["duplicate"] = self.removed.get("duplicate", 0) + len(d)
            idx = np.flatnonzero(mask)
            with self.lock:
                self.log.append((self.kept, idx + read))
            self.kept += len(idx)
            read += n
            if len(idx) == n:
                yield b
            elif len(idx):
                yield b.take(idx)

    def extra(self, removed: dict[str, int], read: int, dedup: dict | None = None) -> dict[str, Any]:
        """The manifest's ``removed`` section: the rows ``read``, and per reason (``removed``: the
        counts, summed over the units) the rows removed, with the filter's expression and what
        ``--dedup`` compared; nothing when no rows could be removed."""
        if self.filter is None and dedup is None:
            return {}
        out: dict[str, Any] = {"read": read}
        if self.filter is not None:
            out["filter"] = {"expression": self.filter.text, "rows": int(removed.get("filter", 0))}
        if dedup is not None:
            out["duplicate"] = {**dedup, "rows": int(removed.get("duplicate", 0))}
        return {"removed": out}
