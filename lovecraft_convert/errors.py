"""The library's errors.

Every error a user can cause is a :class:`LovecraftError`. The CLI prints ``Error: <message>`` on one
line and exits with :attr:`LovecraftError.exit_code`; anything else is a bug and keeps its traceback.
Messages name the file, the line or row, the column, and say what to do.
"""

from __future__ import annotations


class LovecraftError(Exception):
    """Root of every error the library raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = self.message
        if self.hint:
            text = f"{text}; {self.hint}"
        return " ".join(text.split())


class InputError(LovecraftError):
    """An input cannot be found, opened, decompressed or parsed."""


class SchemaError(LovecraftError):
    """The input's columns or types do not fit what was asked."""


class OutputError(LovecraftError):
    """The output cannot be written (exists, locked, no space, unsupported type)."""


class OverflowErrorF16(SchemaError):
    """A value does not fit float16."""


class DatasetError(LovecraftError):
    """A dataset directory or its manifest is missing, incomplete or of an unknown version."""


class Interrupted(LovecraftError):
    """The run was interrupted (SIGINT/SIGTERM); nothing was left at the output path."""

    exit_code = 130


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
