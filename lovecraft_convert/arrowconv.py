"""Batches to and from Apache Arrow, without copying values where the layouts agree."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .errors import SchemaError
from .schema import BINARY, FIXED, SEQUENCE, STRING, STRING_LIST, Batch, Field, Schema, VarColumn

_STRING_TYPES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())


def arrow_type(f: Field) -> pa.DataType:
    """The Arrow type that holds a field; N-d rows become nested fixed-size lists."""
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
    t = base
    for dim in reversed(f.shape):
        t = pa.list_(t, dim)
    return t


def arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f), nullable=False) for f in schema])


def to_arrow(batch: Batch, schema: Schema) -> pa.RecordBatch:
    arrays = []
    for f in schema:
        col = batch.columns[f.name]
        t = arrow_type(f)
        if isinstance(col, VarColumn):
            offsets = _offsets32(col.offsets, f)
            if f.kind == STRING_LIST:
                inner = col.values  # a VarColumn of strings
                strings = pa.Array.from_buffers(
                    pa.string(), len(inner), [None, _offsets32(inner.offsets, f), pa.py_buffer(inner.values)]
                )
                arrays.append(pa.ListArray.from_buffers(t, len(col), [None, offsets], children=[strings]))
            elif f.kind == SEQUENCE:
                values = from_numpy(col.values)
                arrays.append(pa.ListArray.from_buffers(t, len(col), [None, offsets], children=[values]))
            else:
                arrays.append(pa.Array.from_buffers(t, len(col), [None, offsets, pa.py_buffer(col.values)]))
        else:
            arr = from_numpy(col.reshape(-1))
            sizes = list(f.shape)
            while sizes:
                dim = sizes.pop()
                arr = pa.FixedSizeListArray.from_arrays(arr, dim)
            arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(schema))


def from_numpy(a: np.ndarray) -> pa.Array:
    """A 1-D NumPy array as Arrow, numbers without a copy (``pa.array`` would also import pandas,
    half a second of start-up, to ask whether the array is a pandas one)."""
    if a.dtype.kind not in "biuf":
        return pa.array(a)
    a = np.ascontiguousarray(a)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if a.dtype == np.bool_:
        return pa.Array.from_buffers(pa.bool_(), len(a), [None, pa.py_buffer(np.packbits(a, bitorder="little"))])
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), len(a), [None, pa.py_buffer(a)])


def numpy_of(arr: pa.Array) -> np.ndarray:
    """A numeric or boolean Arrow array as NumPy, read from its buffers (nulls NaN in floats):
    ``Array.to_numpy`` goes through pandas' conversion code and imports pandas."""
    t = arr.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        return arr.to_numpy(zero_copy_only=False)
    if pa.types.is_boolean(t):
        bits = np.unpackbits(np.frombuffer(arr.buffers()[1], dtype=np.uint8), bitorder="little")
        values = bits[arr.offset : arr.offset + len(arr)].view(np.bool_)
    else:
        dtype = np.dtype(t.to_pandas_dtype())
        values = np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset : arr.offset + len(arr)]
    if arr.null_count:
        if not pa.types.is_floating(t):
            raise ValueError(f"{t} values with nulls have no NumPy form")
        values = values.copy()
        values[~valid_of(arr)] = np.nan
    return values


def valid_of(arr: pa.Array) -> np.ndarray:
    """Which rows of an Arrow array are not null (from its validity bitmap)."""
    bitmap = arr.buffers()[0]
    if bitmap is None:
        return np.ones(len(arr), dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[arr.offset : arr.offset + len(arr)].astype(bool)


def offsets_of(arr: pa.Array) -> np.ndarray:
    """The int64 offsets of a (large) list or string array (``len + 1`` of them)."""
    large = pa.types.is_large_list(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
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
        return Field(name, SEQUENCE, np.dtype(t.value_type.to_pandas_dtype()).str)
    shape = []
    while pa.types.is_fixed_size_list(t):
        shape.append(t.list_size)
        t = t.value_type
    return Field(name, FIXED, np.dtype(t.to_pandas_dtype()).str, tuple(shape))


def column_from_arrow(arr: pa.Array, f: Field):
    """One Arrow array (no nulls, except floats where null becomes NaN) as a batch column."""
    if f.kind in (STRING, BINARY):
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
        bufs = arr.buffers()
        odt = np.int64 if large else np.int32
        offs = np.frombuffer(bufs[1], dtype=odt)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
        data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
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
        values = numpy_of(arr.values)
        base = offs[0]
        return VarColumn(values[base : offs[-1]], offs - base)
    a = arr
    while pa.types.is_fixed_size_list(a.type):
        a = a.flatten()
    values = numpy_of(a)
    return values.reshape((len(arr), *f.shape))


def batch_from_arrow(rb: pa.RecordBatch, schema: Schema) -> Batch:
    return Batch({f.name: column_from_arrow(rb.column(f.name), f) for f in schema}, rb.num_rows)
