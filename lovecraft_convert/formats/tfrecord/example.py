"""Encoding rows as framed ``tf.train.Example`` records, in NumPy, without TensorFlow.

A record is ``uint64 length | masked CRC32C(length) | data | masked CRC32C(data)``
(:mod:`.framing`). The data is an Example protobuf: ``Example{features=1: Features{feature=1: map<string, Feature>}}`` with
``Feature{bytes_list=1 | float_list=2 | int64_list=3}``, lists packed.

When every column is fixed-shape and numeric, every record of a batch has the same layout: we
build one template row and fill the values in with a 2-D slice assignment. Integer values are
written as varints of one width per column and batch (the widest value's width, padding smaller
values with continuation bytes, which protobuf decodes to the same value), so the layout stays
constant. Text, bytes and sequences go through a per-row encoder.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np

from ...errors import SchemaError
from ...schema import BINARY, FIXED, SEQUENCE, STRING, Batch, Field, Schema, VarColumn
from .framing import crc32c_fn, mask_array, masked_crc32c


def varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


F64 = "float64le"  # the manifest's name for float64 values kept exact as bytes


def feature_kind(f: Field) -> str:
    """float (float_list: float16 and float32, exact), f64 (a bytes_list of one element holding the
    row's float64 values little-endian: float_list is float32, so float64 is kept exact this way,
    as TFDS does for dtypes an Example lacks), int64 (int64_list) or bytes (bytes_list)."""
    if f.kind in (STRING, BINARY):
        return "bytes"
    dt = f.np_dtype
    if dt.kind == "f" and dt.itemsize == 8:
        return "f64"
    if dt.kind == "f" and dt.itemsize <= 4:
        return "float"
    if dt.kind in "iub":
        return "int64"
    raise SchemaError(
        f"column '{f.name}' has dtype {dt}, which TFRecord cannot hold",
        hint="write it to memmap, hdf5 or parquet" if dt.kind in "SU" else "write it to memmap or hdf5",
    )


def storage_dtype(f: Field) -> np.dtype:
    """The dtype of a column's values as decoded: float64 exact, other floats as float32, integers
    as int64."""
    if f.kind in (STRING, BINARY):
        return f.np_dtype
    if f.np_dtype.kind == "f":
        return np.dtype(np.float64) if f.np_dtype.itemsize == 8 else np.dtype(np.float32)
    return np.dtype(np.int64)


def feature_spec(schema: Schema) -> dict[str, dict]:
    """The ``tf.io.parse_example`` spec as JSON (:func:`.tfdata.to_tf_feature_spec` builds the real one)."""
    spec = {}
    for f in schema:
        kind = feature_kind(f)
        if kind == "f64":  # one bytes value per row: decode with tf.io.decode_raw(..., tf.float64)
            shape = {"ragged": True} if f.kind == SEQUENCE else {"value_shape": list(f.shape)}
            spec[f.name] = {"type": "FixedLenFeature", "shape": [], "dtype": "string", "encoding": F64, **shape}
            continue
        dtype = {"float": "float32", "int64": "int64", "bytes": "string"}[kind]
        if f.kind == SEQUENCE:
            spec[f.name] = {"type": "VarLenFeature", "dtype": dtype}
        elif f.kind == FIXED:
            spec[f.name] = {"type": "FixedLenFeature", "shape": list(f.shape), "dtype": dtype}
        else:
            spec[f.name] = {"type": "FixedLenFeature", "shape": [], "dtype": dtype}
    return spec


# --------------------------------------------------------------------------------------------
# encoding
# --------------------------------------------------------------------------------------------


def _varint_len(v: np.ndarray) -> np.ndarray:
    """Bytes of each (uint64) value as a minimal varint."""
    n = np.ones(v.shape, dtype=np.int64)
    for j in range(1, 10):
        n += v >= np.uint64(1 << (7 * j))
    return n


def _varints_fixed(v: np.ndarray, width: int) -> np.ndarray:
    """Each uint64 value as a varint of exactly ``width`` bytes -> uint8 array (..., width)."""
    out = np.empty((*v.shape, width), dtype=np.uint8)
    for j in range(width):
        b = ((v >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        if j < width - 1:
            b |= 0x80
        out[..., j] = b
    return out


def _as_uint64(col: np.ndarray, name: str) -> np.ndarray:
    if col.dtype == np.uint64 and col.size and int(col.max()) > 2**63 - 1:
        raise SchemaError(
            f"column '{name}' holds a uint64 value above 2**63-1, which int64_list cannot hold",
            hint="write it to memmap, hdf5 or parquet",
        )
    return col.astype(np.int64, copy=False).view(np.uint64) if col.dtype != np.uint64 else col


def _entry_head(name: str, kind: str, tag: int, payload_len: int) -> bytes:
    """The bytes of a feature-map entry before its payload (``payload_len`` bytes of values)."""
    # a packed number list is left out when empty; a bytes list always holds its one value
    lst = (b"\x0a" + varint(payload_len)) if payload_len or kind == "f64" else b""
    feature = bytes([tag]) + varint(len(lst) + payload_len) + lst
    key = name.encode()
    head = b"\x0a" + varint(len(key)) + key + b"\x12" + varint(len(feature) + payload_len) + feature
    return b"\x0a" + varint(len(head) + payload_len) + head


_TAGS = {"float": 0x12, "f64": 0x0A, "int64": 0x1A}
_DTYPES = {"float": "<f4", "f64": "<f8", "int64": None}


_CACHE: dict[tuple, tuple] = {}  # (id(schema), key) -> (schema, value): a wide schema is slow to hash


def _cached(schema: Schema, key: tuple, build):
    """``build()``, kept for this very schema object (and ``key``); a few entries at most."""
    hit = _CACHE.get((id(schema), key))
    if hit is not None and hit[0] is schema:
        return hit[1]
    if len(_CACHE) >= 16:
        _CACHE.clear()
    value = build()
    _CACHE[(id(schema), key)] = (schema, value)
    return value


def _segments(schema: Schema) -> tuple[tuple[str, int, int, int], ...]:
    """Runs of consecutive columns of one kind and row size: (kind, row size, first, end). A table
    thousands of columns wide is a few runs, each encoded with a handful of NumPy operations."""
    runs: list[list] = []
    for i, f in enumerate(schema):
        kind, k = feature_kind(f), f.row_size
        if runs and runs[-1][0] == kind and runs[-1][1] == k:
            runs[-1][3] = i + 1
        else:
            runs.append([kind, k, i, i + 1])
    return tuple(tuple(r) for r in runs)


def _layout(schema: Schema, widths: tuple[int, ...]) -> tuple[bytes, tuple[tuple[int, int, int, int, int], ...]]:
    """The template Example of an all-fixed batch whose column i has values of ``widths[i]`` bytes
    each, and its fills: (offset, stride, head length, first column, end column) for each run of
    columns whose entries have one length (their payloads then sit ``stride`` bytes apart)."""
    body = bytearray()
    fills: list[list[int]] = []
    for i, f in enumerate(schema):
        kind = feature_kind(f)
        payload_len = f.row_size * widths[i]
        head = _entry_head(f.name, kind, _TAGS[kind], payload_len)
        stride = len(head) + payload_len
        last = fills[-1] if fills else None
        same = last and feature_kind(schema.fields[last[3]]) == kind and widths[last[3]] == widths[i]
        if same and last[1] == stride and last[2] == len(head):
            last[4] = i + 1
        else:
            fills.append([len(body), stride, len(head), i, i + 1])
        body += head
        body += bytes(payload_len)
    example = b"\x0a" + varint(len(body))
    shift = len(example)
    return example + bytes(body), tuple((off + shift, st, h, a, b) for off, st, h, a, b in fills)


def _stack_runs(batch: Batch, schema: Schema) -> tuple[list[tuple[int, int, np.ndarray]], tuple[int, ...]]:
    """Each run of columns (:func:`_segments`) as one array (rows, columns, values): float runs as
    their bytes, int64 runs as uint64 values; and every column's value width in bytes."""
    n = batch.num_rows
    cols = [batch.columns[f.name] for f in schema]
    widths: list[int] = []
    stacked = []
    for kind, k, a, b in _cached(schema, ("segments",), lambda: _segments(schema)):
        if kind == "int64":
            fields = schema.fields[a:b]
            v = np.stack([_as_uint64(c.reshape(n, k), f.name) for c, f in zip(cols[a:b], fields, strict=True)], axis=1)
            widths += _varint_len(v.max(axis=(0, 2))).tolist() if v.size else [1] * (b - a)
            stacked.append((a, b, v))
        else:
            arr = np.stack([c.reshape(n, k) for c in cols[a:b]], axis=1).astype(_DTYPES[kind], copy=False)
            widths += [arr.itemsize] * (b - a)
            stacked.append((a, b, arr.view(np.uint8).reshape(n, b - a, -1)))
    return stacked, tuple(widths)


