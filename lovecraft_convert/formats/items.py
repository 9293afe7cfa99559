"""Rows as byte items, and back: what the formats that store one self-contained item per row (MDS
shards, litdata chunks, WebDataset members) share.

A row's item is made of *pieces*, one after another, each given for the whole batch:

* ``Const(data)``: the same bytes in every row (a header that only depends on the schema);
* ``Fixed(arr)``: ``arr`` is ``uint8[rows, width]``, row ``i``'s bytes are ``arr[i]``;
* ``Var(values, offsets)``: row ``i``'s bytes are ``values[offsets[i]:offsets[i + 1]]``.

:func:`pack` lays the items of a batch out back to back in one buffer per run of rows (a run is at
most :data:`RUN_BYTES` unless one row is larger), with NumPy: a table of fixed-size pieces is one
strided copy per piece, small variable pieces are gathered by index arrays, and large ones (images,
documents) are copied row by row, so that nothing costs a Python call per byte or an index per byte
of a large value. :func:`gather` is the reverse step of a reader: pieces of many items, by their
start and length, into one ``values``/``offsets`` pair.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

RUN_BYTES = 4 << 20  # the items of one run of rows, built in one buffer
LARGE = 512  # bytes: pieces at least this long on average are copied row by row, not by index


@dataclass
class Const:
    data: bytes


@dataclass
class Fixed:
    arr: np.ndarray  # uint8[rows, width]


@dataclass
class Var:
    values: np.ndarray  # uint8
    offsets: np.ndarray  # int64[rows + 1], into values


Piece = Const | Fixed | Var


def fixed_bytes(col: np.ndarray, dtype: np.dtype | str) -> Fixed:
    """A column of fixed-shape rows as little-endian bytes, one row of ``itemsize * row size`` each."""
    dt = np.dtype(dtype)
    arr = np.ascontiguousarray(col, dtype=dt.newbyteorder("<") if dt.itemsize > 1 else dt)
    n = arr.shape[0]
    return Fixed(arr.reshape(n, -1).view(np.uint8).reshape(n, -1))


def var_bytes(values: np.ndarray, offsets: np.ndarray, itemsize: int = 1) -> Var:
    """Variable-length rows (``values`` of any little-endian dtype, ``offsets`` in elements) as bytes."""
    offs = np.asarray(offsets, dtype=np.int64)
    v = np.ascontiguousarray(values)
    if v.dtype.itemsize > 1 and v.dtype.byteorder == ">":
        v = v.astype(v.dtype.newbyteorder("<"))
    return Var(v.view(np.uint8).reshape(-1), offs * itemsize)


def lengths(pieces: list[Piece], n: int) -> np.ndarray:
    """Each row's item length (int64[n])."""
    out = np.zeros(n, dtype=np.int64)
    for p in pieces:
        if isinstance(p, Const):
            out += len(p.data)
        elif isinstance(p, Fixed):
            out += p.arr.shape[1]
        else:
            out += np.diff(p.offsets)
    return out


def runs(lens: np.ndarray, limit: int = RUN_BYTES) -> Iterator[tuple[int, int]]:
    """Row ranges ``[a, b)`` whose items add up to at most ``limit`` bytes (or one row, when larger)."""
    n = len(lens)
    ends = np.cumsum(lens)
    a = 0
    while a < n:
        base = int(ends[a - 1]) if a else 0
        b = int(np.searchsorted(ends, base + limit, side="right"))
        b = max(b, a + 1)
        yield a, b
        a = b


