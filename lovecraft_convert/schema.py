"""The unit that flows through the pipeline: bounded record batches of named columns.

A column is either a NumPy array whose axis 0 is the record axis (fixed-shape rows of any NumPy
dtype), or a :class:`VarColumn` (variable-length rows: UTF-8 text, raw bytes or numeric sequences),
held as one flat ``values`` array plus ``offsets`` (int64, ``len == rows + 1``). A list of strings
per row (kind ``string_list``) is a VarColumn whose ``values`` is itself a VarColumn of strings. Both
convert to and from Apache Arrow without copying the values (see :mod:`lovecraft_convert.arrowconv`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from operator import is_
from typing import Any

import numpy as np

FIXED = "fixed"
STRING = "string"  # UTF-8 text; values are uint8 bytes
BINARY = "binary"  # raw bytes; values are uint8
SEQUENCE = "sequence"  # numeric sequences; values of ``dtype``
STRING_LIST = "string_list"  # a list of UTF-8 strings per row; values are a VarColumn of strings
KINDS = (FIXED, STRING, BINARY, SEQUENCE, STRING_LIST)


WIDE_COLUMNS = 64  # a table this many columns wide or more is read and written in larger batches
# no more columns than this, whatever the input: each costs memory before any row is read (see
# inputs/csvwide.py; a CSV wider than this is read as one matrix with --stack-columns)
MAX_COLUMNS = 100_000

TEMPORAL = ("timestamp", "date", "time", "duration")
CATEGORY = "category"
UNITS = ("s", "ms", "us", "ns")
NAT = -(2**63)  # a missing timestamp, date, time or duration: NumPy's NaT
_LOGICAL_RE = re.compile(r"(timestamp|time|duration)(?:\[(s|ms|us|ns)(?:,\s*([^\]\s][^\]]*))?\])?|date|category")


@dataclass(frozen=True)
class Logical:
    """What the values of a column mean beyond their dtype, for the formats and readers that hold it:
    ``timestamp`` (int64 counts of ``unit`` since the Unix epoch, in UTC when ``tz`` is given),
    ``date`` (int64 days since the epoch), ``time`` (int64 ``unit`` since midnight), ``duration``
    (int64 ``unit``), a missing value being NaT (-2**63); ``category`` (text whose few distinct
    values a format may store once, as a dictionary). Parquet keeps them as Arrow's temporal and
    dictionary types; formats without them store the int64 counts or the text, and the manifest's
    schema says what they are."""

    type: str
    unit: str | None = None
    tz: str | None = None

    @classmethod
    def parse(cls, text: str) -> Logical | None:
        """``timestamp``, ``timestamp[ms]``, ``timestamp[us, UTC]``, ``date``, ``time[us]``,
        ``duration[ms]``, ``category``; None for any other text (a dtype name)."""
        m = _LOGICAL_RE.fullmatch(text.strip())
        if m is None:
            return None
        if m.group(0) in ("date", CATEGORY):
            return cls(m.group(0), "D" if m.group(0) == "date" else None)
        return cls(m.group(1), m.group(2) or "us", (m.group(3) or "").strip() or None)

    @property
    def temporal(self) -> bool:
        return self.type in TEMPORAL

    def describe(self) -> str:
        if self.type in ("date", CATEGORY):
            return self.type
        return f"{self.type}[{self.unit}{', ' + self.tz if self.tz else ''}]"

    def numpy_dtype(self) -> np.dtype | None:
        """The NumPy type the int64 counts stand for (datetime64 or timedelta64), or None."""
        if self.type in ("timestamp", "date"):
            return np.dtype(f"datetime64[{self.unit}]")
        if self.type == "duration":
            return np.dtype(f"timedelta64[{self.unit}]")
        return None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("type", self.type), ("unit", self.unit), ("tz", self.tz)) if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Logical:
        t, unit, tz = d["type"], d.get("unit"), d.get("tz")
        ok = (t in TEMPORAL and (unit in UNITS or (t == "date" and unit == "D"))) or (t == CATEGORY and unit is None)
        if not ok or not (tz is None or isinstance(tz, str)):
            raise ValueError(f"unknown logical type {d!r}")
        return cls(t, unit, tz)


@dataclass(frozen=True)
class Field:
    """One column: its name, kind, element dtype, (for fixed rows) per-row shape, and what its values
    mean when a dtype does not say it (:class:`Logical`: timestamps, dates, categories)."""

    name: str
    kind: str
    dtype: str
    shape: tuple[int, ...] = ()
    logical: Logical | None = None

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def variable(self) -> bool:
        return self.kind != FIXED

    @property
    def row_size(self) -> int:
        """Elements per row (fixed kinds only)."""
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "kind": self.kind, "dtype": self.dtype, "shape": list(self.shape)}
        if self.logical is not None:
            d["logical"] = self.logical.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Field:
        logical = Logical.from_dict(d["logical"]) if d.get("logical") is not None else None
        return cls(d["name"], d["kind"], d["dtype"], tuple(d.get("shape", ())), logical)

    def describe(self) -> str:
        if self.logical is not None:
            return self.logical.describe()
        if self.kind == FIXED:
            shape = f"[{','.join(map(str, self.shape))}]" if self.shape else ""
            dt = np.dtype(self.dtype)
            # fixed-width bytes and text as NumPy spells them (S6, U6), not by bits ('bytes48')
            return f"{dt.str.lstrip('<>|=') if dt.kind in 'SU' else dt.name}{shape}"
        if self.kind == SEQUENCE:
            return f"sequence<{np.dtype(self.dtype).name}>"
        if self.kind == STRING_LIST:
            return "list<string>"
        return self.kind


def typed_field(name: str, want: str) -> Field:
    """The field ``--column-type NAME=WANT`` gives: text, a number type, or a :class:`Logical` one
    (timestamps, dates, times and durations as int64 counts; a category as text)."""
    lg = Logical.parse(want)
    if lg is not None and lg.type == CATEGORY:
        return Field(name, STRING, "|u1", logical=lg)
    if lg is not None:
        return Field(name, FIXED, "<i8", logical=lg)
    if want == "string":
        return Field(name, STRING, "|u1")
    return Field(name, FIXED, np.dtype(want if want != "bool" else "?").str)


@dataclass(frozen=True)
class Schema:
    fields: tuple[Field, ...]

    def __iter__(self):
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def matrix_dtype(self) -> np.dtype | None:
        """The one dtype of a table whose columns are all fixed-size scalars of it (a feature
        table, which may travel as one ``[columns, rows]`` matrix: :meth:`Batch.from_matrix`),
        else None."""
        dtypes = {f.np_dtype for f in self.fields}
        if len(dtypes) != 1 or not all(f.kind == FIXED and not f.shape for f in self.fields):
            return None
        return dtypes.pop()

    def __getitem__(self, name: str) -> Field:
        return self.fields[self.index[name]]  # (KeyError for a name it lacks)

    @cached_property
    def index(self) -> dict[str, int]:
        """Each column's position (the first, for a repeated name): a lookup by name costs the
        same for a table of 1,000,000 columns as for one of 3."""
        out: dict[str, int] = {}
        for i, f in enumerate(self.fields):
            out.setdefault(f.name, i)
        return out

    def to_list(self) -> list[dict[str, Any]]:
        return [f.to_dict() for f in self.fields]

    @classmethod
    def from_list(cls, items: list[dict[str, Any]]) -> Schema:
        return cls(tuple(Field.from_dict(d) for d in items))


@dataclass
class VarColumn:
    """Variable-length rows as flat values plus offsets (``offsets[0] == 0``).

    ``values`` is a NumPy array, or (kind ``string_list``) a VarColumn of strings: row ``i`` is then
    the strings ``offsets[i]`` to ``offsets[i + 1]`` of ``values``.
    """

    values: np.ndarray | VarColumn
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes + self.offsets.nbytes)

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def nested(self) -> bool:
        """Do the rows hold lists of strings (``values`` a VarColumn)?"""
        return isinstance(self.values, VarColumn)

    def row(self, i: int) -> np.ndarray | VarColumn:
        return _cut(self.values, int(self.offsets[i]), int(self.offsets[i + 1]))

    def slice(self, start: int, stop: int) -> VarColumn:
        offs = self.offsets[start : stop + 1]
        base = offs[0]
        return VarColumn(_cut(self.values, int(base), int(offs[-1])), offs - base)

    def take(self, idx: np.ndarray) -> VarColumn:
        idx = np.asarray(idx)
        idx = np.flatnonzero(idx) if idx.dtype == np.bool_ else idx.astype(np.int64, copy=False)
        if len(idx) and idx.min() < 0:
            idx = np.where(idx < 0, idx + len(self), idx)
        starts = self.offsets[idx]
        lens = self.offsets[idx + 1] - starts  # the rows taken only (a batch from a large window)
        offs = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        if len(idx) == 0:
            return VarColumn(_cut(self.values, 0, 0), offs)
        if (
            isinstance(self.values, np.ndarray)
            and self.values.ndim == 1
            and self.values.dtype != object
            and int(lens.min()) >= 0
            and int(starts.min()) >= int(self.offsets[0])
            and int((starts + lens).max()) <= len(self.values)
            and int(self.offsets[-1]) <= len(self.values)
        ):  # a damaged column (offsets past its values, or going back) is gathered by NumPy, which raises
            return VarColumn(_take_spans(self.values, self.offsets, idx, int(offs[-1])), offs)
        # Gather every element: position j of row k comes from starts[k] + j.
        rel = np.arange(offs[-1], dtype=np.int64) - np.repeat(offs[:-1], lens)
        where = np.repeat(starts, lens) + rel
        values = self.values.take(where) if isinstance(self.values, VarColumn) else self.values[where]
        return VarColumn(values, offs)

    @classmethod
    def concat(cls, parts: list[VarColumn]) -> VarColumn:
        if parts and isinstance(parts[0].values, VarColumn):
            values = cls.concat([p.values for p in parts])  # type: ignore[misc]
        else:
            values = np.concatenate([p.values for p in parts])
        offs = [np.zeros(1, dtype=np.int64)]
        base = 0
        for p in parts:
            offs.append(p.offsets[1:] + base)
            base += int(p.offsets[-1])
        return cls(values, np.concatenate(offs))

    @classmethod
    def from_pylist(cls, rows: list[Any], dtype: Any) -> VarColumn:
        lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offs = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        if dtype == np.uint8 and rows and isinstance(rows[0], (bytes, str)):
            data = b"".join(r.encode() if isinstance(r, str) else r for r in rows)
            if isinstance(rows[0], str):
                lens = np.fromiter((len(r.encode()) for r in rows), dtype=np.int64, count=len(rows))
                np.cumsum(lens, out=offs[1:])
            return cls(np.frombuffer(data, dtype=np.uint8), offs)
        flat = [x for r in rows for x in r]
        return cls(np.asarray(flat, dtype=dtype), offs)

    @classmethod
    def from_string_lists(cls, rows: list[list[str]]) -> VarColumn:
        """Rows of lists of strings (kind ``string_list``)."""
        lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offs = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        inner = [s.encode() for r in rows for s in r]
        strings = cls.from_pylist(inner, np.uint8) if inner else cls(np.zeros(0, np.uint8), np.zeros(1, np.int64))
        return cls(strings, offs)

    def to_pylist(self, kind: str) -> list[Any]:
        out = []
        for i in range(len(self)):
            v = self.row(i)
            if kind == STRING_LIST:
                out.append(v.to_pylist(STRING))  # type: ignore[union-attr]
            elif kind == STRING:
                out.append(v.tobytes().decode("utf-8"))
            elif kind == BINARY:
                out.append(v.tobytes())
            else:
                out.append(v.tolist())
        return out


def _take_spans(values: np.ndarray, offsets: np.ndarray, idx: np.ndarray, total: int) -> np.ndarray:
    """The values of rows ``idx`` back to back: Arrow's take of a binary array over the column's
    bytes (one copy per row in C++; gathering element by element through index arrays cost eight
    bytes of index per byte of text and several times the time). Returns a writable array that
    owns its memory (Arrow's)."""
    import pyarrow as pa

    size = values.dtype.itemsize
    raw = np.ascontiguousarray(values[int(offsets[0]) :]).view(np.uint8)
    byte_offsets = np.ascontiguousarray((offsets - offsets[0]) * size, dtype=np.int64)
    col = pa.Array.from_buffers(
        pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(byte_offsets), pa.py_buffer(raw)]
    )
    at = np.ascontiguousarray(idx, dtype=np.int64)  # as buffers: pa.array() of NumPy would import pandas
    out = col.take(pa.Array.from_buffers(pa.int64(), len(at), [None, pa.py_buffer(at)]))
    del col
    data = out.buffers()[2]
    start = int(np.frombuffer(out.buffers()[1], dtype=np.int64, count=1, offset=out.offset * 8)[0])
    got = np.frombuffer(data, dtype=np.uint8, count=total * size, offset=start) if total else np.zeros(0, np.uint8)
    return got.view(values.dtype)


