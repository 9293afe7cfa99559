"""Inputs: one module per input kind (text, CSV, JSON Lines, JSON arrays, NPY, NPZ, HDF5, Parquet, Arrow,
Hugging Face and lovecraft datasets), each a :class:`~.base.Reader` of bounded
batches that can also split itself into parts for parallel workers.

:func:`open_reader` resolves what the user named (paths, globs, ``-``), detects compression and
kind (:mod:`.kinds` holds the tables), and opens the reader with options sized from the memory
budget.
"""

from __future__ import annotations

import copy
import importlib
import itertools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import OptionsError, SchemaError
from .kinds import InputKind, names, register, unregister

if TYPE_CHECKING:  # pragma: no cover - for annotations only
    from .base import Reader
    from .spec import InputSpec

# Missing values of CSV columns of numbers and booleans besides an empty field: R's NA (palmerpenguins and
# most R exports write it) and what spreadsheets and SQL exports write. pandas, pyarrow and R read them so;
# a text column keeps them as text (NA is also a country code and a name), as pyarrow does.
DEFAULT_NA_VALUES = ("NA", "N/A", "NULL", "null")

__all__ = [
    "DEFAULT_NA_VALUES",
    "InputKind",
    "InputSpec",
    "Part",
    "ReadOptions",
    "Reader",
    "names",
    "open_data",
    "open_reader",
    "paths_or_data",
    "register",
    "unregister",
    "reader_class",
    "resolve_inputs",
]

