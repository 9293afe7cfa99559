"""Decoding ``tf.train.Example`` records into columns, for the loaders, ``verify`` and ``inspect``.

An Example is ``Example{features=1: Features{feature=1: map<string, Feature>}}`` with
``Feature{bytes_list=1 | float_list=2 | int64_list=3}``. Three decoders, fastest first:

* :func:`decode_fixed`: a run of equal-length records of fixed-shape numeric columns (our writer
  gives every integer of a column one varint width within a run): the layout of the first record
  is parsed once, every other record is checked against it with vectorised comparisons, and the
  values are sliced out column by column;
* :func:`decode_span`: records of any lengths and any column kinds laid out as our writer lays them
  out, decoded as whole columns with NumPy (:mod:`.columnar`);
* :func:`parse_example`: any Example, one by one (foreign files, damaged records: the messages).

Values come back as the format stores them: float32 (``float_list``), int64 (``int64_list``), and
bytes for text and binary columns; variable-length columns as :class:`VarColumn`s.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import DatasetError, InputError
from ...schema import BINARY, FIXED, STRING, Batch, Schema, VarColumn
from .columnar import decode_columns
from .example import feature_kind, storage_dtype
from .framing import Records


def kinds_of(schema: Schema) -> dict[str, str]:
    """How each column is stored: bytes (text, binary), float (float_list), f64 (float64 values as
    one bytes element) or int64 (int64_list)."""
    return {f.name: feature_kind(f) for f in schema}


def list_kind(kind: str) -> str:
    """The Example list a stored kind is in."""
    return "bytes" if kind == "f64" else kind


# --------------------------------------------------------------------------------------------
# one record at a time
# --------------------------------------------------------------------------------------------


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result & ((1 << 64) - 1), i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 2:
            n, i = _read_varint(buf, i)
            if i + n > len(buf):
                raise ValueError("length past end")
            yield field, wire, buf[i : i + n]
            i += n
        elif wire == 0:
            v, i = _read_varint(buf, i)
            yield field, wire, v
        elif wire == 5:
            if i + 4 > len(buf):
                raise ValueError("fixed32 past end")
            yield field, wire, buf[i : i + 4]
            i += 4
        elif wire == 1:
            if i + 8 > len(buf):
                raise ValueError("fixed64 past end")
            yield field, wire, buf[i : i + 8]
            i += 8
        else:
            raise ValueError(f"wire type {wire}")


def parse_example(data: bytes) -> dict[str, tuple[str, list]]:
    """``{name: ("float"|"int64"|"bytes", values)}``; InputError on a malformed message."""
    return {k: (kind or "bytes", v) for k, (kind, v) in _parse(data).items()}


def _parse(data: bytes) -> dict[str, tuple[str | None, list]]:
    """:func:`parse_example`, with None as the kind of a Feature that holds no list. Strict where
    protobuf would merge or pick (as TensorFlow's own parser is): one ``features`` field, each map
    entry one key then at most one value, each key once, each Feature at most one list, no unknown
    fields; so that a record is either refused or read as TensorFlow reads it."""
    try:
        out: dict[str, tuple[str | None, list]] = {}
        for seen, (fno, wire, features) in enumerate(_fields(data)):
            _want(fno, wire, 1)
            if seen:
                raise ValueError("features given twice")
            for eno, wire, entry in _fields(features):
                _want(eno, wire, 1)
                parts = list(_fields(entry))
                if [(k, w) for k, w, _ in parts] not in ([(1, 2)], [(1, 2), (2, 2)]):
                    raise ValueError("a feature entry that is not one key and one value")
                key = parts[0][2].decode("utf-8")
                if key in out:
                    raise ValueError(f"feature '{key}' given twice")
                out[key] = _feature(parts[1][2] if len(parts) > 1 else b"")
        return out
    except (ValueError, UnicodeDecodeError, struct.error) as e:
        raise InputError(f"malformed tf.train.Example ({e})", hint="the record is corrupt") from None


def _want(field: int, wire: int, number: int, allowed: tuple[int, ...] = (2,)) -> None:
    if field != number or wire not in allowed:
        raise ValueError(f"unexpected field {field} (wire type {wire})")


def _feature(buf: bytes) -> tuple[str | None, list]:
    fields = list(_fields(buf))
    if not fields:
        return None, []
    if len(fields) > 1 or fields[0][0] not in (1, 2, 3) or fields[0][1] != 2:
        raise ValueError("a Feature that is not one list")
    kind_no, _, lst = fields[0]
    kind = {1: "bytes", 2: "float", 3: "int64"}[kind_no]
    values: list = []
    for no, wire, v in _fields(lst):
        if kind == "bytes":
            _want(no, wire, 1)
            values.append(bytes(v))
        elif kind == "float":
            _want(no, wire, 1, (2, 5))
            if wire == 2:
                if len(v) % 4:
                    raise ValueError("packed floats of a length not a multiple of 4")
                values.extend(np.frombuffer(v, dtype="<f4").tolist())
            else:
                values.append(struct.unpack("<f", v)[0])
        else:
            _want(no, wire, 1, (2, 0))
            if wire == 2:
                j = 0
                while j < len(v):
                    x, j = _read_varint(v, j)
                    values.append(x - (1 << 64) if x >= 1 << 63 else x)
            else:
                values.append(v - (1 << 64) if v >= 1 << 63 else v)
    return kind, values


# --------------------------------------------------------------------------------------------
# runs of equal-length records
# --------------------------------------------------------------------------------------------


class FixedLayout:
    """Where each feature's packed values sit in a record of one length, and how to check the rest."""

    def __init__(self, features: list[tuple], segments: list[tuple[int, int]], ref: bytes) -> None:
        self.features = features  # (name, kind, offset, nbytes, count, width)
        self.segments = segments  # [a, b) byte ranges that must equal the reference record's
        self.ref = np.frombuffer(ref, dtype=np.uint8)


def _parse_layout(rec: bytes, wanted: dict[str, str]) -> FixedLayout | None:
    """The layout of one Example, or None when it is not a constant-layout candidate."""
    try:
        features = []
        values_at: list[tuple[int, int]] = []
        i, n = 0, len(rec)
        while i < n:
            key, i = _read_varint(rec, i)
            if key & 7 != 2:
                return None
            ln, i = _read_varint(rec, i)
            end = i + ln
            if key >> 3 == 1:  # Features
                j = i
                while j < end:
                    k2, j = _read_varint(rec, j)
                    l2, j = _read_varint(rec, j)
                    if k2 != 0x0A:  # map entry
                        j += l2
                        continue
                    e_end = j + l2
                    name, fb = None, None
                    while j < e_end:
                        k3, j = _read_varint(rec, j)
                        l3, j = _read_varint(rec, j)
                        if k3 == 0x0A:
                            name = rec[j : j + l3].decode("utf-8")
                        elif k3 == 0x12:
                            fb = (j, j + l3)
                        j += l3
                    if name is None or fb is None:
                        return None
                    fa, fe = fb
                    if fa == fe:  # empty Feature
                        return None
                    k4, p = _read_varint(rec, fa)
                    l4, p = _read_varint(rec, p)
                    kind = {0x0A: "bytes", 0x12: "float", 0x1A: "int64"}.get(k4)
                    want = wanted.get(name)
                    if kind is None or p + l4 != fe:
                        return None
                    if kind == "bytes":  # float64 values (one element) are the only fixed-size bytes
                        if want not in (None, "f64") or l4 == 0:
                            return None
                        kind = "f64"
                    elif want is not None and kind != want:
                        return None
                    if l4 == 0:
                        if name in wanted:
                            features.append((name, kind, p, 0, 0, 1))
                        continue
                    k5, q = _read_varint(rec, p)
                    if k5 != 0x0A:  # packed values
                        return None
                    l5, q = _read_varint(rec, q)
                    if q + l5 != fe:
                        return None
                    if name not in wanted:  # another column's values: skipped, not compared
                        values_at.append((q, q + l5))
                        continue
                    if kind in ("float", "f64"):
                        size = 4 if kind == "float" else 8
                        if l5 % size:
                            return None
                        features.append((name, kind, q, l5, l5 // size, size))
                    else:
                        widths = []
                        r = q
                        while r < fe:
                            s = r
                            _, r = _read_varint(rec, r)
                            widths.append(r - s)
                        if len(set(widths)) != 1:
                            return None
                        features.append((name, kind, q, l5, len(widths), widths[0]))
                    values_at.append((q, q + l5))
            i = end
        if {f[0] for f in features} != set(wanted):
            return None
        segments = []
        pos = 0
        for a, b in sorted(values_at):
            if a > pos:
                segments.append((pos, a))
            pos = b
        if pos < n:
            segments.append((pos, n))
        return FixedLayout(features, segments, rec)
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def layout_for(recs: np.ndarray, kinds: dict[str, str], cache: dict[int, FixedLayout]) -> FixedLayout | None:
    """The layout every record of ``recs`` (2-D, equal lengths) follows, or None."""
    n, L = recs.shape
    for attempt in (0, 1):
        layout = cache.get(L)
        if layout is None or attempt:
            layout = _parse_layout(recs[0].tobytes(), kinds)
            if layout is None:
                return None
            cache[L] = layout
        ref = layout.ref
        if all(np.array_equal(recs[:, a:b], np.broadcast_to(ref[a:b], (n, b - a))) for a, b in layout.segments):
            return layout
    return None


def decode_fixed(recs: np.ndarray, schema: Schema, kinds: dict[str, str], cache: dict, where: str) -> Batch | None:
    """A run of equal-length records of a fixed-shape numeric schema as columns; None when the
    records do not share one layout (then they are decoded one by one)."""
    if not all(f.kind == FIXED for f in schema):
        return None
    n = len(recs)
    layout = layout_for(recs, kinds, cache)
    if layout is None:
        return None
    cols = {}
    for name, kind, off, nbytes, count, width in layout.features:
        f = schema[name]
        if count != f.row_size:
            raise DatasetError(
                f"feature '{name}' has {count} values per record, the schema says {f.row_size}",
                where=where,
                hint="the dataset is damaged; re-create it",
                kind="schema",
            )
        block = recs[:, off : off + nbytes]
        if kind in ("float", "f64"):
            vals = np.ascontiguousarray(block).view("<f4" if kind == "float" else "<f8").reshape((n, *f.shape))
        else:
            v = block.reshape(n, count, width)
            if (width > 1 and not (v[:, :, :-1] >= 0x80).all()) or (v[:, :, -1] >= 0x80).any():
                return None
            acc = np.zeros((n, count), dtype=np.uint64)
            for j in range(width):
                acc |= (v[:, :, j] & 0x7F).astype(np.uint64) << np.uint64(7 * j)
            vals = acc.view(np.int64).reshape((n, *f.shape))
        cols[name] = vals
    return Batch({f.name: cols[f.name] for f in schema}, n)


# --------------------------------------------------------------------------------------------
# any records
# --------------------------------------------------------------------------------------------


def decode_records(records: list[bytes], schema: Schema, *, where: str, first: int, strict: bool) -> Batch:
    """Records (payloads) as a batch of the schema's columns (see :func:`decode_span`). ``first``:
    the 1-based index of ``records[0]`` in its file, for messages."""
    return decode_span(Records.from_list(records, first - 1), schema, where=where, strict=strict)


def decode_span(records: Records, schema: Schema, *, where: str, strict: bool, kinds: dict | None = None) -> Batch:
    """Framed records as a batch of the schema's columns: as whole columns when they have our
    writer's layout (:mod:`.columnar`), else one by one. ``strict`` (verify): every record must
    hold exactly the schema's features, of the right kind and count; otherwise extra features are
    ignored (a selection of columns)."""
    kinds = kinds_of(schema) if kinds is None else kinds
    if len(records):
        batch = decode_columns(records.buf, records.starts, records.lens, schema, kinds, strict)
        if batch is not None:
            return batch
    return _one_by_one(records.payloads(), records.indices() + 1, schema, kinds, where, strict)


def _one_by_one(records: list[bytes], ids: np.ndarray, schema: Schema, kinds: dict, where: str, strict: bool) -> Batch:
    per: dict[str, list] = {f.name: [] for f in schema}
    for index, data in zip(ids.tolist(), records, strict=True):
        try:
            ex = _parse(bytes(data))
        except InputError as e:
            raise DatasetError(f"record {index}: {e.one_line()}", where=where) from None
        for f in schema:
            got = ex.get(f.name)
            if got is None:
                raise DatasetError(f"record {index} has no feature '{f.name}'", where=where, kind="schema")
            kind, vals = got
            if kind is not None and kind != list_kind(kinds[f.name]):
                raise DatasetError(
                    f"record {index}: feature '{f.name}' is a {kind} list, expected {list_kind(kinds[f.name])}",
                    where=where,
                    kind="schema",
                )
            if kinds[f.name] == "f64":  # one bytes value holding the row's float64 values
                if len(vals) != 1 or len(vals[0]) % 8:
                    raise DatasetError(
                        f"record {index}: feature '{f.name}' does not hold float64 values", where=where, kind="schema"
                    )
                vals = np.frombuffer(vals[0], dtype="<f8")
            if f.kind == FIXED and len(vals) != f.row_size:
                raise DatasetError(
                    f"record {index}: feature '{f.name}' has {len(vals)} values, expected {f.row_size}",
                    where=where,
                    kind="schema",
                )
            if f.kind in (STRING, BINARY) and len(vals) != 1:
                raise DatasetError(
                    f"record {index}: feature '{f.name}' has {len(vals)} values, expected 1", where=where, kind="schema"
                )
            per[f.name].append(vals)
        if strict and len(ex) != len(schema):
            extra = sorted(set(ex) - set(schema.names))
            raise DatasetError(
                f"record {index} has features {extra} that are not in the schema", where=where, kind="schema"
            )
    return _rows_batch(per, schema, len(records))


def _rows_batch(per: dict[str, list], schema: Schema, n: int) -> Batch:
    cols: dict[str, Any] = {}
    for f in schema:
        vals = per[f.name]
        dt = storage_dtype(f)
        if f.kind == FIXED:
            cols[f.name] = np.asarray(vals, dtype=dt).reshape((n, *f.shape))
            continue
        if f.kind in (STRING, BINARY):
            items = [v[0] for v in vals]
            lens = np.fromiter(map(len, items), dtype=np.int64, count=n)
            values = np.frombuffer(b"".join(items), dtype=np.uint8)
        else:
            lens = np.fromiter(map(len, vals), dtype=np.int64, count=n)
            values = np.fromiter((x for v in vals for x in v), dtype=dt, count=int(lens.sum()))
        offs = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        cols[f.name] = VarColumn(values, offs)
    return Batch(cols, n)
