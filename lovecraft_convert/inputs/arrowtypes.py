"""Arrow columns as lovecraft columns: the type decisions of the Arrow-based inputs (Parquet, Arrow
IPC, Hugging Face ``save_to_disk`` directories), in one place.

* Structs become dotted columns (``meta.lang``), one per leaf.
* Numbers and booleans are fixed columns of their dtype (float16 stays float16); fixed-size lists,
  the fixed-shape tensor extension type and Hugging Face ``Array2D``..``Array5D`` become fixed-shape
  columns; variable lists of numbers become ``sequence`` columns; strings and binary map to
  ``string``/``binary``; dictionary-encoded columns are decoded.
* Timestamps, dates, times and durations are int64 counts of their unit (date64 as days, as date32),
  a null as -2**63 (NumPy's NaT), with their Arrow type as the field's ``logical`` type: Parquet
  output keeps it; the manifest's schema and sources record it for the other formats.
  A dictionary of strings (pandas' ``category``) stays a ``category`` (Parquet: a dictionary). Decimals are refused unless read with
  ``--column-type NAME=float64`` (or another number type, or ``string``).
* Nulls: NaN in float columns; an int or bool column with nulls is read as float64 (NaN), refused
  if it also holds integers beyond +-2**53; a null string or binary is empty; a null list an empty
  sequence (a null inside one follows the rule of its element type).
* Maps, unions, lists of lists, of structs or of strings are refused with one line naming the file,
  the column and its type, and the way out (``--columns`` to leave it out).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arrowconv import arrow_to_numpy, column_from_arrow, logical_of, logical_type
from ..errors import UTF8_HINT, InputError, SchemaError, invalid_utf8
from ..schema import (
    BINARY,
    CATEGORY,
    FIXED,
    SEQUENCE,
    STRING,
    STRING_LIST,
    Batch,
    Field,
    Logical,
    VarColumn,
    typed_field,
)

NAT = np.iinfo(np.int64).min  # a null timestamp, as NumPy's NaT
EXACT = 2**53  # integers beyond this are not exact in float64
HF_ARRAY = "datasets.features.features.Array"  # Array2DExtensionType .. Array5DExtensionType
NUMBER_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "bool")
ARROW_ERRORS = (pa.ArrowException, OSError, ValueError, NotImplementedError, IndexError, KeyError)


def type_name(t: pa.DataType, limit: int = 80) -> str:
    """An Arrow type as one short line for messages."""
    s = " ".join(str(t).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _stringy(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _binary(t: pa.DataType) -> bool:
    return (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    )


def _listlike(t: pa.DataType) -> bool:
    return (
        pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t)
    )


def _temporal(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_duration(t)


def _unit(t: pa.DataType) -> str:
    if pa.types.is_date32(t):
        return "D"
    if pa.types.is_date64(t):
        return "ms"
    return t.unit


def _np(t: pa.DataType) -> np.dtype:
    return np.dtype(np.bool_) if pa.types.is_boolean(t) else np.dtype(t.to_pandas_dtype())


@dataclass
class Column:
    """One leaf column of an Arrow schema and how it is read."""

    name: str  # dotted path of struct fields
    path: tuple[str, ...]
    atype: pa.DataType  # as stored (dictionary and extension types included)
    how: str  # number | fixed | hfarray | sequence | string | binary | temporal | cast | refused
    field: Field | None = None
    problem: str | None = None  # refused: what, after "column 'x': "
    hint: str | None = None
    note: dict = dataclasses.field(default_factory=dict)  # what the manifest's sources record of the type decision
    value: pa.DataType | None = None  # element type (number, fixed, hfarray, sequence)
    shape: tuple[int, ...] = ()
    permutation: tuple[int, ...] | None = None  # fixed-shape tensors stored in another dimension order:
    physical: tuple[int, ...] = ()  # the stored shape; the row is its transpose by ``permutation``
    target: pa.DataType | None = None  # --column-type / temporal: the type it is cast to
    to_float: bool = False  # int/bool values with nulls: read as float64 (NaN)

    @property
    def refused(self) -> bool:
        return self.how == "refused"


def refuse(c: Column, problem: str, hint: str | None = None) -> Column:
    c.how = "refused"
    c.problem = problem
    c.hint = hint
    return c


def plan_columns(schema: pa.Schema, column_types: dict[str, str], widened: dict[str, str]) -> list[Column]:
    """The leaf columns of ``schema`` (structs flattened), each with its reading plan."""
    out: list[Column] = []
    for f in schema:
        _walk(out, (f.name,), f, column_types, widened)
    return out


def _walk(out: list[Column], path: tuple[str, ...], f: pa.Field, column_types: dict, widened: dict) -> None:
    t = f.type
    if pa.types.is_struct(t) and t.num_fields:
        for i in range(t.num_fields):
            _walk(out, (*path, t.field(i).name), t.field(i), column_types, widened)
        return
    name = ".".join(path)
    want = column_types.get(name) or (widened.get(name) if widened.get(name) == "string" else None)
    out.append(_leaf(Column(name, path, t, "refused"), f, want, widened.get(name) == "float64"))


def _leaf(c: Column, f: pa.Field, want: str | None, to_float: bool) -> Column:
    t = c.atype
    if pa.types.is_dictionary(t):
        c.note["decoded"] = "dictionary"
        t = t.value_type
    meta = f.metadata or {}  # an extension type no one registered in this process: its storage and these keys
    ext = (meta.get(b"ARROW:extension:name") or b"").decode("utf-8", "replace")
    ext_meta = meta.get(b"ARROW:extension:metadata")
    if isinstance(t, pa.FixedShapeTensorType):
        return _tensor(c, t, to_float)
    if isinstance(t, pa.BaseExtensionType):  # registered (e.g. by an imported ``datasets``)
        ext = c.note["extension"] = t.extension_name
        try:
            ext_meta = t.__arrow_ext_serialize__()
        except (AttributeError, NotImplementedError, TypeError, ValueError):
            ext_meta = None
        t = t.storage_type
    if want is not None:
        return _cast(c, t, want)
    if ext.startswith(HF_ARRAY):
        return _hf_array(c, t, ext_meta, to_float)
    if _numeric(t):
        dt = np.dtype(np.float64) if (to_float and not pa.types.is_floating(t)) else _np(t)
        c.how, c.value, c.to_float = "number", t, to_float
        c.field = Field(c.name, FIXED, dt.str)
        return c
    if _stringy(t):
        # a dictionary of strings (pandas' category, polars' Categorical) stays a category
        category = Logical(CATEGORY) if pa.types.is_dictionary(c.atype) else None
        c.how, c.field = "string", Field(c.name, STRING, "|u1", logical=category)
        return c
    if _binary(t):
        c.how, c.field = "binary", Field(c.name, BINARY, "|u1")
        return c
    if pa.types.is_fixed_size_list(t):
        shape, v = [], t
        while pa.types.is_fixed_size_list(v):
            shape.append(v.list_size)
            v = v.value_type
        if not _numeric(v):
            return refuse(c, f"holds {type_name(c.atype)} (fixed-size lists of {type_name(v, 40)})", _leave_out())
        return _fixed(c, "fixed", v, tuple(shape), to_float)
    if _listlike(t):
        v = t.value_type
        if pa.types.is_dictionary(v):
            v = v.value_type
        if _numeric(v):
            dt = np.dtype(np.float64) if (to_float and not pa.types.is_floating(v)) else _np(v)
            c.how, c.value, c.to_float = "sequence", v, to_float
            c.field = Field(c.name, SEQUENCE, dt.str)
            return c
        if _stringy(v):  # as JSON Lines reads lists of strings: a missing list or string is empty
            c.how, c.field = "string_list", Field(c.name, STRING_LIST, "|u1")
            return c
        if _binary(v):
            return refuse(
                c,
                f"holds {type_name(c.atype)} (lists of binary values), which the output formats cannot hold yet",
                _leave_out(),
            )
        what = "lists of lists" if (_listlike(v) or pa.types.is_fixed_size_list(v)) else f"lists of {type_name(v, 40)}"
        return refuse(c, f"holds {type_name(c.atype)} ({what}), which lovecraft does not convert yet", _leave_out())
    if _temporal(t):
        c.how, c.value, c.target = "temporal", t, pa.int64()
        c.field = Field(c.name, FIXED, "<i8", logical=logical_of(t))
        c.note.update(stored_as="int64", unit="D" if pa.types.is_date(t) else _unit(t), null=int(NAT))
        if pa.types.is_timestamp(t):
            c.note["timezone"] = t.tz
        return c
    if pa.types.is_decimal(t):
        return refuse(
            c,
            f"holds {type_name(c.atype)} (a decimal is read as a number or as text, as you choose)",
            f"read it as --column-type {c.name}=float64 (the nearest double) or --column-type {c.name}=string, "
            "or leave it out with --columns",
        )
    if pa.types.is_null(t):
        return refuse(c, "holds only nulls (type null)", _leave_out())
    if pa.types.is_struct(t):
        what = "a struct without fields" if not t.num_fields else "a struct inside another type"
        return refuse(c, f"holds {type_name(c.atype)} ({what})", _leave_out())
    return refuse(c, f"holds {type_name(c.atype)}, which lovecraft does not convert yet", _leave_out())


def _leave_out() -> str:
    return "leave it out with --columns"


def _fixed(c: Column, how: str, v: pa.DataType, shape: tuple[int, ...], to_float: bool) -> Column:
    dt = np.dtype(np.float64) if (to_float and not pa.types.is_floating(v)) else _np(v)
    c.how, c.value, c.shape, c.to_float = how, v, shape, to_float
    c.field = Field(c.name, FIXED, dt.str, shape)
    return c


def _tensor(c: Column, t: pa.FixedShapeTensorType, to_float: bool) -> Column:
    v = t.value_type
    if not _numeric(v):
        return refuse(c, f"holds {type_name(c.atype)} (tensors of {type_name(v, 40)})", _leave_out())
    physical = tuple(int(s) for s in t.shape)  # the row-major layout of the storage
    perm = tuple(int(p) for p in t.permutation) if t.permutation else None
    if perm == tuple(range(len(physical))):
        perm = None
    _fixed(c, "fixed", v, tuple(physical[p] for p in perm) if perm else physical, to_float)
    c.permutation, c.physical = perm, physical
    c.note["extension"] = t.extension_name
    return c


def _hf_array(c: Column, t: pa.DataType, ext_meta: bytes | None, to_float: bool) -> Column:
    """A Hugging Face ``Array2D``..``Array5D``: nested lists whose shape and dtype the extension's
    metadata gives (``[[2, 3], "float32"]``)."""
    try:
        shape, _dtype = json.loads(ext_meta)
        shape = tuple(shape)
    except (ValueError, TypeError):
        return refuse(c, "holds a Hugging Face array whose shape cannot be read", _leave_out())
    v = t
    while _listlike(v) or pa.types.is_fixed_size_list(v):
        v = v.value_type
    if any(not isinstance(s, int) or s < 0 for s in shape):
        return refuse(c, f"holds Hugging Face arrays of shape {list(shape)} (a dimension varies)", _leave_out())
    if not _numeric(v):
        return refuse(c, f"holds Hugging Face arrays of {type_name(v, 40)}", _leave_out())
    _fixed(c, "hfarray", v, shape, to_float)
    c.note["extension"] = "Hugging Face Array" + str(len(shape)) + "D"
    target = v
    for s in reversed(shape):
        target = pa.list_(target, s)
    c.target = target
    return c


def _cast(c: Column, t: pa.DataType, want: str) -> Column:
    """``--column-type NAME=TYPE`` (decimals, or any scalar read as text or another number type)."""
    scalar = _numeric(t) or _stringy(t) or _binary(t) or pa.types.is_decimal(t) or _temporal(t)
    if not scalar:
        return refuse(c, f"holds {type_name(c.atype)}, which cannot be read as {want}", _leave_out())
    c.how, c.value = "cast", t
    c.note.update(stored_as=want)
    lg = Logical.parse(want)
    if lg is not None:  # a timestamp, date, ... (int64 counts) or a category (text)
        c.field = typed_field(c.name, want)
        c.target = pa.large_string() if lg.type == CATEGORY else logical_type(lg)
        return c
    if want == "string":
        c.target = pa.large_string()
        c.field = Field(c.name, STRING, "|u1")
    else:
        target = pa.bool_() if want == "bool" else pa.from_numpy_dtype(np.dtype(want))
        c.target = target
        c.field = Field(c.name, FIXED, np.dtype(want if want != "bool" else "?").str)
    return c


# --------------------------------------------------------------------------------------------
# reading: Arrow record batches to lovecraft batches
# --------------------------------------------------------------------------------------------


class NeedsFloat(Exception):
    """An int or bool column holds nulls: it must be read as float64 (the reader starts over)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def leaf_array(rb: pa.RecordBatch, path: tuple[str, ...]) -> pa.Array:
    """The leaf array of a (struct-nested) column; a null struct makes its fields null."""
    arr = rb.column(path[0])
    for name in path[1:]:
        arr = pc.struct_field(arr, [arr.type.get_field_index(name)])
    return arr