def _encode_fixed(batch: Batch, schema: Schema, piece_bytes: int) -> Iterator[np.ndarray]:
    """Framed records of an all-fixed, numeric batch, in pieces of about ``piece_bytes``: one
    template, filled a run of same-layout columns at a time."""
    n = batch.num_rows
    stacked, widths = _stack_runs(batch, schema)
    template, fills = _cached(schema, widths, lambda: _layout(schema, widths))
    e = len(template)
    rec = 12 + e + 4
    head = struct.pack("<Q", e)
    frame = np.frombuffer(head + struct.pack("<I", masked_crc32c(head)) + template, dtype=np.uint8)
    crc = crc32c_fn()
    step = max(1, piece_bytes // rec)
    for lo in range(0, n, step):
        m = min(n, lo + step) - lo
        out = np.empty((m, rec), dtype=np.uint8)
        out[:, : 12 + e] = frame
        run = 0
        for off, stride, h, a, b in fills:
            while not stacked[run][0] <= a < stacked[run][1]:
                run += 1
            first, _, arr = stacked[run]
            part = arr[lo : lo + m, a - first : b - first]
            if part.dtype != np.uint8:  # int64 values: varints of this fill's one width
                part = _varints_fixed(part, widths[a]).reshape(m, b - a, -1)
            out[:, 12 + off : 12 + off + stride * (b - a)].reshape(m, b - a, stride)[:, :, h:] = part
        # One C call per record over the rows of a 2-D view (each row a contiguous buffer): about
        # half the cost of slicing a memoryview per record in a generator.
        raw = np.fromiter(map(crc, out[:, 12 : 12 + e]), dtype=np.uint64, count=m)
        out[:, 12 + e :] = mask_array(raw).view(np.uint8).reshape(m, 4)
        yield out.reshape(-1)


def _put_varints(out: np.ndarray, pos: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Write each uint64 of ``v`` as a minimal varint at byte ``pos`` of ``out``; their widths."""
    w = _varint_len(v)
    for j in range(int(w.max()) if len(w) else 0):
        m = w > j
        b = ((v[m] >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        b[w[m] > j + 1] |= 0x80
        out[pos[m] + j] = b
    return w


def _scatter(out: np.ndarray, pos: np.ndarray, lens: np.ndarray, data: np.ndarray) -> None:
    """Copy row r of the flat uint8 ``data`` (``lens[r]`` bytes, rows back to back) to ``pos[r]``.

    The rows keep their order, so this is one boolean-mask assignment; the mask is runs of gap and
    row bytes, made by one ``repeat`` (a byte per output byte, no index arrays)."""
    n = len(pos)
    if not len(data):
        return
    ends = pos + lens
    runs = np.empty(2 * n + 1, dtype=np.int64)
    runs[0] = pos[0]
    runs[2 : 2 * n : 2] = pos[1:] - ends[:-1]
    runs[1 : 2 * n : 2] = lens
    runs[-1] = len(out) - ends[-1]
    keep = np.zeros(2 * n + 1, dtype=np.bool_)
    keep[1 : 2 * n : 2] = True
    out[np.repeat(keep, runs)] = data


def _put_const(out: np.ndarray, pos: np.ndarray, const: bytes) -> None:
    out[pos[:, None] + np.arange(len(const))] = np.frombuffer(const, dtype=np.uint8)


def _encode_rows(batch: Batch, schema: Schema) -> np.ndarray:
    """One framed Example per row for any schema (text, bytes, sequences, fixed), vectorised:
    every length at every level of nesting is computed per row first, then each piece (constant
    bytes, varints, payloads) is scattered to its place in the output with one NumPy operation
    per column. Varints are minimal, as protobuf writes them."""
    n = batch.num_rows
    cols = []
    for f in schema:
        kind = feature_kind(f)
        col = batch.columns[f.name]
        if isinstance(col, VarColumn):
            offs = col.offsets.astype(np.int64, copy=False)
            values = col.values[offs[0] : offs[-1]]
            offs = offs - offs[0]
        else:
            values = col.reshape(-1)
            offs = np.arange(n + 1, dtype=np.int64) * f.row_size
        cnt = np.diff(offs)
        cw = None  # int64 only: varint bytes before each value
        if kind in ("bytes", "f64"):
            if kind == "f64":
                data = np.ascontiguousarray(values, dtype="<f8").view(np.uint8).reshape(-1)
                payload = cnt * 8
            else:
                data = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
                payload = cnt
            tag = 0x0A
            lst = 1 + _varint_len(payload.astype(np.uint64)) + payload  # one value, even if empty
        else:
            if kind == "float":
                data = np.ascontiguousarray(values, dtype="<f4").view(np.uint8).reshape(-1)
                payload, tag = cnt * 4, 0x12
            else:
                data = _as_uint64(np.asarray(values), f.name)
                cw = np.zeros(len(data) + 1, dtype=np.int64)
                np.cumsum(_varint_len(data), out=cw[1:])
                payload, tag = cw[offs[1:]] - cw[offs[:-1]], 0x1A
            lst = np.where(payload > 0, 1 + _varint_len(payload.astype(np.uint64)) + payload, 0)
        feat = 1 + _varint_len(lst.astype(np.uint64)) + lst
        key = f.name.encode()
        head = b"\x0a" + varint(len(key)) + key + b"\x12"
        entry = len(head) + _varint_len(feat.astype(np.uint64)) + feat
        total = 1 + _varint_len(entry.astype(np.uint64)) + entry
        cols.append((kind, tag, head, offs, cnt, data, cw, payload, lst, feat, entry, total))
    body = np.zeros(n, dtype=np.int64)
    for c in cols:
        body += c[-1]
    example = 1 + _varint_len(body.astype(np.uint64)) + body
    rec = 16 + example
    starts = np.cumsum(rec) - rec
    out = np.empty(int(rec.sum()), dtype=np.uint8)
    crc = crc32c_fn()
    lengths, which = np.unique(example, return_inverse=True)  # few distinct lengths: CRC each once
    heads = lengths.astype("<u8").view(np.uint8).reshape(-1, 8)
    head_crc = mask_array(np.fromiter(map(crc, heads), dtype=np.uint64, count=len(heads))).view(np.uint8).reshape(-1, 4)
    out[starts[:, None] + np.arange(8)] = heads[which]
    out[starts[:, None] + np.arange(8, 12)] = head_crc[which]
    pos = starts + 12
    out[pos] = 0x0A
    pos = pos + 1
    pos += _put_varints(out, pos, body.astype(np.uint64))
    for kind, tag, head, offs, cnt, data, cw, payload, lst, feat, entry, _ in cols:
        out[pos] = 0x0A
        pos += 1
        pos += _put_varints(out, pos, entry.astype(np.uint64))
        _put_const(out, pos, head)
        pos += len(head)
        pos += _put_varints(out, pos, feat.astype(np.uint64))
        out[pos] = tag
        pos += 1
        pos += _put_varints(out, pos, lst.astype(np.uint64))
        has = lst > 0
        out[pos[has]] = 0x0A
        pos[has] += 1 + _put_varints(out, pos[has] + 1, payload[has].astype(np.uint64))
        if kind == "int64":  # value j of row r goes to pos[r] + (varint bytes of the row before j)
            _put_varints(out, np.repeat(pos - cw[offs[:-1]], cnt) + cw[:-1], data)
        else:
            _scatter(out, pos, payload, data)
        pos += payload
    ends = starts + 12 + example
    mv = memoryview(out)
    rows = map(mv.__getitem__, map(slice, (starts + 12).tolist(), ends.tolist()))
    data_crc = np.fromiter(map(crc, rows), dtype=np.uint64, count=n)
    out[ends[:, None] + np.arange(4)] = mask_array(data_crc).view(np.uint8).reshape(n, 4)
    return out


def iter_encoded(batch: Batch, schema: Schema, piece_bytes: int = 8 << 20) -> Iterator[bytes | np.ndarray]:
    """Framed ``tf.train.Example`` records, one per row, in pieces of about ``piece_bytes`` (bytes-like)."""
    if batch.num_rows == 0:
        return
    if all(f.kind == FIXED for f in schema):
        yield from _encode_fixed(batch, schema, piece_bytes)
        return
    # bounded by bytes, not rows: the vectorised encoder's temporaries scale with the piece
    per_row = 64 + batch.nbytes // batch.num_rows + sum(len(f.name) + 16 for f in schema)
    step = max(1, piece_bytes // per_row)
    for i in range(0, batch.num_rows, step):
        yield _encode_rows(batch.slice(i, i + step) if batch.num_rows > step else batch, schema)


def encode_batch(batch: Batch, schema: Schema) -> bytes:
    """One framed ``tf.train.Example`` record per row, features in schema order."""
    return b"".join(bytes(p) if isinstance(p, np.ndarray) else p for p in iter_encoded(batch, schema))
