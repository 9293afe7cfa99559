"""Batches to and from Apache Arrow, without copying values where the layouts agree.

Primitive arrays are converted through their buffers (``np.frombuffer``/``pa.Array.from_buffers``),
never with ``Array.to_numpy``/``pa.array``: besides copying less, those import pandas when it is
installed (tens of MiB and a few tenths of a second in every process).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .errors import SchemaError
from .schema import BINARY, FIXED, NAT, SEQUENCE, STRING, STRING_LIST, Batch, Field, Logical, Schema, VarColumn

_STRING_TYPES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())


def logical_type(lg: Logical) -> pa.DataType:
    """The Arrow type of a :class:`~lovecraft_convert.schema.Logical` (a dictionary of strings for
    a category)."""
    if lg.type == "timestamp":
        return pa.timestamp(lg.unit, lg.tz)
    if lg.type == "date":
        return pa.date32()
    if lg.type == "time":
        return pa.time32(lg.unit) if lg.unit in ("s", "ms") else pa.time64(lg.unit)
    if lg.type == "duration":
        return pa.duration(lg.unit)
    return pa.dictionary(pa.int32(), pa.string())


def read_type(want: str) -> pa.DataType:
    """The Arrow type a reader parses ``--column-type`` WANT as (a category as text)."""
    lg = Logical.parse(want)
    if lg is not None:
        return pa.string() if lg.type == "category" else logical_type(lg)
    if want == "string":
        return pa.string()
    return pa.bool_() if want == "bool" else pa.from_numpy_dtype(np.dtype(want))


def logical_of(t: pa.DataType) -> Logical | None:
    """The :class:`~lovecraft_convert.schema.Logical` an Arrow temporal type stands for, or None."""
    if pa.types.is_timestamp(t):
        return Logical("timestamp", t.unit, t.tz)
    if pa.types.is_date(t):  # date64 (milliseconds) is held as days, as date32
        return Logical("date", "D")
    if pa.types.is_time(t):
        return Logical("time", t.unit)
    if pa.types.is_duration(t):
        return Logical("duration", t.unit)
    return None


def arrow_type(f: Field, fixed_as_list: bool = False) -> pa.DataType:
    """The Arrow type that holds a field; N-d rows become nested fixed-size lists, or, with
    ``fixed_as_list``, rows of one dimension a (variable) list whose rows all hold ``shape[0]``
    values (the padded buckets of one Parquet dataset: each bucket's width differs, and readers of a
    directory unify its files' schemas, which fixed-size lists of different sizes do not)."""
    if f.logical is not None and not f.shape and f.kind in (FIXED, STRING):
        return logical_type(f.logical)
    if f.kind == STRING:
        return pa.string()
    if f.kind == BINARY:
        return pa.binary()
    if f.kind == STRING_LIST:
        return pa.list_(pa.string())
    try:
        base = pa.from_numpy_dtype(f.np_dtype)
    except (pa.ArrowNotImplementedError, NotImplementedError, TypeError):
        raise SchemaError(
            f"column '{f.name}' has dtype {f.np_dtype}, which Arrow/Parquet cannot hold",
            hint="write it to memmap or hdf5",
        ) from None
    if f.kind == SEQUENCE:
        return pa.list_(base)
    if fixed_as_list and len(f.shape) == 1:
        return pa.list_(base)
    t = base
    for dim in reversed(f.shape):
        t = pa.list_(t, dim)
    return t


def arrow_schema(schema: Schema, fixed_as_list: bool = False) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f, fixed_as_list), nullable=holds_nulls(f)) for f in schema])


def holds_nulls(f: Field) -> bool:
    """Whether a field's Arrow column holds nulls: a temporal one's NaT (a null for every reader:
    pandas' NaT, polars' and duckdb's null); no other column holds any."""
    return f.logical is not None and f.logical.temporal and not f.shape and f.kind == FIXED


def same_rows(got: pa.DataType, want: pa.DataType) -> bool:
    """Does a file's column of type ``got`` hold what ``want`` does? Equal types, or a list where
    ``want`` is a fixed-size list of numbers (rows of one width written as a list, see
    :func:`arrow_type`; :func:`column_from_arrow` checks each row's width)."""
    if got == want:
        return True
    return (
        pa.types.is_fixed_size_list(want)
        and not pa.types.is_nested(want.value_type)
        and (pa.types.is_list(got) or pa.types.is_large_list(got))
        and got.value_type == want.value_type
    )


def to_arrow(batch: Batch, schema: Schema) -> pa.RecordBatch:
    """``batch`` as a record batch of ``arrow_schema(schema)`` (:class:`ArrowBatches` for many)."""
    return ArrowBatches(schema)(batch)