class Converter:
    """Record batches of one schema to :class:`Batch`es of the planned columns. ``nulls`` counts
    the null values met per column (every value of a null row of a fixed-shape column counts)."""

    def __init__(self, columns: list[Column], errors: str = "strict") -> None:
        self.columns = columns
        self.errors = errors
        self.nulls: dict[str, int] = {c.name: 0 for c in columns}
        self.null_elements: dict[str, int] = {c.name: 0 for c in columns}  # inside lists (NaN, "")

    def batch(self, rb: pa.RecordBatch, source: str, row0: int) -> Batch:
        cols = {}
        for c in self.columns:
            arr = leaf_array(rb, c.path)
            cols[c.name] = self.column(arr, c, source, row0)
        return Batch(cols, rb.num_rows)

    # -- one column ---------------------------------------------------------------------------

    def column(self, arr: pa.Array, c: Column, source: str, row0: int):
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        if isinstance(arr, pa.ExtensionArray) and c.how != "fixed":
            arr = arr.storage
        if c.how == "number":
            return self._number(arr, c, source, row0)
        if c.how in ("fixed", "hfarray"):
            return self._fixed(arr, c, source, row0)
        if c.how == "sequence":
            return self._sequence(arr, c, source, row0)
        if c.how == "string_list":
            return self._string_list(arr, c, source, row0)
        if c.how in ("string", "binary"):
            return self._bytes(arr, c, source, row0)
        if c.how == "temporal":
            return self._temporal(arr, c)
        return self._cast(arr, c, source, row0)

    def _where(self, source: str, row0: int, i: int, c: Column) -> str:
        return f"{source}, row {row0 + i + 1}, column '{c.name}'"

    def _exact(self, arr: pa.Array, c: Column, source: str, row0: int, per_row: int = 1, offsets=None) -> None:
        """Integers read as float64 (their column has nulls) must be exact in float64 (``offsets``:
        the rows' first elements, for the elements of lists)."""
        if not pa.types.is_integer(arr.type) or len(arr) == arr.null_count:
            return
        mm = pc.min_max(arr)
        if mm["min"].as_py() >= -EXACT and mm["max"].as_py() <= EXACT:
            return
        v = arrow_to_numpy(arr.fill_null(0))
        bad = v > EXACT if v.dtype.kind == "u" else (v > EXACT) | (v < -EXACT)
        i = int(np.flatnonzero(bad)[0])
        row = i // per_row if offsets is None else int(np.searchsorted(offsets, i, side="right")) - 1
        fix = f"read it as text with --column-type {c.name}=string" if offsets is None else "fill its missing elements"
        e = InputError(
            f"{self._where(source, row0, row, c)}: {int(v[i])} is beyond +-2**53, so the column cannot be "
            "float64 (which holds its nulls as NaN) without changing it",
            hint=f"{fix}, or leave it out with --columns",
        )
        # (the column, and why, as inspect lists a column it cannot read: columnar.py)
        e.not_exact = (
            c.name,
            f"holds integers beyond +-2**53 and nulls, which float64 (nulls as NaN) would change: {fix}",
        )
        raise e

    def _number(self, arr: pa.Array, c: Column, source: str, row0: int) -> np.ndarray:
        dt = c.field.np_dtype
        n = arr.null_count
        if n:
            self.nulls[c.name] += n
            if not pa.types.is_floating(arr.type) and not c.to_float:
                raise NeedsFloat(c.name)
        if c.to_float and not pa.types.is_floating(arr.type):
            self._exact(arr, c, source, row0)
            return arrow_to_numpy(pc.cast(arr, pa.float64(), safe=False))
        v = arrow_to_numpy(arr)  # from its buffers (to_numpy imports pandas); a float array's nulls as NaN
        return v if v.dtype == dt else v.astype(dt)

    def _fixed(self, arr: pa.Array, c: Column, source: str, row0: int) -> np.ndarray:
        n = len(arr)
        if c.how == "hfarray":
            try:
                arr = arr.cast(c.target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                i = _bad_shape(arr, c.shape)
                raise InputError(
                    f"{self._where(source, row0, i, c)}: a row of another shape than the declared {list(c.shape)}",
                    hint="fix the dataset's arrays, or leave the column out with --columns",
                ) from None
        elif isinstance(arr, pa.ExtensionArray):
            arr = arr.storage
        mask = None
        a = arr
        while pa.types.is_fixed_size_list(a.type):
            k = a.type.list_size
            if a.null_count:
                m = arrow_to_numpy(a.is_null())
                mask = m if mask is None else mask | m
            if mask is not None:
                mask = np.repeat(mask, k)
            a = a.values.slice(a.offset * k, len(a) * k)
        if a.null_count:
            m = arrow_to_numpy(a.is_null())
            mask = m if mask is None else mask | m
        dt = c.field.np_dtype
        if mask is not None and mask.any():
            self.nulls[c.name] += int(mask.sum())
            if not pa.types.is_floating(a.type) and not c.to_float:
                raise NeedsFloat(c.name)
            if not pa.types.is_floating(a.type):
                self._exact(pc.if_else(pa.array(mask), None, a), c, source, row0, max(1, c.field.row_size))
            v = arrow_to_numpy(pc.cast(a, pa.from_numpy_dtype(dt), safe=False).fill_null(0)).copy()
            v[mask] = np.nan
        else:
            v = arrow_to_numpy(a)
            if v.dtype != dt:
                v = v.astype(dt)
        if c.permutation is not None:  # as pyarrow's to_numpy_ndarray: the stored rows transposed
            phys = v.reshape((n, *c.physical))
            return np.ascontiguousarray(phys.transpose(0, *[1 + p for p in c.permutation]))
        return v.reshape((n, *c.shape))

    def _sequence(self, arr: pa.Array, c: Column, source: str, row0: int) -> VarColumn:
        arr = as_list(arr)
        n = len(arr)
        offs = np.zeros(n + 1, dtype=np.int64)
        if arr.null_count:
            self.nulls[c.name] += arr.null_count
            lens = arrow_to_numpy(pc.list_value_length(arr).fill_null(0))
            np.cumsum(lens, out=offs[1:])
        else:
            o = arrow_to_numpy(arr.offsets).astype(np.int64)
            offs = o - o[0]
        values = arr.flatten()
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        dt = c.field.np_dtype
        if values.null_count:
            self.null_elements[c.name] += values.null_count
            if not pa.types.is_floating(values.type) and not c.to_float:
                raise NeedsFloat(c.name)
        if c.to_float and not pa.types.is_floating(values.type):
            self._exact(values, c, source, row0, offsets=offs)  # as a column of numbers: exact, or refused
            v = arrow_to_numpy(pc.cast(values, pa.float64(), safe=False))
        else:
            v = arrow_to_numpy(values)
        return VarColumn(v if v.dtype == dt else v.astype(dt), offs)

    def _string_list(self, arr: pa.Array, c: Column, source: str, row0: int) -> VarColumn:
        """Lists of strings (kind string_list: a VarColumn of strings per row). A missing list is
        an empty one and a missing string an empty string, as the JSON Lines reader holds them."""
        arr = as_list(arr)
        offs = np.zeros(len(arr) + 1, dtype=np.int64)
        if arr.null_count:
            self.nulls[c.name] += arr.null_count
        np.cumsum(arrow_to_numpy(pc.list_value_length(arr).fill_null(0)), out=offs[1:])
        values = arr.flatten()  # the slice's elements, none behind a missing list
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        if pa.types.is_string_view(values.type):
            values = values.cast(pa.large_string())
        if values.null_count:
            self.null_elements[c.name] += values.null_count
            values = pc.fill_null(values, pa.scalar("", values.type))
        try:
            values.validate(full=True)
        except pa.ArrowInvalid:  # not UTF-8 (Arrow does not check when reading)
            rows = values.cast(pa.large_binary()).to_pylist()
            if self.errors == "replace":
                values = pa.array([r.decode("utf-8", "replace") for r in rows], pa.large_string())
            else:
                for i, r in enumerate(rows):
                    try:
                        r.decode("utf-8")
                    except UnicodeDecodeError as e:
                        row = int(np.searchsorted(offs, i, side="right")) - 1
                        raise InputError(
                            f"{self._where(source, row0, row, c)}: {invalid_utf8(e, of='')}", hint=UTF8_HINT
                        ) from None
        return VarColumn(_var_bytes(values), offs)

    def _bytes(self, arr: pa.Array, c: Column, source: str, row0: int) -> VarColumn:
        t = arr.type
        if pa.types.is_string_view(t):
            arr = arr.cast(pa.large_string())
        elif pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
            arr = arr.cast(pa.large_binary())
        if arr.null_count:
            self.nulls[c.name] += arr.null_count
            arr = pc.fill_null(arr, pa.scalar("" if c.field.kind == STRING else b"", arr.type))
        if c.field.kind == STRING:
            arr = self._utf8(arr, c, source, row0)
        return _var_bytes(arr)

    def _utf8(self, arr: pa.Array, c: Column, source: str, row0: int) -> pa.Array:
        """Strings that are not UTF-8 (Arrow does not check when reading): an error naming the row,
        or (``--errors replace``) U+FFFD in their place."""
        try:
            arr.validate(full=True)
            return arr
        except pa.ArrowInvalid:
            pass
        rows = arr.cast(pa.large_binary()).to_pylist()
        if self.errors == "replace":
            return pa.array([r.decode("utf-8", "replace") for r in rows], pa.large_string())
        for i, r in enumerate(rows):
            try:
                r.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(
                    f"{self._where(source, row0, i, c)}: {invalid_utf8(e, of='')}", hint=UTF8_HINT
                ) from None
        raise InputError(f"{source}, column '{c.name}': malformed strings", hint="re-create the file")

    def _temporal(self, arr: pa.Array, c: Column) -> np.ndarray:
        width = arr.type.bit_width
        ints = arr.view(pa.int64() if width == 64 else pa.int32())
        if width != 64:
            ints = ints.cast(pa.int64())
        if pa.types.is_date64(arr.type):  # milliseconds: held as days, as date32
            ints = pc.divide(ints, 86_400_000)
        if ints.null_count:
            self.nulls[c.name] += ints.null_count
            ints = pc.fill_null(ints, NAT)
        return arrow_to_numpy(ints)

    def _cast(self, arr: pa.Array, c: Column, source: str, row0: int):
        if c.field.kind == STRING and _binary(arr.type):  # checked (or repaired) as UTF-8 below
            return self._bytes(arr.cast(pa.large_binary()).view(pa.large_string()), c, source, row0)
        try:
            if pa.types.is_decimal(arr.type) and pa.types.is_floating(c.target):
                # through the decimal text: the nearest double (Arrow's decimal cast is not: 0.57 ->
                # 0.5700000000000001), as float(Decimal(text)) gives
                arr = arr.cast(pa.large_string())
            out = arr.cast(c.target)
        except pa.ArrowInvalid as e:  # a value that does not fit: the first such, named by its row
            i = _first_uncast(arr, c.target)
            where = f"{source}, column '{c.name}'" if i is None else self._where(source, row0, i, c)
            value = "a value" if i is None else repr(arr[i].as_py())
            raise InputError(
                f"{where}: {value} cannot be read as {c.note.get('stored_as')} ({_first_line(e)})",
                hint="fix the value or choose another --column-type",
            ) from None
        except pa.ArrowNotImplementedError as e:
            raise InputError(
                f"{source}, column '{c.name}': a value cannot be read as {c.note.get('stored_as')} ({_first_line(e)})",
                hint="choose another --column-type",
            ) from None
        if pa.types.is_boolean(c.target) and _numeric(arr.type):  # 0 and 1 only (Arrow makes 1.5 true)
            bad = arrow_to_numpy(pc.fill_null(pc.and_(pc.not_equal(arr, 0), pc.not_equal(arr, 1)), False))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InputError(
                    f"{self._where(source, row0, i, c)}: {arr[i].as_py()!r} is not a valid bool",
                    hint="fix the value or choose another --column-type",
                )
        if c.field.kind == STRING:
            return self._bytes(out, c, source, row0)
        if c.field.logical is not None:  # int64 counts, a null as NaT
            self.nulls[c.name] += out.null_count
            return column_from_arrow(out, c.field)
        if out.null_count:
            self.nulls[c.name] += out.null_count
            if not pa.types.is_floating(out.type):
                i = int(np.flatnonzero(arrow_to_numpy(out.is_null()))[0])
                raise InputError(
                    f"{self._where(source, row0, i, c)}: null value in a {c.field.describe()} column",
                    hint=f"pass --column-type {c.name}=float64 to read nulls as NaN",
                )
        v = arrow_to_numpy(out)
        return v if v.dtype == c.field.np_dtype else v.astype(c.field.np_dtype)


def as_list(arr: pa.Array) -> pa.Array:
    """A list_view array (any list_view or large_list_view) as a large_list of the same rows; any
    other array as it is. Each row is a view (an offset and a size into the values, in any order,
    possibly overlapping); pyarrow's own cast to a list left offsets past the values for an empty
    last view (an invalid array, read as garbage). Gathered here: the rows' values in row order."""
    if not (pa.types.is_list_view(arr.type) or pa.types.is_large_list_view(arr.type)):
        return arr
    sizes = arrow_to_numpy(arr.sizes.fill_null(0)).astype(np.int64)  # (a null row: size 0)
    starts = arrow_to_numpy(arr.offsets).astype(np.int64)
    if arr.null_count:
        sizes[arrow_to_numpy(arr.is_null())] = 0
    offsets = np.zeros(len(arr) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    # element j of row i sits at starts[i] + j in the values: one take of every row's elements
    index = np.repeat(starts - offsets[:-1], sizes) + np.arange(int(offsets[-1]), dtype=np.int64)
    values = arr.values.take(pa.array(index))
    mask = arr.is_null() if arr.null_count else None
    return pa.LargeListArray.from_arrays(pa.array(offsets), values, mask=mask)


def _var_bytes(arr: pa.Array) -> VarColumn:
    """A string or binary array without nulls as values + offsets (no copy of the values)."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    bufs = arr.buffers()
    odt = np.int64 if large else np.int32
    offs = np.frombuffer(bufs[1], dtype=odt)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    base = int(offs[0]) if len(offs) else 0
    return VarColumn(data[base : int(offs[-1]) if len(offs) else 0], offs - base)


def _bad_shape(arr: pa.Array, shape: tuple[int, ...]) -> int:
    """The first row (0-based) of nested lists whose shape is not ``shape`` (slow; for errors)."""
    for i, row in enumerate(arr.to_pylist()):
        if row is not None and np.shape(np.asarray(row, dtype=object)) != shape:
            return i
    return 0


def _first_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 200 else text[:197] + "..."


def check_names(columns: list[Column], source: str) -> None:
    """Two leaves with one dotted name (a column ``a.b`` beside a struct ``a`` with field ``b``)."""
    seen: set[str] = set()
    for c in columns:
        if c.name in seen:
            raise SchemaError(f"{source}: two columns are named '{c.name}'", hint="rename one of them")
        seen.add(c.name)


def refusal(c: Column, source: str, readable: list[str]) -> SchemaError:
    """The one-line error of a column no output can hold (as read)."""
    hint = c.hint or _leave_out()
    if hint.endswith("--columns") and readable:
        shown = ",".join(readable[:8]) + (",..." if len(readable) > 8 else "")
        hint = f"{hint}, e.g. --columns {shown}"
    return SchemaError(f"{source}, column '{c.name}': {c.problem}", hint=hint)


def _first_uncast(arr: pa.Array, target: pa.DataType) -> int | None:
    """The index of the first value of ``arr`` that does not cast to ``target`` (halving the
    range that fails: a few dozen casts of slices), None when the whole casts after all."""
    lo, hi = 0, len(arr)

    def fails(a: int, b: int) -> bool:
        try:
            arr.slice(a, b - a).cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return True
        return False

    if hi == 0 or not fails(lo, hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(lo, mid):
            hi = mid
        else:
            lo = mid
    return lo
