"""Spill frames: how units hand records to each other, through the work directory or, when the
units share nothing with the driver, through the store (:mod:`.units`).

* Plain frames (``shard``, ``bucket --layout packed``): a batch as raw column bytes in schema order
  (offsets then values for variable-length columns; lists of strings: the lists' offsets, then the
  strings' offsets and bytes); *counted* frames start with their row count, so a file of them can
  be walked without an index.
* Grouped frames (``bucket``): rows sorted by length, stored as the distinct lengths, how many rows
  have each, and the values in that order, so any length range is one contiguous slice.

Every frame carries CRC32C digests, checked whenever it is read: a plain frame ends with the
digest of its bytes; a grouped frame's index (its header, lengths and counts) has one, and so do
the values of each length, so a unit reading one length range checks exactly what it reads. A
damaged frame is one line naming the spill file and the frame (:func:`damaged`), and counts a
frame declares are checked against the file's size before anything is allocated for them. A unit's
spill files are also digested whole as they are written (:class:`UnitSpill`): the journal records
it, and ``--resume`` redoes a part whose files no longer match (:func:`.journal.intact`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import crc32c
import numpy as np

from ..errors import OutputError
from ..schema import STRING_LIST, Batch, Schema, VarColumn

# grouped frame value dtypes (a code in the frame header says which)
CODES = ["|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<f2", "<f4", "<f8", "|b1"]
DIGEST = 4  # bytes of a CRC32C (little-endian uint32)
RESUME_HINT = "run the same command with --resume: the part that wrote it is read again"


def damaged(path: str, offset: int, what: str) -> OutputError:
    """The error of a spill frame that cannot be trusted (``what`` says why)."""
    return OutputError(f"spill frame at byte {offset} {what}", where=path, hint=RESUME_HINT)


def _digest(value: int) -> bytes:
    return int(value).to_bytes(DIGEST, "little")


def write_frame(f, batch: Batch, schema: Schema, counted: bool = False) -> tuple[int, int]:
    """Append a batch as raw column bytes (the schema says how to read them back) and their
    digest; ``counted`` frames start with their row count, so a file of them can be walked
    without an index."""
    offset = f.tell()
    crc = 0

    def put(data) -> None:
        nonlocal crc
        crc = crc32c.crc32c(data, crc)
        f.write(data)

    if counted:
        put(np.int64(batch.num_rows).tobytes())
    for fd in schema:
        col = batch.columns[fd.name]
        if isinstance(col, VarColumn):
            put(np.ascontiguousarray(col.offsets, dtype=np.int64).data)
            if isinstance(col.values, VarColumn):  # lists of strings: then the strings
                put(np.ascontiguousarray(col.values.offsets, dtype=np.int64).data)
                put(np.ascontiguousarray(col.values.values, dtype=np.uint8).data)
            else:
                put(np.ascontiguousarray(col.values, dtype=fd.np_dtype if fd.kind == "sequence" else np.uint8).data)
        else:
            put(np.ascontiguousarray(col, dtype=fd.np_dtype).reshape(-1).view(np.uint8).data)
    f.write(_digest(crc))
    return offset, batch.num_rows


class _Cursor:
    """Reads a frame's arrays from a buffer or a file, digesting the bytes read and refusing a count
    that reaches past the end (a damaged frame must not make anything large be allocated)."""

    def __init__(self, name: str, offset: int, end: int, buf=None, f=None) -> None:
        self.name, self.offset, self.end, self.buf, self.f = name, offset, end, buf, f
        self.pos = offset
        self.crc = 0

    def take(self, dtype, count: int) -> np.ndarray:
        dtype = np.dtype(dtype)
        if count < 0 or self.pos + count * dtype.itemsize > self.end:
            raise damaged(self.name, self.offset, "is damaged (it reaches past the end of the file)")
        if self.buf is not None:
            a = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
        else:
            a = read_array(self.f, dtype, count)
            if a is None:
                raise damaged(self.name, self.offset, "is cut short")
        self.pos += a.nbytes
        self.crc = crc32c.crc32c(a, self.crc)
        return a

    def count(self, a: np.ndarray, what: str) -> int:
        """``a`` (the last of some offsets) as a count, refused when it is negative."""
        v = int(a[-1])
        if v < 0:
            raise damaged(self.name, self.offset, f"is damaged (a negative {what})")
        return v

    def check(self) -> None:
        """The digest that follows against the bytes read so far."""
        crc = self.crc
        if int(self.take(np.uint32, 1)[0]) != crc:
            raise damaged(self.name, self.offset, "is damaged (its CRC32C differs from the one written with it)")


def _columns(cur: _Cursor, rows: int, schema: Schema) -> dict[str, Any]:
    cols: dict[str, Any] = {}
    for fd in schema:
        if fd.variable:
            offs = cur.take(np.int64, rows + 1)
            vals: Any
            if fd.kind == STRING_LIST:
                inner = cur.take(np.int64, cur.count(offs, "offset") + 1)
                vals = VarColumn(cur.take(np.uint8, cur.count(inner, "offset")), inner)
            else:
                vdt = fd.np_dtype if fd.kind == "sequence" else np.dtype(np.uint8)
                vals = cur.take(vdt, cur.count(offs, "offset"))
            cols[fd.name] = VarColumn(vals, offs)
        else:
            a = cur.take(fd.np_dtype, rows * fd.row_size)
            cols[fd.name] = a.reshape((rows, *fd.shape))
    cur.check()
    return cols


def read_array(f, dtype, count: int) -> np.ndarray | None:
    """``count`` values of ``dtype`` read from the file ``f`` at its position (any binary file with
    ``readinto``: a local file, or a range of an object on a store); None when it ends first."""
    a = np.empty(count, dtype=dtype)
    mv = memoryview(a.view(np.uint8)).cast("B")
    got = 0
    while got < len(mv):
        n = f.readinto(mv[got:])
        if not n:
            return None
        got += n
    return a


def file_size(f) -> int:
    """The size of a spill file open for reading: a local file's, or that of the range of an
    object it reads (its ``length``)."""
    n = getattr(f, "length", None)
    return int(n) if n is not None else os.fstat(f.fileno()).st_size


def frames_from_buffer(buf: bytes, schema: Schema, name: str = "spill file") -> list[Batch]:
    """The counted frames of a whole frame file already in memory (views into ``buf``), each
    checked against its digest; ``name`` is the file, for errors."""
    out = []
    pos = 0
    while pos < len(buf):
        cur = _Cursor(name, pos, len(buf), buf=buf)
        rows = int(cur.take(np.int64, 1)[0])
        if rows < 0:
            raise damaged(name, pos, "is damaged (a negative row count)")
        out.append(Batch(_columns(cur, rows, schema), rows))
        pos = cur.pos
    return out


def frame_from_buffer(buf, offset: int, rows: int, schema: Schema, name: str = "spill file") -> Batch:
    """The plain frame of ``rows`` rows at ``offset`` of a spill file already in memory (views
    into ``buf``), checked against its digest."""
    cur = _Cursor(name, offset, len(buf), buf=buf)
    return Batch(_columns(cur, rows, schema), rows)


def read_frame(f, offset: int, rows: int, schema: Schema) -> Batch:
    """The plain frame of ``rows`` rows at ``offset`` of the open spill file ``f``, checked against
    its digest."""
    f.seek(offset)
    cur = _Cursor(f.name, offset, file_size(f), f=f)
    return Batch(_columns(cur, rows, schema), rows)


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
    """Append a frame of rows sorted by length; returns [offset, rows].

    Layout: ``rows, nu, nv, code`` (int64), the ``nu`` distinct lengths and their counts (int64),
    the CRC32C of each length's values (uint32), the CRC32C of all of that (the index), then the
    values."""
    offset = f.tell()
    uniq, first = np.unique(lengths_sorted, return_index=True)
    counts = np.diff(np.append(first, len(lengths_sorted)))
    code = CODES.index(values.dtype.str)
    raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    crcs = np.array(_segment_crcs(raw, uniq.astype(np.int64) * counts * values.dtype.itemsize), "<u4")
    index = [
        np.array([len(lengths_sorted), len(uniq), values.size, code], dtype=np.int64).data,
        uniq.astype(np.int64).data,
        counts.astype(np.int64).data,
        crcs.data,
    ]
    crc = 0
    for part in index:
        crc = crc32c.crc32c(part, crc)
        f.write(part)
    f.write(_digest(crc))
    f.write(raw.data)
    return [offset, len(lengths_sorted)]


def _segment_crcs(raw: np.ndarray, nbytes: np.ndarray) -> list[int]:
    """The CRC32C of each of the consecutive segments of ``raw`` (bytes) that are ``nbytes`` long."""
    mv = memoryview(raw)
    ends = np.cumsum(nbytes).tolist()
    return [crc32c.crc32c(mv[a:b]) for a, b in zip([0, *ends][:-1], ends, strict=True)]


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
    """The rows of the frame at ``offset`` whose length is in [lo, hi], as ``dtype``; the frame's
    index and the values read are checked against their digests."""
    f.seek(offset)
    name = f.name
    cur = _Cursor(name, offset, file_size(f), f=f)
    rows, nu, nv, code = cur.take(np.int64, 4).tolist()
    if min(rows, nu, nv) < 0 or not 0 <= code < len(CODES):
        raise damaged(name, offset, "is damaged (its header)")
    uniq = cur.take(np.int64, nu)
    counts = cur.take(np.int64, nu)
    crcs = cur.take(np.uint32, nu)
    cur.check()
    src = np.dtype(CODES[code])
    i0, i1 = np.searchsorted(uniq, lo, side="left"), np.searchsorted(uniq, hi, side="right")
    sizes = uniq * counts  # values per length
    v0 = int(sizes[:i0].sum())
    n = int(sizes[i0:i1].sum())
    at = cur.pos + v0 * src.itemsize
    if at + n * src.itemsize > cur.end:
        raise damaged(name, offset, "is cut short")
    f.seek(at)
    vals = read_array(f, src, n)
    if vals is None:
        raise damaged(name, offset, "is cut short")
    got = _segment_crcs(vals.view(np.uint8), sizes[i0:i1] * src.itemsize)
    bad = np.flatnonzero(np.array(got, dtype=np.uint32) != crcs[i0:i1])
    if len(bad):
        length = int(uniq[i0 + int(bad[0])])
        raise damaged(name, offset, f"is damaged (the values of length {length} differ from their CRC32C)")
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


class Digesting:
    """A spill file being written, digested (CRC32C) as its bytes go out."""

    def __init__(self, f) -> None:
        self.f = f
        self.crc = 0

    def write(self, data) -> int:
        self.crc = crc32c.crc32c(data, self.crc)
        return self.f.write(data)

    def tell(self) -> int:
        return self.f.tell()

    def close(self) -> None:
        self.f.close()


def file_crc(path: str, chunk: int = 8 << 20) -> int:
    """The CRC32C of a whole file (read in pieces of ``chunk`` bytes)."""
    crc = 0
    with open(path, "rb") as f:
        while data := f.read(chunk):
            crc = crc32c.crc32c(data, crc)
    return crc


class UnitSpill:
    """One unit's spill files in ``spill_dir`` (named ``<prefix><unit>-b<bucket>.bin``): one per hash
    bucket (``buckets`` > 0) or one,
    opened when first written, digested whole as they are written, closed (also on error), then
    published under their final names (so a file the journal names is always whole)."""

    def __init__(self, spill_dir: str, unit: int, buckets: int, prefix: str = "u") -> None:
        self.dir = spill_dir
        self.unit = unit
        p = prefix
        self.names = [f"{p}{unit:05d}-b{b:04d}.bin" for b in range(buckets)] if buckets else [f"{p}{unit:05d}.bin"]
        self.handles: list = [None] * len(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def file(self, b: int):
        if self.handles[b] is None:
            self.handles[b] = Digesting(open(os.path.join(self.dir, self.names[b] + ".tmp"), "wb"))  # noqa: SIM115
        return self.handles[b]

    def close(self) -> None:
        for h in self.handles:
            if h is not None:
                h.close()

    def publish(self) -> Iterator[tuple[int, str, int, int]]:
        """(bucket, name, size, CRC32C) of each file written, renamed to its final name."""
        for b, name in enumerate(self.names):
            if self.handles[b] is None:
                continue
            p = os.path.join(self.dir, name)
            os.rename(p + ".tmp", p)
            yield b, name, os.path.getsize(p), self.handles[b].crc
