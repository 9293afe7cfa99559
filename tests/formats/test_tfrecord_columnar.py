"""The whole-column decoder of ``tf.train.Example`` records (formats/tfrecord/columnar.py) against
the values written and against TensorFlow's own ``tf.io.parse_example``: generated schemas of every
column kind (text with empty and non-ASCII strings, bytes, float64 kept as bytes, float32, int64 of
every varint width, fixed shapes, sequences with empty rows), every column selection; and damaged
records (a byte changed, inserted or removed, the CRC made right again, or not): either the right
values or a one-line error, never other values."""

from __future__ import annotations

import os
import struct

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lovecraft_convert.errors import DatasetError, LovecraftError
from lovecraft_convert.formats.tfrecord.columnar import decode_columns
from lovecraft_convert.formats.tfrecord.decode import decode_span, kinds_of
from lovecraft_convert.formats.tfrecord.example import feature_spec, iter_encoded
from lovecraft_convert.formats.tfrecord.framing import RecordRuns, Records
from lovecraft_convert.formats.tfrecord.reader import TfrecordReader
from lovecraft_convert.schema import BINARY, FIXED, SEQUENCE, STRING, Batch, Field, Schema, VarColumn

KINDS = ["text", "bin", "f64", "f64x3", "f64seq", "f32", "f32x2", "f32seq", "i64", "i64x2", "i64seq", "flag"]
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40) | st.sampled_from(["", "é", "東京🙂", "x" * 200])


def _var(vals: list, dtype) -> VarColumn:
    if vals and isinstance(vals[0], bytes):
        flat = np.frombuffer(b"".join(vals), dtype=np.uint8)
    else:
        flat = np.array([x for v in vals for x in v], dtype=dtype)
    offs = np.concatenate([[0], np.cumsum([len(v) for v in vals])]).astype(np.int64)
    return VarColumn(flat, offs)


@st.composite
def tables(draw, min_rows: int = 1, max_rows: int = 30):
    """(batch, schema, rows): rows[i][name] is the value a reader must give (bytes for text)."""
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=7))
    n = draw(st.integers(min_rows, max_rows))
    fields, cols = [], {}
    rows: list[dict] = [{} for _ in range(n)]
    floats64 = st.floats(allow_nan=True, allow_infinity=True)
    floats32 = st.floats(width=32, allow_nan=False)
    for j, k in enumerate(kinds):
        long = "a_column_name_longer_than_what_one_gather_reads_of_an_entry"
        name = draw(st.sampled_from(["c", "col", "a_rather_long_column_name", long, "é"])) + str(j)
        if k in ("text", "bin"):
            vals = [draw(TEXT).encode() if k == "text" else draw(st.binary(max_size=300)) for _ in range(n)]
            f, col = Field(name, STRING if k == "text" else BINARY, "uint8"), _var(vals, np.uint8)
        elif k in ("f64seq", "f32seq", "i64seq"):
            elem = {"f64seq": floats64, "f32seq": floats32, "i64seq": INT64}[k]
            dtype = {"f64seq": np.float64, "f32seq": np.float32, "i64seq": np.int64}[k]
            vals = [draw(st.lists(elem, max_size=5)) for _ in range(n)]
            f, col = Field(name, SEQUENCE, np.dtype(dtype).name), _var(vals, dtype)
            vals = [np.array(v, dtype=dtype) for v in vals]
        else:
            shape = {"f64x3": (3,), "f32x2": (2,), "i64x2": (2,)}.get(k, ())
            size = int(np.prod(shape, dtype=np.int64))
            elem, dtype = {
                "f64": (floats64, np.float64),
                "f64x3": (floats64, np.float64),
                "f32": (floats32, np.float32),
                "f32x2": (floats32, np.float32),
                "i64": (INT64, np.int64),
                "i64x2": (INT64, np.int64),
                "flag": (st.booleans(), np.bool_),
            }[k]
            col = np.array(draw(st.lists(elem, min_size=n * size, max_size=n * size)), dtype=dtype).reshape(n, *shape)
            f = Field(name, FIXED, np.dtype(dtype).name, shape)
            vals = list(col)
        fields.append(f)
        cols[name] = col
        for i in range(n):
            rows[i][name] = vals[i]
    return Batch(cols, n), Schema(tuple(fields)), rows


