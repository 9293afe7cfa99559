"""Checking a format (``verify``): the problems a checker reports (:class:`FileProblem`), the
units it checks (:class:`Unit`), what verify gives it (:class:`CheckContext`), and the
descriptor's checking part (:class:`CheckingPart`: decode a unit completely with the format's own
checksums, the files beside the units, the stray files that matter)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import LovecraftError
from ..manifest import MANIFEST_NAME, file_path
from ..schema import Batch, Schema
from .part import FormatPart


class FileProblem(Exception):
    """A problem found in one file of a dataset: ``verify`` reports it as one line (``kind`` says
    what sort: decode, rows, schema, manifest, ...)."""

    def __init__(self, file: str, message: str, kind: str = "decode") -> None:
        super().__init__(message)
        self.file = file
        self.message = message
        self.kind = kind

    @classmethod
    def of(cls, file: str, e: LovecraftError, kind: str | None = None) -> FileProblem:
        """A library error raised while decoding ``file``, as a problem of that file."""
        return cls(file, e.without_where() if e.where else e.one_line(), kind or _problem_kind(e))


class ColumnFiles(str):
    """The file a unit's ``check_unit`` yields with a batch (its first, for messages about the
    unit), knowing each column's own where the unit keeps a file per column (memmap), so that a
    difference ``verify --against`` finds names the file holding that column."""

    by_column: dict[str, str]

    def __new__(cls, first: str, by_column: dict[str, str]) -> ColumnFiles:
        s = super().__new__(cls, first)
        s.by_column = dict(by_column)
        return s

    def of(self, column: str) -> str:
        return self.by_column.get(column, str(self))


def file_of(file: str, column: str) -> str:
    """The file holding ``column`` of what ``check_unit`` yielded as ``file``."""
    return file.of(column) if isinstance(file, ColumnFiles) else file


@dataclass
class Unit:
    """A shard (or a bucket's shard) as the manifest lists it: rows stored in its files."""

    label: str
    rows: int
    files: list[str]
    stats: dict | None
    bucket: dict | None = None

    @property
    def first(self) -> str:
        """The file a problem of the unit is reported on (the manifest when it lists none)."""
        return self.files[0] if self.files else MANIFEST_NAME


@dataclass
class CheckContext:
    """What a format's checker gets from ``verify``: the dataset directory, its manifest, the
    manifest's entry of every file by path, and the rows to decode per batch for a schema."""

    root: str
    manifest: dict
    info: dict[str, dict]
    budget: int
    step_rows: Any  # Callable[[Schema], int]

    def full(self, path: str) -> str:
        """The full path (or URI) of manifest path ``path``; DatasetError when it leaves the dataset."""
        return file_path(self.root, path)


def _problem_kind(e: LovecraftError) -> str:
    return e.kind if e.kind in ("rows", "schema", "manifest", "bucket") else "decode"


def short(e: BaseException, limit: int = 300) -> str:
    """An exception's text on one line, at most ``limit`` characters."""
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CheckingPart(FormatPart):
    """The descriptor's checking part (the :class:`~.protocols.Checks` protocol), with defaults."""

    def check_unit(self, ctx: CheckContext, unit: Unit, schema: Schema) -> Iterator[tuple[Batch, str]]:
        """Decode every row of ``unit`` with the format's own checks: ``(batch, file)`` pairs, in
        order; raises :class:`FileProblem` at the first problem."""
        raise NotImplementedError

    def checked_unit_file(self, unit: Unit) -> str:
        """The one data file of ``unit`` (formats that write one file per unit); a FileProblem otherwise."""
        mine = [p for p in unit.files if p.endswith(self.extensions)]
        if len(mine) != 1:
            others = ", ".join(unit.files) or "none"
            raise FileProblem(unit.first, f"{unit.label} lists {others}; expected one {self.name} file")
        return mine[0]

    def stat_file(self, ctx: CheckContext, unit: Unit, column: str, key: str) -> str:
        """The file a statistic of ``column`` in ``unit`` is reported on."""
        return unit.first

    def extra_files(self, manifest: dict) -> dict[str, dict] | FileProblem | None:
        """Files the manifest lists outside ``files`` (written by :meth:`finish_dataset`), by path."""
        return None

    def check_extra(self, ctx: CheckContext, path: str) -> list[FileProblem]:
        """Problems of a file of :meth:`extra_files` (its size and hash are checked by verify)."""
        return []

    def stray_reason(self, name: str) -> str | None:
        """Why a file the manifest does not list (``name``: its path in the dataset) would change
        what this format's readers read: ``verify`` reports it as a problem; None: only a warning
        (a README, ``.DS_Store``). By default, a file of the format's own extensions, which a glob
        of the dataset's files would take."""
        if name.endswith(self.extensions):
            return f"a {self.extensions[0]} file: a glob of the dataset's files would take it"
        return None
