"""Columns named by a selection: a name, a range ``first:last`` (every column from ``first`` to
``last`` inclusive, in the input's order) or a shell pattern (``c*``, ``pixel_??``), in the input's
order. ``--stack-columns`` and ``--column-type`` take the same selections, through this one matcher.
"""

from __future__ import annotations

import fnmatch

from .errors import OptionsError, SchemaError

PATTERN_CHARS = "*?["


def is_pattern(sel: str) -> bool:
    return any(c in sel for c in PATTERN_CHARS)


def select(names: list[str], sel: str, flag: str = "--stack-columns") -> list[str]:
    """The columns a selection names, in input order (empty when none). A selection that is a
    column's own name is that column, whatever characters it holds."""
    if sel in names:
        return [sel]
    first, colon, last = sel.partition(":")
    if colon and first in names and last in names:
        a, b = names.index(first), names.index(last)
        return names[a : b + 1] if a <= b else []
    if colon and not is_pattern(sel):
        missing = first if first not in names else last
        raise OptionsError(f"{flag}: no column '{missing}'", hint="the range FIRST:LAST names two columns")
    return [n for n in names if fnmatch.fnmatchcase(n, sel)]


def some(names: list[str]) -> str:
    """The first few of ``names``, for a message."""
    return ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")


class ColumnTypes:
    """``--column-type SELECTION=TYPE``: a column's own name wins over a range or pattern; two ranges
    or patterns that give one column different types are an error."""

    def __init__(self, types: dict[str, str]) -> None:
        self.types = dict(types)

    def __bool__(self) -> bool:
        return bool(self.types)

    def resolve(self, names: list[str], source: str, what: str = "column", strict: bool = True) -> dict[str, str]:
        """Every column of ``names`` a selection types, with its type; a selection that matches no
        column is a SchemaError naming ``source`` (``strict``), or types nothing."""
        out: dict[str, str] = {}
        by: dict[str, str] = {}
        for sel, t in self.types.items():
            if sel in names:
                out[sel] = t
                by[sel] = sel
        for sel, t in self.types.items():
            if sel in names:
                continue
            try:
                matched = select(names, sel, "--column-type")
            except OptionsError:
                if strict:
                    raise
                matched = []
            if not matched and strict:
                what_ = f"no {what} '{sel}'" if not is_pattern(sel) and ":" not in sel else f"no {what} matches '{sel}'"
                raise SchemaError(f"--column-type {sel}=...: {what_} in {source}", hint=f"{what}s are {some(names)}")
            for n in matched:
                if by.get(n) == n:
                    continue  # its own name wins
                if n in out and out[n] != t:
                    raise OptionsError(
                        f"--column-type: column '{n}' is {out[n]} by {by[n]} and {t} by {sel}",
                        hint="make the selections not overlap, or give the column by its own name",
                    )
                out[n], by[n] = t, sel
        return out

    def get(self, name: str) -> str | None:
        """The type of a column met on its own (a JSON Lines key): its own name, else the first
        pattern that matches it (ranges need every column: they are resolved with :meth:`resolve`)."""
        if name in self.types:
            return self.types[name]
        for sel, t in self.types.items():
            if is_pattern(sel) and fnmatch.fnmatchcase(name, sel):
                return t
        return None


class TypeLookup(dict):
    """``--column-type`` for keys met one by one (JSON Lines): the names given, whose ``get`` and
    ``in`` also match the patterns given (iterating gives the names only)."""

    def __init__(self, types: dict[str, str]) -> None:
        super().__init__({k: v for k, v in types.items() if not is_pattern(k)})
        self.patterns = [(k, v) for k, v in types.items() if is_pattern(k)]

    def get(self, name, default=None):
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        for sel, t in self.patterns:
            if fnmatch.fnmatchcase(name, sel):
                return t
        return default

    def __contains__(self, name) -> bool:
        return self.get(name) is not None

    def __getitem__(self, name):
        t = self.get(name)
        if t is None:
            raise KeyError(name)
        return t