def pack(
    pieces: list[Piece], n: int, lens: np.ndarray | None = None, rows: tuple[int, int] | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The items of ``n`` rows (or of ``rows = (a, b)`` of them), back to back: ``(uint8 buffer,
    item lengths)`` per run of rows."""
    if lens is None:
        lens = lengths(pieces, n)
    a0, b0 = rows or (0, n)
    for a, b in runs(lens[a0:b0]):
        yield _build(pieces, a0 + a, a0 + b, lens[a0 + a : a0 + b]), lens[a0 + a : a0 + b]


BIG = 64 << 10  # an item at least this large is handed on as its pieces, not copied into a run


def stream(pieces: list[Piece], n: int, lens: np.ndarray | None = None) -> Iterator[tuple[list, np.ndarray]]:
    """The items of ``n`` rows in order, as ``(buffers, item lengths)``: runs of small items built
    in one buffer each (:func:`pack`), and each item of :data:`BIG` bytes or more as its pieces
    (views of the batch's arrays: written with ``writev`` or handed to the hashing writer, they
    are not copied; the batch's arrays are never changed once made), small pieces joined."""
    if lens is None:
        lens = lengths(pieces, n)
    big = np.flatnonzero(lens >= BIG).tolist()
    a = 0
    for b in [*big, n]:
        if b > a:
            for buf, part in pack(pieces, n, lens, (a, b)):
                yield [buf], part
        if b < n:
            out: list = []
            small = bytearray()
            for part in row_parts(pieces, b):
                if len(part) < BIG:
                    small += part if isinstance(part, bytes) else memoryview(np.ascontiguousarray(part)).cast("B")
                    continue
                if small:
                    out.append(bytes(small))
                    small = bytearray()
                out.append(part)
            if small:
                out.append(bytes(small))
            yield out, lens[b : b + 1]
        a = b + 1


def row_parts(pieces: list[Piece], i: int) -> list[np.ndarray | bytes]:
    """Row ``i``'s item as its pieces (views, no copy): for an item too large to build whole."""
    out: list[np.ndarray | bytes] = []
    for p in pieces:
        if isinstance(p, Const):
            out.append(p.data)
        elif isinstance(p, Fixed):
            out.append(p.arr[i])
        else:
            out.append(p.values[int(p.offsets[i]) : int(p.offsets[i + 1])])
    return out


def _build(pieces: list[Piece], a: int, b: int, lens: np.ndarray) -> np.ndarray:
    m = b - a
    total = int(lens.sum())
    out = np.empty(total, dtype=np.uint8)
    if total == 0:
        return out
    if all(not isinstance(p, Var) for p in pieces):  # every row the same size: a 2-D view
        grid = out.reshape(m, -1)
        col = 0
        for p in pieces:
            if isinstance(p, Const):
                w = len(p.data)
                grid[:, col : col + w] = np.frombuffer(p.data, dtype=np.uint8)
            else:
                w = p.arr.shape[1]
                grid[:, col : col + w] = p.arr[a:b]
            col += w
        return out
    starts = np.zeros(m, dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    pos = starts  # each row's write position, advanced piece by piece
    for p in pieces:
        if isinstance(p, Const):
            w = len(p.data)
            if w:
                out[(pos[:, None] + np.arange(w)).reshape(-1)] = np.tile(np.frombuffer(p.data, np.uint8), m)
            pos = pos + w
        elif isinstance(p, Fixed):
            w = p.arr.shape[1]
            if w >= LARGE:
                src = p.arr
                for i, d in enumerate(pos.tolist()):
                    out[d : d + w] = src[a + i]
            elif w:
                out[(pos[:, None] + np.arange(w)).reshape(-1)] = p.arr[a:b].reshape(-1)
            pos = pos + w
        else:
            offs = p.offsets[a : b + 1]
            plen = np.diff(offs)
            count = int(plen.sum())
            if count and count >= LARGE * m:
                vals = p.values
                for d, s, e in zip(pos.tolist(), offs[:-1].tolist(), offs[1:].tolist(), strict=True):
                    out[d : d + (e - s)] = vals[s:e]
            elif count:
                rel = np.arange(count, dtype=np.int64) - np.repeat(np.cumsum(plen) - plen, plen)
                out[np.repeat(pos, plen) + rel] = p.values[np.repeat(offs[:-1], plen) + rel]
            pos = pos + plen
    return out


def gather(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pieces ``buf[starts[i]:starts[i] + lens[i]]`` of many items as one ``(values, offsets)`` pair
    (a copy). ``buf`` is a uint8 array (a mapped file)."""
    lens = np.asarray(lens, dtype=np.int64)
    n = len(lens)
    _inside(buf, starts, lens)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    count = int(offsets[-1])
    if count == 0:
        return np.zeros(0, dtype=np.uint8), offsets
    if count >= LARGE * n:
        values = np.empty(count, dtype=np.uint8)
        for d, s, k in zip(offsets[:-1].tolist(), np.asarray(starts).tolist(), lens.tolist(), strict=True):
            values[d : d + k] = buf[s : s + k]
        return values, offsets
    rel = np.arange(count, dtype=np.int64) - np.repeat(offsets[:-1], lens)
    return buf[np.repeat(np.asarray(starts, dtype=np.int64), lens) + rel], offsets


def gather_fixed(buf: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """``uint8[n, width]``: ``width`` bytes at each of ``starts`` (a copy)."""
    starts = np.asarray(starts, dtype=np.int64)
    n = len(starts)
    if width == 0 or n == 0:
        return np.zeros((n, width), dtype=np.uint8)
    _inside(buf, starts, width)
    if n > 1:
        step = int(starts[1] - starts[0])
        if step >= width and np.all(np.diff(starts) == step):  # evenly spaced: a strided view, one copy
            first = int(starts[0])
            view = np.lib.stride_tricks.as_strided(buf[first:], shape=(n, width), strides=(step, 1), writeable=False)
            return np.array(view)
    if width >= LARGE:
        out = np.empty((n, width), dtype=np.uint8)
        for i, s in enumerate(starts.tolist()):
            out[i] = buf[s : s + width]
        return out
    return buf[(starts[:, None] + np.arange(width)).reshape(-1)].reshape(n, width)


def uint32_at(buf: np.ndarray, starts: np.ndarray, count: int) -> np.ndarray:
    """``uint32[n, count]``: ``count`` little-endian uint32 at each of ``starts``."""
    return gather_fixed(buf, starts, 4 * count).view("<u4").reshape(len(starts), count)


def compact(rf, starts: np.ndarray, lens: np.ndarray, gap: int = 64 << 10) -> tuple[np.ndarray, np.ndarray]:
    """The pieces ``[starts[i], starts[i] + lens[i])`` of a remote file ``rf`` (a
    :class:`~lovecraft_convert.storage.remote.RemoteFile`) read into one local buffer, as a mapped
    local file would be sliced: ``(buffer, where each piece starts in it)``. Pieces closer than
    ``gap`` bytes are read as one span (a run of rows is one read); the buffer holds the spans only,
    so its size is the pieces', not the file's. ValueError for a piece outside the file."""
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    lens = np.asarray(lens, dtype=np.int64).reshape(-1)
    if len(starts) == 0:
        return np.zeros(0, np.uint8), starts.copy()
    ends = starts + lens
    if int(starts.min()) < 0 or int(lens.min()) < 0 or int(ends.max()) > rf.size:
        raise ValueError("a piece of an item lies outside the file")
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    cut = np.flatnonzero(s[1:] > e[:-1] + gap) + 1  # a new span where a piece starts past the reach of the last
    lo = s[np.concatenate(([0], cut))]
    hi = e[np.concatenate((cut, [len(s)])) - 1]
    data = rf.read_spans(list(zip(lo.tolist(), hi.tolist(), strict=True)))
    if any(len(d) != int(b - a) for d, a, b in zip(data, lo, hi, strict=True)):
        raise ValueError("a piece of an item lies outside the file")
    base = np.concatenate(([0], np.cumsum(hi - lo)))  # where each span starts in the buffer
    buf = np.frombuffer(b"".join(data), dtype=np.uint8) if len(data) > 1 else np.frombuffer(data[0], np.uint8)
    span = np.searchsorted(lo, starts, side="right") - 1
    return buf, base[span] + (starts - lo[span])


def _inside(buf: np.ndarray, starts: np.ndarray, lens) -> None:
    """Refuse (ValueError) pieces that reach outside ``buf``: a damaged file's offsets must not
    read past its end (nor make a strided view that would)."""
    starts = np.asarray(starts, dtype=np.int64)
    if len(starts) == 0:
        return
    ends = starts + lens
    if int(starts.min()) < 0 or int(np.max(ends)) > len(buf) or (np.ndim(lens) and int(np.min(lens)) < 0):
        raise ValueError("a piece of an item lies outside the file")


def bad_utf8_row(values: np.ndarray, offsets: np.ndarray) -> int | None:
    """The first row of a text column that is not valid UTF-8, or None: the rows' concatenation
    must decode, and no row may start inside a character (so none borrows the end of one)."""
    values, offs = np.asarray(values), np.asarray(offsets)
    starts = offs[:-1][np.diff(offs) > 0]
    bad = np.flatnonzero((values[starts] & 0xC0) == 0x80) if len(starts) else []
    at = int(starts[bad[0]]) if len(bad) else None
    try:
        values.tobytes().decode("utf-8")
    except UnicodeDecodeError as e:
        at = e.start if at is None else min(at, e.start)
    if at is None:
        return None
    return int(np.searchsorted(offs, at, side="right")) - 1
