"""Decoding many ``tf.train.Example`` records as whole columns with NumPy: every column kind (text,
bytes, float64 kept as bytes, float32, int64, fixed shapes and sequences), no Python per record.

The records of a dataset we wrote have a layout we know: ``Example{features=1: Features{feature=1:
map<string, Feature>}}``, one map entry per column in the order of the first record, each holding
``key`` then ``value``, a Feature of one list, numbers packed, a bytes list of exactly one value.
Only the lengths vary (text, sequences, integers of more or fewer varint bytes). So each level of
nesting is read for all records at once: a varint per record is one gather (two to five for the
rare long ones), every constant byte (tags, the column's name) is compared for all records in one
operation, and every length is checked against where its message ends. Most of an entry is read
eight bytes at a time: one word holds its tag, its size and the start of its key; another, for
values under ~120 bytes, the Feature's size, its list's tag and size and the packed field's tag
and size, all of which follow from where the entry ends, so one comparison checks them. A record that differs in
anything makes :func:`decode_columns` answer None, and the caller decodes the records one by one
with the general parser (which names the record and what is wrong).

What makes a yes exact: every position only moves forward; each nested message must end exactly
where its parent says; the last entry must end where the record does. A record that passes was
read within its own bytes, field by field, as a protobuf parser reads it. Every key is compared
(selected columns or not), so a repeated key, which protobuf resolves to its last value, is never
taken for the first.
"""

from __future__ import annotations

import numpy as np

from ...schema import BINARY, FIXED, STRING, Batch, Schema, VarColumn
from .example import storage_dtype, varint

_TAGS = {"bytes": 0x0A, "f64": 0x0A, "float": 0x12, "int64": 0x1A}
_LENGTH_BYTES = 5  # a length varint of more bytes would be over 2^35: no record is that long
_SMALL_GATHER = 64  # bytes per row up to which fixed-size values are gathered with an index array
_PAD = 48  # bytes readable after any position of a record (its records' buffer padded so)


class _Layout(Exception):
    """The records do not follow the expected layout (the caller decodes them one by one)."""


def _varint_at(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]  # IndexError past the end
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("bad varint")


def _entry_names(rec: bytes) -> list[str] | None:
    """The keys of a record's feature-map entries, in order, or None when it is not laid out as ours
    (one ``features`` field holding only entries, each starting with its key)."""
    read_varint = _varint_at
    try:
        if not rec or rec[0] != 0x0A:
            return None
        n, i = read_varint(rec, 1)
        if i + n != len(rec):
            return None
        names = []
        while i < len(rec):
            if rec[i] != 0x0A:
                return None
            n, i = read_varint(rec, i + 1)
            end = i + n
            if end > len(rec) or i >= end or rec[i] != 0x0A:
                return None
            k, j = read_varint(rec, i + 1)
            if j + k > end:
                return None
            names.append(rec[j : j + k].decode("utf-8"))
            i = end
        return names if len(set(names)) == len(names) else None
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


