"""``--filter EXPR``: which rows are kept, as a small expression over columns.

The language is parsed once by the recursive-descent parser below (never Python's ``eval``) and
checked against the reader's schema before any row is read; each batch is then evaluated
vectorised with ``pyarrow.compute``.

Grammar (lowest precedence first)::

    expr    := or
    or      := and ( "or" and )*
    and     := not ( "and" not )*
    not     := "not" not | compare
    compare := value [ ( "==" | "!=" | "<" | "<=" | ">" | ">=" ) value
                     | [ "not" ] "in" "(" literal ( "," literal )* [ "," ] ")" ]
    value   := [ "-" ] NUMBER | STRING | "true" | "false" | column
             | FUNCTION "(" column ")" | "(" expr ")"
    column  := NAME | `any name in backquotes`

NAME is letters, digits, ``_`` and ``.`` (``meta.lang``, a JSON Lines key), not starting with a
digit; STRING is ``"..."`` or ``'...'`` with ``\\`` escapes; the functions are ``len`` (characters
of a string, bytes of a binary value, elements of a sequence), ``isnan``, ``isnull`` (a missing
value, NaN included) and ``lower``/``upper``. A comparison with a missing value (null, or a NaN,
which is how a missing number is held) is false, and so is its negation (SQL's rule): a row is kept
only when the expression is true.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import OptionsError, SchemaError
from ..schema import BINARY, SEQUENCE, STRING, STRING_LIST, Batch, Schema

COMPARE = ("==", "!=", "<=", ">=", "<", ">")
FUNCTIONS = ("len", "isnan", "isnull", "lower", "upper")
KEYWORDS = ("and", "or", "not", "in", "true", "false")
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<quoted>`[^`]+`)
    | (?P<name>[A-Za-z_][A-Za-z0-9_.]*)
    | (?P<op>==|!=|<=|>=|<|>|\(|\)|,|-)
    )""",
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}


@dataclass
class Node:
    """One node of the parsed expression: ``op`` (``col``, ``lit``, ``call``, a comparison, ``in``,
    ``not in``, ``and``, ``or``, ``not``), its ``args``, and ``at``: its 0-based position in the
    text (for messages)."""

    op: str
    args: tuple
    at: int


