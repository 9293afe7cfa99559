"""How the CSV reader types what pyarrow would read wrong: integers past int64 (uint64, or text:
float64 would round them), integers past 2**53 with a missing value (text), and a column of
booleans with a missing value (float64: 1, 0, NaN). Used by :mod:`.csv` as it infers and widens
its columns."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

BOOL_NAN = "bool_nan"  # a widened column of booleans with a missing value: read as bool, held as float64
INT_RE = re.compile(r"^\s*[+-]?[0-9]+\s*$")


def widened_type(cur: str, value: str) -> str:
    """The type a column of type ``cur`` (an int, or ``null``: empty so far) widens to for a value
    it cannot take: float64 for a number, but an integer beyond int64 is uint64 (0 to 2**64 - 1)
    or text (exact), and a column already uint64 (integers beyond int64) becomes text: float64
    would round them."""
    if INT_RE.match(value):
        n = int(value)
        if cur in ("int64", "null") and 0 <= n < 1 << 64:
            return "uint64"
        return "string"
    if cur.startswith("uint"):
        return "string"
    return "float64" if looks_float(value) else "string"


ROUNDED = (
    "column '{0}' holds integers beyond 2**53 and a missing value: read as text, exact (float64, which "
    "holds missing numbers as NaN, would round them; --column-type {0}=... chooses)"
)


def rounds(arr) -> bool:
    """Does float64 column ``arr`` (integers widened for a missing value, as parsed) hold a value
    that may have been rounded: 2**53 or beyond, where float64 no longer holds every integer? (The
    text 9007199254740993, 2**53 + 1, parses to 2**53 itself: a bound of ``> 2**53`` let it pass.)
    Every piece is checked, with a missing value or not (a later piece's 2**53 + 3 was rounded)."""
    import pyarrow.compute as pc

    top = pc.max(pc.abs(arr)).as_py()
    return top is not None and top >= 2.0**53


def looks_float(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def big_integers(
    table, reparse: Callable[[], Any], fixed: dict, widened: dict[str, str], hexed: bool = False
) -> list[str]:
    """Columns of ``table`` (the first piece, types inferred) whose integers pyarrow would change:
    float64 for integers that do not fit int64 (an id of 2**63 or more: float64 rounds them, two
    ids one value), and, where the piece holds ``0x`` (``hexed``), int64 for hexadecimal integers
    (pyarrow parses ``0xa475f55fbb6bc638`` as int64 and wraps it to a negative number, without a
    word: numpy's own test CSVs hold such seeds). They are read as uint64 when every value is an
    integer from 0 to 2**64 - 1, else as text, exact (as JSON Lines keeps such numbers).
    ``widened`` gets their types (``fixed``: the columns typed by ``--column-type``, left alone);
    ``reparse()``: the piece parsed again with ``widened``'s types. Returns the notes saying so
    (none: nothing retyped)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    big = []
    for name, col in zip(table.column_names, table.columns, strict=True):
        if name in fixed or name in widened:
            continue
        if pa.types.is_floating(col.type):
            if col.null_count < len(col) and pc.max(pc.abs(col)).as_py() >= 2.0**63:
                big.append(name)
        elif hexed and pa.types.is_integer(col.type):
            big.append(name)
    if not big:
        return []
    widened.update(dict.fromkeys(big, "string"))
    text = reparse()
    notes = []
    for name in big:
        values = [v for v in text.column(name).to_pylist() if v not in (None, "")]
        hex_ = any(HEX_RE.match(v) for v in values)
        if not all(INT_RE.match(v) or HEX_RE.match(v) for v in values) or (
            pa.types.is_integer(table.column(name).type) and not hex_
        ):
            del widened[name]  # real floats (1e19), or decimal integers of int64: as inferred
            continue
        fits = all(0 <= parse_int(v) < 1 << 64 for v in values)
        widened[name] = "uint64" if fits else "string"
        notes.append(big_note(name, widened[name], hex_))
    return notes


HEX_RE = re.compile(r"^\s*0[xX][0-9a-fA-F]+\s*$")


def parse_int(v: str) -> int:
    """An integer of INT_RE or HEX_RE."""
    return int(v, 16) if HEX_RE.match(v) else int(v)


def big_note(name: str, read_as: str, hexadecimal: bool = False) -> str:
    """The note on column ``name`` of integers beyond int64 (or hexadecimal), read as ``read_as``
    (uint64 or string)."""
    what = "uint64" if read_as == "uint64" else "text, exact"
    if hexadecimal:
        return (
            f"column '{name}' holds hexadecimal integers: read as {what} (int64 would wrap those past 2**63 to "
            f"negative numbers; --column-type {name}=... chooses)"
        )
    return f"column '{name}' holds integers beyond int64: read as {what} (float64 would round them; --column-type {name}=... chooses)"


def wrapped_hex(table, names: list[str]) -> dict[str, str]:
    """Of int64 columns ``names`` (``table``: a piece with them read as text), those holding a
    hexadecimal integer of 2**63 or more (which int64 wraps), and the type each is read as: uint64
    when every value is an integer from 0 to 2**64 - 1, else text."""
    found = {}
    for name in names:
        values = [v.strip() for v in table.column(name).to_pylist() if v]
        if any(HEX_RE.match(v) and parse_int(v) >= 1 << 63 for v in values):
            fits = all((INT_RE.match(v) or HEX_RE.match(v)) and 0 <= parse_int(v) < 1 << 64 for v in values)
            found[name] = "uint64" if fits else "string"
    return found
