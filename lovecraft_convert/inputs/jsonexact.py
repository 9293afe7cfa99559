"""The exact JSON Lines parser: Python's ``json``, line by line.

It reads the first records of an input (to infer types), and any piece of input the fast parser
(``pyarrow.json``) refuses or cannot be trusted with: a broken line, a value of a kind the column
has not held yet, NaN/Infinity, duplicate keys, numbers in a text column. It knows the line of
every value, so its errors name the file, the line and the key. Numbers keep their JSON text
(a text column holds ``1.50`` as written), and it decides, per value, what the fast parser
cannot: whether an integer literal is beyond 2**53 or int64.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable

import numpy as np

from ..errors import UTF8_HINT, invalid_utf8
from ..schema import MAX_COLUMNS, Logical
from .jsontypes import (
    EXACT,
    INT64_MAX,
    INT64_MIN,
    Col,
    arrow_type,
    describe_flags,
    json_text,
    null_hint,
    problem,
    read_kind,
    union,
    word,
)


class JInt(str):
    """An integer's JSON text."""

    __slots__ = ()


class JFloat(str):
    """A number's JSON text (with a fraction or an exponent)."""

    __slots__ = ()


class JConst(str):
    """NaN, Infinity or -Infinity: Python's json reads them, RFC 8259 has no such values."""

    __slots__ = ()


_DECODER = json.JSONDecoder(parse_int=JInt, parse_float=JFloat, parse_constant=JConst)
_SURROGATE = re.compile("[\ud800-\udfff]")
_KINDS = {"array": list, "string": str, "number": (JInt, JFloat), "true/false": bool, "null": type(None)}


class LineError(Exception):
    """A problem at a line (``key`` None: the whole line)."""

    def __init__(self, line: int, key: str | None, message: str, hint: str) -> None:
        super().__init__(message)
        self.line, self.key, self.message, self.hint = line, key, message, hint