def _payloads(batch: Batch, schema: Schema) -> list[bytes]:
    data = b"".join(bytes(p) for p in iter_encoded(batch, schema))
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        out.append(data[pos + 12 : pos + 12 + n])
        pos += n + 16
    return out


def _same(got, want, f: Field) -> None:
    if f.kind in (STRING, BINARY):
        assert bytes(got) == want
    else:
        np.testing.assert_array_equal(np.asarray(got, dtype=np.float64 if f.np_dtype.kind == "f" else None), want)


def _rows_of(batch: Batch, schema: Schema) -> list[dict]:
    out = [{} for _ in range(batch.num_rows)]
    for f in schema:
        c = batch.columns[f.name]
        for i in range(batch.num_rows):
            out[i][f.name] = c.row(i) if isinstance(c, VarColumn) else c[i]
    return out


def _check_rows(batch: Batch, schema: Schema, rows: list[dict]) -> None:
    assert batch.num_rows == len(rows)
    assert list(batch.columns) == schema.names
    got = _rows_of(batch, schema)
    for g, w in zip(got, rows, strict=True):
        for f in schema:
            want = w[f.name]
            if f.kind in (STRING, BINARY):
                assert g[f.name].tobytes() == want
            else:
                a = np.asarray(g[f.name]).astype(np.float64) if f.np_dtype.kind == "f" else np.asarray(g[f.name])
                b = np.asarray(want).astype(np.float64) if f.np_dtype.kind == "f" else np.asarray(want)
                np.testing.assert_array_equal(a.reshape(-1), b.reshape(-1))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.data())
def test_every_column_kind_decodes_as_whole_columns_to_the_values_written(case, data):
    """What our writer writes never leaves the whole-column path (the speed of every column kind),
    and gives the values written, for the full schema and for any selection of its columns in any
    order."""
    batch, schema, rows = case
    payloads = _payloads(batch, schema)
    recs = Records.from_list(payloads)
    got = decode_columns(recs.buf, recs.starts, recs.lens, schema, kinds_of(schema), strict=True)
    assert got is not None
    _check_rows(got, schema, rows)
    names = data.draw(st.permutations(schema.names).flatmap(lambda p: st.lists(st.sampled_from(p), unique=True)))
    if names:
        sub = Schema(tuple(schema[n] for n in names))
        part = decode_columns(recs.buf, recs.starts, recs.lens, sub, kinds_of(sub), strict=False)
        assert part is not None
        _check_rows(part, sub, [{n: r[n] for n in names} for r in rows])
        # strict (verify): a record holding columns the schema lacks is not silently accepted
        if len(names) < len(schema):
            with pytest.raises(DatasetError, match="not in the schema"):
                decode_span(recs, sub, where="t", strict=True)


def _tf_values(payloads: list[bytes], schema: Schema) -> list[dict] | None:
    """What ``tf.io.parse_example`` gives for the records (float64 decoded from its bytes), or None
    when TensorFlow refuses them."""
    tf = pytest.importorskip("tensorflow")
    from lovecraft_convert.formats.tfrecord.tfdata import decode_float64, to_tf_feature_spec

    spec_json = feature_spec(schema)
    try:
        ex = tf.io.parse_example(tf.constant(payloads, dtype=tf.string), to_tf_feature_spec(spec_json))
    except (tf.errors.InvalidArgumentError, ValueError):
        return None
    out = [{} for _ in payloads]
    for f in schema:
        v = ex[f.name]
        if spec_json[f.name].get("encoding") == "float64le":
            try:
                v = decode_float64(tf, v, spec_json[f.name])
            except tf.errors.InvalidArgumentError:
                return None
        if isinstance(v, tf.SparseTensor):
            v = tf.RaggedTensor.from_sparse(v)
        for i in range(len(payloads)):
            x = v[i].numpy() if not isinstance(v, tf.RaggedTensor) else v[i].numpy()
            out[i][f.name] = x if f.kind not in (STRING, BINARY) else bytes(x)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_rows=8))