class Filter:
    """A parsed ``--filter`` expression: :meth:`check` it against a schema, then :meth:`mask` batches."""

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text.strip():
            raise OptionsError("--filter: give an expression, e.g. 'len(text) >= 200 and lang == \"en\"'")
        self.text = text
        self._tokens = _tokenize(text)
        self._i = 0
        self.root = self._expr()
        if self._i < len(self._tokens):
            kind, value, at = self._tokens[self._i]
            self.fail(at, f"unexpected {_shown(kind, value)}", "join conditions with and / or")
        self.schema: Schema | None = None

    # -- messages ---------------------------------------------------------------------------------

    def fail(self, at: int, what: str, hint: str | None = None, cls: type = OptionsError):
        """Raise the one-line error of this expression at ``at`` (0-based; shown 1-based)."""
        raise cls(f"--filter {self.text!r}: {what} at position {at + 1}", hint=hint)

    # -- the parser ----------------------------------------------------------------------------------

    def _peek(self) -> tuple[str, str, int]:
        if self._i < len(self._tokens):
            return self._tokens[self._i]
        return ("end", "", len(self.text))

    def _next(self) -> tuple[str, str, int]:
        tok = self._peek()
        self._i += 1
        return tok

    def _is(self, value: str) -> bool:
        kind, v, _ = self._peek()
        return kind in ("op", "name") and v == value

    def _expect(self, value: str, hint: str | None = None) -> None:
        kind, v, at = self._next()
        if not (kind in ("op", "name") and v == value):
            self.fail(at, f"expected '{value}', found {_shown(kind, v)}", hint)

    def _expr(self) -> Node:
        left = self._and()
        while self._is("or"):
            at = self._next()[2]
            left = Node("or", (left, self._and()), at)
        return left

    def _and(self) -> Node:
        left = self._not()
        while self._is("and"):
            at = self._next()[2]
            left = Node("and", (left, self._not()), at)
        return left

    def _not(self) -> Node:
        if self._is("not"):
            at = self._next()[2]
            return Node("not", (self._not(),), at)
        return self._compare()

    def _compare(self) -> Node:
        left = self._value()
        kind, v, at = self._peek()
        if kind == "op" and v in COMPARE:
            self._next()
            return Node(v, (left, self._value()), at)
        negated = False
        if self._is("not"):
            save = self._i
            self._next()
            if not self._is("in"):
                self._i = save
                return left
            negated = True
        if self._is("in"):
            self._next()
            self._expect("(", "list the values in parentheses, e.g. label in (1, 2)")
            items = [self._literal()]
            while self._is(","):
                self._next()
                if self._is(")"):
                    break
                items.append(self._literal())
            self._expect(")", "close the list of values with ')'")
            return Node("not in" if negated else "in", (left, tuple(items)), at)
        return left

    def _number(self, value: int | float, text: str, at: int) -> int | float:
        """An integer literal within int64 (what it is compared as); beyond, one line (it was a
        traceback: OverflowError from pyarrow's scalar)."""
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            self.fail(
                at,
                f"the integer {text} is beyond the 64-bit integers",
                hint=f"write it as a float to compare it as one ({float(value)!r})",
            )
        return value

    def _literal(self) -> Node:
        node = self._value()
        if node.op != "lit":
            self.fail(node.at, "the values after 'in' must be numbers or strings")
        return node

    def _value(self) -> Node:
        kind, v, at = self._next()
        if kind == "op" and v == "-":
            k2, v2, _ = self._next()
            if k2 != "num":
                self.fail(at, "'-' goes before a number")
            return Node("lit", (self._number(-_number(v2), "-" + v2, at),), at)
        if kind == "num":
            return Node("lit", (self._number(_number(v), v, at),), at)
        if kind == "str":
            return Node("lit", (_unescape(v[1:-1]),), at)
        if kind == "quoted":
            return Node("col", (v[1:-1],), at)
        if kind == "op" and v == "(":
            node = self._expr()
            self._expect(")", "close the parenthesis")
            return node
        if kind == "name":
            if v in ("true", "false"):
                return Node("lit", (v == "true",), at)
            if v in KEYWORDS:
                self.fail(at, f"'{v}' where a value was expected", "give a column, a number or a string before it")
            if self._is("("):
                if v not in FUNCTIONS:
                    self.fail(at, f"unknown function '{v}'", f"the functions are {', '.join(FUNCTIONS)}")
                self._next()
                arg = self._value()
                self._expect(")", f"{v}() takes one column")
                return Node("call", (v, arg), at)
            return Node("col", (v,), at)
        if kind == "end":
            self.fail(at, "the expression ends where a value was expected", "complete the condition")
        self.fail(at, f"unexpected {_shown(kind, v)}", "give a column, a number or a string")
        raise AssertionError  # unreachable

    # -- what it reads ---------------------------------------------------------------------------

    @property
    def columns(self) -> list[str]:
        """The columns the expression reads, in the order they appear."""
        out: list[str] = []

        def walk(n: Node) -> None:
            if n.op == "col":
                out.append(n.args[0])
            for a in n.args:
                if isinstance(a, Node):
                    walk(a)
                elif isinstance(a, tuple):
                    for b in a:
                        if isinstance(b, Node):
                            walk(b)

        walk(self.root)
        return list(dict.fromkeys(out))

    def check(self, schema: Schema) -> Filter:
        """Check every column named exists in ``schema`` and every operation fits its type (one
        line naming the expression, the position and the column); returns the filter."""
        self.schema = schema
        kind = self._type(self.root)
        if kind != "bool":
            self.fail(self.root.at, f"the expression is a {kind}, not a condition", "compare it, e.g. x > 0")
        return self

    def _column_type(self, n: Node) -> str:
        name = n.args[0]
        schema = self.schema
        assert schema is not None
        if name not in schema.names:
            shown = ", ".join(schema.names[:50]) + (", ..." if len(schema.names) > 50 else "")
            quoted = "NaN is tested with isnan(COLUMN)" if name.lower() == "nan" else f'text is quoted: "{name}"'
            self.fail(n.at, f"no column '{name}'", f"columns are {shown} ({quoted})")
        f = schema[name]
        if f.kind == STRING:
            return "string"
        if f.kind == BINARY:
            return "binary"
        if f.kind in (SEQUENCE, STRING_LIST) or f.shape:
            return "list"
        if f.logical is not None:
            return "temporal"
        return "bool" if f.np_dtype == np.bool_ else "number"

    def _type(self, n: Node) -> str:
        if n.op == "lit":
            v = n.args[0]
            return "bool" if isinstance(v, bool) else "string" if isinstance(v, str) else "number"
        if n.op == "col":
            return self._column_type(n)
        if n.op == "call":
            fn, arg = n.args
            if arg.op != "col":
                self.fail(arg.at, f"{fn}() takes a column")
            t = self._type(arg)
            want = {
                "len": ("string", "binary", "list"),
                "isnan": ("number",),
                "isnull": ("number", "string", "binary", "list", "bool", "temporal"),
                "lower": ("string",),
                "upper": ("string",),
            }[fn]
            if t not in want:
                self.fail(n.at, f"{fn}() of column '{arg.args[0]}', a {t}", f"{fn}() takes a {' or '.join(want)} column",
                          SchemaError)  # fmt: skip
            return {"len": "number", "isnan": "bool", "isnull": "bool"}.get(fn, "string")
        if n.op in ("and", "or", "not"):
            for a in n.args:
                if self._type(a) != "bool":
                    self.fail(a.at, f"'{n.op}' joins conditions, not a {self._type(a)}", "compare it, e.g. x > 0")
            return "bool"
        if n.op in ("in", "not in"):
            left, items = n.args
            t = self._type(left)
            for it in items:
                self._comparable(t, self._type(it), it.at, left)
            return "bool"
        a, b = n.args
        if {self._type(a), self._type(b)} == {"temporal", "string"} and {a.op, b.op} == {"col", "lit"}:
            col, lit = (a, b) if a.op == "col" else (b, a)  # a date or time written as text: checked now
            lg = self.schema[col.args[0]].logical
            try:
                temporal_value(lit.args[0], lg.type, lg.tz)
            except ValueError as e:
                self.fail(lit.at, f"'{lit.args[0]}' is not a {lg.describe()} for column '{col.args[0]}'", str(e),
                          SchemaError)  # fmt: skip
            return "bool"
        self._comparable(self._type(a), self._type(b), n.at, a if a.op == "col" else b)
        if n.op not in ("==", "!=") and "bool" in (self._type(a), self._type(b)):
            self.fail(n.at, f"'{n.op}' between true/false values", "use == or !=", SchemaError)
        return "bool"

    def _comparable(self, ta: str, tb: str, at: int, about: Node) -> None:
        ok = ta == tb or {ta, tb} <= {"number", "bool"} or {ta, tb} == {"string", "binary"}
        if ok and "list" not in (ta, tb) and "temporal" not in (ta, tb):
            return
        what = f"column '{about.args[0]}' is a {ta if about.op == 'col' else tb}" if about.op == "col" else ""
        hint = "compare len(COLUMN) for a list" if "list" in (ta, tb) else "compare like with like (quote text)"
        if "temporal" in (ta, tb) and "list" not in (ta, tb):
            hint = "write a date or time as quoted ISO 8601 text, e.g. ts > '2020-01-31' (isnull() tests a missing one)"
        self.fail(at, f"cannot compare a {ta} with a {tb}" + (f" ({what})" if what else ""), hint, SchemaError)

    # -- evaluation ------------------------------------------------------------------------------

    def mask(self, batch: Batch) -> np.ndarray:
        """The rows of ``batch`` the expression keeps (a bool array; missing -> not kept)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.schema is None:
            raise AssertionError("Filter.check(schema) must run before mask()")
        arrays: dict[str, Any] = {}
        try:
            out = self._eval(self.root, batch, arrays)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            self.fail(self.root.at, f"cannot be evaluated ({e})", "check the columns' types", SchemaError)
        if not isinstance(out, pa.ChunkedArray | pa.Array):
            return np.full(batch.num_rows, bool(out.as_py() if hasattr(out, "as_py") else out))
        out = pc.fill_null(out, False)
        return np.asarray(out.to_numpy(zero_copy_only=False), dtype=bool)

    def _array(self, name: str, batch: Batch, arrays: dict):
        if name not in arrays:
            from ..arrowconv import to_arrow

            schema = self.schema
            assert schema is not None
            f = schema[name]
            arrays[name] = to_arrow(Batch({name: batch.columns[name]}, batch.num_rows), Schema((f,))).column(0)
        return arrays[name]

    def _eval(self, n: Node, batch: Batch, arrays: dict):
        import pyarrow as pa
        import pyarrow.compute as pc

        if n.op == "lit":
            return pa.scalar(n.args[0])
        if n.op == "col":  # NaN is a missing number: compared, it is null (and the row is not kept)
            a = self._array(n.args[0], batch, arrays)
            if pa.types.is_floating(a.type) and a.null_count < len(a):
                a = pc.if_else(pc.is_nan(a), pa.scalar(None, a.type), a)
            return a
        if n.op == "call":
            fn, arg = n.args
            a = self._array(arg.args[0], batch, arrays)
            t = self._type(arg)
            if fn == "len":
                if t == "string":
                    return pc.utf8_length(a)
                if t == "binary":
                    return pc.binary_length(a)
                if pa.types.is_fixed_size_list(a.type):
                    return pa.array(np.full(len(a), a.type.list_size, dtype=np.int32))
                return pc.list_value_length(a)
            if fn == "isnan":
                return pc.is_nan(a) if pa.types.is_floating(a.type) else pa.array(np.zeros(len(a), dtype=bool))
            if fn == "isnull":
                return pc.is_null(a, nan_is_null=True)
            return pc.utf8_lower(a) if fn == "lower" else pc.utf8_upper(a)
        if n.op == "not":
            return pc.invert(self._eval(n.args[0], batch, arrays))
        if n.op in ("and", "or"):
            a, b = (self._eval(x, batch, arrays) for x in n.args)
            return pc.and_kleene(a, b) if n.op == "and" else pc.or_kleene(a, b)
        if n.op in ("in", "not in"):
            left, items = n.args
            a = self._eval(left, batch, arrays)
            values = [it.args[0] for it in items]
            if isinstance(a, pa.Scalar):
                a = pa.array([a.as_py()] * batch.num_rows)
            if pa.types.is_boolean(a.type) and not all(isinstance(v, bool) for v in values):
                a = pc.cast(a, pa.int64())  # true is 1: `flag in (2)` keeps nothing
            if all(isinstance(v, (int, float)) for v in values) and not pa.types.is_floating(a.type):
                if all(isinstance(v, int) or float(v).is_integer() for v in values):
                    values = [int(v) for v in values]
                else:
                    a = pc.cast(a, pa.float64())
            found = pc.is_in(a, value_set=_value_set(values, a.type))
            found = pc.if_else(pc.is_null(a), pa.scalar(None, pa.bool_()), found)
            return pc.invert(found) if n.op == "not in" else found
        a, b = (self._eval(x, batch, arrays) for x in n.args)
        a, b = _aligned(a, b)
        fn = {"==": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
              ">=": pc.greater_equal}[n.op]  # fmt: skip
        return fn(a, b)


def _value_set(values: list, t):
    import pyarrow as pa

    try:
        return pa.array(values, type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array(values)


def _aligned(a, b):
    """Make a binary column comparable with a string literal, a date or time column with an ISO
    8601 one (and a NaN-free number with a bool)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for x, y in ((a, b), (b, a)):
        t = x.type
        if (pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t)) and isinstance(y, pa.Scalar):
            kind = "timestamp" if pa.types.is_timestamp(t) else "date" if pa.types.is_date(t) else "time"
            y2 = pa.scalar(temporal_value(y.as_py(), kind, getattr(t, "tz", None)), t)
            return (x, y2) if x is a else (y2, x)
        if pa.types.is_binary(x.type) and pa.types.is_string(y.type) and isinstance(y, pa.Scalar):
            y2 = pa.scalar(y.as_py().encode(), pa.binary())
            return (x, y2) if x is a else (y2, x)
        # Arrow has no kernel comparing a bool with a number: the bool side becomes 0 or 1 of the
        # number's type (true == 1, as the language promises numbers and booleans compare)
        if pa.types.is_boolean(x.type) and (pa.types.is_integer(y.type) or pa.types.is_floating(y.type)):
            x2 = pc.cast(x, y.type)
            return (x2, y) if x is a else (y, x2)
    return a, b


