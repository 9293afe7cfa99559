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

A message names options as the caller spelled them: ``pass --on-overflow clip`` on the command
line, ``pass on_overflow='clip'`` from Python. Messages are written with the CLI's flags; when an
error is shown (:meth:`LovecraftError.one_line`, ``str()``) its text is rendered for the surface in
use (:func:`surface`: the CLI sets ``"cli"``, the library's default is ``"python"``): every
``--flag`` outside backquotes becomes the keyword argument's name (``--column-type`` is
``column_types``), and an option marked with :func:`flag` (or :func:`spelled`) takes the spelling
given for each surface, value included. Rendering at show time, not at raise time, makes an error
raised in a worker process read right in the process that shows it.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator
from typing import Any

SURFACES = ("python", "cli")
_SURFACE: contextvars.ContextVar[str] = contextvars.ContextVar("lovecraft_surface", default="python")
_MARK = re.compile("\x1e([^\x1e\x1f]*)\x1f([^\x1e]*)\x1e")
_NO_VALUE: Any = object()


@contextlib.contextmanager
def surface(name: str) -> Iterator[None]:
    """Errors shown inside the block name options as ``name`` spells them (``"cli"``: flags,
    ``"python"``: keyword arguments)."""
    if name not in SURFACES:
        raise ValueError(f"unknown surface {name!r}")
    token = _SURFACE.set(name)
    try:
        yield
    finally:
        _SURFACE.reset(token)


def spelled(cli: str, python: str) -> str:
    """Text that reads ``cli`` on the command line and ``python`` from Python (rendered by
    :func:`render` when the error is shown)."""
    return f"\x1e{cli}\x1f{python}\x1e"


def flag(name: str, value: Any = _NO_VALUE) -> str:
    """An option (a keyword argument's name, ``on_overflow``) with an optional value, as the caller
    spells it: ``--on-overflow clip`` or ``on_overflow='clip'``."""
    cli = "--" + name.replace("_", "-")
    if value is _NO_VALUE:
        return spelled(cli, name)
    return spelled(f"{cli} {value}", f"{name}={value!r}")


# flags whose keyword argument is not the flag's name, underscored (switches: the keyword as it is set)
KEYWORDS = {
    "column-type": "column_types",
    "no-header": "header=False",
    "quiet": "progress=False",
    "resume": "resume=True",
    "overwrite": "overwrite=True",
}
_FLAG = re.compile(r"(?<![\w'\"-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")


def _keyword(m: re.Match) -> str:
    return KEYWORDS.get(m.group(1), m.group(1).replace("-", "_"))


def _python(text: str) -> str:
    """``--flag``s outside backquotes (a command line to run stays as it is) as keyword names."""
    parts = text.split("`")
    parts[::2] = [_FLAG.sub(_keyword, p) for p in parts[::2]]
    return "`".join(parts)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"


def shown(text: str) -> str:
    """``text`` printable: the bytes of a name that are not UTF-8 (which Python decodes as lone
    surrogates, ``caf\\udce9``) as ``\\xNN`` (``caf\\xe9``, as ``ls -b`` shows them)."""
    return _SURROGATE.sub(_escaped, text)


def render(text: str) -> str:
    """``text`` (written for the command line, options marked by :func:`flag`) spelled for the
    surface in use."""
    cli = _SURFACE.get() == "cli"
    if cli and "\x1e" not in text:
        return text
    out: list[str] = []
    at = 0
    for m in _MARK.finditer(text):
        plain = text[at : m.start()]
        out.append(plain if cli else _python(plain))
        out.append(m.group(1) if cli else m.group(2))
        at = m.end()
    rest = text[at:]
    out.append(rest if cli else _python(rest))
    return "".join(out)


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
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.one_line()

    def __reduce__(self):
        # raised in worker processes and re-raised in the driver: rebuilt from its attributes
        # (subclasses take other arguments than the message)
        return _rebuild, (type(self), dict(self.__dict__), self.args)

    def one_line(self) -> str:
        """The message and its hint on one line, options spelled for the surface in use."""
        text = self.message
        if self.hint:
            text = f"{text}; {self.hint}"
        return shown(" ".join(render(text).split()))

    def without_where(self) -> str:
        """The message and hint without the file it names (for reports that name the file apart)."""
        text = f"{self.detail}; {self.hint}" if self.hint else self.detail
        return shown(" ".join(render(text).split()))


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
            hint=f"scale the data, keep a wider type, or pass {flag('on_overflow', 'clip')}",
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


class SlowReadWarning(UserWarning):
    """A read the loader can do, but far slower than another way it names (an exact shuffle of a
    remote dataset larger than its cache reads rows by ranged GETs). Filter it with
    ``warnings.filterwarnings("ignore", category=lovecraft_convert.SlowReadWarning)``."""


class Interrupted(LovecraftError):
    """The run was interrupted (SIGINT/SIGTERM): nothing was committed at the output path (a
    ``shard`` or ``bucket`` run keeps its work beside it, ``.NAME.partial``, for ``resume=True``; the
    message says which). A subclass of :class:`LovecraftError`, not of ``KeyboardInterrupt``: an
    ``except Exception`` around a call catches it too."""

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


UTF8_HINT = f"fix the file or pass {flag('errors', 'replace')}"


def invalid_utf8(e: UnicodeDecodeError, byte: int | None = None, of: str = " of the line") -> str:
    """What an invalid UTF-8 error says (``byte``: its 1-based position, by default in the piece
    decoded); the hint is :data:`UTF8_HINT`."""
    return f"invalid UTF-8 ({e.reason} at byte {e.start + 1 if byte is None else byte}{of})"
