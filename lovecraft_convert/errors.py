"""The library's errors.

Every error a user can cause is a :class:`LovecraftError`. The CLI prints ``Error: <message>`` on one
line and exits with :attr:`LovecraftError.exit_code`: 2 for :class:`OptionsError` (the flags or
keyword arguments do not fit together), 1 for everything else the user can fix, 130 when
interrupted. Anything else is a bug and keeps its traceback. Messages name the file, the line or
row, the column, and say what to do.

An error says what it is about in attributes, never only in its text: ``where`` is the file or URI
(with its line, row or column) when it was given apart from the message, ``detail`` the message
without it, and ``kind`` a short word for the kind of problem (``decode``, ``rows``, ``schema``...),
which ``verify`` reports per problem.
"""

from __future__ import annotations


class LovecraftError(Exception):
    """Root of every error the library raises on purpose."""

    exit_code = 1
    kind = "error"

    def __init__(self, message: str, *, hint: str | None = None, where: str | None = None, kind: str | None = None):
        self.detail = message
        self.where = where
        self.message = f"{where}: {message}" if where else message
        self.hint = hint
        if kind is not None:
            self.kind = kind
        super().__init__(self.one_line())

    def __reduce__(self):
        # raised in worker processes and re-raised in the driver: rebuilt from its attributes
        # (subclasses take other arguments than the message)
        return _rebuild, (type(self), dict(self.__dict__), self.args)

    def one_line(self) -> str:
        text = self.message
        if self.hint:
            text = f"{text}; {self.hint}"
        return " ".join(text.split())

    def without_where(self) -> str:
        """The message and hint without the file it names (for reports that name the file apart)."""
        text = f"{self.detail}; {self.hint}" if self.hint else self.detail
        return " ".join(text.split())


class OptionsError(LovecraftError):
    """The options do not fit together (a usage error: exit code 2, as for a bad flag)."""

    exit_code = 2
    kind = "options"


class InputError(LovecraftError):
    """An input cannot be found, opened, decompressed or parsed."""

    kind = "input"


class SchemaError(LovecraftError):
    """The input's columns or types do not fit what was asked."""

    kind = "schema"


class OutputError(LovecraftError):
    """The output cannot be written (exists, locked, no space, unsupported type)."""

    kind = "output"


class OverflowErrorF16(SchemaError):
    """A value does not fit the narrower float type it is cast to (``--dtype``).

    ``row`` is the 1-based row in the input, or None when the caller knows only ``local_row`` (the
    0-based row within a part read by a worker); :meth:`at_row` gives the error placed in the input.
    """

    def __init__(
        self,
        *,
        source: str,
        column: str,
        row: int | None,
        local_row: int,
        value: float,
        target: str,
        limit: float,
        part: int | None = None,
    ) -> None:
        self.source, self.column, self.row, self.local_row = source, column, row, local_row
        self.value, self.target, self.limit, self.part = value, target, limit, part
        where = location(source, row=row, column=column)
        super().__init__(
            f"value {value!r} overflows {target} (max {limit})",
            where=where,
            hint="scale the data, keep a wider type, or pass --on-overflow clip",
        )

    def at_row(self, row: int) -> OverflowErrorF16:
        """The same error at 1-based input row ``row``."""
        return OverflowErrorF16(
            source=self.source,
            column=self.column,
            row=row,
            local_row=self.local_row,
            value=self.value,
            target=self.target,
            limit=self.limit,
            part=self.part,
        )


class DatasetError(LovecraftError):
    """A dataset directory or its manifest is missing, incomplete, damaged or of an unknown version."""

    kind = "dataset"


class DependencyError(LovecraftError):
    """An optional package a feature needs (PyTorch, TensorFlow, ...) is not installed."""

    kind = "dependency"


def need(module: str, what: str, install: str):
    """``module`` imported, or a DependencyError saying that ``what`` needs it and how to install it
    (``import torch`` failing deep in a loader says neither)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if e.name is not None and e.name.split(".")[0] != top:
            raise  # the package is there but broken (one of its own imports is missing): a real error
        raise DependencyError(f"{what} needs {top}, which is not installed", hint=install) from None


class Interrupted(LovecraftError):
    """The run was interrupted (SIGINT/SIGTERM); nothing was left at the output path."""

    exit_code = 130
    kind = "interrupted"


def _rebuild(cls: type, state: dict, args: tuple) -> LovecraftError:
    e = cls.__new__(cls)
    Exception.__init__(e, *args)
    e.__dict__.update(state)
    return e


def location(path: str, *, line: int | None = None, row: int | None = None, column: str | None = None) -> str:
    """Format ``file, line N, column 'c'`` for messages (rows and lines are 1-based)."""
    parts = [path]
    if line is not None:
        parts.append(f"line {line}")
    if row is not None:
        parts.append(f"row {row}")
    if column is not None:
        parts.append(f"column '{column}'")
    return ", ".join(parts)


UTF8_HINT = "fix the file or pass --errors replace"


def invalid_utf8(e: UnicodeDecodeError, byte: int | None = None, of: str = " of the line") -> str:
    """What an invalid UTF-8 error says (``byte``: its 1-based position, by default in the piece
    decoded); the hint is :data:`UTF8_HINT`."""
    return f"invalid UTF-8 ({e.reason} at byte {e.start + 1 if byte is None else byte}{of})"
