"""CSV tables wider than :data:`MAX_COLUMNS` columns: refused as their header is counted, or, with
``--stack-columns``, read as one matrix of numbers whose stacked columns are slices of it.

Past some width, what every column costs (a name, a schema entry, the CSV parser's state, a
writer's chunk) outweighs any memory budget: a header of 1,000,000 names held as Python strings
and fields is hundreds of MiB before a row is read, and pyarrow's CSV reader keeps state per
column. So a header is counted as bytes (delimiters outside quotes), and one with more than
``MAX_COLUMNS`` fields is refused in one line naming the fix, unless ``--stack-columns`` makes
it narrow. Then the header stays bytes (the fields' offsets in a NumPy array); selections are
resolved on it (a range by finding its two names, a pattern by matching each name once); every
piece of rows is parsed as one column of numbers (see ``CsvReader._one_column``) into a
``[rows, columns]`` matrix, and each stacked column is a slice of it (a copy of a run of columns),
so no step pays per column per batch.

``MAX_COLUMNS`` is 100,000: a table that wide needs about 1.2 GiB for its per-column floors alone
(``jobs/convert.check_memory``: 8 KiB read, 4 KiB or more written, per column), and the tables
seen wider than that (genotype matrices, one-hot vocabularies) are matrices of one type, which are
what ``--stack-columns`` is for.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, OptionsError, SchemaError
from ..schema import MAX_COLUMNS

__all__ = [
    "MAX_COLUMNS",
    "WideHeader",
    "bad_rows",
    "count_fields",
    "generated_header",
    "not_numbers",
    "plan",
    "too_wide",
]


def count_fields(header: bytes, delimiter: str) -> int:
    """The fields of a header line (delimiters outside double quotes, plus one)."""
    arr = np.frombuffer(header, dtype=np.uint8)
    seps = np.flatnonzero(arr == ord(delimiter))
    quotes = np.flatnonzero(arr == 34)
    if len(quotes):  # a delimiter after an odd number of quotes is inside a quoted field
        inside = np.searchsorted(quotes, seps) % 2 == 1
        return int(np.count_nonzero(~inside)) + 1
    return len(seps) + 1


def too_wide(name: str, count: int, line: bytes, delimiter: str, header: bool) -> InputError:
    """The refusal of a table of ``count`` > MAX_COLUMNS fields in its first ``line`` (its header,
    or with ``header`` False its first row), naming its first and last columns for the fix."""
    if header:
        cut = line.split(delimiter.encode(), 1)[0], line.rsplit(delimiter.encode(), 1)[-1]
        first, last = (c.strip(b'"').decode("utf-8", "replace")[:40] for c in cut)
        what = f"the header has {count} columns"
    else:
        first, last, what = "f0", f"f{count - 1}", f"the first row has {count} fields"
    return InputError(
        f"{name}: {what}, more than {MAX_COLUMNS} (each column costs memory before any row is read)",
        hint=f"convert or shard it with --stack-columns NAME=FIRST:LAST (e.g. x={first}:{last} for every column), "
        "which reads the table as one matrix of numbers",
    )


def generated_header(count: int, names: list[str] | None, name: str) -> WideHeader:
    """The header of a table without one: ``--column-names``, or f0, f1, ... as for any CSV read
    with ``--no-header`` (joined by NUL, which no name holds)."""
    if names is not None and len(names) != count:
        raise SchemaError(
            f"{name}: --column-names gives {len(names)} names, the first row has {count} fields",
            hint="give one name per column",
        )
    text = "\x00".join(names if names is not None else map("f{}".format, range(count)))
    return WideHeader(text.encode("utf-8"), "\x00", name)


class WideHeader:
    """A header kept as its bytes and the offsets of its fields (unquoted names only)."""

    def __init__(self, text: bytes, delimiter: str, name: str) -> None:
        if b'"' in text:
            raise InputError(
                f"{name}: a header of more than {MAX_COLUMNS} columns with quoted names",
                hint="write the header without quotes to read the table as one matrix",
            )
        self.text = text
        arr = np.frombuffer(text, dtype=np.uint8)
        seps = np.flatnonzero(arr == ord(delimiter))
        self.starts = np.concatenate([[0], seps + 1]).astype(np.int64)
        self.ends = np.concatenate([seps, [len(text)]]).astype(np.int64)

    def __len__(self) -> int:
        return len(self.starts)

    def name(self, i: int) -> str:
        return self.text[int(self.starts[i]) : int(self.ends[i])].decode("utf-8")

    def find(self, name: str) -> int | None:
        """The first column named ``name``."""
        needle = name.encode("utf-8")
        pos = self.text.find(needle)
        while pos >= 0:
            i = int(np.searchsorted(self.starts, pos, side="right")) - 1
            if self.starts[i] == pos and self.ends[i] == pos + len(needle):
                return i
            pos = self.text.find(needle, pos + 1)
        return None

    def matching(self, pattern: str) -> np.ndarray:
        """The columns whose names match the shell pattern, in order."""
        rx = re.compile(fnmatch.translate(pattern).encode("utf-8"))
        text, starts, ends = self.text, self.starts.tolist(), self.ends.tolist()
        return np.array(
            [i for i, (a, b) in enumerate(zip(starts, ends, strict=True)) if rx.match(text, a, b)], dtype=np.int64
        )


@dataclass
class Group:
    name: str
    columns: np.ndarray  # positions in the header, in order
    run: tuple[int, int] | None  # (first, stop) when they are a run of columns


def plan(header: WideHeader, specs: list[str], source: str) -> tuple[list[Group], np.ndarray]:
    """The stacked groups of ``--stack-columns`` specs (as transforms.stack reads them) and the
    positions of the columns left as they are."""
    from ..transforms.stack import parse

    taken = np.zeros(len(header), dtype=bool)
    groups: list[Group] = []
    for spec in specs:
        name, sel = parse(spec)
        first, colon, last = sel.partition(":")
        a = header.find(first) if colon else None
        b = header.find(last) if colon else None
        if colon and a is not None and b is not None:
            cols = np.arange(a, b + 1, dtype=np.int64) if a <= b else np.empty(0, np.int64)
        elif colon and not any(c in sel for c in "*?["):
            missing = first if a is None else last
            raise OptionsError(f"--stack-columns: no column '{missing}'", hint="the range FIRST:LAST names two columns")
        else:
            cols = header.matching(sel)
        if not len(cols):
            raise OptionsError(f"--stack-columns {spec}: no column matches {sel!r}", hint="check the names")
        if taken[cols].any():
            m = header.name(int(cols[np.flatnonzero(taken[cols])[0]]))
            raise OptionsError(f"--stack-columns: column '{m}' is in two stacked columns")
        taken[cols] = True
        run = (int(cols[0]), int(cols[-1]) + 1) if int(cols[-1]) - int(cols[0]) == len(cols) - 1 else None
        groups.append(Group(name, cols, run))
    rest = np.flatnonzero(~taken)
    names = [header.name(int(j)) for j in rest[: MAX_COLUMNS + 1]]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise SchemaError(f"{source}: column name '{dup}' appears twice in the header", hint="rename one of them")
    if len(rest) + len(groups) > MAX_COLUMNS:
        raise SchemaError(
            f"{source}: {len(rest)} columns are left unstacked, more than {MAX_COLUMNS}",
            hint="stack them too with --stack-columns",
        )
    return groups, rest


def _row(row0: int | None, k: int) -> str:
    return f", row {row0 + k + 1}" if row0 is not None else ""


def not_numbers(values, ncols: int, header: WideHeader, name: str, row0: int | None) -> InputError:
    """The error for a piece of a matrix table whose values are not all numbers (``values``: its
    values as one column of strings, row by row; ``row0``: the rows before it, when known)."""
    step = 1 << 16  # (a slice at a time: a piece's millions of values as Python strings would be GiBs)
    for at in range(0, len(values), step):
        for k, v in enumerate(values.slice(at, step).to_pylist(), at):
            try:
                float(v)
            except (TypeError, ValueError):
                col = header.name(k % ncols)
                return InputError(
                    f"{name}{_row(row0, k // ncols)}, column '{col}': {str(v)[:40]!r} is not a number",
                    hint=f"the columns of a table wider than {MAX_COLUMNS} are read as one matrix of numbers: "
                    "fix the value",
                )
    return InputError(f"{name}: a value is not a number", hint="fix the file")


def bad_rows(piece: bytes, ncols: int, delimiter: str, name: str, row0: int | None) -> InputError:
    """The error for a piece of a matrix table whose lines do not each hold ``ncols`` plain fields."""
    if b'"' in piece:
        return InputError(
            f"{name}: quoted values in a table wider than {MAX_COLUMNS} columns",
            hint="write the values without quotes to read the table as one matrix",
        )
    rows = [line for line in piece.split(b"\n") if line.strip(b"\r")]
    for k, line in enumerate(rows):
        got = line.count(delimiter.encode()) + 1
        if got != ncols:
            return InputError(
                f"{name}{_row(row0, k)}: {got} fields in a table of {ncols} columns",
                hint="every row must have the header's number of fields",
            )
    return InputError(f"{name}: rows that cannot be read as one matrix", hint="check the file and --delimiter")
