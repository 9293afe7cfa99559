"""JSON Lines column types: what a key's values have been, the column that holds them, and the
Arrow type they are parsed as.

A column's state is the set of kinds of value met so far (*flags*), so that widening is a union:
whatever order parts of the input are read in, by however many workers, the final set and so the
final type are the same. Scalar flags::

    N  null or a missing key        B  true/false           S  string
    I  integer within +-2**53       J  integer beyond +-2**53, within int64
    K  integer beyond int64         F  number with a fraction or an exponent

A list column's state is ``[`` followed by the flags of its elements (``[`` alone: only empty lists
so far). ``O`` marks a key that held only nulls and then an object: not a column, its keys are.
The column a state becomes (:func:`field_of`):

* any ``S``, or ``B`` with numbers: string (numbers and booleans as their JSON text);
* ``B``: bool, or float64 (1/0/NaN) with ``N``;
* ``F``: float64 (an integer in it is rounded as float64 rounds); ``K`` alone: string (the digits);
* ``I``/``J``: int64, or float64 (NaN for the nulls) with ``N``; only ``N``: float64 of NaN;
* ``N`` with ``J`` or ``K`` is refused (float64 cannot hold those integers exactly), whatever else
  the column holds, so that the refusal does not depend on the order values are met in;
* lists: strings -> string_list; numbers -> sequence (float64 with ``F``, ``K`` or null elements,
  else int64); booleans -> sequence<bool> (float64 with nulls); strings or booleans mixed with
  numbers are refused.

A type fixed with ``--column-type`` is not a state: every value must fit it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..schema import CATEGORY, FIXED, NAT, SEQUENCE, STRING, STRING_LIST, Field, Logical

EXACT = 2**53  # float64 holds every integer up to here
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
NUMBERS = frozenset("IJKF")
FIXED_TYPES = (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "bool", "string",
)  # fmt: skip
_WORDS = {
    "N": "null",
    "B": "a boolean",
    "S": "a string",
    "I": "an integer",
    "J": "an integer",
    "K": "an integer",
    "F": "a number",
    "[": "a list",
    "{": "an object",
}


class Bad(Exception):
    """A value the column cannot take: ``row`` (0-based, in the piece) and the message parts."""

    def __init__(self, row: int | None, key: str | None, message: str, hint: str) -> None:
        super().__init__(message)
        self.row, self.key, self.message, self.hint = row, key, message, hint


class Fallback(Exception):
    """The fast parser's result cannot be trusted for this piece (NaN/Infinity literals, numbers
    whose JSON text matters): read it with the exact parser."""


@dataclass
class Col:
    """One column: its dotted name, the keys that lead to it, its state (or fixed type)."""

    name: str
    path: tuple[str, ...] | None  # None: not met yet (a key named by --columns or --column-type)
    flags: str = ""  # scalars: sorted flags; lists: "[" + sorted element flags; "": not met yet
    fixed: str | None = None  # the --column-type
    late: bool = False  # first met after the probe (placed after the probe's columns, by name)

    @property
    def is_list(self) -> bool:
        return self.flags.startswith("[")

    def elements(self) -> set[str]:
        return set(self.flags[1:] if self.is_list else self.flags)


def norm(flags: set[str], is_list: bool) -> str:
    """The canonical text of a state (kinds that cannot change the column are dropped)."""
    s = set(flags)
    if "S" in s and not is_list:
        s -= {"I", "F", "B"}
    elif "F" in s:
        s.discard("I")
    text = "".join(sorted(s))
    return "[" + text if is_list else text


@functools.lru_cache(maxsize=4096)
def union(a: str, b: str) -> str | None:
    """The state of a column that was ``a`` and meets ``b`` (None: a list and a scalar)."""
    if a == "O" or b == "O":  # an object where only nulls were (or the reverse): the key is an object
        return "O" if (b if a == "O" else a) in ("", "N", "O") else None
    if not b:
        return a
    if not a or a == "N":
        return b if b.startswith("[") else norm(set(a) | set(b), False)
    if b == "N":
        return a if a.startswith("[") else norm(set(a) | set(b), False)
    la, lb = a.startswith("["), b.startswith("[")
    if la != lb:
        return None
    return norm(set(a.lstrip("[")) | set(b.lstrip("[")), la)


@functools.lru_cache(maxsize=1024)
def problem(flags: str) -> tuple[str, str] | None:
    """Why a state is refused (message, hint), or None."""
    is_list = flags.startswith("[")
    s = set(flags.lstrip("["))
    if "N" in s and s & {"J", "K"}:
        what = "list elements" if is_list else "values"
        return (
            f"integers beyond +-2**53 and null {what} (or missing keys): float64, which would hold the "
            "nulls as NaN, cannot hold those integers exactly",
            "pass --column-type {key}=string to keep them as text",
        )
    if is_list and "S" in s and s & (NUMBERS | {"B"}):
        return "lists mixing strings and numbers or booleans", "leave the key out with --columns"
    if is_list and "B" in s and s & NUMBERS:
        return "lists mixing booleans and numbers", "leave the key out with --columns"
    return None


def describe_flags(flags: str) -> str:
    """What a state holds, for messages ("numbers", "lists of strings", ...)."""
    if flags == "O":
        return "objects"
    if flags.startswith("["):
        s = set(flags[1:]) - {"N"}
        if not s:
            return "empty lists"
        if "S" in s:
            return "lists of strings"
        if "B" in s:
            return "lists of booleans"
        return "lists of numbers"
    s = set(flags) - {"N"}
    if not s:
        return "nulls"
    if s == {"S"}:
        return "strings"
    if s == {"B"}:
        return "booleans"
    if s <= NUMBERS:
        return "numbers"
    return "values of several kinds"


def word(kind: str) -> str:
    """``a string``, ``a list``... for a one-letter kind."""
    return _WORDS.get(kind, kind)


# --------------------------------------------------------------------------------------------
# the column a state becomes, and the Arrow type it is parsed as
# --------------------------------------------------------------------------------------------


def output(col: Col) -> tuple[str, str]:
    """(schema kind, dtype) of the column."""
    if col.fixed is not None:
        lg = Logical.parse(col.fixed)
        if col.fixed == "string" or (lg is not None and lg.type == CATEGORY):
            return STRING, "|u1"
        if lg is not None:  # a timestamp, date, ...: int64 counts
            return FIXED, "<i8"
        return FIXED, np.dtype(col.fixed if col.fixed != "bool" else "?").str
    if col.is_list:
        s = col.elements()
        if "S" in s:
            return STRING_LIST, "|u1"
        if "B" in s:
            return SEQUENCE, "|b1" if "N" not in s else "<f8"
        if s & {"F", "K", "N"} or not s:
            return SEQUENCE, "<f8"
        return SEQUENCE, "<i8"
    s = col.elements()
    if "S" in s or ("B" in s and s & NUMBERS):
        return STRING, "|u1"
    if "B" in s:
        return FIXED, "|b1" if "N" not in s else "<f8"
    if "F" in s:
        return FIXED, "<f8"
    if "K" in s:
        return STRING, "|u1"
    if s & {"I", "J"}:
        return FIXED, "<i8" if "N" not in s else "<f8"
    return FIXED, "<f8"  # only nulls (or not met yet)


def field_of(col: Col) -> Field:
    kind, dtype = output(col)
    return Field(col.name, kind, dtype, logical=Logical.parse(col.fixed) if col.fixed is not None else None)


def read_kind(col: Col) -> str:
    """What the fast parser reads the column as: null, bool, int64, uint64, float64, string, or
    ``list<...>`` of one of them."""
    if col.fixed is not None:
        if col.fixed == "string" or Logical.parse(col.fixed) is not None:  # ISO 8601 text, category text
            return "string"
        if col.fixed == "bool":
            return "bool"
        if col.fixed == "uint64":
            return "uint64"
        return "float64" if col.fixed.startswith("float") else "int64"
    kind, dtype = output(col)
    s = col.elements()
    if col.is_list:
        if kind == STRING_LIST:
            return "list<string>"
        if "B" in s:
            return "list<bool>"
        if not (s - {"N"}):
            return "list<null>"
        return "list<float64>" if s & {"F", "K"} else "list<int64>"
    if kind == STRING:
        return "string"
    if "B" in s:
        return "bool"
    if "F" in s:
        return "float64"
    if s & {"I", "J"}:
        return "int64"
    return "null"


def arrow_type(kind: str):
    import pyarrow as pa

    base = {
        "null": pa.null(),
        "bool": pa.bool_(),
        "int64": pa.int64(),
        "uint64": pa.uint64(),
        "float64": pa.float64(),
        "string": pa.string(),
    }
    if kind.startswith("list<"):
        return pa.list_(base[kind[5:-1]])
    return base[kind]


# --------------------------------------------------------------------------------------------
# type names as other runs of the reader get them (``Reader.widen``)
# --------------------------------------------------------------------------------------------


def state_name(col: Col) -> str:
    """A state as the text ``widen`` takes back: ``~`` + flags, then the keys that lead to the
    column when they are not its name cut at the dots (``@`` + JSON)."""
    import json

    text = "~" + col.flags
    if col.path is not None and list(col.path) != col.name.split("."):
        text += "@" + json.dumps(list(col.path))
    return text


def state_from_name(name: str, current: Col | None) -> tuple[str, tuple[str, ...] | None] | None:
    """(state, keys) to join for a ``widen`` type name: our own ``~`` states, or the type of a
    column as a dataset schema describes it (``verify --against`` forces the dataset's types);
    None when the column already becomes that type."""
    import json

    if name.startswith("~"):
        flags, _, path = name[1:].partition("@")
        return flags, (tuple(json.loads(path)) if path else None)
    r = _described(name, current)
    return None if r is None else (r, None)


def _described(name: str, current: Col | None) -> str | None:
    """A dataset schema's type name as a state: ``=TYPE`` for scalars (read as that type)."""
    if current is not None and current.flags and field_of(current).describe() == name:
        return None
    if name in ("float64", "float32", "float16"):
        return "=float64"  # (float16 and float32 are float64 narrowed by --dtype)
    if name in FIXED_TYPES:
        return "=" + name
    if name == "list<string>":
        return "[S"
    if name.startswith("sequence<"):
        inner = name[9:-1]
        return "[" + ("B" if inner == "bool" else "F" if inner.startswith("float") else "I")
    return None


# --------------------------------------------------------------------------------------------
# Arrow arrays -> batch columns
# --------------------------------------------------------------------------------------------


def observe(arr, col: Col, fast: bool, digits) -> set[str]:
    """The kinds of value an Arrow array shows (those the fast parser can tell apart: nulls, and
    integers beyond 2**53 in integer columns). Raises Fallback where the fast parser's reading
    may hide what the exact parser would see: NaN/Infinity literals, and large numbers in a float
    column when the piece holds a long run of digits (``digits()``: an integer literal beyond
    2**53 has 16 digits or more). Computed with NumPy on the buffers (``pyarrow.compute`` costs a
    tenth of a second to import)."""
    import pyarrow as pa

    if col.fixed is not None:
        if fast and pa.types.is_floating(arr.type) and not np.isfinite(_present(arr)).all():
            raise Fallback
        return set()
    seen: set[str] = set()
    values = arr
    if pa.types.is_list(arr.type):
        values = arr.values
        if len(values) and pa.types.is_null(values.type):
            seen.add("N")
    if values.null_count:
        seen.add("N")
    if pa.types.is_integer(values.type) and len(values) - values.null_count:
        v = _present(values)
        if max(-int(v.min()), int(v.max())) > EXACT:
            seen.add("J")
    if fast and pa.types.is_floating(values.type) and len(values) - values.null_count:
        v = _present(values)
        if not np.isfinite(v).all():
            raise Fallback
        if max(-float(v.min()), float(v.max())) >= EXACT and digits():
            raise Fallback
    return seen


def _present(arr) -> np.ndarray:
    """The values of a numeric Arrow array that are not null."""
    from ..arrowconv import arrow_to_numpy, valid_of

    v = arrow_to_numpy(arr)
    return v[valid_of(arr)] if arr.null_count else v


def build(arr, col: Col):
    """The batch column of an Arrow array read as ``read_kind(col)`` (null -> NaN, empty string,
    empty list); raises Bad for a value a fixed type cannot take."""
    import pyarrow as pa

    from ..arrowconv import column_from_arrow, offsets_of, valid_of
    from ..schema import VarColumn

    f = field_of(col)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    if f.kind == STRING:
        if not pa.types.is_string(arr.type):  # only nulls so far
            arr = pa.nulls(n, pa.string())
        return column_from_arrow(_empty_nulls(arr, ""), f)
    if f.kind in (SEQUENCE, STRING_LIST):
        offs = offsets_of(arr)
        if arr.null_count and np.any(np.diff(offs)[~valid_of(arr)]):
            arr = _empty_nulls(arr, [])
            offs = offsets_of(arr)
        base = int(offs[0])
        values = arr.values.slice(base, int(offs[-1]) - base)
        if f.kind == STRING_LIST:
            inner = column_from_arrow(_empty_nulls(values, ""), Field(f.name, STRING, "|u1"))
            return VarColumn(inner, offs - base)
        return VarColumn(_numbers(values, f.np_dtype, col), offs - base)
    if f.logical is not None and f.logical.temporal:
        return _temporal(arr, f, col)
    if col.fixed is not None:
        return _fixed(arr, col)
    return _numbers(arr, f.np_dtype, col)


def _temporal(arr, f: Field, col: Col) -> np.ndarray:
    """ISO 8601 text as the int64 counts of a timestamp or date (a null as NaT)."""
    import pyarrow as pa

    from ..arrowconv import column_from_arrow, logical_type

    t = logical_type(f.logical)
    if not pa.types.is_string(arr.type):  # only nulls so far
        return np.full(len(arr), NAT, dtype=np.int64)
    try:
        return column_from_arrow(arr.cast(t), f)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    for row, v in enumerate(arr.to_pylist()):
        try:
            pa.array([v], pa.string()).cast(t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            zone = f.logical.type == "timestamp" and ("+" in v[10:] or v.endswith("Z") or "-" in v[10:])
            hint = (
                f"read it as --column-type '{col.name}=timestamp[{f.logical.unit}, UTC]' (it has a zone offset)"
                if zone and not f.logical.tz
                else "fix the value or choose another --column-type"
            )
            raise Bad(row, col.name, f"{v!r} is not a valid {col.fixed}", hint) from None
    raise Bad(0, col.name, f"a value is not a valid {col.fixed}", "fix the value or choose another --column-type")


def _numbers(arr, dtype: np.dtype, col: Col) -> np.ndarray:
    import pyarrow as pa

    from ..arrowconv import arrow_to_numpy, valid_of

    if pa.types.is_null(arr.type):
        return np.full(len(arr), np.nan, dtype=dtype)
    if dtype.kind == "f" and pa.types.is_integer(arr.type):  # integers with nulls: float64, NaN
        out = arrow_to_numpy(arr).astype(dtype)
        if arr.null_count:
            out[~valid_of(arr)] = np.nan
        return out
    if dtype.kind == "f" and pa.types.is_boolean(arr.type):  # booleans with nulls: 1/0/NaN
        out = arrow_to_numpy(_nulls_false(arr)).astype(dtype)
        if arr.null_count:
            out[~valid_of(arr)] = np.nan
        return out
    return arrow_to_numpy(arr).astype(dtype, copy=False)


def _nulls_false(arr):
    """A boolean array with its validity bitmap dropped (its null rows are set to NaN after)."""
    import pyarrow as pa

    return pa.Array.from_buffers(pa.bool_(), len(arr), [None, arr.buffers()[1]], offset=arr.offset)


def _fixed(arr, col: Col) -> np.ndarray:
    import pyarrow as pa

    from ..arrowconv import arrow_to_numpy, valid_of

    want = np.dtype(col.fixed if col.fixed != "bool" else "?")
    if arr.null_count and want.kind != "f":
        row = int(np.flatnonzero(~valid_of(arr))[0])
        raise Bad(row, col.name, f"null (or a missing key) where --column-type says {col.fixed}", null_hint(col))
    if pa.types.is_null(arr.type):
        return np.full(len(arr), np.nan, dtype=want)
    values = arrow_to_numpy(arr)
    if want.kind in "iu":
        info = np.iinfo(want)
        out = (values < info.min) | (values > info.max)
        if out.any():
            row = int(np.flatnonzero(out)[0])
            raise Bad(
                row,
                col.name,
                f"{values[row]} does not fit {col.fixed}",
                "fix the value or choose another --column-type",
            )
        return values.astype(want)
    if want.kind == "f":
        with np.errstate(over="ignore"):
            narrow = values.astype(want)
        over = np.isfinite(values) & ~np.isfinite(narrow)
        if over.any():
            row = int(np.flatnonzero(over)[0])
            raise Bad(row, col.name, f"{values[row]!r} does not fit {col.fixed}", "choose --column-type float64")
        return narrow
    return values.astype(want)


def null_hint(col: Col) -> str:
    return f"give it a value, or pass --column-type {col.name}=float64 to read nulls as NaN"


def _empty_nulls(arr, empty):
    """``arr`` with its null rows empty (Arrow leaves their bytes unspecified)."""
    import pyarrow as pa

    from ..arrowconv import offsets_of, valid_of

    if not arr.null_count:
        return arr
    if pa.types.is_string(arr.type):
        offs = offsets_of(arr)
        if not np.any(np.diff(offs)[~valid_of(arr)]):
            return arr
    import pyarrow.compute as pc

    try:
        return pc.fill_null(arr, pa.scalar(empty, arr.type))
    except pa.ArrowNotImplementedError:  # lists: rebuilt (never met: parsers leave null lists empty)
        return pa.array([[] if v is None else v for v in arr.to_pylist()], arr.type)


def json_text(value) -> str:
    """A value as a message shows it (short)."""
    import json

    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(value)
    if isinstance(value, float) and not math.isfinite(value):
        text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."
