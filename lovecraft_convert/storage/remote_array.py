"""An array stored in a file of a remote dataset, read by rows: what a memory map is for a local file.

A NumPy memmap or a Megatron ``.bin`` larger than the cache cannot be fetched whole, and an exact
shuffle reads its rows in no order at all, so :class:`RemoteArray` reads only the rows asked for:
a slice of rows is one read (through the cache: the loader's prefetched pieces, or an aligned range
fetched there and then); rows gathered at random (``take``) are grouped into runs of nearby rows,
each run read from the cache when a piece there holds it, and otherwise with its own ranged GET,
several at once (measured against fetching each run's aligned range into the cache: see
docs/guide/object-storage.md).
"""

from __future__ import annotations

import numpy as np

from .remote import RemoteFile

GAP = 64 << 10  # rows closer than this are read in one request
DIRECT_THREADS = 16
DIRECT = True  # False: runs the cache does not hold are read through it (aligned ranges fetched), for measuring


class RemoteArray:
    """A read-only C-ordered array of ``shape`` and ``dtype`` at byte ``offset`` of ``rf``."""

    def __init__(self, rf: RemoteFile, dtype, shape: tuple[int, ...], offset: int) -> None:
        self.rf = rf
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        self.offset = int(offset)
        self.ndim = len(self.shape)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))

    def __len__(self) -> int:
        return self.shape[0]

    def _rows(self, a: int, b: int) -> np.ndarray:
        out = np.empty((max(0, b - a), *self.shape[1:]), dtype=self.dtype)
        if b > a and self.row_bytes:
            at = self.offset + a * self.row_bytes
            n = self.rf.readinto(out.reshape(-1).view(np.uint8), at)
            if n != out.nbytes:
                from ..errors import DatasetError

                raise DatasetError(
                    f"rows {a}..{b - 1}: the file ends at byte {at + n}",
                    where=self.rf.uri,
                    hint="the dataset is damaged; run `lovecraft verify`",
                )
        return out

    def __getitem__(self, key):
        if isinstance(key, slice):
            a, b, step = key.indices(self.shape[0])
            if step != 1:
                return self.take(np.arange(a, b, step, dtype=np.int64))
            return self._rows(a, max(a, b))
        if isinstance(key, list):
            key = np.asarray(key, dtype=np.int64)
        if isinstance(key, int | np.integer):
            i = int(key) + (self.shape[0] if key < 0 else 0)
            if not 0 <= i < self.shape[0]:
                raise IndexError(f"index {key} is out of bounds for {self.shape[0]} rows")
            return self._rows(i, i + 1)[0]
        return self.take(np.asarray(key, dtype=np.int64))

    def span(self, a: int, b: int) -> tuple[str, int, int]:
        """(URI, first byte, end) of rows ``[a, b)``."""
        return self.rf.uri, self.offset + a * self.row_bytes, self.offset + b * self.row_bytes

    def take(self, idx, axis: int | None = 0, out=None, mode: str = "raise") -> np.ndarray:
        """Rows ``idx`` (any order, repeats allowed), read in runs of nearby rows (what ``np.take``
        of a remote array calls)."""
        if (axis not in (0, None) or (axis is None and self.ndim != 1)) or out is not None or mode != "raise":
            raise ValueError("a remote array is taken along its first axis, into a new array")
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        out = np.empty((len(idx), *self.shape[1:]), dtype=self.dtype)
        if not len(idx) or not self.row_bytes:
            return out
        n = self.shape[0]
        if int(idx.min()) < 0 or int(idx.max()) >= n:
            raise IndexError(f"index out of range for {n} rows")
        order = np.argsort(idx, kind="stable")
        s = idx[order]
        gap_rows = max(1, GAP // self.row_bytes)
        cut = np.flatnonzero(np.diff(s) > gap_rows) + 1
        starts = np.concatenate(([0], cut))
        stops = np.concatenate((cut, [len(s)]))
        runs = [(int(s[a]), int(s[b - 1]) + 1, a, b) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]
        flat = out.reshape(len(idx), -1)
        for (lo, _hi, a, b), rows in zip(runs, self._read_runs([(lo, hi) for lo, hi, _, _ in runs]), strict=True):
            flat[order[a:b]] = rows.reshape(rows.shape[0], -1)[s[a:b] - lo]
        return out

    def _read_runs(self, runs: list[tuple[int, int]]) -> list[np.ndarray]:
        """The rows of each ``[lo, hi)``: from the cache where it holds them, else by ranged GETs,
        several at once."""
        got: list[np.ndarray | None] = [None] * len(runs)
        missing = []
        for i, (lo, hi) in enumerate(runs):
            at, stop = self.offset + lo * self.row_bytes, self.offset + hi * self.row_bytes
            if not DIRECT or self.rf.cached(at, stop):
                got[i] = self._rows(lo, hi)
            else:
                missing.append(i)
        if missing:
            from ..errors import DatasetError

            spans = [
                (self.offset + runs[i][0] * self.row_bytes, self.offset + runs[i][1] * self.row_bytes) for i in missing
            ]
            for i, data in zip(missing, self.rf.read_direct(spans, DIRECT_THREADS), strict=True):
                lo, hi = runs[i]
                if len(data) != (hi - lo) * self.row_bytes:
                    raise DatasetError(
                        f"rows {lo}..{hi - 1}: the file ends early",
                        where=self.rf.uri,
                        hint="the dataset is damaged; run `lovecraft verify`",
                    )
                got[i] = np.frombuffer(data, dtype=self.dtype).reshape((hi - lo, *self.shape[1:]))
        return got  # type: ignore[return-value]
