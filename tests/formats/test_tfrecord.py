"""The vectorised ``tf.train.Example`` encoder for text, bytes and sequences against a plain
per-record encoder written from the protobuf wire format (the obvious, slow way): byte for byte,
on generated batches of every column kind, including empty rows, empty strings and extreme
integers. TensorFlow's own parse of what we write is tested in test_properties.py and the
round-trip tests."""

from __future__ import annotations

import struct

import crc32c
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lovecraft_convert.formats.tfrecord.decode import parse_example
from lovecraft_convert.formats.tfrecord.example import _encode_rows, iter_encoded
from lovecraft_convert.formats.tfrecord.framing import iter_records
from lovecraft_convert.schema import BINARY, FIXED, SEQUENCE, STRING, Batch, Field, Schema, VarColumn


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _masked(data: bytes) -> bytes:
    c = crc32c.crc32c(data)
    return struct.pack("<I", (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _oracle(rows: list[dict], schema: Schema) -> bytes:
    out = b""
    for row in rows:
        features = b""
        for f in schema:
            v = row[f.name]
            if f.kind in (STRING, BINARY):
                feature = _ld(1, _ld(1, v))  # bytes_list holding one value
            elif f.np_dtype.kind == "f":
                packed = np.asarray(v, dtype="<f4").tobytes()
                feature = _ld(2, _ld(1, packed) if packed else b"")
            else:
                packed = b"".join(_varint(int(x)) for x in v)
                feature = _ld(3, _ld(1, packed) if packed else b"")
            features += _ld(1, _ld(1, f.name.encode()) + _ld(2, feature))  # map entry
        example = _ld(1, features)
        head = struct.pack("<Q", len(example))
        out += head + _masked(head) + example + _masked(example)
    return out


COLUMN = st.sampled_from(["text", "bin", "fseq", "iseq", "ffix", "ifix", "flag"])
INT64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def batches(draw):
    kinds = draw(st.lists(COLUMN, min_size=1, max_size=4))
    n = draw(st.integers(1, 12))
    fields, columns, rows = [], {}, [{} for _ in range(n)]
    for j, k in enumerate(kinds):
        name = f"{k}_{j}"
        if k in ("text", "bin", "fseq", "iseq"):
            if k == "text":
                vals = [draw(st.text(max_size=20)).encode("utf-8", "surrogatepass") for _ in range(n)]
                field, dtype = Field(name, STRING, "uint8"), np.uint8
            elif k == "bin":
                vals = [draw(st.binary(max_size=300)) for _ in range(n)]
                field, dtype = Field(name, BINARY, "uint8"), np.uint8
            elif k == "fseq":
                vals = [draw(st.lists(st.floats(width=32), max_size=6)) for _ in range(n)]
                field, dtype = Field(name, SEQUENCE, "float32"), np.float32
            else:
                vals = [draw(st.lists(INT64, max_size=6)) for _ in range(n)]
                field, dtype = Field(name, SEQUENCE, "int64"), np.int64
            flat = [x for v in vals for x in (v if not isinstance(v, bytes) else v)]
            offs = np.concatenate([[0], np.cumsum([len(v) for v in vals])]).astype(np.int64)
            columns[name] = VarColumn(np.array(flat, dtype=dtype), offs)
        elif k == "ffix":
            arr = np.array(draw(st.lists(st.floats(width=32), min_size=3 * n, max_size=3 * n)), np.float32)
            arr = arr.reshape(n, 3)
            field, columns[name] = Field(name, FIXED, "float32", (3,)), arr
            vals = list(arr)
        elif k == "ifix":
            arr = np.array(draw(st.lists(INT64, min_size=n, max_size=n)), dtype=np.int64)
            field, columns[name] = Field(name, FIXED, "int64"), arr
            vals = [[x] for x in arr.tolist()]
        else:
            arr = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
            field, columns[name] = Field(name, FIXED, "bool"), arr
            vals = [[int(x)] for x in arr]
        fields.append(field)
        for i in range(n):
            rows[i][name] = vals[i]
    return Batch(columns, n), Schema(tuple(fields)), rows


@settings(max_examples=200, deadline=None)
@given(batches())
def test_vectorised_records_match_a_per_record_encoder_byte_for_byte(case):
    batch, schema, rows = case
    assert bytes(_encode_rows(batch, schema)) == _oracle(rows, schema)


def test_a_sliced_batch_and_long_values_with_multi_byte_lengths():
    # offsets that do not start at 0 (a slice of a bigger batch) and lengths past one varint byte
    text = [b"x" * n for n in (0, 127, 128, 300, 20000)]
    offs = np.concatenate([[0], np.cumsum([len(t) for t in text])]).astype(np.int64)
    col = VarColumn(np.frombuffer(b"".join(text), dtype=np.uint8), offs)
    schema = Schema((Field("t", STRING, "uint8"),))
    part = Batch({"t": col}, len(text)).slice(1, 5)
    data = b"".join(bytes(p) for p in iter_encoded(part, schema))
    assert data == _oracle([{"t": t} for t in text[1:5]], schema)
    import io

    got = [parse_example(r)["t"] for r in iter_records(io.BytesIO(data), "mem")]
    assert got == [("bytes", [t]) for t in text[1:5]]


FIXED_COLUMN = st.sampled_from(["ffix", "f1", "ifix", "flag", "f64"])


@st.composite
def fixed_batches(draw):
    """All-fixed numeric batches up to 80 columns wide: runs of one kind broken by others, names of
    several lengths (entries of several head lengths), integers of every varint width."""
    kinds = draw(st.lists(FIXED_COLUMN, min_size=1, max_size=80))
    n = draw(st.integers(1, 9))
    fields, columns = [], {}
    for j, k in enumerate(kinds):
        name = "c" * draw(st.integers(1, 3)) + str(j)
        if k == "ffix":
            arr = np.array(draw(st.lists(st.floats(width=32), min_size=2 * n, max_size=2 * n)), np.float32).reshape(
                n, 2
            )
            field = Field(name, FIXED, "float32", (2,))
        elif k == "f1":
            arr = np.array(draw(st.lists(st.floats(width=16), min_size=n, max_size=n)), np.float16)
            field = Field(name, FIXED, "float16")
        elif k == "f64":
            arr = np.array(draw(st.lists(st.floats(), min_size=n, max_size=n)), np.float64)
            field = Field(name, FIXED, "float64")
        elif k == "ifix":
            arr = np.array(draw(st.lists(INT64, min_size=n, max_size=n)), dtype=np.int64)
            field = Field(name, FIXED, "int64")
        else:
            arr = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
            field = Field(name, FIXED, "bool")
        fields.append(field)
        columns[name] = arr
    return Batch(columns, n), Schema(tuple(fields))


@settings(max_examples=150, deadline=None)
@given(fixed_batches(), st.sampled_from([1, 200, 8 << 20]))
def test_fixed_batches_filled_by_runs_of_columns_decode_to_the_values(case, piece_bytes):
    """The template path (a run of same-layout columns filled at once, pieces of any size): every
    record decodes to its row's values, and float32-only batches match the per-record encoder
    byte for byte (integers are written as varints of one width per column, not minimal)."""
    import io

    batch, schema = case
    data = b"".join(bytes(p) for p in iter_encoded(batch, schema, piece_bytes=piece_bytes))
    records = [parse_example(r) for r in iter_records(io.BytesIO(data), "mem")]
    assert len(records) == batch.num_rows
    for i, rec in enumerate(records):
        assert list(rec) == [f.name for f in schema]
        for f in schema:
            want = batch.columns[f.name][i]
            kind, got = rec[f.name]
            if f.dtype == "float64":  # a bytes_list of the row's float64 values, exact
                assert kind == "bytes" and got == [np.asarray(want, "<f8").tobytes()]
            elif f.dtype in ("float32", "float16"):
                assert kind == "float"
                np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32).reshape(-1))
            else:
                assert (kind, got) == ("int64", np.asarray(want, np.int64).reshape(-1).tolist())
    if all(f.dtype == "float32" for f in schema):
        rows = [{f.name: batch.columns[f.name][i] for f in schema} for i in range(batch.num_rows)]
        assert data == _oracle(rows, schema)