def _cut(values: np.ndarray | VarColumn, start: int, stop: int) -> np.ndarray | VarColumn:
    """Elements ``[start, stop)`` of a VarColumn's values (rows of the inner VarColumn when nested)."""
    return values.slice(start, stop) if isinstance(values, VarColumn) else values[start:stop]


Column = np.ndarray | VarColumn


@dataclass
class Batch:
    """A bounded slice of records: every column has ``num_rows`` rows."""

    columns: dict[str, Column]
    num_rows: int = field(default=-1)
    # a wide table's columns of one dtype as the rows of one [columns, rows] matrix (from_matrix)
    matrix: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.num_rows < 0:
            self.num_rows = len(next(iter(self.columns.values()))) if self.columns else 0

    @classmethod
    def from_matrix(cls, names: list[str], matrix: np.ndarray) -> Batch:
        """The columns ``names`` as the rows of ``matrix`` (2-D, C-contiguous, ``[columns, rows]``),
        which steps paid per column and batch (a copy, a reduction) can then take whole: see
        :meth:`matrix_of`."""
        rows = list(matrix)
        b = cls(dict(zip(names, rows, strict=True)), matrix.shape[1], matrix)
        b._rows = rows
        return b

    def matrix_of(self, names: list[str]) -> np.ndarray | None:
        """The ``[len(names), rows]`` matrix whose rows are the columns ``names`` in this order,
        when the batch was made so (:meth:`from_matrix`) and the columns are still its rows."""
        m, rows = self.matrix, getattr(self, "_rows", None)
        if m is None or rows is None or len(names) != len(rows):
            return None
        # each column still the matrix's row: checked in C loops (a Python loop over thousands of
        # columns, for every batch and every step that asks, was ~1 ms per call)
        if all(map(is_, map(self.columns.get, names), rows)):
            return m
        return None

    @property
    def whole_matrix(self) -> np.ndarray | None:
        """The matrix when it holds every column of the batch, in the batch's column order."""
        return self.matrix_of(list(self.columns)) if self.matrix is not None else None

    @property
    def nbytes(self) -> int:
        m = self.whole_matrix  # a wide table's: one size, not a sum over thousands of columns
        if m is not None:
            return int(m.nbytes)
        return sum(int(c.nbytes) for c in self.columns.values())

    def slice(self, start: int, stop: int) -> Batch:
        stop = min(stop, self.num_rows)
        cols = {
            k: (c.slice(start, stop) if isinstance(c, VarColumn) else c[start:stop]) for k, c in self.columns.items()
        }
        return Batch(cols, max(0, stop - start))

    def take(self, idx: np.ndarray) -> Batch:
        cols = {k: c.take(idx) if isinstance(c, VarColumn) else c[idx] for k, c in self.columns.items()}
        return Batch(cols, len(idx))

    @classmethod
    def concat(cls, parts: list[Batch]) -> Batch:
        if len(parts) == 1:
            return parts[0]
        names = list(parts[0].columns)
        mats = [p.matrix_of(names) for p in parts]
        if all(m is not None for m in mats):  # a wide table's: one copy, not one per column
            return cls.from_matrix(names, np.concatenate(mats, axis=1))
        cols: dict[str, Column] = {}
        for n in names:
            first = parts[0].columns[n]
            if isinstance(first, VarColumn):
                cols[n] = VarColumn.concat([p.columns[n] for p in parts])  # type: ignore[misc]
            else:
                cols[n] = np.concatenate([p.columns[n] for p in parts])
        return cls(cols, sum(p.num_rows for p in parts))


def field_for_array(name: str, arr: np.ndarray) -> Field:
    """The field of a fixed-shape column whose axis 0 is the record axis."""
    return Field(name, FIXED, arr.dtype.str, tuple(int(s) for s in arr.shape[1:]))


def row_nbytes(f: Field, mean_var_len: float = 64.0) -> float:
    """Estimated in-memory bytes of one row, used to size batches from the memory budget."""
    if f.kind == FIXED:
        return max(1, f.np_dtype.itemsize * f.row_size)
    return 8 + mean_var_len * f.np_dtype.itemsize