class _Reader:
    """One read position per record: a byte or an 8-byte word per record is one gather. Words are
    read through an overlapping view (one per byte position), so the buffer must have eight bytes
    after any position read: the records' own buffer when it has them after the last record (a
    span's buffer usually holds the next record's start), else a padded copy of the records' bytes
    (``base``: what positions lose). A damaged length sends a position out of bounds: IndexError,
    which the caller takes as "not our layout"."""

    def __init__(self, buf: np.ndarray, lo: int, hi: int) -> None:
        if hi + _PAD <= len(buf):
            self.buf, self.base = buf, 0
        else:
            self.buf, self.base = np.zeros(hi - lo + _PAD, dtype=np.uint8), lo
            self.buf[: hi - lo] = buf[lo:hi]
        self.words = np.ndarray((len(self.buf) - 7,), dtype="<u8", buffer=self.buf, strides=(1,))
        self._regions: dict[int, np.ndarray] = {}

    def at(self, pos: np.ndarray) -> np.ndarray:
        return np.take(self.buf, pos)

    def word(self, pos: np.ndarray) -> np.ndarray:
        """The eight bytes at each position, as a little-endian uint64 (indexing, not ``take``,
        which would copy the overlapping view first)."""
        return self.words[pos]

    def region(self, pos: np.ndarray, nbytes: int) -> np.ndarray:
        """The ``nbytes`` (a multiple of 8, up to :data:`_PAD`) at each position, as rows of
        little-endian uint64 words: one gather of ``nbytes``-byte items (as fast as one of words)
        where a word at a time would take ``nbytes / 8`` gathers."""
        view = self._regions.get(nbytes)
        if view is None:
            view = self._regions[nbytes] = np.ndarray(
                (len(self.buf) - nbytes + 1,), dtype=f"V{nbytes}", buffer=self.buf, strides=(1,)
            )
        return view[pos].view("<u8").reshape(len(pos), nbytes // 8)

    def expect(self, pos: np.ndarray, byte: int) -> None:
        if not (self.at(pos) == byte).all():
            raise _Layout

    def expect_bytes(self, pos: np.ndarray, const: bytes) -> None:
        for i in range(0, len(const), 8):
            piece = const[i : i + 8]
            mask = np.uint64((1 << (8 * len(piece))) - 1)
            want = np.uint64(int.from_bytes(piece, "little"))
            if not ((self.word(pos + i) & mask) == want).all():
                raise _Layout

    def length(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The varint at each position (a length: at most five bytes) and the position after it."""
        b = self.at(pos)
        more = b >= 0x80
        if not more.any():
            return b.astype(np.int64), pos + 1
        value = (b & 0x7F).astype(np.int64)
        width = np.ones(len(pos), dtype=np.int64)
        for j in range(1, _LENGTH_BYTES):
            b = self.at(pos + j)
            value |= np.where(more, (b & 0x7F).astype(np.int64) << (7 * j), 0)
            width += more
            more &= b >= 0x80
            if not more.any():
                return value, pos + width
        raise _Layout


def _bytes_at(g: np.ndarray, at: int, nbytes: int) -> np.ndarray:
    """Bytes ``at`` to ``at + nbytes`` (at most 8) of each row of a region (:meth:`_Reader.region`),
    as a little-endian uint64."""
    j, s = divmod(at, 8)
    x = g[:, j]
    if s:
        x = x >> np.uint64(8 * s)
        if s + nbytes > 8:
            x = x | (g[:, j + 1] << np.uint64(64 - 8 * s))
    return x if nbytes == 8 else x & np.uint64((1 << (8 * nbytes)) - 1)


def _check(ok: np.ndarray | bool) -> None:
    if not np.all(ok):
        raise _Layout


def _gather(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The bytes ``buf[starts[i]:starts[i] + lens[i]]`` of every row, back to back (uint8): one
    Arrow ``take`` (the rows are the odd elements of a binary array over the whole buffer)."""
    n = len(starts)
    total = int(lens.sum()) if n else 0
    if total == 0:
        return np.zeros(0, dtype=np.uint8)
    import pyarrow as pa

    bounds = np.empty(2 * n + 1, dtype=np.int64)
    bounds[0] = 0
    bounds[1::2] = starts
    bounds[2::2] = starts + lens
    if bounds[-1] < len(buf):  # a last element to the end of the buffer: the offsets then cover it
        bounds = np.append(bounds, len(buf))
    arr = pa.Array.from_buffers(
        pa.large_binary(), len(bounds) - 1, [None, pa.py_buffer(bounds), pa.py_buffer(np.ascontiguousarray(buf))]
    )
    idx = np.arange(1, 2 * n, 2, dtype=np.int64)  # as a buffer: pa.array of a NumPy array imports pandas
    rows = arr.take(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(idx)]))
    offs, data = rows.buffers()[1:]
    return np.frombuffer(data, dtype=np.uint8, count=total, offset=int(np.frombuffer(offs, np.int64, 1)[0]))


def _fixed_bytes(r: _Reader, starts: np.ndarray, nbytes: int) -> np.ndarray:
    """``nbytes`` bytes at each start, as a 2-D uint8 array (rows, nbytes): a word per row for up
    to eight, an index array for a few words, Arrow for more."""
    n = len(starts)
    if nbytes <= 8:
        return r.word(starts).view(np.uint8).reshape(n, 8)[:, :nbytes]
    if nbytes <= _SMALL_GATHER:
        return np.take(r.buf, starts[:, None] + np.arange(nbytes))
    return _gather(r.buf, starts, np.full(n, nbytes, dtype=np.int64)).reshape(n, nbytes)


