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

from ..arrowconv import arrow_owned, read_type
from ..errors import UTF8_HINT, InputError, OptionsError, SchemaError, invalid_utf8
from ..schema import BINARY, FIXED, STRING, WIDE_COLUMNS, Batch, Field, Schema, typed_field
from ..selection import ColumnTypes
from . import csvsniff as sniff
from .base import Part, Reader, ReadOptions, SchemaChanged
from .csvmatrix import MatrixParsing, record_line
from .csvquote import QuoteScan, RecordTooLong, SkippedPastEnd, Syntax, UnclosedQuote, record_pieces
from .csvtypes import BOOL_NAN, INT_RE, ROUNDED, big_integers, big_note, rounds, widened_type, wrapped_hex
from .csvwide import MAX_COLUMNS, WideHeader, count_fields, too_wide
from .spec import InputSpec
from .streams import open_range, open_stream

# User-facing column types and the Arrow type the CSV reader parses them as.
COLUMN_TYPES = {
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "float16": "float32", "float32": "float32", "float64": "float64", "bool": "bool", "string": "string",
}  # fmt: skip
_CONV_RE = re.compile(
    r"In CSV column #(\d+): (?:Row #\d+: )?CSV conversion error to ([^:]+?): "
    r"(?:invalid value|expected (?:no )?(a )?zone offset in) '(.*)'",
    re.S,
)
# values that mark a missing value in some tool's output: an error on one names --na-values
_MISSING_MARKS = {"NA", "N/A", "#N/A", "#NA", "<NA>", "NULL", "NONE", "NIL", "MISSING", "-", "--", "?", "."}
_COLS_RE = re.compile(r"Expected (\d+) columns, got (\d+)")