def test_our_values_are_tensorflows(case):
    pytest.importorskip("tensorflow")
    batch, schema, _ = case
    payloads = _payloads(batch, schema)
    want = _tf_values(payloads, schema)
    assert want is not None
    got = decode_span(Records.from_list(payloads), schema, where="t", strict=True)
    _check_rows(got, schema, want)


def _damage(payloads: list[bytes], data) -> list[bytes]:
    i = data.draw(st.integers(0, len(payloads) - 1))
    rec = bytearray(payloads[i])
    how = data.draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
    at = data.draw(st.integers(0, max(0, len(rec) - 1)))
    if how == "flip" and rec:
        rec[at] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "set" and rec:
        rec[at] = data.draw(st.integers(0, 255))
    elif how == "insert":
        rec[at:at] = bytes([data.draw(st.integers(0, 255))])
    elif how == "delete" and rec:
        del rec[at]
    else:
        del rec[at:]
    return payloads[:i] + [bytes(rec)] + payloads[i + 1 :]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_rows=6), st.data())
def test_a_damaged_record_with_a_right_crc_gives_tensorflows_values_or_one_line(case, data):
    """A record changed after its CRC was computed (a writer's bug, not a disk's): our decoder
    either refuses it with one line, or gives exactly what TensorFlow's parser gives."""
    pytest.importorskip("tensorflow")
    batch, schema, _ = case
    bad = _damage(_payloads(batch, schema), data)
    try:
        got = decode_span(Records.from_list(bad), schema, where="t.tfrecord", strict=False)
    except LovecraftError as e:
        assert "\n" not in str(e) and str(e).startswith("t.tfrecord: record ")
        return
    want = _tf_values(bad, schema)
    assert want is not None, "we accepted records TensorFlow refuses"
    _check_rows(got, schema, want)


def _frame(payloads: list[bytes]) -> bytes:
    def masked(b: bytes) -> bytes:
        c = crc32c.crc32c(b)
        return struct.pack("<I", (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF)

    out = b""
    for p in payloads:
        head = struct.pack("<Q", len(p))
        out += head + masked(head) + p + masked(p)
    return out


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(tables(min_rows=2, max_rows=40), st.data())
def test_a_file_damaged_on_disk_is_refused_with_one_line(tmp_path, case, data):
    """Any byte of the file changed (header, data or CRC): the reader names the file and the record,
    on one line; undamaged files read back whole, in spans and runs of every size."""
    batch, schema, rows = case
    raw = _frame(_payloads(batch, schema))
    path = os.path.join(tmp_path, "d.tfrecord")
    with open(path, "wb") as f:
        f.write(raw)
    reader = TfrecordReader(batch.num_rows, schema, path, None)
    step = data.draw(st.integers(1, 50))
    _check_rows(Batch.concat(list(reader.chunks(0, batch.num_rows, step))), schema, rows)
    damaged = bytearray(raw)
    at = data.draw(st.integers(0, len(raw) - 1))
    damaged[at] ^= 1 << data.draw(st.integers(0, 7))
    with open(path, "wb") as f:
        f.write(damaged)
    with pytest.raises(DatasetError) as e:
        list(TfrecordReader(batch.num_rows, schema, path, None).chunks(0, batch.num_rows, step))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: ")


def test_spans_of_varying_records_are_framed_together(tmp_path):
    """Records of varying lengths come as a few large spans (not a run broken every few records),
    and runs of one length as fixed runs, both checked."""
    lines = [b"y" * 5] * 100 + [b"x" * (i % 7) for i in range(5000)]
    schema = Schema((Field("t", STRING, "uint8"),))
    batch = Batch({"t": _var(lines, np.uint8)}, len(lines))
    path = os.path.join(tmp_path, "t.tfrecord")
    with open(path, "wb") as f:
        for p in iter_encoded(batch, schema):
            f.write(bytes(p))
    kinds = [(k, len(r)) for k, r in RecordRuns(path, False, len(lines)).runs(0, len(lines))]
    assert kinds == [("fixed", 100), ("span", 5000)]
    got = TfrecordReader(len(lines), schema, path, None).read_block(0, np.array([3, 99, 100, 5050]))
    assert [got.columns["t"].row(i).tobytes() for i in range(4)] == [lines[i] for i in (3, 99, 100, 5050)]