class ArrowBatches:
    """Batches of one schema to record batches, with the schema's Arrow types worked out once
    (a 2,000-column table's batches would otherwise pay for them every time)."""

    def __init__(self, schema: Schema, aschema: pa.Schema | None = None, fixed_as_list: bool = False) -> None:
        self.schema = schema
        self.aschema = aschema if aschema is not None else arrow_schema(schema, fixed_as_list)
        self.types = [arrow_type(f, fixed_as_list) for f in schema]
        self.names = [f.name for f in schema]
        # a table of scalar columns of one native number type (a wide feature table) may arrive as
        # one [columns, rows] matrix: then each column is a slice of one buffer. ``dtype``: that
        # type, or None
        one = schema.matrix_dtype()
        self.dtype = one if one is not None and one.kind in "iuf" and one.isnative else None
        if any(f.logical is not None for f in schema):
            self.dtype = None

    def __call__(self, batch: Batch) -> pa.RecordBatch:
        m = batch.matrix_of(self.names) if self.dtype is not None else None
        if m is not None and m.dtype == self.dtype and m.flags.c_contiguous:
            return self.from_matrix(m, m)
        return pa.RecordBatch.from_arrays(_arrays(batch, self.schema, self.types), schema=self.aschema)

    def from_matrix(self, m: np.ndarray, base: np.ndarray) -> pa.RecordBatch:
        """The columns as the rows of ``m`` (``[columns, rows]``, each row contiguous), a view into
        the C-contiguous ``base``: each column a slice of one buffer, nothing copied."""
        n, step = m.shape[1], m.strides[0]
        buf, start = pa.py_buffer(base), m.ctypes.data - base.ctypes.data
        size = n * m.dtype.itemsize
        arrays = [
            pa.Array.from_buffers(t, n, [None, buf.slice(start + i * step, size)]) for i, t in enumerate(self.types)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.aschema)


def _logical_array(col, f: Field, t: pa.DataType) -> pa.Array:
    """A column of a logical type as its Arrow array: int64 counts viewed as the temporal type (32-bit
    ones narrowed first), text dictionary-encoded (each batch its own dictionary, which Parquet
    stores per column chunk)."""
    if f.kind == STRING:
        offsets = _offsets32(col.offsets, f)
        strings = pa.Array.from_buffers(pa.string(), len(col), [None, offsets, pa.py_buffer(col.values)])
        return strings.dictionary_encode().cast(t)
    values = np.ascontiguousarray(col, dtype=np.int64)
    missing = values == NAT
    nulls = int(np.count_nonzero(missing))
    validity = pa.py_buffer(np.packbits(~missing, bitorder="little")) if nulls else None
    if t.bit_width == 32:
        small = np.where(missing, 0, values)
        if len(small) and (small.min() < -(2**31) or small.max() >= 2**31):
            bad = small[(small < -(2**31)) | (small >= 2**31)]
            raise SchemaError(f"column '{f.name}': {int(bad[0])} is beyond the 32-bit {t}")
        return pa.Array.from_buffers(t, len(values), [validity, pa.py_buffer(small.astype(np.int32))], nulls)
    return pa.Array.from_buffers(t, len(values), [validity, pa.py_buffer(values)], nulls)


def _arrays(batch: Batch, schema: Schema, types: list) -> list:
    arrays = []
    for f, t in zip(schema, types, strict=True):
        col = batch.columns[f.name]
        if f.logical is not None and not f.shape and f.kind in (FIXED, STRING):
            arrays.append(_logical_array(col, f, t))
            continue
        if isinstance(col, VarColumn):
            offsets = _offsets32(col.offsets, f)
            if f.kind == STRING_LIST:
                inner = col.values  # a VarColumn of strings
                strings = pa.Array.from_buffers(
                    pa.string(), len(inner), [None, _offsets32(inner.offsets, f), pa.py_buffer(inner.values)]
                )
                arrays.append(pa.ListArray.from_buffers(t, len(col), [None, offsets], children=[strings]))
            elif f.kind == SEQUENCE:
                values = numpy_to_arrow(col.values)
                arrays.append(pa.ListArray.from_buffers(t, len(col), [None, offsets], children=[values]))
            else:
                arrays.append(pa.Array.from_buffers(t, len(col), [None, offsets, pa.py_buffer(col.values)]))
        elif pa.types.is_list(t):  # rows of one width written as a list (arrow_type's fixed_as_list)
            n, width = len(col), f.shape[0]
            if n * width >= 2**31:
                raise SchemaError(f"column '{f.name}': one batch holds over 2 GiB of values", hint="lower --max-memory")
            offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int32) * np.int32(width))
            values = numpy_to_arrow(col.reshape(-1))
            arrays.append(pa.ListArray.from_buffers(t, n, [None, offsets], children=[values]))
        else:
            arr = numpy_to_arrow(col.reshape(-1))
            sizes = list(f.shape)
            while sizes:
                dim = sizes.pop()
                arr = pa.FixedSizeListArray.from_arrays(arr, dim)
            arrays.append(arr)
    return arrays