class Parsed:
    """The records of some lines: kept values by column, the line of each record, and the state
    every column reached (``states``; new columns in ``new``)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.lines: list[int] = []
        self.states: dict[str, str] = {}
        self.new: dict[str, tuple[str, ...]] = {}
        self.present: dict[str, int] = {}  # records holding the key (null or not)
        self.lines_read = 0


class ExactParser:
    """Parses lines against the reader's columns ``cols`` (name -> Col).

    ``mode`` is ``records`` (every line an object) or ``values`` (no line an object: one column
    ``value``); ``selected`` (None: every key) limits the kept keys; ``errors`` is strict|replace.
    """

    def __init__(
        self, cols: dict[str, Col], mode: str, selected: set[str] | None, errors: str, fixed: dict[str, str]
    ) -> None:
        self.cols = cols
        self.mode = mode
        self.selected = selected
        self.errors = errors
        self.fixed = fixed
        self.keys: dict[str, None] | None = None  # keys met but not kept (set to a dict to list them)
        self.refresh()

    def refresh(self) -> None:
        """Recompute what is derived from the columns (after the reader added or widened some)."""
        known = [c for c in self.cols.values() if c.path is not None]
        self.leaf = {c.path: c.name for c in known if c.flags != "O"}
        self.objects = {c.path[:i] for c in known for i in range(1, len(c.path))}
        self.objects.update(c.path for c in known if c.flags == "O")
        if self.selected is not None:
            # keys are matched by name, so a selected "a.b" is a top-level key "a.b" or b inside a
            self.into = {s[:i] for s in self.selected for i, ch in enumerate(s) if ch == "."}

    # -- lines ----------------------------------------------------------------------------------

    def parse(self, piece: bytes, line0: int) -> Parsed:
        """The lines of ``piece`` (whole lines; ``line0`` lines before it in the input)."""
        out = Parsed()
        states = out.states
        lines = piece.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        out.lines_read = len(lines)
        for i, raw in enumerate(lines):
            line = line0 + i + 1
            if not raw.strip(b" \t\r"):
                continue
            value = self._decode(raw, line, i == 0 and line0 == 0)
            row: dict = {}
            if self.mode == "values":
                if type(value) is dict:
                    raise LineError(
                        line,
                        None,
                        "an object, where the first line holds a value that is not one",
                        "every line holds an object, or none does",
                    )
                self._leaf(("value",), "value", value, row, states, out, line)
            else:
                if type(value) is not dict:
                    raise LineError(
                        line,
                        None,
                        f"{_kind_name(value)}, not an object: each line of a JSON Lines input holds one object",
                        "fix the line (an input where no line holds an object is read as one column 'value')",
                    )
                self._walk(value, (), row, states, out, line)
            out.rows.append(row)
            out.lines.append(line)
        n = len(out.rows)
        for name, col in self.cols.items():  # a missing key is a null
            if col.fixed is None and out.present.get(name, 0) < n and states.get(name, col.flags) != "O":
                before = states.get(name, col.flags)
                state = union(before, "N")
                if state != before and state is not None:
                    bad = problem(state)
                    if bad is not None:
                        i = next(i for i, r in enumerate(out.rows) if name not in r)
                        raise LineError(out.lines[i], name, bad[0], bad[1].format(key=name))
                    states[name] = state
        return out

    def _decode(self, raw: bytes, line: int, first: bool):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if self.errors != "replace":
                raise LineError(
                    line,
                    None,
                    invalid_utf8(e),
                    UTF8_HINT,
                ) from None
            text = raw.decode("utf-8", "replace")
        try:
            return _DECODER.decode(text)
        except json.JSONDecodeError as e:
            hint = "fix the line"
            if first and text.strip() == "[":
                hint = "this looks like a JSON array, not JSON Lines: pass --input-format json (or name the file .json)"
            elif first and text.strip() == "{":
                hint = "this looks like one JSON document over many lines, not JSON Lines: write one object per line (e.g. jq -c '.[]')"
            at = "" if e.msg.endswith(" at") else " at"  # ("Unterminated string starting at")
            raise LineError(line, None, f"not valid JSON ({e.msg}{at} character {e.colno})", hint) from None
        except RecursionError:
            raise LineError(line, None, "not readable JSON (nested too deeply)", "flatten the record") from None

    # -- keys -----------------------------------------------------------------------------------

    def _walk(self, obj: dict, path: tuple[str, ...], row: dict, states: dict, out: Parsed, line: int) -> None:
        sel = self.selected
        prefix = ".".join(path) + "." if path else ""
        for key, value in obj.items():
            name = prefix + key
            if sel is not None and name not in sel and name not in self.into:
                if self.keys is not None and len(self.keys) < 1000:
                    self.keys.setdefault(name)
                continue
            p = (*path, key)
            if type(value) is dict:
                if p in self.leaf:
                    col = self.cols[self.leaf[p]]
                    flags = states.get(col.name, col.flags)
                    if flags in ("", "N") and col.fixed is None:  # only nulls so far: the key is an object
                        states[col.name] = "O"
                        out.present[col.name] = len(out.rows) + 1  # (no null to add for it)
                        del self.leaf[p]
                        self.objects.add(p)
                        self._walk(value, p, row, states, out, line)
                        continue
                    raise LineError(
                        line,
                        name,
                        f"an object, where earlier lines hold {describe_flags(flags) if flags else 'values'}",
                        "give the key one shape, or leave it out with --columns",
                    )
                if sel is not None and name in sel and name not in self.into:
                    raise LineError(line, name, "holds an object", f"select the keys inside it ({name}.KEY)")
                if name in self.fixed:
                    raise LineError(
                        line, name, "holds an object", f"--column-type takes the keys inside it ({name}.KEY)"
                    )
                self._walk(value, p, row, states, out, line)
            elif p in self.objects:
                if value is not None:
                    raise LineError(
                        line,
                        name,
                        f"{_kind_name(value)}, where earlier lines hold an object",
                        "give the key one shape, or leave it out with --columns",
                    )
            elif sel is None or name in sel:
                self._leaf(p, name, value, row, states, out, line)

    def _leaf(self, p: tuple[str, ...], name: str, value, row: dict, states: dict, out: Parsed, line: int) -> None:
        col = self.cols.get(name)
        if col is None or col.path != p:
            if col is not None and col.path is not None:
                raise LineError(
                    line,
                    name,
                    "two keys make this column name (a key holding dots, and nested keys)",
                    "rename one of them, or leave it out with --columns",
                )
            if col is None:
                _check_key(name, line, self.errors)
                if len(self.cols) >= MAX_COLUMNS:
                    raise LineError(
                        line,
                        name,
                        f"a key beyond the first {MAX_COLUMNS} of the input (each key is a column)",
                        "keep such data in fewer keys, or select keys with --columns",
                    )
                col = Col(name, p, fixed=self.fixed.get(name))
                self.cols[name] = col
            col.path = p
            out.new[name] = p
            self.leaf[p] = name
            self.objects.update(p[:i] for i in range(1, len(p)))
        kind = self._kind(value, name, line, col.fixed)
        row[name] = value
        out.present[name] = out.present.get(name, 0) + 1
        if col.fixed is not None:
            self._fits_fixed(value, kind, col, line)
            return
        before = states.get(name, col.flags)
        state = union(before, kind)
        if state is None:
            raise LineError(
                line,
                name,
                f"{_kind_name(value)}, where earlier lines hold {describe_flags(before)}",
                "give the key one kind of value, or leave it out with --columns",
            )
        if state != before:
            bad = problem(state)
            if bad is not None:
                raise LineError(line, name, bad[0], bad[1].format(key=name))
            states[name] = state

    def _kind(self, value, name: str, line: int, fixed: str | None) -> str:
        t = type(value)
        if t is str:
            if not value.isascii():
                _check_text(value, name, line, self.errors)
            return "S"
        if value is None:
            return "N"
        if t is bool:
            return "B"
        if t is JInt:
            n = int(value)
            return "I" if -EXACT <= n <= EXACT else "J" if INT64_MIN <= n <= INT64_MAX else "K"
        if t is JFloat:
            if fixed != "string" and math.isinf(float(value)):
                raise LineError(
                    line,
                    name,
                    f"{value[:40]} is beyond the float64 range",
                    f"pass --column-type {name}=string to keep its text",
                )
            return "F"
        if t is JConst:
            raise LineError(
                line, name, f"{value} is not JSON (RFC 8259 has no NaN or Infinity)", "write null for a missing value"
            )
        if t is list:
            kinds = set()
            for v in value:
                if type(v) in (list, dict):
                    what = "lists" if type(v) is list else "objects"
                    raise LineError(
                        line,
                        name,
                        f"a list of {what}: only lists of numbers, of strings or of booleans become columns",
                        "leave the key out with --columns",
                    )
                kinds.add(self._kind(v, name, line, None))
            return "[" + "".join(sorted(kinds))
        raise LineError(line, name, f"unexpected value {value!r}", "report this")  # pragma: no cover

    def _fits_fixed(self, value, kind: str, col: Col, line: int) -> None:
        want = col.fixed
        assert want is not None
        if kind.startswith("["):
            raise LineError(line, col.name, f"a list where --column-type says {want}", "fix the value")
        if Logical.parse(want) is not None:  # text: ISO 8601 for a timestamp or date (null: NaT), a category
            if kind in "NS":
                return
            raise LineError(
                line, col.name, f"{json_text(_plain(value))} is not a valid {want} (a string is)", "fix the value"
            )
        if kind == "N":
            if want == "string" or want.startswith("float"):
                return
            raise LineError(line, col.name, f"null (or a missing key) where --column-type says {want}", null_hint(col))
        ok = (
            want == "string"
            or (want == "bool" and kind == "B")
            or (want.startswith("float") and kind in "IJKFB")  # (true/false: 1/0)
            or (want.startswith(("int", "uint")) and kind in "IJK")
        )
        if ok and want.startswith(("int", "uint")):
            info = np.iinfo(np.dtype(want))
            ok = info.min <= int(value) <= info.max
            if not ok:
                raise LineError(
                    line, col.name, f"{value} does not fit {want}", "fix the value or choose another --column-type"
                )
        if ok and want == "float32" and abs(float(value)) > float(np.finfo(np.float32).max):
            raise LineError(line, col.name, f"{value} does not fit {want}", "choose --column-type float64")
        if not ok:
            raise LineError(
                line,
                col.name,
                f"{json_text(_plain(value))} is not a valid {want}",
                "fix the value or choose another --column-type",
            )

    # -- columns --------------------------------------------------------------------------------

    def arrays(self, parsed: Parsed, names: list[str]) -> dict:
        """Arrow arrays of the kept values, read as the columns' current types (after typing found
        nothing to widen)."""
        import pyarrow as pa

        out = {}
        for name in names:
            col = self.cols[name]
            kind = read_kind(col)
            conv = _converter(kind)
            values = [conv(r.get(name)) for r in parsed.rows]
            if kind == "null":
                out[name] = pa.nulls(len(values))
            else:
                out[name] = pa.array(values, type=arrow_type(kind))
        return out


def _converter(kind: str) -> Callable:
    if kind.startswith("list<"):
        elem = _converter(kind[5:-1])
        return lambda v: None if v is None else [elem(e) for e in v]
    if kind in ("int64", "uint64"):
        return lambda v: None if v is None else int(v)
    if kind == "float64":
        return lambda v: None if v is None else float(v)
    if kind == "string":
        return _as_text
    return lambda v: v


def _as_text(v):
    if type(v) is str:
        return v if v.isascii() else _SURROGATE.sub("\ufffd", v)  # lone surrogates (--errors replace)
    if v is None:
        return v
    if v is True:
        return "true"
    if v is False:
        return "false"
    return str.__str__(v)  # a number's JSON text


def _plain(v):
    if type(v) is JInt:
        return int(v)
    if type(v) is JFloat:
        return float(v)
    return v


def _kind_name(value) -> str:
    if type(value) in (JInt, JFloat):
        return "a number"
    for name, t in _KINDS.items():
        if isinstance(value, t):
            return "an array" if name == "array" else f"a {name}" if name != "null" else "null"
    if type(value) is dict:
        return "an object"
    return word(str(type(value)))


def _check_text(s: str, name: str, line: int, errors: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        if errors != "replace":
            raise LineError(
                line,
                name,
                "a \\u escape names a lone surrogate (half of a character), which is not text",
                "fix the file or pass --errors replace",
            ) from None


def _check_key(name: str, line: int, errors: str) -> None:
    if not name.isascii():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise LineError(
                line, None, "a key holds a lone surrogate escape (half of a character)", "fix the file"
            ) from None