# Imported on first use: the readers' base needs numpy, and ``lovecraft convert --help`` reads the
# kinds table (kinds.py) through this package without reading anything else.
_LAZY = {
    "Part": ".base",
    "Reader": ".base",
    "ReadOptions": ".base",
    "InputSpec": ".spec",
    "resolve_inputs": ".sources",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def paths_or_data(inputs: Any) -> tuple[list[str] | None, Any]:
    """``(paths, None)`` when ``inputs`` names inputs (a path, a list of them, ``-``), ``(None,
    data)`` when it is data held in memory (:mod:`.memory`): an Arrow stream (anything with
    ``__arrow_c_stream__``), a dict of arrays, a list of them, or an iterable of them (a generator
    is told apart by its first item, which is put back)."""
    if isinstance(inputs, (str, os.PathLike)):
        return [os.fspath(inputs)], None
    if hasattr(inputs, "__arrow_c_stream__") or isinstance(inputs, Mapping):
        return None, inputs
    if isinstance(inputs, (list, tuple)):
        if inputs and isinstance(inputs[0], Mapping):
            return None, inputs
        return [os.fspath(p) if isinstance(p, os.PathLike) else p for p in inputs], None
    try:
        it = iter(inputs)
    except TypeError:
        raise OptionsError(
            f"inputs={inputs!r}: give a path, a list of paths, or data (an Arrow stream, a dict of arrays)"
        ) from None
    first = next(it, None)
    if first is None or not isinstance(first, Mapping):
        return [
            os.fspath(p) if isinstance(p, os.PathLike) else p for p in itertools.chain([first], it) if p is not None
        ], None
    return None, itertools.chain([first], it)


def reader_class(kind: str) -> type[Reader]:
    """The reader class of input kind ``kind`` (built in or registered: :mod:`.kinds`)."""
    from .kinds import reader_of

    found = reader_of(kind)
    if found is None:
        raise OptionsError(f"unknown input format '{kind}'", hint=f"use one of {', '.join(names())}")
    if not isinstance(found, str):
        return found
    module, _, cls = found.partition(":")
    return getattr(importlib.import_module(module), cls)


def open_reader(
    inputs: list[str],
    *,
    budget: int,
    input_format: str | None = None,
    errors: str = "strict",
    header: bool = True,
    delimiter: str | None = None,
    column_types: dict[str, str] | None = None,
    skip_rows: int = 0,
    comment: str | None = None,
    max_expansion: float = 1000.0,
    threads: bool = True,
    columns: list[str] | None = None,
    lenient: bool = False,
    na_values: list[str] | None = None,
    column_names: list[str] | None = None,
    text_column: str | None = None,
    stack_columns: list[str] | None = None,
    resolved: list[InputSpec] | None = None,
    files: dict | None = None,
) -> Reader:
    """The reader of ``inputs`` (all of one kind). ``budget`` is the memory budget the batches are
    sized from (a batch is 1/16 of it); ``threads`` False keeps a reader to one core (in workers).
    ``columns``: the columns that will be used (``--columns``; readers of columnar inputs read only
    those, JSON Lines parses only those keys); ``lenient``: leave out columns no output can hold
    instead of refusing them (``inspect``); ``text_column``: the one of ``columns`` a tokenizer
    reads (an input without it says so). ``na_values`` (CSV): the strings read as missing in columns
    of numbers and booleans besides an empty field (None: :data:`DEFAULT_NA_VALUES`);
    ``column_names`` (CSV): the names of the columns of a file without a header; ``stack_columns``:
    the ``--stack-columns`` specs, which a reader of a table too wide to read column by column
    applies itself (``reader.stacked``); ``resolved``: the inputs as a reader of them already
    resolved them (``reader.specs``; no file is looked at again), instead of ``inputs``. ``files``: the
    options of the files and WebDataset inputs (``--decode``, ``--metadata``...: see
    :func:`~.filedecode.check_options`)."""
    from .sources import resolve_inputs

    if input_format is not None and input_format not in names():
        raise OptionsError(f"unknown input format '{input_format}'", hint=f"use one of {', '.join(names())}")
    specs = [copy.copy(s) for s in resolved] if resolved is not None else resolve_inputs(list(inputs), input_format)
    kinds = {s.format for s in specs}
    if len(kinds) > 1:
        raise SchemaError(f"inputs mix formats ({', '.join(sorted(kinds))})", hint="convert them separately")
    kind = specs[0].format
    cls = reader_class(kind)
    ropts = _read_options(
        cls, budget, errors=errors, header=header, delimiter=delimiter, column_types=column_types,
        skip_rows=skip_rows, comment=comment, max_expansion=max_expansion, threads=threads, columns=columns,
        lenient=lenient, na_values=na_values, column_names=column_names, text_column=text_column,
        stack_columns=stack_columns, files=files,
    )  # fmt: skip
    reader = cls(specs, ropts)
    reader.format = kind
    return reader


def open_data(data: Any, *, budget: int, input_format: str | None = None, **options: Any) -> Reader:
    """The reader of data held in memory (:mod:`.memory`: an Arrow stream, dicts of arrays); the
    keywords are :func:`open_reader`'s (``input_format`` must be None: the data says its kind)."""
    from .memory import MemoryReader

    if input_format is not None:
        raise OptionsError("--input-format names the kind of input files", hint="drop it for in-memory data")
    options.pop("header", None)
    return MemoryReader(data, _read_options(MemoryReader, budget, **options))


def _read_options(
    cls: type[Reader],
    budget: int,
    *,
    errors: str = "strict",
    header: bool = True,
    delimiter: str | None = None,
    column_types: dict[str, str] | None = None,
    skip_rows: int = 0,
    comment: str | None = None,
    max_expansion: float = 1000.0,
    threads: bool = True,
    columns: list[str] | None = None,
    lenient: bool = False,
    na_values: list[str] | None = None,
    column_names: list[str] | None = None,
    text_column: str | None = None,
    stack_columns: list[str] | None = None,
    files: dict | None = None,
):
    """The reader options of :func:`open_reader`'s keywords, refused where reader ``cls`` does
    not take them."""
    from .base import ReadOptions

    column_types = dict(column_types or {})
    if column_types and not cls.takes_column_types:
        raise OptionsError("--column-type applies to CSV, JSON Lines, Parquet, Arrow and Hugging Face inputs only")
    if not cls.takes_csv_syntax:
        for flag, given in (
            ("--skip-rows", skip_rows),
            ("--comment", comment is not None),
            ("--na-values", na_values is not None),
            ("--column-names", column_names is not None),
        ):
            if given:
                raise OptionsError(f"{flag} applies to CSV inputs only")
    if files and not cls.takes_file_options:
        from .filedecode import FileOptions

        flag = FileOptions.from_dict(files).given()[0]
        raise OptionsError(f"{flag} applies to files and webdataset inputs only", hint="or pass --input-format files")
    return ReadOptions(
        batch_bytes=max(1 << 20, budget // 16),
        errors=errors,
        header=header,
        delimiter=delimiter,
        # float16 columns are read as float32 and downcast with the float16 report
        # (a files input keeps float16: its own columns are narrowed by the plan, its sidecar's read as float32)
        column_types={
            k: ("float32" if v == "float16" and not cls.takes_file_options else v) for k, v in column_types.items()
        },
        skip_rows=skip_rows,
        comment=comment,
        na_values=DEFAULT_NA_VALUES if na_values is None else tuple(na_values),
        column_names=list(column_names) if column_names else None,
        max_ratio=max_expansion,
        threads=threads,
        columns=list(columns) if columns else None,
        lenient=lenient,
        text_column=text_column,
        stack_columns=list(stack_columns) if stack_columns else None,
        files=files,
    )