def numpy_to_arrow(a: np.ndarray) -> pa.Array:
    """A 1-d NumPy array as an Arrow array (zero-copy for native numbers; bools are bit-packed)."""
    if a.dtype == np.bool_:
        bits = np.packbits(a.view(np.uint8), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(a), [None, pa.py_buffer(bits)])
    if a.dtype.kind in "iuf":
        a = np.ascontiguousarray(a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("=")))
        return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), len(a), [None, pa.py_buffer(a)])
    if a.dtype.kind in "SU":
        return _fixed_text_to_arrow(a)
    return pa.array(a)  # other dtypes (datetime, objects): pyarrow's own conversion


def _fixed_text_to_arrow(a: np.ndarray) -> pa.Array:
    """Fixed-width NumPy text (``S``: binary, ``U``: string) as Arrow, each value its bytes up to
    the last that is not NUL (NumPy's own reading: trailing NULs are padding, NULs inside are
    kept). pyarrow's conversion ends a value at its first NUL: ``b"a\0b"`` became ``b"a"``."""
    n = len(a)
    if a.dtype.kind == "S":
        width, unit, t = a.dtype.itemsize, np.uint8, pa.binary()
    else:
        a = a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))
        width, unit, t = a.dtype.itemsize // 4, np.uint32, pa.string()
    codes = np.ascontiguousarray(a).view(unit).reshape(n, width) if width else np.zeros((n, 0), unit)
    used = codes != 0
    lens = np.where(used.any(axis=1), width - np.argmax(used[:, ::-1], axis=1), 0) if width else np.zeros(n, int)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    values = codes[np.arange(width) < lens[:, None]]  # each row's first lens[i] units, in row order
    if unit is np.uint32 and len(values) and int(values.max()) >= 0x80:  # beyond ASCII: UTF-8 by Python
        return pa.array([str(x) for x in a.tolist()], type=t)
    if offsets[-1] >= 2**31:
        raise SchemaError("a batch of fixed-width text holds over 2 GiB", hint="lower --max-memory")
    data = pa.py_buffer(values.astype(np.uint8))
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(offsets.astype(np.int32)), data])


_NUMPY_OF = {
    pa.int8(): "i1", pa.int16(): "i2", pa.int32(): "i4", pa.int64(): "i8",
    pa.uint8(): "u1", pa.uint16(): "u2", pa.uint32(): "u4", pa.uint64(): "u8",
    pa.float16(): "f2", pa.float32(): "f4", pa.float64(): "f8", pa.bool_(): "?",
}  # fmt: skip


def numpy_dtype(t: pa.DataType) -> np.dtype:
    """The NumPy dtype of an Arrow primitive type."""
    code = _NUMPY_OF.get(t)
    return np.dtype(code) if code is not None else np.dtype(t.to_pandas_dtype())


