"""Data held in memory as an input of ``convert``: a ``pyarrow.RecordBatchReader`` or anything that
exports an Arrow stream (``__arrow_c_stream__``: a pyarrow Table, a polars or pandas DataFrame), or
an iterable of dicts of arrays (each dict a batch of columns: NumPy arrays, with rows on axis 0, or
lists), as ``pyarrow.dataset.write_dataset`` takes them.

The data is read once, in the order given, one batch at a time (a stream is never gathered), so
it goes through the reader of Arrow inputs (:class:`~.columnar.ColumnarReader`): the same types,
``column_types``, ``columns`` and nulls as a Parquet or Arrow file. What a one-pass read cannot
do, it refuses saying so: a job that splits its input into parts (``shard``, ``bucket``), and an
integer column that meets a null after its first batch (a file is read again with the column as
float64; a stream cannot be).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ..arrowconv import numpy_to_arrow
from ..errors import InputError, SchemaError, spelled
from .base import Part, ReadOptions, SchemaChanged
from .columnar import ColumnarReader, SourceFile, guarded
from .spec import InputSpec

KIND = "memory"


def describe(data: Any) -> str:
    """How messages and the manifest's ``sources`` name the data: ``<in-memory pyarrow.Table>``."""
    t = type(data)
    return f"<in-memory {t.__module__.split('.')[0]}.{t.__qualname__}>"


def _stream(data: Any, name: str) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The Arrow schema of ``data`` and its record batches, read lazily."""
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    if hasattr(data, "__arrow_c_stream__"):
        try:
            reader = pa.RecordBatchReader.from_stream(data)
        except (TypeError, ValueError, pa.ArrowException) as e:
            raise InputError(
                f"{name}: its Arrow stream cannot be read ({e})", hint="pass a pyarrow Table or RecordBatchReader"
            ) from None
        return reader.schema, iter(reader)
    items = iter([data] if isinstance(data, Mapping) else data)
    try:
        first = next(items)
    except StopIteration:
        raise InputError(f"{name}: empty input (no batches)", hint="pass at least one dict of arrays") from None
    rb = _dict_batch(first, name, 1, None)
    return rb.schema, itertools.chain([rb], (_dict_batch(d, name, i, rb.schema) for i, d in enumerate(items, 2)))


def _array(v: Any) -> pa.Array:
    """A column given as a NumPy array (rows on axis 0; more axes make fixed-size lists), a pyarrow
    array, or a list."""
    if isinstance(v, (pa.Array, pa.ChunkedArray)):
        return v
    a = np.asarray(v) if not isinstance(v, list) else None
    if a is None or a.dtype == object:
        return pa.array(v)
    if a.ndim == 0:
        raise TypeError("a scalar, not an array of rows")
    flat = numpy_to_arrow(np.ascontiguousarray(a).reshape(-1)) if a.dtype.kind in "biuf" else pa.array(a.reshape(-1))
    for dim in reversed(a.shape[1:]):
        flat = pa.FixedSizeListArray.from_arrays(flat, dim)
    return flat


def _dict_batch(d: Any, name: str, i: int, schema: pa.Schema | None) -> pa.RecordBatch:
    where = f"{name}, batch {i}"
    if not isinstance(d, Mapping) or not d:
        raise InputError(
            f"{where}: a {type(d).__name__}, not a dict of columns", hint="give dicts of column name -> array"
        )
    arrays, names = [], []
    for k, v in d.items():
        try:
            arrays.append(_array(v))
        except (TypeError, ValueError, pa.ArrowException) as e:
            raise InputError(
                f"{where}, column '{k}': cannot be made an array ({e})", hint="give NumPy arrays or lists"
            ) from None
        names.append(str(k))
    lengths = {len(a) for a in arrays}
    if len(lengths) > 1:
        sizes = ", ".join(f"{n}: {len(a)}" for n, a in zip(names, arrays, strict=True))
        raise InputError(f"{where}: columns of different lengths ({sizes})", hint="give every column the same rows")
    rb = pa.RecordBatch.from_arrays(arrays, names=names)
    if schema is not None and not rb.schema.equals(schema):
        if rb.schema.names != schema.names:
            raise SchemaError(
                f"{where}: columns {rb.schema.names} differ from the first batch's {schema.names}",
                hint="give every batch the same columns, in the same order",
            )
        try:
            rb = rb.cast(schema)
        except (pa.ArrowException, ValueError, NotImplementedError):
            bad = next(n for n in names if rb.schema.field(n).type != schema.field(n).type)
            raise SchemaError(
                f"{where}, column '{bad}': {rb.schema.field(bad).type}, but {schema.field(bad).type} in the first batch",
                hint="give every batch the same column types",
            ) from None
    return rb


class MemoryReader(ColumnarReader):
    """The reader of data held in memory: one pass over its record batches."""

    title = "in-memory"

    def __init__(self, data: Any, options: ReadOptions) -> None:
        name = describe(data)
        self._schema, self._batches = _stream(data, name)
        spec = InputSpec("", name, format=KIND)
        super().__init__([spec], options)
        self.format = KIND

    def open_files(self) -> list[SourceFile]:
        return [SourceFile(0, "", self.specs[0].name, self._schema, {"in_memory": True})]

    def read_file(self, f: SourceFile, blocks: tuple[int, int] | None, row0: int = 0) -> Iterator[tuple[object, int]]:
        if self._batches is None:
            raise InputError(
                f"{f.name}: in-memory data is read once, and was read already",
                hint="pass the data again (a new reader of it)",
            )
        batches, self._batches = self._batches, None
        row = row0
        for rb in guarded(batches, f.name):
            step = max(1, int(self.options.batch_bytes * rb.num_rows // max(1, rb.nbytes)))
            for a in range(0, rb.num_rows, step):
                yield rb.slice(a, step), row + a
            row += rb.num_rows
            self._done += rb.nbytes

    def _convert(self, rb, f: SourceFile, row0: int):
        before = dict(self.widened)
        try:
            return super()._convert(rb, f, row0)
        except SchemaChanged:
            column = next(k for k in self.widened if k not in before)
            raise SchemaError(
                f"{f.name}, column '{column}': an integer or boolean column holds a null at row "
                f"{row0 + 1} or after (a file is read again with the column as float64; a stream "
                "cannot be)",
                hint="give the column a float type: "
                + spelled(f"--column-type {column}=float64", f"column_types={{{column!r}: 'float64'}}"),
            ) from None

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        raise InputError(
            f"{self.specs[0].name}: in-memory data is read once, in order; it cannot be split into parts",
            hint="convert it first, then shard or bucket the dataset convert wrote",
        )

    def load_blocks(self, mapper=None) -> None:
        pass

    def memory_bytes(self) -> int | None:
        return None

    def progress_total(self) -> int | None:
        return None