class CsvReader(MatrixParsing, Reader):
    widens = True
    takes_column_types = True
    takes_logical_types = True
    takes_csv_syntax = True

    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        super().__init__(specs, options)
        import pyarrow as pa

        self.pa = pa
        self.prepare_rereads(COLUMN_TYPES)
        self.widened: dict[str, str] = {}  # column -> arrow type name we force after widening
        # --column-type by column (its selections resolved once the header is read)
        self.column_types: dict[str, str] = dict(options.column_types)
        self.header: list[str] | None = None
        self.wide: WideHeader | None = None  # a header of more than MAX_COLUMNS, read as a matrix (csvwide)
        self.stacked = False  # the reader made the --stack-columns columns itself
        self.schema_types = None
        self._stream = None
        self._base = 0
        self.schema = self._probe()

    # -- options --------------------------------------------------------------------------------
    def _delimiter(self, spec: InputSpec) -> str:
        if self.options.delimiter:
            return self.options.delimiter
        if spec.base_ext == ".tsv":
            return "\t"
        if spec.sniffed_delimiter is None:
            spec.sniffed_delimiter = self._sniff(spec)
        return spec.sniffed_delimiter

    def _sniff(self, spec: InputSpec) -> str:
        """The delimiter of an input whose delimiter nobody gave: a comma, unless its first lines are
        separated by tabs or spaces (:mod:`.csvsniff`), which the manifest's sources then record."""
        try:
            with open_stream(spec, max_ratio=self.options.max_ratio) as f:
                parts, got = [], 0
                while got < sniff.SNIFF_BYTES:
                    part = f.read(sniff.SNIFF_BYTES - got)
                    if not part:
                        break
                    parts.append(part)
                    got += len(part)
                data = b"".join(parts)
                at_end = got < sniff.SNIFF_BYTES or not f.read(1)
        except InputError:
            return ","  # reading it again reports the problem
        lines = sniff.head_lines(data, self.options.skip_rows, self.options.comment, at_end)
        found = sniff.sniff_delimiter(lines, self.options.header and not self.options.column_names)
        if found is None:
            return ","
        self._note(spec, "delimiter", found)
        self._note(spec, "notes", [sniff.delimiter_note(spec.name, found, lines[0].count(found) + 1)])
        return found

    def _note(self, spec: InputSpec, key: str, value) -> None:
        """Record what the reader decided about an input (the manifest's sources show it)."""
        notes = dict(spec.notes or {})
        if key == "notes":
            value = list(dict.fromkeys([*notes.get("notes", []), *value]))
        notes[key] = value
        spec.notes = notes

    def _syntax(self, spec: InputSpec, comments: bool = True) -> Syntax:
        """The delimiter and comment character (pieces are already without comment lines)."""
        comment = self.options.comment if comments else None
        if comment is not None and comment == self._delimiter(spec):
            raise OptionsError(f"--comment {comment!r} is the delimiter of {spec.name}", hint="choose another one")
        return Syntax.of(self._delimiter(spec), comment)

    def _first_record_end(self, piece: bytes, spec: InputSpec) -> int:
        return QuoteScan(piece, self._syntax(spec, comments=False)).record_end(1)

    def _block_size(self) -> int:
        """pyarrow's parse block: an eighth of a batch (1 to 4 MiB); a whole batch (up to 4 MiB)
        for a wide table, whose per-block, per-column costs would otherwise dominate (2,000
        columns: read 1.6x faster, and in less memory, in 4 MiB blocks than in 1 MiB ones)."""
        share = 1 if self._ncols() >= WIDE_COLUMNS else 8
        return int(max(1 << 20, min(self.options.batch_bytes // share, 4 << 20)))

    def _ncols(self) -> int:
        return len(self.wide) if self.wide is not None else len(self.header or ())

    def _arrow_options(self, spec: InputSpec):
        import pyarrow.csv as pc

        ro = pc.ReadOptions(
            block_size=self._block_size(),
            autogenerate_column_names=not self.options.header,
            use_threads=self.options.threads,
        )
        po = pc.ParseOptions(delimiter=self._delimiter(spec), newlines_in_values=True)
        types = {}
        for name, t in self.column_types.items():
            types[name] = read_type(COLUMN_TYPES.get(t, t))
        for name, t in self.widened.items():
            types[name] = self.pa.bool_() if t == BOOL_NAN else getattr(self.pa, t)()
        co = pc.ConvertOptions(
            column_types=types,
            null_values=["", *self.options.na_values],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
            timestamp_parsers=[],
            check_utf8=True,
        )
        return ro, po, co

    def _chunks(self, spec: InputSpec, chunk: int, stream=None, first: bool = True, base: int = 0) -> Iterator[bytes]:
        """Decompressed input cut into pieces that end at a record boundary (a newline outside
        quotes, see :mod:`.csvquote`), without comment lines; each is then parsed on its own by
        pyarrow's multi-threaded ``read_csv``. ``first``: the stream starts at the start of the
        input (a BOM and ``--skip-rows`` lines are dropped); ``base``: its offset in the input."""
        chunk = self.options.piece_bytes or chunk
        # a record is parsed whole, in about six times its size: one must fit in a batch (1/16 of
        # the budget; a fixed 64 MiB floor let a 50 MB field take 361 MB at a 256 MiB budget)
        max_record = max(chunk, self.options.batch_bytes)
        if stream is None:
            stream = open_stream(spec, max_ratio=self.options.max_ratio)
        syntax = self._syntax(spec)
        with stream:
            self._stream = stream
            pieces = record_pieces(
                stream.read,
                chunk,
                syntax,
                strip_bom=first,
                skip_rows=self.options.skip_rows if first else 0,
                max_record=max_record,
                first=1 << 20,  # the first batch sooner: everything downstream waits for it
            )
            try:
                for piece in pieces:
                    yield self._text(piece)
            except UnclosedQuote as e:
                raise InputError(
                    f"{self._where(spec, base + e.offset)}: a quoted field opened here is never closed "
                    "(unterminated quote)",
                    hint="fix the quoting (a quote inside a quoted field is written twice)",
                ) from None
            except RecordTooLong as e:
                raise InputError(
                    f"{self._where(spec, base + e.offset)}: a record longer than {e.limit} bytes (unbalanced quote?)",
                    hint="check the quoting, or raise --max-memory (a record must fit in 1/16 of it)",
                ) from None
            except SkippedPastEnd as e:
                n = self.options.skip_rows
                raise InputError(
                    f"{spec.name}: --skip-rows {n} skips past the end of the input "
                    f"(it has {e.lines} line{'' if e.lines == 1 else 's'})",
                    hint="check --skip-rows",
                ) from None

    def _text(self, piece: bytes) -> bytes:
        """``--errors replace``: invalid UTF-8 becomes U+FFFD (pieces end at a newline, never inside
        a character); otherwise invalid bytes are an error naming the row and column."""
        if self.options.errors == "replace":
            return piece.decode("utf-8", "replace").encode("utf-8")
        return piece

    def _bad_utf8(self, spec: InputSpec, names: list[str], col: str) -> InputError:
        idx = names.index(col)
        row, line = self._locate(spec, lambda r: len(r) > idx and _escaped(r[idx]), "surrogateescape")
        where = f", row {row} (line {line})" if row else ""
        return InputError(
            f"{spec.name}{where}, column '{col}': invalid UTF-8", hint="fix the file or pass --errors replace"
        )

    def _where(self, spec: InputSpec, offset: int) -> str:
        """``name, line N`` of byte ``offset`` of the (decompressed) input; slow, for errors."""
        lines = 1
        try:
            with open_stream(spec, max_ratio=self.options.max_ratio) as f:
                left = offset
                while left > 0:
                    blk = f.read(min(left, 4 << 20))
                    if not blk:
                        break
                    lines += blk.count(b"\n")
                    left -= len(blk)
        except InputError:
            return spec.name
        return f"{spec.name}, line {lines}"

    def _parse(self, piece: bytes, spec: InputSpec, names: list[str] | None, types: bool = True):
        import pyarrow as pa
        import pyarrow.csv as pc

        ro, po, co = self._arrow_options(spec)
        if names is not None:
            ro.column_names = names
            ro.autogenerate_column_names = False
        if types and self.schema_types is not None:
            co.column_types = self.schema_types
        if b'"' not in piece:  # no quotes, so no newline inside a value: pyarrow's faster chunking
            po.newlines_in_values = False
        source = arrow_owned(piece) if ro.use_threads else pa.py_buffer(piece)
        try:
            try:
                return pc.read_csv(source, read_options=ro, parse_options=po, convert_options=co)
            except pa.ArrowInvalid as e:
                if "straddl" not in str(e) or ro.block_size > len(piece):
                    raise
                # a record longer than a parse block (a field of megabytes; the piece holds it whole,
                # within the budget): the piece as one block
                ro.block_size = len(piece) + 1
                return pc.read_csv(source, read_options=ro, parse_options=po, convert_options=co)
        except pa.ArrowInvalid as e:
            self._raise(spec, e, 0)
            raise

    def _header_names(self, line: bytes, spec: InputSpec) -> list[str]:
        """The column names of header ``line`` (UTF-8): split at the delimiter when it holds no
        quote and no CR but its line end (what pyarrow makes of it, without its ~13 us per
        column: 2,000 columns, 26 ms), else as pyarrow parses it."""
        text = line[: -2 if line.endswith(b"\r\n") else -1 if line.endswith(b"\n") else None]
        if not any(c in text for c in (b'"', b"\r", b"\n")):
            names = text.decode("utf-8").split(self._delimiter(spec))
        else:
            names = list(self._parse(line, spec, None, types=False).schema.names)
        names, note = sniff.name_blanks(names)
        if note:
            self._note(spec, "notes", [note])
        return names

    # -- schema ---------------------------------------------------------------------------------
    def widen(self, widened: dict[str, str]) -> None:
        if widened:
            self.widened.update(widened)
            self.schema = self._probe()

    def _probe(self) -> Schema:
        """Infer types from the first piece of the first input (later pieces may widen them)."""
        spec = self.specs[0]
        self.schema_types = None
        # The first piece with a record (pieces of blank lines before it hold none: a piece can
        # end at the first newline), and the next one when it holds the header alone (a last line
        # without a newline is a piece of its own): types are inferred from rows.
        piece = b""
        for p in self._chunks(spec, 4 << 20):
            piece = (piece + p).lstrip(b"\r\n")
            if not self.options.header and piece.strip():
                break
            if piece.strip() and piece[self._first_record_end(piece, spec) or len(piece) :].strip():
                break
            if len(piece) > 8 << 20:  # a header and megabytes of blank lines: types from what is here
                break
        if not piece:
            raise InputError(f"{spec.name}: empty input (no header, no rows)", hint="check the file")
        first_line = piece.split(b"\n", 1)[0].rstrip(b"\r")
        if piece.count(b"\n") <= 1 and b"\r" in first_line and b'"' not in first_line:  # one line: a header alone
            raise InputError(
                f"{spec.name}: its lines end with a carriage return alone (classic Mac OS), not a newline",
                hint=f"convert them, e.g. tr '\\r' '\\n' < {spec.name} > fixed.csv",
            )
        end = self._first_record_end(piece, spec) or len(piece)
        if self.options.header:
            _header_utf8(spec, piece[:end])
        # counted as bytes before any name is made: a header too wide is refused (or read as a
        # matrix, with --stack-columns) in the memory of its bytes
        count = count_fields(record_line(piece[:end]), self._delimiter(spec))
        if count > MAX_COLUMNS:
            if not self.options.stack_columns:
                raise too_wide(spec.name, count, record_line(piece[:end]), self._delimiter(spec), self.options.header)
            return self._probe_wide(piece, end, spec, count)
        if self.options.header:
            self.header = self._header_names(piece[:end], spec)
        else:
            line = piece[:end].decode("utf-8", "replace")
            width = len(next(pycsv.reader(io.StringIO(line), delimiter=self._delimiter(spec))))
            self.header = self.options.column_names or [f"f{i}" for i in range(width)]
            if len(self.header) != width:
                n = len(self.header)
                raise SchemaError(
                    f"{spec.name}: --column-names gives {n} name{'' if n == 1 else 's'}, "
                    f"the first row has {width} field{'' if width == 1 else 's'}",
                    hint="give one name per column",
                )
        t = self._infer_uniform(piece[end:] if self.options.header else piece, spec)
        if t is not None:
            aschema = self.pa.schema([(n, t) for n in self.header])
        else:
            # the body, named by the header as we read it (header only: no rows, said below)
            body = (piece[end:] if self.options.header else piece) or b"\n"
            table = self._parse(body, spec, self.header, types=False)
            notes = big_integers(
                table,
                lambda: self._parse(body, spec, self.header, types=False),
                self.column_types,
                self.widened,
                hexed=b"0x" in body or b"0X" in body,
            )
            if notes:
                self._note(spec, "notes", notes)
                table = self._parse(body, spec, self.header, types=False)
            aschema = table.schema
        self.header = None
        schema = self._fields(aschema, spec)
        self.schema_types = {f.name: self._arrow_type(f) for f in schema}
        if self.options.header:
            first = schema.fields[0]
            numeric = first.kind == FIXED and first.np_dtype.kind in "iuf"
            rest = piece[end:].lstrip(b"\r\n").decode("utf-8", "replace").splitlines()[:1]
            row = next(pycsv.reader(rest, delimiter=self._delimiter(spec)), None)
            note = sniff.header_note(
                spec.name, schema.names, numeric, row, self.options.skip_rows, self._delimiter(spec)
            )
            if note is not None:
                self._note(spec, "notes", [note])
        return schema

    def _arrow_type(self, f: Field):
        pa = self.pa
        if self.widened.get(f.name) == BOOL_NAN:
            return pa.bool_()  # parsed as booleans, held as float64 (see _convert)
        if f.logical is not None:
            return read_type(f.logical.describe())
        if f.kind == STRING:
            return pa.string()
        if f.kind == BINARY:
            return pa.binary()
        return pa.from_numpy_dtype(f.np_dtype)

    def _fields(self, aschema, spec: InputSpec) -> Schema:
        pa = self.pa
        names = list(aschema.names)
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            if sniff.looks_like_data(names):
                raise SchemaError(
                    f"{spec.name}: column name '{dup}' appears twice in the header, whose names are all numbers "
                    "(is the first line data?)",
                    hint="pass --no-header if the file has no header (columns f0, f1, ...), "
                    "or name the columns with --column-names",
                )
            raise SchemaError(
                f"{spec.name}: column name '{dup}' appears twice in the header",
                hint=f"rename one of them, or name the columns with --column-names A,B,... "
                f"--skip-rows {self.options.skip_rows + 1}",
            )
        if self.header is None:
            self.header = names
        elif names != self.header:
            raise SchemaError(
                f"{spec.name}: header {names} differs from the first input's {self.header}",
                hint="give inputs with the same columns",
            )
        self.column_types = ColumnTypes(self.options.column_types).resolve(names, spec.name)
        from ..arrowconv import numpy_dtype

        fields = []
        retry = {}
        numeric: dict = {}  # dtype by Arrow type: a wide table's thousands of columns have a few
        for name, t in zip(names, aschema.types, strict=True):
            if name in self.column_types:
                fields.append(typed_field(name, self.column_types[name]))
                continue
            dt = numeric.get(t)
            if dt is None and (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
                dt = numeric[t] = numpy_dtype(t).str
            if self.widened.get(name) == BOOL_NAN:
                fields.append(Field(name, FIXED, "<f8"))
            elif dt is not None:
                fields.append(Field(name, FIXED, dt))
            elif pa.types.is_string(t) or pa.types.is_large_string(t):
                fields.append(Field(name, STRING, "|u1"))
            elif pa.types.is_binary(t):  # pyarrow infers binary for bytes that are not UTF-8
                raise self._bad_utf8(spec, names, name)
            else:  # null (all empty so far), dates, times...: read as text
                retry[name] = "string"
        if retry:
            self.widened.update(retry)
            return self._probe()
        return Schema(tuple(fields))

    # -- reading --------------------------------------------------------------------------------
    def progress_done(self) -> int:
        return self._base + (self._stream.raw_count() if self._stream is not None else 0)

    def batches(self) -> Iterator[Batch]:
        rows = 0
        self._base = 0
        for spec in self.specs:
            row0 = rows
            for b in self._stream_batches(spec, None, self.options.header, True, row0=0):
                rows += b.num_rows
                yield b
            self._base += spec.size or 0
            self._stream = None
            if rows == row0:
                raise InputError(f"{spec.name}: no data rows (header only)", hint="check the file")

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        syntax = self._syntax(self.specs[0])  # the delimiter is the same for every file to split
        if any(self._syntax(s) != syntax for s in self.specs):
            return [Part(i, i) for i in range(len(self.specs))]
        return self._byte_partitions(
            target_bytes,
            quoted=True,
            mapper=mapper,
            syntax=syntax,
            skip_rows=self.options.skip_rows,
            header=self.options.header,
        )

    probe_specs = 1  # (the first input's header and rows settle the columns)

    def part_batches(self, part: Part) -> Iterator[Batch]:
        spec = self.specs[part.spec]
        if part.start is None and part.stop_spec is not None and self.wide is None:
            yield from self._small_files(part)
        elif part.start is None:
            yield from self._stream_batches(spec, None, self.options.header, True, row0=None)
        else:
            stream = open_range(spec.path, part.start, part.end)
            first = part.start == 0
            yield from self._stream_batches(
                spec, stream, self.options.header and first, first, row0=None, base=part.start
            )

    def _small_files(self, part: Part) -> Iterator[Batch]:
        """A part of whole small files: their rows (each file's header checked and dropped) parsed
        together in pieces of up to a chunk, one parse per piece instead of per file (pyarrow's
        ~1 ms a call was most of the time of 100,000 files of a few rows). A piece that fails is
        read again file by file, so the error names its file."""
        chunk = int(max(1 << 20, min(self.options.batch_bytes // 2, 16 << 20)))
        held: list[tuple[InputSpec, bytes]] = []
        size = 0

        def parse(held) -> Iterator[Batch]:
            data = b"".join(body for _, body in held)
            try:
                table = self._parse(data, held[0][0], self.header)
                out = [self._convert(rb, held[0][0], None) for rb in table.to_batches(max_chunksize=len(data))]
            except InputError:
                for spec, _ in held:  # (the error again, naming its file)
                    yield from self._stream_batches(spec, None, self.options.header, True, row0=None)
                raise
            yield from out

        for i in part.spec_range:
            spec = self.specs[i]
            body = self._whole_body(spec, chunk)
            if body is None or size + len(body) > chunk:
                if held:
                    yield from parse(held)
                held, size = [], 0
            if body is None:
                yield from self._stream_batches(spec, None, self.options.header, True, row0=None)
            elif body.strip():
                held.append((spec, body))
                size += len(body)
        if held:
            yield from parse(held)

    def _whole_body(self, spec: InputSpec, chunk: int) -> bytes | None:
        """The data records of a small plain file (its header checked against the first input's
        and dropped), ending with a newline; None for a file to read as a stream."""
        if spec.compression is not None or spec.size is None or spec.size > chunk:
            return None
        if self.options.skip_rows or self.options.comment is not None or self.options.errors == "replace":
            data = b"".join(self._chunks(spec, chunk)).lstrip(b"\r\n")
        else:  # (what _chunks makes of a small plain file, without its machinery: a file read whole)
            from ..storage import open_input

            with open_input(spec.path, buffering=0) as f:
                data = f.read(spec.size + 1)
            if len(data) > spec.size:
                return None  # (it grew: read as a stream)
            data = data.removeprefix(b"\xef\xbb\xbf").lstrip(b"\r\n")
        if self.options.header and data.strip():
            nl = data.find(b"\n") + 1
            quoted = b'"' in data[:nl] if nl else True
            end = (nl if not quoted else self._first_record_end(data, spec)) or len(data)
            _header_utf8(spec, data[:end])
            if (names := self._header_names(data[:end], spec)) != self.header:
                raise SchemaError(
                    f"{spec.name}: header {names} differs from the first input's {self.header}",
                    hint="give inputs with the same columns",
                )
            data = data[end:]
        return data if data.endswith(b"\n") or not data else data + b"\n"

    def _stream_batches(
        self, spec: InputSpec, stream, with_header: bool, first: bool, row0: int | None, base: int = 0
    ) -> Iterator[Batch]:
        """Batches of one input (or of its byte range from ``base``; ``first``: the range starts
        the input). ``row0`` None: rows are not known here."""
        from ..runtime.readahead import prefetch

        chunk = int(max(1 << 20, min(self.options.batch_bytes // 2, 16 << 20)))
        rows = 0
        uniform = self._uniform_type() if self.wide is None else None
        header_done = not with_header
        # Reading, decompressing and cutting the next piece (one core, mostly) runs in a thread of
        # its own, a piece ahead: pyarrow's parse of this one, on every core, does not wait for it.
        pieces = self._chunks(spec, chunk, stream, first, base)
        if stream is not None or spec.compression is not None or spec.size is None or spec.size > chunk:
            pieces = prefetch(pieces, depth=1)  # (a small file is one piece: a thread would only cost)
        for piece in pieces:
            if not header_done:
                if not piece.strip():
                    continue  # blank lines before the header
                piece = piece.lstrip(b"\r\n")  # the header is the first line that is not blank
                header_done = True
                end = self._first_record_end(piece, spec)
                _header_utf8(spec, piece[:end])
                if self.wide is not None:
                    if record_line(piece[:end]) != self.wide.text:
                        raise SchemaError(
                            f"{spec.name}: its header differs from the first input's",
                            hint="give inputs with the same columns",
                        )
                elif (names := self._header_names(piece[:end], spec)) != self.header:
                    raise SchemaError(
                        f"{spec.name}: header {names} differs from the first input's {self.header}",
                        hint="give inputs with the same columns",
                    )
                piece = piece[end:]
                if not piece:
                    continue
            if self.wide is not None:
                batch = self._parse_wide(piece, spec, None if row0 is None else row0 + rows)
                yield batch
                rows += batch.num_rows
                continue
            batch = self._parse_uniform(piece, spec, uniform) if uniform is not None else None
            if batch is not None:
                yield batch
                rows += batch.num_rows
                continue
            table = self._parse(piece, spec, self.header)
            if b"0x" in piece or b"0X" in piece:
                self._late_hex(piece, spec, table)
            for rb in table.to_batches(max_chunksize=max(1, table.num_rows)):
                yield self._convert(rb, spec, None if row0 is None else row0 + rows)
                rows += rb.num_rows

    def _late_hex(self, piece: bytes, spec: InputSpec, table) -> None:
        """A piece after the first holding ``0x`` and a negative number in a column typed int64:
        pyarrow wraps a hexadecimal integer past 2**63 - 1 to a negative number. Such a column is
        widened as the first piece's are (uint64, or text where a value is not an integer from 0 to
        2**64 - 1) and the read starts again. Hexadecimal values below 2**63 are read right."""
        import pyarrow.compute as pc

        skip = {*self.column_types, *self.widened}
        ints = [
            f.name
            for f in self.schema
            if f.kind == FIXED and f.np_dtype == np.int64 and f.name not in skip
            and (pc.min(table.column(f.name)).as_py() or 0) < 0
        ]  # fmt: skip
        if not ints:
            return
        typed, self.schema_types = self.schema_types, {**self.schema_types, **dict.fromkeys(ints, self.pa.string())}
        try:
            hexed = wrapped_hex(self._parse(piece, spec, self.header), ints)
        finally:
            self.schema_types = typed
        if hexed:
            self.widened.update(hexed)
            self._note(spec, "notes", [big_note(n, t, True) for n, t in hexed.items()])
            self.schema = self._probe()
            raise SchemaChanged(self.widened)

    def _convert(self, rb, spec: InputSpec, row0: int | None) -> Batch:
        import pyarrow.compute as pc

        from ..arrowconv import column_from_arrow

        pa = self.pa
        cols = {}
        for f in self.schema:
            arr = rb.column(f.name)
            if pa.types.is_floating(arr.type) and self.widened.get(f.name) == "float64" and rounds(arr):
                self.widened[f.name] = "string"
                self._note(spec, "notes", [ROUNDED.format(f.name)])
                self.schema = self._probe()
                raise SchemaChanged(self.widened)
            if arr.null_count:
                if pa.types.is_integer(arr.type) and f.name not in self.column_types:
                    # a missing value: NaN in float64, unless that would round the integers (uint64:
                    # beyond int64; others beyond 2**53, checked once widened): text then, exact
                    self.widened[f.name] = "string" if pa.types.is_unsigned_integer(arr.type) else "float64"
                    if self.widened[f.name] == "string":
                        self._note(spec, "notes", [ROUNDED.format(f.name)])
                    self.schema = self._probe()
                    raise SchemaChanged(self.widened)
                if pa.types.is_boolean(arr.type) and f.name not in self.column_types and f.name not in self.widened:
                    self.widened[f.name] = BOOL_NAN  # 1.0, 0.0 and NaN, as a JSON Lines or Parquet bool
                    self.schema = self._probe()
                    raise SchemaChanged(self.widened)
                if (
                    not pa.types.is_floating(arr.type)
                    and not (f.logical is not None and f.logical.temporal)
                    and self.widened.get(f.name) != BOOL_NAN
                ):
                    raise self._missing(spec, f, arr, row0)  # (a missing timestamp or date is NaT)
            if self.widened.get(f.name) == BOOL_NAN:
                arr = pc.fill_null(pc.cast(arr, pa.float64()), float("nan"))
            cols[f.name] = column_from_arrow(arr, f)
        return Batch(cols, rb.num_rows)

    def _missing(self, spec: InputSpec, f: Field, arr, row0: int | None) -> InputError:
        """The error of a missing value (an empty field or one of ``--na-values``) in a column that
        has no missing value (a fixed int or bool type), naming its row, line and value."""
        idx = self.header.index(f.name)
        missing = {"", *self.options.na_values}
        found: list[str] = []

        def bad(r: list[str]) -> bool:
            if len(r) > idx and r[idx] in missing:
                found.append(r[idx])
                return True
            return False

        row, line = self._locate(spec, bad)
        if row is not None:
            where = f"row {row} (line {line})"
        elif row0 is not None:
            where = f"row {row0 + int(np.flatnonzero(~np.asarray(arr.is_valid()))[0]) + 1}"
        else:
            where = "a row"
        what = f"missing value '{found[0]}'" if found and found[0] else "empty value"
        hint = f"fill it, or pass --column-type {f.name}=float64 to read missing values as NaN"
        if f.np_dtype == np.bool_:  # (a bool column is fixed by --column-type: left to itself it is float64)
            hint = f"fill it, or leave out --column-type {f.name}=bool to read it as float64 (1, 0 and NaN)"
        return InputError(f"{spec.name}, {where}, column '{f.name}': {what} in a {f.describe()} column", hint=hint)

    def _raise(self, spec: InputSpec, e: Exception, row_hint: int) -> None:
        """Turn an Arrow error into a one-line InputError (widening instead where we may)."""
        msg = str(e)
        if "Empty CSV file" in msg:
            raise InputError(f"{spec.name}: empty input (no header, no rows)", hint="check the file") from None
        m = _CONV_RE.search(msg)
        if m and self.header is not None:
            col = self.header[int(m.group(1))]
            value = m.group(4)
            if m.group(2) == "string" or "UTF8" in msg:
                raise self._bad_utf8(spec, self.header, col) from None
            if col not in self.column_types:
                cur = self.widened.get(col) or (str(self.schema[col].np_dtype) if col in self.schema.names else "null")
                if cur.startswith("int") or cur.startswith("uint") or cur == "null":
                    new = widened_type(cur, value)
                    if INT_RE.match(value) or cur.startswith("uint"):
                        self._note(spec, "notes", [big_note(col, new)])
                else:
                    new = "string"
                self.widened[col] = new
                self.schema = self._probe()
                raise SchemaChanged(self.widened) from None
            want = self.column_types[col]
            idx = int(m.group(1))
            row, line = self._locate(spec, lambda r: len(r) > idx and r[idx] == value)
            where = f"row {row} (line {line})" if row else "a row"
            hint = "fix the value or choose another --column-type"
            if want.startswith("timestamp") and "zone offset" in msg:
                zone = "has a zone offset" if m.group(3) is None else "has no zone offset"
                raise InputError(
                    f"{spec.name}, {where}, column '{col}': '{value}' {zone}, the type {want} "
                    f"{'has none' if m.group(3) is None else 'needs one'}",
                    hint=f"read it as --column-type '{col}=timestamp[us, UTC]'"
                    if m.group(3) is None
                    else f"read it as --column-type {col}=timestamp (no time zone)",
                ) from None
            if want != "string" and value.upper() in _MISSING_MARKS and value not in self.options.na_values:
                marks = ",".join(dict.fromkeys([*self.options.na_values, value]))
                hint = f"fix the value, choose another --column-type, or pass --na-values {marks} if it marks a missing value"
            raise InputError(
                f"{spec.name}, {where}, column '{col}': '{value}' is not a valid {want}", hint=hint
            ) from None
        m = _COLS_RE.search(msg)
        if m:
            ncols = len(self.header or [])
            seen: list[list[str]] = []

            def bad(r: list[str]) -> bool:
                seen.append(r)
                return len(r) != ncols

            row, line = self._locate(spec, bad)
            where = f"row {row} (line {line})" if row else "a row"
            hint = "fix the row (is a quote unbalanced or a delimiter missing?)"
            if row == 1 and self.options.header:
                # the first row after the header: is the "header" a line before the data?
                then = " --no-header" if all(sniff.is_number(v) for v in seen[-1]) else ""
                hint = (
                    f"if the header line is a line before the data instead (scikit-learn's CSVs begin with one), "
                    f"pass --skip-rows {self.options.skip_rows + 1}{then}; else {hint}"
                )
            expected = f"{m.group(1)} fields," + (" as the header has," if row == 1 and self.options.header else "")
            raise InputError(f"{spec.name}, {where}: expected {expected} found {m.group(2)}", hint=hint) from None
        if "UTF8" in msg or "utf8" in msg.lower():
            m = re.search(r"In CSV column #(\d+)", msg)
            if m and self.header is not None and int(m.group(1)) < len(self.header):
                raise self._bad_utf8(spec, self.header, self.header[int(m.group(1))]) from None
            raise InputError(
                f"{spec.name}: invalid UTF-8 in a text column", hint="fix the file or pass --errors replace"
            ) from None
        raise InputError(
            f"{spec.name}: cannot parse CSV ({msg.splitlines()[0]})", hint="check the file and --delimiter"
        ) from None

    def _locate(self, spec: InputSpec, bad, errors: str = "replace") -> tuple[int | None, int | None]:
        """Slow path, on errors only: find the first data row (1-based) matching ``bad``, and the
        line (of the file, preamble and comments counted) where it ends."""
        try:
            with open_stream(spec, max_ratio=self.options.max_ratio) as raw:
                text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors=errors, newline="")
                line = [0]
                lines = _data_lines(text, self.options.skip_rows, self._syntax(spec), line)
                reader = pycsv.reader(lines, delimiter=self._delimiter(spec))
                rows = (r for r in reader if r)  # pyarrow skips blank lines
                if self.options.header:
                    next(rows, None)
                for i, r in enumerate(rows, 1):
                    if bad(r):
                        return i, line[0]
        except (InputError, pycsv.Error):
            pass
        return None, None


def _data_lines(text, skip: int, syntax: Syntax, line: list[int]) -> Iterator[str]:
    """The lines of ``text`` after the first ``skip``, without comment lines; ``line[0]``: the
    number of the last line read (the csv module reads a record's lines, no more)."""
    state = 0  # the quote state, followed only to tell comment lines from values
    start = True  # the line starts after a newline
    for n, s in enumerate(text, 1):
        line[0] = n
        if n <= skip:
            continue
        if syntax.comment is not None:
            if state == 0 and start and s[:1] == chr(syntax.comment):
                continue
            state = QuoteScan(s.encode("utf-8", "surrogateescape"), Syntax(syntax.delimiter), state).final
            start = s.endswith("\n")
        yield s


def _header_utf8(spec: InputSpec, header: bytes) -> None:
    """Column names must be UTF-8 (with ``--errors replace`` the piece was already repaired)."""
    try:
        header.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{spec.name}, line 1 (the header): {invalid_utf8(e)}", hint=UTF8_HINT) from None


def _escaped(s: str) -> bool:
    """Whether ``s`` (decoded with surrogateescape) held bytes that are not UTF-8."""
    return any("\udc80" <= c <= "\udcff" for c in s)
