"""What a part's reader gives, checked against what the manifest says the part holds.

A format's reader is built from the manifest (the part's rows, the schema's columns) and reads its
files; where a file holds something else (a column of another shape or type than the schema says,
fewer rows), the reader's own library would fail somewhere later, in its own words (a NumPy
reshape, a pyarrow key lookup). :class:`CheckedReader` stands between the loaders and every
format's reader (plugins included) and turns such a batch into one line naming the part's files and
the column, before anything is made of it. The checks look at shapes and types only: a batch is
not copied.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import DatasetError
from ..formats.base import PartReader
from ..manifest import EDITED
from ..schema import FIXED, Batch, Schema, VarColumn


class CheckedReader(PartReader):
    """``reader`` (one part's), each batch it gives checked: its rows, and each column's shape and
    type against ``schema`` (``storage``: the dtype the format gives a column back in)."""

    def __init__(self, reader: PartReader, schema: Schema, storage, where: str) -> None:
        super().__init__(reader.rows, schema)
        self.inner = reader
        self.random_access = reader.random_access
        self.opens_at = reader.opens_at  # what a remote dataset's prefetch fetches with the part
        self.where = where
        self.expect = [(f, np.dtype(storage(f))) for f in schema]
        self._starts: np.ndarray | None = None

    def __getattr__(self, name: str) -> Any:  # the format's own attributes (a TFRecord reader's path)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _fail(self, what: str) -> DatasetError:
        return DatasetError(f"{self.where}: {what}", hint=EDITED, kind="manifest")

    def _checked(self, b: Batch, rows: int | None) -> Batch:
        if rows is not None and b.num_rows != rows:
            raise self._fail(f"{b.num_rows} rows read where the manifest's counts promise {rows}")
        for f, dt in self.expect:
            c = b.columns.get(f.name)
            if c is None:
                raise self._fail(f"the files give no column '{f.name}', which the manifest's schema lists")
            if f.kind == FIXED:
                if not isinstance(c, np.ndarray) or c.shape != (b.num_rows, *f.shape):
                    got = list(c.shape[1:]) if isinstance(c, np.ndarray) else type(c).__name__
                    raise self._fail(f"column '{f.name}' holds rows of shape {got}, the schema says {list(f.shape)}")
                if c.dtype.kind != dt.kind or c.dtype.itemsize != dt.itemsize:
                    raise self._fail(f"column '{f.name}' holds {c.dtype.name}, the schema says {f.np_dtype.name}")
            elif isinstance(c, VarColumn):
                if len(c.offsets) != b.num_rows + 1:
                    raise self._fail(f"column '{f.name}' has {len(c.offsets) - 1} rows in a batch of {b.num_rows}")
            elif not (isinstance(c, np.ndarray) and c.dtype == object and c.shape == (b.num_rows,)):
                raise self._fail(f"column '{f.name}' does not hold rows of variable length, as the schema says")
        return b

    def chunks(self, start: int, stop: int, chunk_rows: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        done = 0
        for b in self.inner.chunks(start, stop, chunk_rows, rng):
            done += b.num_rows
            if done > stop - start:
                raise self._fail(f"more rows read than the {stop - start} asked for")
            yield self._checked(b, None)

    def block_starts(self) -> np.ndarray:
        if self._starts is None:
            starts = np.asarray(self.inner.block_starts(), dtype=np.int64)
            if len(starts) < 1 or int(starts[0]) != 0 or int(starts[-1]) != self.rows or (np.diff(starts) < 0).any():
                raise self._fail(f"its blocks do not cover the {self.rows} rows the manifest says")
            self._starts = starts
        return self._starts

    def open_listing(self) -> None:
        getattr(self.inner, "open_listing", self.inner.block_starts)()  # (a plugin's reader may not have it)

    def read_block(self, k: int, rows: np.ndarray | None = None) -> Batch:
        starts = self.block_starts()
        want = int(starts[k + 1] - starts[k]) if rows is None else len(rows)
        return self._checked(self.inner.read_block(k, rows), want)

    def read_blocks(self, blocks: list[tuple[int, np.ndarray | None]]) -> Batch:
        """The format's own ``read_blocks`` (TFRecord decodes a window's blocks together: the
        base class's block-by-block loop would pay NumPy's cost per call once per block)."""
        starts = self.block_starts()
        want = sum(int(starts[k + 1] - starts[k]) if rows is None else len(rows) for k, rows in blocks)
        return self._checked(self.inner.read_blocks(blocks), want)

    def read(self, start: int, stop: int) -> Batch:
        return self._checked(self.inner.read(start, stop), stop - start)

    def byte_ranges(self, start: int, stop: int) -> list[tuple[str, int, int]] | None:
        return self.inner.byte_ranges(start, stop)  # what reading reads: for a remote dataset's prefetch

    def block_ranges(self, k: int) -> list[tuple[str, int, int]] | None:
        return self.inner.block_ranges(k)

    def take(self, idx: np.ndarray) -> Batch:
        return self._checked(self.inner.take(idx), len(idx))

    def close(self) -> None:
        self.inner.close()
