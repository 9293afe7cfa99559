"""CSV input, streamed with pyarrow's CSV reader.

pyarrow fixes column types from the first block, so a column that is int for a megabyte and float
later would fail mid-file. We read optimistically and, when a later block holds a value the
current type cannot, widen that column (int64 -> float64 -> string) and raise :class:`SchemaChanged`;
the pipeline then starts over with the wider types. The final types therefore hold every value of
the whole file. Types the user fixes with ``--column-type`` are never widened: a value that does
not fit is an error naming the row, the line and the column.
"""

from __future__ import annotations

import csv as pycsv
import io
import re
from collections.abc import Iterator

import numpy as np

from ..errors import InputError, SchemaError
from ..schema import BINARY, FIXED, STRING, Batch, Field, Schema
from ..sources import InputSpec, open_stream
from .base import Reader, ReadOptions

# User-facing column types and the Arrow type the CSV reader parses them as.
COLUMN_TYPES = {
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "float16": "float32", "float32": "float32", "float64": "float64", "bool": "bool", "string": "string",
}  # fmt: skip
_CONV_RE = re.compile(r"In CSV column #(\d+): (?:Row #\d+: )?CSV conversion error to (\w+): invalid value '(.*)'", re.S)
_COLS_RE = re.compile(r"Expected (\d+) columns, got (\d+)")


class SchemaChanged(Exception):
    """A column had to be widened; the conversion must start over with the reader's new types."""


