"""Tables of numbers parsed as one matrix: the part of the CSV reader (:class:`.csv.CsvReader`)
that reads a wide table's rows as one column of values.

pyarrow's CSV reader pays per column for every piece it parses (its state, a conversion, an array):
with thousands of columns that is most of the time, and with hundreds of thousands it is most of
the memory. When every line of a piece holds exactly the header's number of fields, without quotes,
the delimiters can be made newlines and the piece parsed as ONE column of rows x columns values,
reshaped into a ``[rows, columns]`` matrix. Two readers use it: a table of at least
``WIDE_COLUMNS`` columns of one numeric type (a feature matrix, its columns made from the matrix),
and a table wider than ``MAX_COLUMNS`` read with ``--stack-columns`` (see :mod:`.csvwide`), whose
stacked columns are slices of it. Wherever the shortcut does not apply, the reader parses the piece
as usual (which widens types or names the bad row).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError, OptionsError
from ..schema import FIXED, MAX_COLUMNS, WIDE_COLUMNS, Batch, Field, Schema
from .base import SchemaChanged
from .csvwide import WideHeader, bad_rows, generated_header, not_numbers, plan
from .spec import InputSpec

__all__ = ["MatrixParsing", "fields_per_line", "record_line"]


class MatrixParsing:
    """The matrix parsing of :class:`.csv.CsvReader` (a base class of it: these methods use its
    options, its header and its Arrow options)."""

    def _uniform_type(self):
        """The Arrow type of every column when the table is wide and all its columns have that one
        numeric type (a feature matrix), else None: see :meth:`_parse_uniform` (which parses
        ``t``, that type)."""
        if len(self.header or ()) < WIDE_COLUMNS or self.schema_types is None:
            return None
        types = {self.schema_types.get(n) for n in self.header}
        if len(types) != 1:
            return None
        t = types.pop()
        pa = self.pa
        return t if t is not None and (pa.types.is_integer(t) or pa.types.is_floating(t)) else None

    def _one_column(self, piece: bytes, spec: InputSpec, t=None):
        """The values of ``piece`` (rows of a wide table) as one Arrow column of type ``t`` (None:
        the one type pyarrow infers for them all), and its number of lines: every delimiter made a
        newline, so pyarrow converts one column of rows x columns values instead of thousands of
        short ones (its costs per column and piece dominate a wide table: 2,000 columns parse ~3x
        faster so). Only when each line has exactly the header's number of fields, with no quotes,
        blank lines or lone CRs, and every value converts; otherwise None."""
        import pyarrow as pa
        import pyarrow.csv as pc

        ncols = self._ncols()
        delim = self._delimiter(spec)
        if b'"' in piece or len(delim) != 1 or not 0 < ord(delim) < 128 or delim in "\r\n":
            return None
        if b"\r" in piece and piece.count(b"\r") != piece.count(b"\r\n"):
            return None
        raw = np.frombuffer(piece, np.uint8)
        seps = raw == ord(delim)
        lines = fields_per_line(piece, seps, ncols - 1)
        if not lines:
            return None
        # the delimiters made newlines: less their code's distance to a newline's
        # (numpy's two passes take a sixth of bytes.replace's time, with a delimiter every few bytes)
        # in memory Arrow owns: its parsing threads may release the buffer last (see arrow_owned)
        buf = pa.allocate_buffer(len(raw))
        one = np.frombuffer(buf, dtype=np.uint8)
        np.multiply(seps.view(np.uint8), np.uint8((ord(delim) - 10) % 256), out=one)  # wraps, as uint8 does
        np.subtract(raw, one, out=one)
        ro, po, co = self._arrow_options(spec)
        ro.column_names, ro.autogenerate_column_names = ["v"], False
        ro.block_size = max(1 << 20, len(piece) // 2) if self.options.threads else len(piece) + 1
        po.delimiter, po.newlines_in_values, po.ignore_empty_lines = delim, False, False
        co.column_types = {"v": t} if t is not None else {}
        try:
            values = pc.read_csv(buf, ro, po, co).column(0)
        except pa.ArrowInvalid:
            return None
        return (values, lines) if len(values) == lines * ncols else None

    def _parse_uniform(self, piece: bytes, spec: InputSpec, t) -> Batch | None:
        """A piece of a wide table of one numeric type ``t`` parsed as one column (see
        :meth:`_one_column`); None where that cannot be done, or for an empty integer: the piece
        is then parsed as usual, which widens types or reports the error."""
        got = self._one_column(piece, spec, t)
        if got is None:
            return None
        values, lines = got
        if values.null_count and not self.pa.types.is_floating(t):
            return None
        from ..arrowconv import arrow_to_numpy

        matrix = np.ascontiguousarray(arrow_to_numpy(values).reshape(lines, len(self.header)).T)
        return Batch.from_matrix(self.header, matrix)  # the schema is the header's

    def _infer_uniform(self, body: bytes, spec: InputSpec):
        """The one Arrow type of every column of a wide table (rows ``body``), inferred from one
        column of all its values (:meth:`_one_column`): pyarrow's inference column by column costs
        ~40 us a column (2,000 columns: 0.1-0.25 s before anything else can start). Only where the
        answer is the one column-by-column inference gives: int64 when every value is an integer;
        float64 when none is empty and every column holds a value that is not an integer (a column
        of integral values alone may have been written ``1``, int64, or ``1.0``, float64). Else
        None: the types are inferred column by column."""
        if self._ncols() < WIDE_COLUMNS or self.column_types or self.widened:
            return None
        got = self._one_column(body, spec)
        if got is None:
            return None
        values, lines = got
        pa = self.pa
        if values.null_count or not (pa.types.is_int64(values.type) or pa.types.is_float64(values.type)):
            return None
        if pa.types.is_float64(values.type):
            from ..arrowconv import arrow_to_numpy

            m = arrow_to_numpy(values).reshape(lines, len(self.header))
            if np.any(np.all(np.isfinite(m) & (m == np.trunc(m)), axis=0)):
                return None
        return values.type

    def _probe_wide(self, piece: bytes, end: int, spec: InputSpec, count: int) -> Schema:
        """The schema of a table of ``count`` > MAX_COLUMNS columns, stacked (see csvwide): every
        column of one number type, inferred from the first rows as one column of values."""
        if self.options.header:
            self.wide = WideHeader(record_line(piece[:end]), self._delimiter(spec), spec.name)
            body = piece[end:]
        else:
            self.wide = generated_header(count, self.options.column_names, spec.name)
            body = piece
        self.groups, self.rest = plan(self.wide, list(self.options.stack_columns or []), spec.name)
        self.stacked = True
        if self.options.column_types:
            raise OptionsError(
                f"--column-type with a table of more than {MAX_COLUMNS} columns: its columns are read as one "
                "matrix of one number type"
            )
        t = self.pa.float64() if self.widened.get("*") == "float64" else None
        if t is None:
            got = self._one_column(body, spec)
            if got is None or not (self.pa.types.is_int64(got[0].type) or self.pa.types.is_float64(got[0].type)):
                raise self._not_matrix(body, spec, 0)
            t = self.pa.float64() if got[0].null_count else got[0].type
        self.wide_type = t
        dt = np.dtype(t.to_pandas_dtype()).str
        at = [(int(j), Field(self.wide.name(int(j)), FIXED, dt)) for j in self.rest]
        at += [(int(g.columns[0]), Field(g.name, FIXED, dt, (len(g.columns),))) for g in self.groups]
        fields = tuple(f for _, f in sorted(at, key=lambda x: x[0]))
        if len({f.name for f in fields}) != len(fields):
            raise OptionsError("--stack-columns: a stacked column's name is the name of another column")
        self.schema_types = None
        return Schema(fields)

    def _not_matrix(self, piece: bytes, spec: InputSpec, row0: int | None) -> InputError:
        got = self._one_column(piece, spec) if b'"' not in piece else None
        if got is not None:
            return not_numbers(got[0], self._ncols(), self.wide, spec.name, row0)
        return bad_rows(piece, self._ncols(), self._delimiter(spec), spec.name, row0)

    def _parse_wide(self, piece: bytes, spec: InputSpec, row0: int | None) -> Batch:
        """A piece of rows of a wide table as the stacked columns (slices of its matrix)."""
        from ..arrowconv import arrow_to_numpy

        t = self.wide_type
        got = self._one_column(piece, spec, t)
        if got is None or (got[0].null_count and not self.pa.types.is_floating(t)):
            if self.pa.types.is_integer(t) and self._one_column(piece, spec, self.pa.float64()) is not None:
                self.widened["*"] = "float64"  # a number that is not an integer (or an empty one)
                self.schema = self._probe()
                raise SchemaChanged(dict(self.widened))
            raise self._not_matrix(piece, spec, row0)
        values, lines = got
        matrix = arrow_to_numpy(values).reshape(lines, self._ncols())
        cols: dict = {}
        for g in self.groups:
            part = matrix[:, g.run[0] : g.run[1]] if g.run is not None else matrix[:, g.columns]
            cols[g.name] = np.ascontiguousarray(part)
        for j in self.rest.tolist():
            cols[self.wide.name(j)] = np.ascontiguousarray(matrix[:, j])
        return Batch({f.name: cols[f.name] for f in self.schema}, lines)


def fields_per_line(piece: bytes, seps: np.ndarray, want: int) -> int:
    """The number of lines of ``piece`` if each holds exactly ``want`` delimiters (``seps``: where
    they are), else 0. Long lines (a wide table's, a hundred or so per piece) are found one by one
    (``find`` skips a line's bytes at memory speed), short ones all at once."""
    n = len(piece)
    if not n:
        return 0
    first = piece.find(b"\n")
    if first < 0 or first >= 1 << 10:  # lines of 1 KiB and more
        start = lines = 0
        while start < n:
            end = piece.find(b"\n", start)
            end = n if end < 0 else end
            if np.count_nonzero(seps[start:end]) != want:
                return 0
            start, lines = end + 1, lines + 1
        return lines
    raw = np.frombuffer(piece, np.uint8)
    ends = np.flatnonzero(raw == 10)
    if not piece.endswith(b"\n"):
        ends = np.append(ends, n)
    if int(np.count_nonzero(seps)) != len(ends) * want:
        return 0
    before = np.searchsorted(np.flatnonzero(seps), ends)  # delimiters before each line's end
    return len(ends) if before[0] == want and not np.any(np.diff(before) != want) else 0


def record_line(record: bytes) -> bytes:
    """A record without its line end."""
    return record[: -2 if record.endswith(b"\r\n") else -1 if record.endswith(b"\n") else None]
