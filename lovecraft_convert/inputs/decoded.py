"""What a record batch of an Arrow-based input becomes once decoded, known before it is.

A dictionary-encoded column holds each row as an index: 5,048 indices and a dictionary of ``"a"``
and one 512 KiB string take a few KiB in a batch and 1.5 GiB decoded. A view column
(``string_view``) likewise: many rows can view the same bytes. So a batch's size in memory says
little of what the converter will make of it. Here each row's decoded bytes are computed from the
lengths of the dictionary's values and the indices (or the views' lengths), and the batch is cut
into slices that decode to at most a batch of the memory budget each; a single row that decodes to
more than :data:`ROW_SHARE` batches is refused, naming the row and the column.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from ..arrowconv import offsets_of, valid_of
from ..errors import InputError

ROW_SHARE = 4  # a row may decode to at most this many batches (a quarter of the memory budget)


def expands(t: pa.DataType) -> bool:
    """Does a column of this type take (much) more memory decoded than in its batch?"""
    if pa.types.is_dictionary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return True
    if pa.types.is_struct(t):
        return any(expands(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return expands(t.value_type)
    return False


def _row_bytes(arr: pa.Array, name: str, out: dict[str, np.ndarray]) -> None:
    """Decoded bytes per row of the expanding leaves of ``arr`` (a top-level column ``name``)."""
    t = arr.type
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            _row_bytes(arr.field(i), f"{name}.{t.field(i).name}", out)
        return
    if pa.types.is_dictionary(t):
        values = arr.dictionary
        if variable(values.type):
            lengths = value_lengths(values)
        else:
            width = max(1, values.nbytes // max(1, len(values)))
            lengths = np.full(len(values), width, dtype=np.int64)
        idx = arr.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        # (+ an offset per row)
        sizes = lengths[np.clip(idx, 0, len(lengths) - 1)] + 8 if len(lengths) else np.full(len(arr), 8, np.int64)
        if arr.null_count:
            sizes[~np.asarray(arr.is_valid())] = 8
        out[name] = sizes
        return
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        out[name] = value_lengths(arr) + 8
        return
    if expands(t):  # a list of expanding values: every row counted as the whole list's share
        values = arr.flatten()
        inner: dict[str, np.ndarray] = {}
        _row_bytes(values, name, inner)
        total = sum(int(v.sum()) for v in inner.values())
        out[name] = np.full(len(arr), -(-total // max(1, len(arr))), dtype=np.int64)


def variable(t: pa.DataType) -> bool:
    """Strings or bytes of any length (each value's length its own)."""
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary_view(t)
    )


def value_lengths(values: pa.Array) -> np.ndarray:
    """Bytes of each value of a string or binary array (0 for nulls)."""
    if pa.types.is_string_view(values.type) or pa.types.is_binary_view(values.type):
        views = values.buffers()[1]  # 16 bytes a value, its length first (no kernel reads views)
        n = np.frombuffer(views, dtype="<i4").reshape(-1, 4)[values.offset : values.offset + len(values), 0]
        out = n.astype(np.int64)
        if values.null_count:
            out[~np.asarray(values.is_valid())] = 0
        return out
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    # from the offsets buffer: pc.fill_null(..., 0) makes a pa.scalar, which imports pandas
    out = np.diff(offsets_of(values))
    if values.null_count:
        out[~valid_of(values)] = 0
    return out


def bounded(rb: pa.RecordBatch, limit: int, name: str, where: str, row0: int) -> Iterator[tuple[pa.RecordBatch, int]]:
    """Slices of ``rb`` (with the row of the file each starts at) that decode to at most ``limit``
    bytes each (one row may decode to up to ROW_SHARE times that: alone in its slice); ``where``
    names the block for messages (``row group 3``)."""
    expanding = [f.name for f in rb.schema if expands(f.type)]
    if not expanding or rb.num_rows == 0:
        yield rb, row0
        return
    per: dict[str, np.ndarray] = {}
    for col in expanding:
        _row_bytes(rb.column(col), col, per)
    plain = sum(rb.column(f.name).nbytes for f in rb.schema if f.name not in expanding)
    sizes = np.full(rb.num_rows, -(-plain // rb.num_rows), dtype=np.int64)
    for v in per.values():
        sizes += v
    total = int(sizes.sum())
    if total <= limit:
        yield rb, row0
        return
    big = np.flatnonzero(sizes > ROW_SHARE * limit)
    if len(big):
        i = int(big[0])
        col = max(per, key=lambda c: int(per[c][i]))
        raise InputError(
            f"{name}, {where}, row {row0 + i + 1}, column '{col}': decodes to {int(per[col][i])} bytes, more than "
            f"a row may take under this memory budget ({ROW_SHARE * limit})",
            hint=f"raise --max-memory (a row must fit in {ROW_SHARE}/16 of it), or leave the column out with --columns",
        )
    ends = np.cumsum(sizes)
    start = 0
    while start < rb.num_rows:
        base = int(ends[start - 1]) if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + limit, side="right")))
        yield rb.slice(start, stop - start), row0 + start
        start = stop
