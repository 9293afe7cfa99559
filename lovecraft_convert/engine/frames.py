"""Spill frames: how units hand records to each other through the work directory.

* Plain frames (``shard``): a batch as raw column bytes in schema order (offsets then values for
  variable-length columns; lists of strings: the lists' offsets, then the strings' offsets and
  bytes); *counted* frames start with their row count, so a file of them can be walked without an
  index.
* Grouped frames (``bucket``): rows sorted by length, stored as the distinct lengths, how many rows
  have each, and the values in that order, so any length range is one contiguous slice.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import LovecraftError
from ..schema import STRING_LIST, Batch, Schema, VarColumn

# grouped frame value dtypes (a code in the frame header says which)
CODES = ["|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<f2", "<f4", "<f8", "|b1"]


def write_frame(f, batch: Batch, schema: Schema, counted: bool = False) -> tuple[int, int]:
    """Append a batch as raw column bytes (the schema says how to read them back); ``counted``
    frames start with their row count, so a file of them can be walked without an index."""
    offset = f.tell()
    if counted:
        f.write(np.int64(batch.num_rows).tobytes())
    for fd in schema:
        col = batch.columns[fd.name]
        if isinstance(col, VarColumn):
            f.write(np.ascontiguousarray(col.offsets, dtype=np.int64).data)
            if isinstance(col.values, VarColumn):  # lists of strings: then the strings
                f.write(np.ascontiguousarray(col.values.offsets, dtype=np.int64).data)
                f.write(np.ascontiguousarray(col.values.values, dtype=np.uint8).data)
            else:
                f.write(np.ascontiguousarray(col.values, dtype=fd.np_dtype if fd.kind == "sequence" else np.uint8).data)
        else:
            f.write(np.ascontiguousarray(col, dtype=fd.np_dtype).reshape(-1).view(np.uint8).data)
    return offset, batch.num_rows


def frames_from_buffer(buf: bytes, schema: Schema) -> list[Batch]:
    """The counted frames of a whole frame file already in memory (views into ``buf``)."""
    out = []
    pos = 0
    while pos < len(buf):
        rows = int(np.frombuffer(buf, dtype=np.int64, count=1, offset=pos)[0])
        pos += 8
        cols: dict[str, Any] = {}
        for fd in schema:
            if fd.variable:
                offs = np.frombuffer(buf, dtype=np.int64, count=rows + 1, offset=pos)
                pos += offs.nbytes
                vals: Any
                if fd.kind == STRING_LIST:
                    inner = np.frombuffer(buf, dtype=np.int64, count=int(offs[-1]) + 1, offset=pos)
                    pos += inner.nbytes
                    data = np.frombuffer(buf, dtype=np.uint8, count=int(inner[-1]), offset=pos)
                    pos += data.nbytes
                    vals = VarColumn(data, inner)
                else:
                    vdt = fd.np_dtype if fd.kind == "sequence" else np.dtype(np.uint8)
                    vals = np.frombuffer(buf, dtype=vdt, count=int(offs[-1]), offset=pos)
                    pos += vals.nbytes
                cols[fd.name] = VarColumn(vals, offs)
            else:
                a = np.frombuffer(buf, dtype=fd.np_dtype, count=rows * fd.row_size, offset=pos)
                pos += a.nbytes
                cols[fd.name] = a.reshape((rows, *fd.shape))
        out.append(Batch(cols, rows))
    return out


def read_frame(f, offset: int, rows: int, schema: Schema) -> Batch:
    f.seek(offset)
    cols: dict[str, Any] = {}
    for fd in schema:
        if fd.variable:
            offs = np.fromfile(f, dtype=np.int64, count=rows + 1)
            vals: Any
            if fd.kind == STRING_LIST:
                inner = np.fromfile(f, dtype=np.int64, count=int(offs[-1]) + 1)
                vals = VarColumn(np.fromfile(f, dtype=np.uint8, count=int(inner[-1])), inner)
            else:
                vdt = fd.np_dtype if fd.kind == "sequence" else np.dtype(np.uint8)
                vals = np.fromfile(f, dtype=vdt, count=int(offs[-1]))
            cols[fd.name] = VarColumn(vals, offs)
        else:
            a = np.fromfile(f, dtype=fd.np_dtype, count=rows * fd.row_size)
            cols[fd.name] = a.reshape((rows, *fd.shape))
    return Batch(cols, rows)


def gather_sorted(values: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """``values[starts[i] : starts[i] + lens[i]]`` for every i, concatenated; ``lens`` ascending.

    Rows of one length are copied as one 2-D fancy index over a strided view of ``values`` (a view
    whose row s is ``values[s:]``): one call per distinct length, a memcpy per row, no index
    array per element.
    """
    total = int(lens.sum())
    out = np.empty(total, dtype=values.dtype)
    if total == 0:
        return out
    isz = values.itemsize
    view = np.lib.stride_tricks.as_strided(
        values, shape=(len(values), int(lens[-1])), strides=(isz, isz), writeable=False
    )
    uniq, first = np.unique(lens, return_index=True)
    ends = np.append(first[1:], len(lens))
    pos = 0
    for ln, a, b in zip(uniq.tolist(), first.tolist(), ends.tolist(), strict=True):
        if ln:  # only view[s, :ln] is read, always inside values
            n = (b - a) * ln
            out[pos : pos + n].reshape(b - a, ln)[...] = view[starts[a:b], :ln]
            pos += n
    return out


def write_grouped(f, lengths_sorted: np.ndarray, values: np.ndarray) -> list[int]:
    """Append a frame of rows sorted by length; returns [offset, rows]."""
    offset = f.tell()
    uniq, first = np.unique(lengths_sorted, return_index=True)
    counts = np.diff(np.append(first, len(lengths_sorted)))
    code = CODES.index(values.dtype.str)
    f.write(np.array([len(lengths_sorted), len(uniq), values.size, code], dtype=np.int64).data)
    f.write(uniq.astype(np.int64).data)
    f.write(counts.astype(np.int64).data)
    f.write(np.ascontiguousarray(values).view(np.uint8).data)
    return [offset, len(lengths_sorted)]


class Grouped:
    """Rows sorted by length: ``counts[i]`` rows of length ``uniq[i]``, values in that order."""

    __slots__ = ("uniq", "counts", "values")

    def __init__(self, uniq: np.ndarray, counts: np.ndarray, values: np.ndarray) -> None:
        self.uniq, self.counts, self.values = uniq, counts, values

    @property
    def rows(self) -> int:
        return int(self.counts.sum())

    def slice(self, r0: int, r1: int) -> Grouped:
        ends = np.cumsum(self.counts)
        starts = ends - self.counts
        c = np.clip(np.minimum(ends, r1) - np.maximum(starts, r0), 0, None)
        skipped = np.clip(r0 - starts, 0, self.counts)
        v0 = int((self.uniq * skipped).sum())
        nv = int((self.uniq * c).sum())
        keep = c > 0
        return Grouped(self.uniq[keep], c[keep], self.values[v0 : v0 + nv])

    def lengths(self) -> np.ndarray:
        return np.repeat(self.uniq, self.counts)

    def to_var(self) -> VarColumn:
        offs = np.zeros(self.rows + 1, dtype=np.int64)
        np.cumsum(self.lengths(), out=offs[1:])
        return VarColumn(self.values, offs)

    def dense(self, width: int, pad, dtype: np.dtype) -> np.ndarray:
        out = np.full((self.rows, width), pad, dtype=dtype)
        r = v = 0
        for ln, c in zip(self.uniq.tolist(), self.counts.tolist(), strict=True):
            if ln:
                out[r : r + c, :ln] = self.values[v : v + c * ln].reshape(c, ln)
            r += c
            v += c * ln
        return out


def read_grouped(f, offset: int, lo: int, hi: int, dtype: np.dtype) -> Grouped:
    """The rows of the frame at ``offset`` whose length is in [lo, hi], as ``dtype``."""
    f.seek(offset)
    rows, nu, nv, code = np.fromfile(f, dtype=np.int64, count=4).tolist()
    uniq = np.fromfile(f, dtype=np.int64, count=nu)
    counts = np.fromfile(f, dtype=np.int64, count=nu)
    i0, i1 = np.searchsorted(uniq, lo, side="left"), np.searchsorted(uniq, hi, side="right")
    src = np.dtype(CODES[code])
    v0 = int((uniq[:i0] * counts[:i0]).sum())
    n = int((uniq[i0:i1] * counts[i0:i1]).sum())
    f.seek(offset + 32 + 16 * nu + v0 * src.itemsize)
    vals = np.fromfile(f, dtype=src, count=n)
    if len(vals) != n:
        raise LovecraftError(f"{f.name}: spill file is short", hint="run again with --overwrite")
    if src != dtype:
        vals = vals.astype(dtype)
    return Grouped(uniq[i0:i1], counts[i0:i1], vals)


def merge_hist(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not pairs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    v = np.concatenate([p[0] for p in pairs]).astype(np.int64)
    c = np.concatenate([p[1] for p in pairs]).astype(np.int64)
    uniq, inv = np.unique(v, return_inverse=True)
    return uniq, np.bincount(inv, weights=c, minlength=len(uniq)).astype(np.int64)


class UnitSpill:
    """One unit's spill files in ``spill_dir``: one per hash bucket (``buckets`` > 0) or one,
    opened when first written, closed (also on error), then published under their final names
    (so a file the journal names is always whole)."""

    def __init__(self, spill_dir: str, unit: int, buckets: int) -> None:
        self.dir = spill_dir
        self.names = [f"u{unit:05d}-b{b:04d}.bin" for b in range(buckets)] if buckets else [f"u{unit:05d}.bin"]
        self.handles: list = [None] * len(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def file(self, b: int):
        if self.handles[b] is None:
            self.handles[b] = open(os.path.join(self.dir, self.names[b] + ".tmp"), "wb")  # noqa: SIM115 - close()
        return self.handles[b]

    def close(self) -> None:
        for h in self.handles:
            if h is not None:
                h.close()

    def publish(self) -> Iterator[tuple[int, str, int]]:
        """(bucket, name, size) of each file written, renamed to its final name."""
        for b, name in enumerate(self.names):
            if self.handles[b] is None:
                continue
            p = os.path.join(self.dir, name)
            os.rename(p + ".tmp", p)
            yield b, name, os.path.getsize(p)