def arrow_to_numpy(a: pa.Array) -> np.ndarray:
    """A primitive Arrow array as NumPy, from its buffers (zero-copy unless it has nulls or is
    boolean); nulls of a floating array become NaN, those of others keep whatever the buffer holds
    (callers that meet them mask them with ``valid_of``)."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks() if a.num_chunks != 1 else a.chunk(0)
    t = a.type
    if t not in _NUMPY_OF:
        return a.to_numpy(zero_copy_only=False)
    data = a.buffers()[1]
    n, off = len(a), a.offset
    if t == pa.bool_():
        bits = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        out = np.unpackbits(bits, count=off + n, bitorder="little")[off:].astype(np.bool_)
    else:
        dt = numpy_dtype(t)
        out = np.frombuffer(data, dtype=dt, count=off + n)[off:] if n else np.zeros(0, dt)
    if a.null_count and numpy_dtype(t).kind == "f":
        out = out.copy()
        out[~valid_of(a)] = np.nan
    return out


def valid_of(arr: pa.Array) -> np.ndarray:
    """Which rows of an Arrow array are not null (from its validity bitmap)."""
    bitmap = arr.buffers()[0]
    if bitmap is None:
        return np.ones(len(arr), dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), count=arr.offset + len(arr), bitorder="little")
    return bits[arr.offset :].astype(bool)


def offsets_of(arr: pa.Array) -> np.ndarray:
    """The int64 offsets of a (large) list, string or binary array (``len + 1`` of them)."""
    t = arr.type
    large = pa.types.is_large_list(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    offs = np.frombuffer(arr.buffers()[1], dtype=np.int64 if large else np.int32)
    return offs[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)


def _offsets32(offs: np.ndarray, f: Field) -> pa.Buffer:
    if offs[-1] >= 2**31:
        raise SchemaError(f"column '{f.name}': one batch holds over 2 GiB of values", hint="lower --max-memory")
    return pa.py_buffer(offs.astype(np.int32))


def field_from_arrow(name: str, t: pa.DataType) -> Field:
    if t in (pa.string(), pa.large_string()):
        return Field(name, STRING, "|u1")
    if t in (pa.binary(), pa.large_binary()):
        return Field(name, BINARY, "|u1")
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and t.value_type in _STRING_TYPES[:2]:
        return Field(name, STRING_LIST, "|u1")
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return Field(name, SEQUENCE, numpy_dtype(t.value_type).str)
    shape = []
    while pa.types.is_fixed_size_list(t):
        shape.append(t.list_size)
        t = t.value_type
    return Field(name, FIXED, numpy_dtype(t).str, tuple(shape))


def column_from_arrow(arr: pa.Array, f: Field):
    """One Arrow array (no nulls, except floats where null becomes NaN, temporal ones where it becomes
    NaT) as a batch column."""
    if isinstance(arr, pa.ChunkedArray) and (pa.types.is_dictionary(arr.type) or logical_of(arr.type)):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if f.kind == FIXED and not f.shape and logical_of(arr.type) is not None:
        if f.logical is not None and arr.type != logical_type(f.logical):
            arr = arr.cast(logical_type(f.logical))  # e.g. Parquet's milliseconds for seconds
        ints = arr.view(pa.int64() if arr.type.bit_width == 64 else pa.int32()).cast(pa.int64())
        if ints.null_count:
            ints = ints.fill_null(NAT)
        return np.asarray(ints.to_numpy(zero_copy_only=False), dtype=np.int64)
    if f.kind in (STRING, BINARY):
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        offs = offsets_of(arr)
        data = arr.buffers()[2]
        data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        base = offs[0]
        return VarColumn(data[base : offs[-1]], offs - base)
    if f.kind == STRING_LIST:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        offs = offsets_of(arr)
        base = offs[0]
        inner = arr.values.slice(base, offs[-1] - base)
        return VarColumn(column_from_arrow(inner, Field(f.name, STRING, "|u1")), offs - base)
    if f.kind == SEQUENCE:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        offs = offsets_of(arr)
        values = arrow_to_numpy(arr.values)
        base = offs[0]
        return VarColumn(values[base : offs[-1]], offs - base)
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        return _regular_rows(arr, f)
    a = arr
    while pa.types.is_fixed_size_list(a.type):
        a = a.flatten()
    values = arrow_to_numpy(a)
    if f.np_dtype.kind in "SU":  # fixed-width text: Arrow gives objects
        values = values.astype(f.np_dtype, copy=False)
    return values.reshape((len(arr), *f.shape))


def _regular_rows(arr: pa.Array, f: Field) -> np.ndarray:
    """A list column whose rows all hold ``f.shape[0]`` values as a ``[rows, width]`` array (a view
    of the values); a SchemaError naming the first row of another width."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    width = f.shape[0] if len(f.shape) == 1 else -1
    offs = offsets_of(arr)
    lens = np.diff(offs)
    bad = np.flatnonzero(lens != width)
    if bad.size:
        r = int(bad[0])
        raise SchemaError(
            f"column '{f.name}': row {r + 1} of the batch holds {int(lens[r])} values, the schema says {f.shape}"
        )
    values = arrow_to_numpy(arr.values)
    return values[offs[0] : offs[-1]].reshape((len(arr), width))


def batch_from_arrow(rb: pa.RecordBatch, schema: Schema) -> Batch:
    return Batch({f.name: column_from_arrow(rb.column(f.name), f) for f in schema}, rb.num_rows)


def arrow_owned(data) -> pa.Buffer:
    """``data`` (bytes-like) copied into memory Arrow allocated, for a parse on Arrow's threads
    (``pyarrow.csv.read_csv`` with ``use_threads``). Given a Python object instead
    (``pa.py_buffer``), the worker thread that finishes last can hold the final reference to it
    after the call has returned, and releasing it takes the GIL: when the interpreter is already
    exiting, that thread is ended inside Arrow's C++ and the process aborts (``terminate called
    without an active exception``, seen after a run stopped on a full disk). The copy costs about
    a millisecond per 4 MiB piece, a few percent of parsing it."""
    buf = pa.allocate_buffer(len(data))
    if len(data):
        np.frombuffer(buf, dtype=np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
    return buf