def _scalar_varints(r: _Reader, at: np.ndarray, width: np.ndarray, v: np.ndarray | None) -> np.ndarray:
    """One varint per row, exactly ``width`` bytes long (1 to 10) at ``at``, as int64 (``v``: the
    word that holds the first three, as bytes 5 to 7, when read already)."""
    if len(width) and (width.min() < 1 or width.max() > 10):
        raise _Layout

    def byte(j: int) -> np.ndarray:
        if v is not None and j < 3:
            return ((v >> np.uint64(40 + 8 * j)) & _LOW).astype(np.uint8)
        return r.at(at + j)

    b = byte(0)
    if (width == 1).all():
        _check(b < 0x80)
        return b.astype(np.int64)
    acc = np.zeros(len(at), dtype=np.uint64)
    for j in range(int(width.max())):
        b = byte(j) if j else b
        live = width > j
        _check((b[live] >= 0x80) == (width[live] > j + 1))  # continuation exactly until the last byte
        acc |= np.where(live, (b & 0x7F).astype(np.uint64) << np.uint64(7 * j), np.uint64(0))
    return acc.view(np.int64)


def _packed_varints(values: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Packed varints (rows of ``size`` bytes, back to back) -> (int64 values, count per row)."""
    n = len(size)
    if not len(values):
        return np.zeros(0, dtype=np.int64), np.zeros(n, dtype=np.int64)
    is_end = values < 0x80
    row_end = np.cumsum(size)
    _check(is_end[row_end[size > 0] - 1])  # every row's last varint ends inside the row
    ends_at = np.flatnonzero(is_end)
    first = np.concatenate(([0], ends_at[:-1] + 1))
    width = ends_at - first + 1
    _check(width.max() <= 10)
    shift = (7 * (np.arange(len(values), dtype=np.int64) - np.repeat(first, width))).astype(np.uint64)
    parts = (values & 0x7F).astype(np.uint64) << shift
    vals = np.bitwise_or.reduceat(parts, first)
    counts = np.bincount(np.searchsorted(row_end, ends_at, side="right"), minlength=n).astype(np.int64)
    return vals.view(np.int64), counts


def decode_columns(
    buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, schema: Schema, kinds: dict[str, str], strict: bool
) -> Batch | None:
    """Records ``buf[starts[i]:starts[i] + lens[i]]`` (uint8 buffer, in increasing order) as the
    schema's columns, values as :func:`.example.storage_dtype` says; None when any record is not
    laid out as ours, or lacks a column (``strict``: or holds another)."""
    n = len(starts)
    if n == 0:
        return None
    first = bytes(buf[int(starts[0]) : int(starts[0] + lens[0])])
    names = _entry_names(first)
    wanted = set(schema.names)
    if names is None or not wanted <= set(names) or (strict and len(names) != len(wanted)):
        return None
    lo, hi = int(starts[0]), int(starts[-1] + lens[-1])
    try:
        r = _Reader(buf, lo, hi)
        return _decode(r, starts - r.base, starts + lens - r.base, names, schema, kinds)
    except (_Layout, IndexError):
        return None


_LOW = np.uint64(0xFF)
_LOW5 = np.uint64((1 << 40) - 1)


def _decode(r: _Reader, starts, ends, names: list[str], schema: Schema, kinds: dict[str, str]) -> Batch:
    n = len(starts)
    r.expect(starts, 0x0A)
    body, p = r.length(starts + 1)
    _check(p + body == ends)
    wanted = set(schema.names)
    spans = {}
    for name in names:
        # entry: 0x0A size | key: 0x0A len name | value: 0x12 len Feature, and nothing else
        key = name.encode()
        head = b"\x0a" + varint(len(key)) + key + b"\x12"
        h = len(head)
        # the entry's tag and size, its head and the word after it (the Feature's start), read in
        # one gather when they fit the padding (keys up to ~30 bytes)
        reach = -(-(h + 10) // 8) * 8
        g = r.region(p, reach) if reach <= _PAD else None
        w = g[:, 0] if g is not None else r.word(p)
        size = (w >> np.uint64(8)) & _LOW
        if (size < 0x80).all():  # a one-byte size: the word holds the entry's tag and the head's start
            m = min(6, h)
            mask = np.uint64(0xFF | (((1 << (8 * m)) - 1) << 16))
            _check((w & mask) == np.uint64(0x0A | (int.from_bytes(head[:m], "little") << 16)))
            if g is None:
                if h > m:
                    r.expect_bytes(p + 2 + m, head[m:])
                v = r.word(p + (2 + h))
            else:
                for i in range(m, h, 8):  # the rest of the head, 8 bytes at a time
                    piece = head[i : i + 8]
                    _check(_bytes_at(g, 2 + i, len(piece)) == np.uint64(int.from_bytes(piece, "little")))
                v = _bytes_at(g, 2 + h, 8)
            q = p + (2 + h)
            end = p + 2 + size.astype(np.int64)
        else:
            _check((w & _LOW) == 0x0A)
            size, q = r.length(p + 1)
            r.expect_bytes(q, head)
            end = q + size
            q = q + h
            v = r.word(q)
        p = end
        # The Feature: its size, its list's tag and size, the packed field's (or bytes value's) tag
        # and size. When they take a byte each (values under ~120 bytes), they are the first five
        # bytes of a word (``v``), and all follow from where the entry ends: one comparison checks them.
        e = end - q - 1  # the Feature's size, if it takes one byte
        if name not in wanted:  # another column: its Feature is not read, only its size checked
            if not ((v & _LOW).astype(np.int64) == e).all():
                feat, q = r.length(q)
                _check(q + feat == end)
            continue
        kind = kinds[name]
        small = ((e - 4).astype(np.uint64) <= np.uint64(123)).all()
        if small:
            eu = e.astype(np.uint64)
            want = eu | ((eu - np.uint64(2)) << np.uint64(16)) | ((eu - np.uint64(4)) << np.uint64(32))
            small = ((v & _LOW5) == (want | np.uint64((_TAGS[kind] << 8) | (0x0A << 24)))).all()
        if small:
            spans[name] = (q + 5, e - 4, v)
            continue
        feat, q = r.length(q)
        _check(q + feat == end)
        at, nbytes = _list_payload(r, q, end, kind)
        _check(at + nbytes == end)
        spans[name] = (at, nbytes, None)
    _check(p == ends)
    return Batch({f.name: _column(r, f, kinds[f.name], *spans[f.name]) for f in schema}, n)


def _list_payload(r: _Reader, q: np.ndarray, end: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """A Feature (from its list's tag at ``q``, ending at ``end``) of one list holding one packed
    field or one bytes value: where each row's payload starts, and its size."""
    n = len(q)
    r.expect(q, _TAGS[kind])
    lst, q = r.length(q + 1)
    _check(q + lst == end)
    has = lst > 0
    if kind in ("bytes", "f64"):
        _check(has)
    if has.all():
        r.expect(q, 0x0A)
        nbytes, at = r.length(q + 1)
        return at, nbytes
    nbytes, at = np.zeros(n, dtype=np.int64), end.copy()
    if has.any():  # some empty number lists (sequences): read where there is a list
        r.expect(q[has], 0x0A)
        nbytes[has], at[has] = r.length(q[has] + 1)
    return at, nbytes


def _column(r: _Reader, f, kind: str, at: np.ndarray, nbytes: np.ndarray, v: np.ndarray | None):
    """One column's values from where each row's payload is (``at``, ``nbytes`` bytes; ``v``: the
    word read before it, whose bytes 5 to 7 are its first three)."""
    buf = r.buf
    n = len(at)
    dt = storage_dtype(f)
    if kind == "bytes":
        _check(f.kind in (STRING, BINARY))
        offs = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(nbytes, out=offs[1:])
        return VarColumn(_gather(buf, at, nbytes), offs)
    if kind in ("float", "f64"):
        width = 4 if kind == "float" else 8
        little = "<f4" if kind == "float" else "<f8"
        if f.kind == FIXED:
            _check(nbytes == width * f.row_size)
            if f.row_size == 1:  # one word per row
                w = r.word(at) if width == 8 else (r.word(at) & np.uint64(0xFFFFFFFF)).astype("<u4")
                return w.view(little).astype(dt, copy=False).reshape((n, *f.shape))
            raw = np.ascontiguousarray(_fixed_bytes(r, at, width * f.row_size))
            return raw.view(little).astype(dt, copy=False).reshape((n, *f.shape))
        _check(nbytes % width == 0)
        values = _gather(buf, at, nbytes).view(little).astype(dt, copy=False)
        return VarColumn(values, np.concatenate([[0], np.cumsum(nbytes // width)]).astype(np.int64))
    if f.kind == FIXED and f.row_size == 1:
        return _scalar_varints(r, at, nbytes, v).astype(dt, copy=False).reshape((n, *f.shape))
    values, counts = _packed_varints(_gather(buf, at, nbytes), nbytes)
    values = values.astype(dt, copy=False)
    if f.kind == FIXED:
        _check(counts == f.row_size)
        return values.reshape((n, *f.shape))
    return VarColumn(values, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
