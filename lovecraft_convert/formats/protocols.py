"""The four small interfaces a format's descriptor offers, one per kind of caller.

A command depends on the one it uses, not on the whole descriptor: ``convert``, ``shard`` and
``bucket`` on :class:`Writes`, ``open_dataset`` and the loaders on :class:`Reads`, ``verify`` on
:class:`Checks`, ``inspect`` on :class:`Describes`. The defaults of each live beside the types it
speaks of (:mod:`.writing`, :mod:`.reading`, :mod:`.checking`, :mod:`.describing`), and
:class:`~.base.OutputFormat` composes the four, so a format subclasses one class and overrides
what differs. ``tests/formats/test_protocols.py`` holds that every registered format offers all four
and that the composite offers nothing outside them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..manifest import Spec
from ..schema import Batch, Field, Schema
from .checking import CheckContext, FileProblem, Unit
from .reading import PartFiles, PartReader
from .writing import Writer


@runtime_checkable
class Writes(Protocol):
    """What writing a dataset needs: the writer of a unit and what the dataset's manifest gets."""

    name: str
    extensions: tuple[str, ...]
    compressions: tuple[str, ...]
    default_compression: str | None
    stem: str
    kinds: tuple[str, ...]
    column_floor: int
    padded_buckets: bool

    def check_compression(self, compression: str | None) -> str | None: ...
    def writer_class(self) -> type[Writer]: ...
    def check_schema(self, schema: Schema, source: str) -> None: ...
    def size_linear(self, compression: str | None) -> bool: ...
    def dataset_extra(self, schema: Schema, unit_extras: list[dict]) -> dict[str, Any]: ...
    def bucket_extra(self, unit_extra: dict) -> dict[str, Any]: ...
    def finish_dataset(self, directory: str, manifest: dict) -> dict[str, Any]: ...


@runtime_checkable
class Reads(Protocol):
    """What reading a dataset needs: the reader of a part, and what its manifest may claim."""

    name: str
    extensions: tuple[str, ...]
    random_access: bool
    variable_as_objects: bool
    manifest_keys: tuple[str, ...]
    manifest_spec: Spec | None

    def storage_dtype(self, field: Field, manifest: dict | None = None) -> np.dtype: ...
    def manifest_problems(self, manifest: dict) -> list[str]: ...
    def check_manifest(self, manifest: dict, where: str) -> None: ...
    def most_rows(self, sizes: list[int], entries: list[dict], schema: Schema, manifest: dict) -> int | None: ...
    def count_problem(
        self, sizes: list[int], entries: list[dict], rows: int, schema: Schema, manifest: dict
    ) -> str | None: ...
    def open_part(self, files: PartFiles, manifest: dict, shared: dict) -> PartReader: ...
    def unit_file(self, files: list[str], where: str) -> str: ...
    def tf_dataset(self, ds, plan, input_context, start: tuple[int, int] = (0, 0)) -> tuple[Any, int] | None: ...


@runtime_checkable
class Checks(Protocol):
    """What ``verify`` needs: every row of a unit decoded with the format's own checks."""

    name: str
    extensions: tuple[str, ...]

    def check_unit(self, ctx: CheckContext, unit: Unit, schema: Schema) -> Iterator[tuple[Batch, str]]: ...
    def checked_unit_file(self, unit: Unit) -> str: ...
    def stat_file(self, ctx: CheckContext, unit: Unit, column: str, key: str) -> str: ...
    def extra_files(self, manifest: dict) -> dict[str, dict] | FileProblem | None: ...
    def check_extra(self, ctx: CheckContext, path: str) -> list[FileProblem]: ...
    def stray_reason(self, name: str) -> str | None: ...


@runtime_checkable
class Describes(Protocol):
    """What ``inspect`` needs: the code that loads a dataset, and files of the format on their own."""

    name: str
    title: str
    reads_remote: bool

    def load_snippets(self, path: str, manifest: dict) -> dict[str, str]: ...
    def claims_file(self, path: str) -> bool: ...
    def inspect_files(self, paths: list[str], *, sample: int | None, max_expansion: float) -> dict[str, Any]: ...
    def format_file_report(self, report: dict[str, Any]) -> str: ...


PROTOCOLS = (Writes, Reads, Checks, Describes)
