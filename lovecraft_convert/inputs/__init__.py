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
from typing import TYPE_CHECKING

from ..errors import OptionsError, SchemaError
from .kinds import names

if TYPE_CHECKING:  # pragma: no cover - for annotations only
    from .base import Reader
    from .sources import InputSpec

# Missing values of CSV columns of numbers and booleans besides an empty field: R's NA (palmerpenguins and
# most R exports write it) and what spreadsheets and SQL exports write. pandas, pyarrow and R read them so;
# a text column keeps them as text (NA is also a country code and a name), as pyarrow does.
DEFAULT_NA_VALUES = ("NA", "N/A", "NULL", "null")

__all__ = [
    "DEFAULT_NA_VALUES",
    "InputSpec",
    "Part",
    "ReadOptions",
    "Reader",
    "names",
    "open_reader",
    "reader_class",
    "resolve_inputs",
]

# Imported on first use: the readers' base needs numpy, and ``lovecraft convert --help`` reads the
# kinds table (kinds.py) through this package without reading anything else.
_LAZY = {
    "Part": ".base",
    "Reader": ".base",
    "ReadOptions": ".base",
    "InputSpec": ".sources",
    "resolve_inputs": ".sources",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def reader_class(kind: str) -> type[Reader]:
    from .kinds import READERS

    if kind not in READERS:
        raise OptionsError(f"unknown input format '{kind}'", hint=f"use one of {', '.join(names())}")
    module, _, cls = READERS[kind].partition(":")
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
    from .base import ReadOptions
    from .sources import resolve_inputs

    if input_format is not None and input_format not in names():
        raise OptionsError(f"unknown input format '{input_format}'", hint=f"use one of {', '.join(names())}")
    specs = [copy.copy(s) for s in resolved] if resolved is not None else resolve_inputs(list(inputs), input_format)
    kinds = {s.format for s in specs}
    if len(kinds) > 1:
        raise SchemaError(f"inputs mix formats ({', '.join(sorted(kinds))})", hint="convert them separately")
    kind = specs[0].format
    column_types = dict(column_types or {})
    cls = reader_class(kind)
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
    ropts = ReadOptions(
        batch_bytes=max(1 << 20, budget // 16),
        errors=errors,
        header=header,
        delimiter=delimiter,
        # float16 columns are read as float32 and downcast with the float16 report
        column_types={k: ("float32" if v == "float16" else v) for k, v in column_types.items()},
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
    reader = cls(specs, ropts)
    reader.format = kind
    return reader