def _looks_float(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


class CsvReader(Reader):
    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        super().__init__(specs, options)
        import pyarrow as pa

        self.pa = pa
        for spec in specs:
            if spec.is_stdin and not spec.stdin_spool:
                _spool_stdin(spec)
        unknown = {k: v for k, v in options.column_types.items() if v not in COLUMN_TYPES}
        if unknown:
            k, v = next(iter(unknown.items()))
            raise SchemaError(f"--column-type {k}={v}: unknown type", hint=f"use one of {', '.join(COLUMN_TYPES)}")
        self.widened: dict[str, str] = {}  # column -> arrow type name we force after widening
        self.header: list[str] | None = None
        self.schema = self._probe()
        self._file = None
        self._base = 0

    # -- options --------------------------------------------------------------------------------
    def _delimiter(self, spec: InputSpec) -> str:
        if self.options.delimiter:
            return self.options.delimiter
        return "\t" if spec.base_ext == ".tsv" else ","

    def _arrow_options(self, spec: InputSpec):
        import pyarrow.csv as pc

        ro = pc.ReadOptions(
            block_size=int(max(1 << 20, min(self.options.batch_bytes // 2, 64 << 20))),
            autogenerate_column_names=not self.options.header,
            use_threads=True,
        )
        po = pc.ParseOptions(delimiter=self._delimiter(spec), newlines_in_values=True)
        types = {}
        for name, t in self.options.column_types.items():
            types[name] = getattr(self.pa, COLUMN_TYPES[t])() if t != "bool" else self.pa.bool_()
            if t == "string":
                types[name] = self.pa.string()
        for name, t in self.widened.items():
            types[name] = getattr(self.pa, t)()
        co = pc.ConvertOptions(
            column_types=types,
            null_values=[""],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
            timestamp_parsers=[],
            check_utf8=True,
        )
        return ro, po, co

    def _open(self, spec: InputSpec):
        import pyarrow as pa
        import pyarrow.csv as pc

        ro, po, co = self._arrow_options(spec)
        if spec.compression is None and not spec.is_stdin:
            src = pa.OSFile(spec.path, "rb")
            self._file = src
        else:
            src = open_stream(spec, max_ratio=self.options.max_ratio)
            self._file = src
        try:
            return pc.open_csv(src, read_options=ro, parse_options=po, convert_options=co)
        except pa.ArrowInvalid as e:
            src.close()
            self._raise(spec, e, 0)
            raise

    # -- schema ---------------------------------------------------------------------------------
    def _probe(self) -> Schema:
        reader = self._open(self.specs[0])
        try:
            schema = self._fields(reader.schema, self.specs[0])
        finally:
            reader.close()
            self._file.close()
        return schema

    def _fields(self, aschema, spec: InputSpec) -> Schema:
        pa = self.pa
        names = list(aschema.names)
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise SchemaError(f"{spec.name}: column name '{dup}' appears twice in the header", hint="rename one of them")
        if self.header is None:
            self.header = names
        elif names != self.header:
            raise SchemaError(f"{spec.name}: header {names} differs from the first input's {self.header}", hint="give inputs with the same columns")
        for name in self.options.column_types:
            if name not in names:
                raise SchemaError(f"--column-type {name}=...: no column '{name}' in {spec.name}", hint=f"columns are {', '.join(names)}")
        fields = []
        retry = {}
        for f in aschema:
            t = f.type
            if f.name in self.options.column_types:
                want = self.options.column_types[f.name]
                if want == "string":
                    fields.append(Field(f.name, STRING, "|u1"))
                else:
                    fields.append(Field(f.name, FIXED, np.dtype(want if want != "bool" else "?").str))
                continue
            if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
                fields.append(Field(f.name, FIXED, np.dtype(t.to_pandas_dtype()).str))
            elif pa.types.is_string(t) or pa.types.is_large_string(t):
                fields.append(Field(f.name, STRING, "|u1"))
            elif pa.types.is_binary(t):
                fields.append(Field(f.name, BINARY, "|u1"))
            else:  # null (all empty so far), dates, times...: read as text
                retry[f.name] = "string"
        if retry:
            self.widened.update(retry)
            return self._probe()
        return Schema(tuple(fields))

    # -- reading --------------------------------------------------------------------------------
    def progress_done(self) -> int:
        f = self._file
        try:
            pos = f.raw_count() if hasattr(f, "raw_count") else f.tell()
        except (ValueError, OSError, AttributeError):
            pos = 0
        return self._base + pos

    def batches(self) -> Iterator[Batch]:
        pa = self.pa
        rows = 0
        self._base = 0
        for spec in self.specs:
            reader = self._open(spec)
            got = self._fields(reader.schema, spec)
            if got != self.schema:
                reader.close()
                self.schema = got
                raise SchemaChanged()
            row0 = rows
            try:
                while True:
                    try:
                        rb = reader.read_next_batch()
                    except StopIteration:
                        break
                    except pa.ArrowInvalid as e:
                        self._raise(spec, e, rows - row0)
                        raise
                    yield self._convert(rb, spec, rows - row0)
                    rows += rb.num_rows
            finally:
                reader.close()
                self._base += spec.size or 0
                self._file.close()
            if rows == row0:
                raise InputError(f"{spec.name}: no data rows (header only)", hint="check the file")

    def _convert(self, rb, spec: InputSpec, row0: int) -> Batch:
        from ..arrowconv import column_from_arrow

        pa = self.pa
        cols = {}
        for f in self.schema:
            arr = rb.column(f.name)
            if arr.null_count:
                if pa.types.is_integer(arr.type) and f.name not in self.options.column_types:
                    self.widened[f.name] = "float64"
                    self.schema = self._probe()
                    raise SchemaChanged()
                if not pa.types.is_floating(arr.type):
                    i = int(np.flatnonzero(~np.asarray(arr.is_valid()))[0])
                    raise InputError(
                        f"{spec.name}, row {row0 + i + 1}, column '{f.name}': empty value in a {f.describe()} column",
                        hint=f"fill it, or pass --column-type {f.name}=float64 to read empty values as NaN",
                    )
            cols[f.name] = column_from_arrow(arr, f)
        return Batch(cols, rb.num_rows)

    def _raise(self, spec: InputSpec, e: Exception, row_hint: int) -> None:
        """Turn an Arrow error into a one-line InputError (widening instead where we may)."""
        msg = str(e)
        if "Empty CSV file" in msg:
            raise InputError(f"{spec.name}: empty input (no header, no rows)", hint="check the file") from None
        m = _CONV_RE.search(msg)
        if m and self.header is not None:
            col = self.header[int(m.group(1))]
            value = m.group(3)
            if m.group(2) == "string" or "UTF8" in msg:
                row, line = self._locate(spec, lambda r: False, col)
                raise InputError(f"{spec.name}, column '{col}': invalid UTF-8", hint="fix the file") from None
            if col not in self.options.column_types:
                cur = self.widened.get(col) or (str(self.schema[col].np_dtype) if col in self.schema.names else "null")
                if cur.startswith("int") or cur.startswith("uint") or cur == "null":
                    new = "float64" if _looks_float(value) else "string"
                else:
                    new = "string"
                self.widened[col] = new
                self.schema = self._probe()
                raise SchemaChanged() from None
            want = self.options.column_types[col]
            idx = int(m.group(1))
            row, line = self._locate(spec, lambda r: len(r) > idx and r[idx] == value)
            where = f"row {row} (line {line})" if row else "a row"
            raise InputError(
                f"{spec.name}, {where}, column '{col}': '{value}' is not a valid {want}",
                hint="fix the value or choose another --column-type",
            ) from None
        m = _COLS_RE.search(msg)
        if m:
            ncols = len(self.header or [])
            row, line = self._locate(spec, lambda r: len(r) != ncols)
            where = f"row {row} (line {line})" if row else "a row"
            raise InputError(
                f"{spec.name}, {where}: expected {m.group(1)} fields, found {m.group(2)}",
                hint="fix the row (is a quote unbalanced or a delimiter missing?)",
            ) from None
        if "UTF8" in msg or "utf8" in msg.lower():
            raise InputError(f"{spec.name}: invalid UTF-8 in a text column", hint="fix the file") from None
        raise InputError(f"{spec.name}: cannot parse CSV ({msg.splitlines()[0]})", hint="check the file and --delimiter") from None

    def _locate(self, spec: InputSpec, bad, col=None) -> tuple[int | None, int | None]:
        """Slow path, on errors only: find the first data row (1-based) matching ``bad``."""
        try:
            with open_stream(spec, max_ratio=self.options.max_ratio) as raw:
                text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
                reader = pycsv.reader(text, delimiter=self._delimiter(spec))
                if self.options.header:
                    next(reader, None)
                for i, r in enumerate(reader, 1):
                    if bad(r):
                        return i, reader.line_num
        except (InputError, pycsv.Error):
            pass
        return None, None


def _spool_stdin(spec: InputSpec) -> None:
    """CSV may need a second read (type widening): copy stdin to a temporary file, in bounded memory."""
    import atexit
    import os
    import shutil
    import sys
    import tempfile

    fd, path = tempfile.mkstemp(prefix="lovecraft-stdin-", suffix=".spool")
    atexit.register(lambda: os.path.exists(path) and os.unlink(path))
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(sys.stdin.buffer, out, 4 << 20)
    spec.stdin_spool = path
    spec.size = os.path.getsize(path)