def temporal_value(text: str, kind: str, tz: str | None = None):
    """The Python value of ISO 8601 ``text`` for a column of ``kind`` (``date``: 2020-01-31;
    ``time``: 12:30:00; ``timestamp``: 2020-01-31 or 2020-01-31T12:30:00, with an offset or ``Z``
    only for a column with a time zone ``tz``, where a time without one is in that zone); a
    ValueError saying what to write otherwise."""
    import datetime as dt

    examples = {"date": "'2020-01-31'", "time": "'12:30:00'", "timestamp": "'2020-01-31' or '2020-01-31T12:30:00'"}
    if kind not in examples:
        raise ValueError(f"a {kind} column is not compared with text")
    try:
        if kind == "date":
            return dt.date.fromisoformat(text)
        if kind == "time":
            return dt.time.fromisoformat(text)
        v = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"write an ISO 8601 {kind}, e.g. {examples[kind]}") from None
    if tz is None:
        if v.tzinfo is not None:
            raise ValueError("the column's times have no time zone: write the time without an offset")
        return v
    return v if v.tzinfo is not None else v.replace(tzinfo=_zone(tz))


def _zone(tz: str):
    """A column's time zone (a name such as Europe/Paris, UTC, or an offset such as +02:00)."""
    import datetime as dt

    m = re.fullmatch(r"([+-])(\d\d):?(\d\d)", tz)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        return dt.timezone(sign * dt.timedelta(hours=int(m.group(2)), minutes=int(m.group(3))))
    if tz.upper() in ("UTC", "Z"):
        return dt.UTC
    from zoneinfo import ZoneInfo

    return ZoneInfo(tz)


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    out = []
    pos = 0
    n = len(text)
    while pos < n:
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.lastgroup is None:
            at = len(text) - len(text[pos:].lstrip())
            ch = text[at]
            if ch in "\"'":
                raise OptionsError(
                    f"--filter {text!r}: a string not closed at position {at + 1}", hint=f"end it with {ch}"
                )
            if ch == "=":
                raise OptionsError(f"--filter {text!r}: unexpected '=' at position {at + 1}", hint="compare with ==")
            if ch == "`":
                raise OptionsError(f"--filter {text!r}: a `name` not closed at position {at + 1}", hint="end it with `")
            raise OptionsError(f"--filter {text!r}: unexpected '{ch}' at position {at + 1}",
                               hint="use columns, numbers, \"strings\", comparisons, in (...), and/or/not")  # fmt: skip
        kind = m.lastgroup
        out.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    return out


def _number(text: str) -> int | float:
    return float(text) if any(c in text for c in ".eE") else int(text)


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), s)


def _shown(kind: str, value: str) -> str:
    return "the end of the expression" if kind == "end" else f"'{value}'"
