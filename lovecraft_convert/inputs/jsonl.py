"""JSON Lines input: one JSON object per line (UTF-8, LF or CRLF; blank lines skipped).

Keys become columns; nested objects become dotted columns (``meta.lang``); lists of numbers become
sequences, lists of strings string lists. An input where no line holds an object (every line an
array, a number or a string) is read as one column ``value``.

Two parsers read the pieces of input (whole lines, a few MiB each):

* the fast one, ``pyarrow.json``, with an explicit schema of the columns' current types; it runs on
  all cores, releases the GIL and skips the keys ``--columns`` leaves out without building them;
* the exact one (:mod:`.jsonexact`, Python's ``json``) for the first records (types are inferred
  from them) and for any piece the fast one refuses or cannot be trusted with. It names the line
  and key of every problem.

A piece goes to the fast parser only if every line in it, stripped of whitespace, starts with ``{``
and ends with ``}``, it is valid UTF-8, and the fast parser returns one record per line, so the fast
parser never accepts what the exact one refuses (two objects on one line, an object over two).

Types are inferred over the whole input: a value of a kind a column has not held widens it
(:mod:`.jsontypes`); the reader then reads on to the end of its input (or part) only to learn every
widening, and raises :class:`~.base.SchemaChanged` with all of them, so a job starts over once.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator

import numpy as np

from ..errors import InputError, OptionsError, SchemaError
from ..schema import MAX_COLUMNS, Batch, Schema
from ..selection import TypeLookup
from .base import Part, Reader, ReadOptions, SchemaChanged
from .jsondepth import MAX_DEPTH, first_too_deep, first_too_many_keys, key_path
from .jsonexact import ExactParser, LineError, Parsed
from .jsontypes import (
    FIXED_TYPES,
    Bad,
    Col,
    Fallback,
    arrow_type,
    build,
    field_of,
    norm,
    observe,
    problem,
    read_kind,
    state_from_name,
    state_name,
    union,
)
from .spec import InputSpec
from .streams import open_range, open_stream

BOM = b"\xef\xbb\xbf"
PROBE_BYTES = 1 << 20  # the first records (at most this many bytes, and PROBE_RECORDS records),
PROBE_RECORDS = 1000  # read by the exact parser (in every worker), settle the first types
EXACT_BYTES = 1 << 20  # the exact parser takes pieces in steps of this many bytes
_DIGITS = re.compile(rb"[0-9]{16}")


class _LongLine(Exception):
    pass


class _TooDeep(Exception):
    """A line of a piece no parser may see: (its line in the piece, the message, the key, the hint)."""


class JsonlReader(Reader):
    takes_column_types = True
    takes_logical_types = True
    late_columns = True
    widens = True
    unit, a_unit = "line", "a line"  # what messages count records in (a JSON array's reader: elements)

    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        super().__init__(specs, options)
        self.prepare_rereads(FIXED_TYPES)
        self.selected = list(dict.fromkeys(options.columns)) if options.columns else None
        self.cols: dict[str, Col] = {}
        self.mode = "records"
        self.widened: dict[str, str] = {}  # column -> state, for readers in other processes
        self.null_counts: dict[str, int] = {}
        self._counted = False  # null_counts cover the whole input (a pass of batches() ended)
        self._collect = False  # a type widened: read on only to learn every widening
        self._changed = False  # a column's state changed since the schema was settled
        self._every_change = False  # in a worker's part: every change of state starts the job over
        self._stream = None
        self._base = 0
        self._is_nl = np.empty(0, dtype=bool)
        self._probe()
        self._settle()
        if options.text_column is not None and options.text_column in self.pending:
            self._check_pending()  # the text to tokenize is not in the first records: is it anywhere?

    # -- columns ------------------------------------------------------------------------------

    def _probe(self) -> None:
        """Types from the first records of the first inputs (the exact parser)."""
        sel = set(self.selected) if self.selected is not None else None
        fixed = self.fixed_types = TypeLookup(self.options.column_types)
        self.parser = ExactParser(self.cols, self.mode, sel, self.options.errors, fixed)
        self.parser.keys = {}
        budget = PROBE_BYTES
        probed_all = True
        records = 0
        self.probe_specs = 0  # the leading inputs the probe reads (see Reader.probe_specs)
        for spec in self.specs:
            line = 0
            self.probe_specs += 1
            try:
                for piece in self._chunks(spec, None, True, min(PROBE_BYTES, self._chunk())):
                    data = bytes(piece)
                    nl = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
                    if len(nl) > PROBE_RECORDS - records:  # lines, so at most that many records
                        data = data[: int(nl[PROBE_RECORDS - records - 1]) + 1]
                        budget = 0
                    _check_depth(data)  # (before any parser sees it)
                    if not records and self.mode == "records":
                        self.mode = self.parser.mode = _mode_of(data)
                    parsed = self._exact_parse(spec, data, line)
                    line += parsed.lines_read
                    records += len(parsed.rows)
                    for name, state in parsed.states.items():
                        self.cols[name].flags = state
                    budget -= len(piece)
                    if budget <= 0:
                        probed_all = False
                        break
            except _LongLine as e:
                raise self._long_line(spec, line, e) from None
            except _TooDeep as e:
                raise _too_deep(spec, line, e, self.unit) from None
            if budget <= 0:
                break
        for name in [*(self.selected or []), *fixed]:  # named keys not met yet
            if name not in self.cols:
                self.cols[name] = Col(name, None, "N" if records else "", fixed=fixed.get(name))
        if self.selected is not None:
            self.cols = {n: self.cols[n] for n in self.selected}
            self.parser.cols = self.cols
        self.parser.refresh()
        self.probe_keys = [c.name for c in self.cols.values() if c.path is not None] + list(self.parser.keys or {})
        self.parser.keys = None
        for sel, _t in fixed.patterns:  # a pattern names keys of the first records
            if not any(fnmatch.fnmatchcase(k, sel) for k in self.probe_keys):
                listed = ", ".join(self.probe_keys[:50]) if self.probe_keys else "none"
                raise SchemaError(
                    f"--column-type {sel}=...: no key matches '{sel}' in {', '.join(s.name for s in self.specs)}",
                    hint=f"keys in the first records are {listed}",
                )
        self._records = records  # records the probe read: a key met later was missing in them
        if probed_all and not records:
            raise InputError(
                f"{', '.join(s.name for s in self.specs)}: empty input (no records)", hint="check the file"
            )
        if probed_all and not self.cols:
            raise SchemaError(
                f"{', '.join(s.name for s in self.specs)}: no record has a key (every line is {{}})",
                hint="there is nothing to convert",
            )

    def _settle(self) -> None:
        """The schema and the fast parser's Arrow schema from the columns' current states."""
        cols = [c for c in self.cols.values() if c.flags != "O"]  # ("O": an object, its keys are columns)
        early = [c for c in cols if not c.late]
        late = sorted((c for c in cols if c.late), key=lambda c: c.name)
        self.order = [c.name for c in early + late]
        self.schema = Schema(tuple(field_of(self.cols[n]) for n in self.order))
        self.pending = [c.name for c in cols if c.path is None]
        self.arrow_schema = _arrow_schema(cols) if not self.pending else None
        self.parser.refresh()
        self._changed = False

    def widen(self, widened: dict[str, str]) -> None:
        """Join states other readers met (``~`` names, from SchemaChanged), or read columns as the
        types a dataset holds (``verify --against``: the type names of its schema; a scalar column
        is then read as that type, as ``--column-type`` would, so that the kinds that made it, say
        booleans and nulls for float64, read back as they were written)."""
        changed = False
        for name, tname in widened.items():
            col = self.cols.get(name)
            got = state_from_name(tname, col)
            if got is None:
                continue
            state, path = got
            if col is None:
                if self.selected is not None:
                    continue
                col = self.cols[name] = Col(name, path or tuple(name.split(".")), late=True)
                col.fixed = self.fixed_types.get(name)
            elif col.path is None:
                col.path = path or tuple(name.split("."))
            if col.fixed is not None:
                continue
            if state.startswith("="):  # a dataset's scalar type
                col.fixed = state[1:]
                changed = True
                continue
            new = union(col.flags, state)
            if new is None:
                raise SchemaError(f"column '{name}': {tname} does not fit {col.flags}")
            if new != col.flags or col.late:
                col.flags = new
                self.widened[name] = state_name(col)
                changed = True
        if changed:
            self._settle()

    def source_of(self, column: str) -> str:
        return ", ".join(s.name for s in self.specs)

    def _apply(self, name: str, state: str, path: tuple[str, ...] | None = None) -> None:
        """A column met a new kind of value (or was met for the first time). A new column, or one
        whose type changes, makes this pass a collecting one (the job starts over at its end); so
        does any change in a part read by a worker, since other workers learn of it only then (see
        :mod:`.jsontypes`: the kinds met decide refusals too). Otherwise the column's state grows
        and reading goes on."""
        col = self.cols[name]
        if path is not None and col.path is None:
            col.path = path
        if state == col.flags and path is None:
            return
        before = field_of(col)
        col.flags = state
        self.widened[name] = state_name(col)
        self._changed = True
        if name not in self.order or self._every_change or state == "O" or field_of(col) != before:
            self._collect = True

    # -- reading ------------------------------------------------------------------------------

    def check_columns(self) -> None:
        """Raise now (not when the rows are read) for a column asked for that no record holds."""
        self._check_pending()

    def progress_done(self) -> int:
        return self._base + (self._stream.raw_count() if self._stream is not None else 0)

    def batches(self) -> Iterator[Batch]:
        self._check_pending()
        self._base = 0
        self.null_counts = {n: 0 for n in self.order}
        self._counted = False
        rows = 0
        for spec in self.specs:
            for batch in self._read(spec, None, 0, True):
                rows += batch.num_rows
                yield batch
        self._end_pass()
        self._counted = True
        if rows == 0:
            raise InputError(
                f"{', '.join(s.name for s in self.specs)}: empty input (no records)", hint="check the file"
            )

    def column_info(self) -> dict[str, dict]:
        """Nulls (null values and missing keys) per column, once a pass has read the whole input."""
        return {n: {"nulls": self.null_counts.get(n, 0)} for n in self.order} if self._counted else {}

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        self._check_pending()
        return self._byte_partitions(target_bytes, quoted=False, mapper=mapper)

    def part_batches(self, part: Part) -> Iterator[Batch]:
        self._every_change = True
        self.null_counts = {n: 0 for n in self.order}
        for i in part.spec_range:
            spec = self.specs[i]
            stream = None if part.start is None else open_range(spec.path, part.start, part.end)
            yield from self._read(spec, stream, part.line0, part.start in (None, 0))
        if self._collect:
            # a type widened: learn every widening of the rest of the input too, so that the job
            # starts over once, not once per part that widens something
            if part.end is not None and spec.size is not None and part.end < spec.size:
                for _ in self._read(spec, open_range(spec.path, part.end, spec.size), self._line_end, False):
                    pass
            for other in self.specs[part.spec_range.stop :]:
                for _ in self._read(other, None, 0, True):
                    pass
        self._end_pass()

    def _end_pass(self) -> None:
        if self._collect:
            self._collect = False
            self._settle()
            raise SchemaChanged(dict(self.widened))
        if not self.order:
            raise SchemaError(
                f"{', '.join(s.name for s in self.specs)}: no record has a key (every line is {{}})",
                hint="there is nothing to convert",
            )

    def _read(self, spec: InputSpec, stream, line0: int, strip_bom: bool) -> Iterator[Batch]:
        line = line0
        try:
            for piece in self._chunks(spec, stream, strip_bom, self._chunk()):
                batches, n = self._piece(spec, piece, line)
                line += n
                if not self._collect:
                    yield from batches
            self._line_end = line
        except _LongLine as e:
            raise self._long_line(spec, line, e) from None
        except _TooDeep as e:
            raise _too_deep(spec, line, e, self.unit) from None

    def _long_line(self, spec: InputSpec, line: int, e: _LongLine) -> InputError:
        return InputError(
            f"{self.a_unit} longer than {e.args[0]} bytes",
            where=f"{spec.name}, {self.unit} {line + 1}",
            hint=f"raise --max-memory ({self.a_unit} must fit in 1/32 of it)",
        )

    def _chunk(self) -> int:
        return int(min(8 << 20, max(1 << 16, self.options.batch_bytes // 2)))

    def _max_line(self) -> int:
        return int(max(1 << 20, self.options.batch_bytes // 2))

    def _chunks(self, spec: InputSpec, stream, strip_bom: bool, chunk: int) -> Iterator[memoryview]:
        """The decompressed input in pieces of whole lines, each a view of one buffer that is
        reused for the next piece (only the unfinished last line is copied to its front; fresh
        buffers would cost the kernel a page-clearing pass each). A line longer than the limit is
        refused as its bytes arrive."""
        max_line = self._max_line()
        room = max_line  # for the unfinished line carried to the next piece
        if stream is None and spec.compression is None and spec.size is not None and spec.size < chunk:
            chunk, room = spec.size + 1, 1  # a small file: read at once (no line carried; room for a newline)
        buf = bytearray(chunk + room)
        view = memoryview(buf)
        carry = 0  # bytes of an unfinished line at the front of buf
        first = strip_bom
        with self.open_spec(spec, stream) as stream:
            while True:
                n = carry
                while n < carry + chunk:  # fill (a stream may return less than asked)
                    got = stream.readinto(view[n : carry + chunk])
                    if not got:
                        break
                    n += got
                eof = n < carry + chunk
                start = 0
                if first:
                    first = False
                    if buf.startswith(BOM):
                        start = 3
                if eof:
                    if n > start:
                        if buf[n - 1] != 10:
                            buf[n] = 10
                            n += 1
                        yield view[start:n]
                    break
                cut = buf.rfind(b"\n", start, n) + 1
                if cut == 0:
                    if n - start > max_line:
                        raise _LongLine(max_line)
                    view[: n - start] = view[start:n]
                    carry = n - start
                    continue
                yield view[start:cut]  # (used up before the next piece is read into buf)
                carry = n - cut
                if carry > max_line:
                    raise _LongLine(max_line)
                view[:carry] = view[cut:n]
            self._base += stream.raw_count()
            self._stream = None

    # -- one piece ----------------------------------------------------------------------------

    def _piece(self, spec: InputSpec, piece: memoryview | bytes, line0: int) -> tuple[list[Batch], int]:
        """The batches of a piece of whole lines (none while collecting widenings) and its line count.

        A piece the fast parser cannot take is cut in steps of EXACT_BYTES, which it tries again:
        only the steps it still cannot take go to the exact parser. No parser sees a piece before
        its lines are known to nest at most MAX_DEPTH deep (pyarrow's reader would overflow its
        stack on a deep one)."""
        nl = self._newlines(piece)
        _check_depth(piece, nl)
        got = self._fast_piece(spec, piece, line0, nl)
        if got is not None:
            return got
        out: list[Batch] = []
        lines = 0
        small = len(piece) <= EXACT_BYTES
        for sub in _split(bytes(piece), EXACT_BYTES):
            got = None if small else self._fast_piece(spec, sub, line0 + lines)
            if got is None:
                got = self._exact_piece(spec, sub, line0 + lines)
            out += got[0]
            lines += got[1]
        return out, lines

    def _fast_piece(self, spec: InputSpec, piece, line0: int, nl=None) -> tuple[list[Batch], int] | None:
        fast = self._fast(piece, nl)
        if fast is None:
            return None
        tables, row_lines, nlines, digits = fast
        nulls: dict[str, int] = {}
        try:
            out = []
            base = 0
            for rb in tables:
                arrays = {n: rb.column(n) for n in self.order}
                batch = self._columns(arrays, rb.num_rows, True, digits, spec, line0, row_lines, base, nulls)
                base += rb.num_rows
                if batch is not None:
                    out.append(batch)
        except Fallback:
            return None
        self._count(nulls)
        return out, nlines

    def _exact_piece(self, spec: InputSpec, piece: bytes, line0: int) -> tuple[list[Batch], int]:
        parsed = self._exact_parse(spec, piece, line0)
        for name, path in parsed.new.items():
            col = self.cols[name]
            if name not in self.order:  # met after the first records, which lacked it
                col.late = True
                if self._records:
                    col.flags = union(col.flags, "N") or col.flags
            self._apply(name, union(col.flags, parsed.states.get(name, "")) or col.flags, path)
        for name, state in parsed.states.items():
            self._apply(name, state)
        if self._changed:
            self._settle()
        if self._collect:
            return [], parsed.lines_read
        nulls: dict[str, int] = {}
        arrays = self.parser.arrays(parsed, self.order)
        batch = self._columns(arrays, len(parsed.rows), False, None, spec, 0, parsed.lines, 0, nulls)
        self._count(nulls)
        return ([batch] if batch is not None else []), parsed.lines_read

    def _count(self, nulls: dict[str, int]) -> None:
        for name, n in nulls.items():
            self.null_counts[name] = self.null_counts.get(name, 0) + n

    def _exact_parse(self, spec: InputSpec, piece: bytes, line0: int) -> Parsed:
        try:
            return self.parser.parse(bytes(piece), line0)
        except LineError as e:
            where = f"{spec.name}, {self.unit} {e.line}" + (f", key '{e.key}'" if e.key is not None else "")
            raise InputError(e.message, where=where, hint=e.hint) from None

    def _columns(self, arrays: dict, rows: int, fast: bool, digits, spec, line0: int, row_lines, base: int, nulls):
        """The batch of Arrow arrays read as the current types; None when a column widened (or
        while collecting). ``row_lines`` maps rows to lines (exact parser: line numbers; fast
        parser: line indices in the piece, None when every line is a record)."""
        changed = []
        for name in self.order:
            col = self.cols[name]
            seen = observe(arrays[name], col, fast, digits)
            if seen and col.fixed is None:
                new = union(col.flags, norm(seen | col.elements(), col.is_list))
                if new != col.flags:
                    if new is None or problem(new) is not None:
                        if fast:
                            raise Fallback  # the exact parser names the line
                        raise SchemaError(f"{spec.name}, key '{name}': cannot hold {new}")  # pragma: no cover
                    changed.append((name, new))
        for name, new in changed:
            self._apply(name, new)
        if self._changed:
            self._settle()
        if self._collect:
            return None
        cols = {}
        for name in self.order:
            arr = arrays[name]
            try:
                cols[name] = build(arr, self.cols[name])
            except Bad as e:
                row = base + (e.row or 0)
                line = line0 + 1 + (int(row_lines[row]) if row_lines is not None else row) if fast else row_lines[row]
                raise InputError(
                    e.message, where=f"{spec.name}, {self.unit} {line}, key '{name}'", hint=e.hint
                ) from None
            nulls[name] = nulls.get(name, 0) + arr.null_count
        return Batch(cols, rows)

    def _newlines(self, piece) -> np.ndarray:
        """Offsets of the newlines of a piece (through a reused buffer: no fresh pages per piece)."""
        arr = np.frombuffer(piece, dtype=np.uint8)
        if len(self._is_nl) < len(arr):
            self._is_nl = np.empty(len(arr) + len(arr) // 4, dtype=bool)
        return np.flatnonzero(np.equal(arr, 10, out=self._is_nl[: len(arr)]))

    def _fast(self, piece: memoryview | bytes, nl=None):
        """``pyarrow.json`` over the piece: (record batches, row -> line index or None, lines,
        digits()), or None where the exact parser must read it (``nl``: its newlines, when known)."""
        import pyarrow as pa
        import pyarrow.json as pj

        if self.arrow_schema is None or not self.order:
            return None
        if not _utf8(piece):
            if self.options.errors != "replace":
                return None  # the exact parser names the line
            piece = bytes(piece).decode("utf-8", "replace").encode("utf-8")
            nl = None
        arr = np.frombuffer(piece, dtype=np.uint8)
        if nl is None:
            nl = self._newlines(piece)
        starts = np.empty(len(nl), dtype=np.int64)
        starts[0] = 0
        starts[1:] = nl[:-1] + 1
        ends = nl - 1  # last byte of each line (before LF, and before CR)
        cr = (ends >= starts) & (arr[np.maximum(ends, 0)] == 13)
        ends = ends - cr
        nonempty = ends >= starts
        row_lines = None
        if self.mode == "records":
            ok = nonempty & (arr[starts] == 123) & (arr[np.maximum(ends, 0)] == 125)
            if not ok.all():
                keep = np.ones(len(nl), dtype=bool)
                for i in np.flatnonzero(~ok).tolist():
                    line = bytes(piece[starts[i] : ends[i] + 1]).strip(b" \t\r")
                    if not line:
                        keep[i] = False
                    elif not (line.startswith(b"{") and line.endswith(b"}")):
                        return None
                row_lines = np.flatnonzero(keep)
            data = piece
        else:
            if not nonempty.all():
                return None
            data = b'{"value":' + bytes(piece[:-1]).replace(b"\n", b'}\n{"value":') + b"}\n"
        expected = len(nl) if row_lines is None else len(row_lines)
        behaviour = "error" if self.mode == "values" else "ignore" if self.selected is not None else "infer"
        try:
            # one block: one chunk per column (no copy to combine), parsed on one core while the
            # writer compresses on the other
            table = pj.read_json(
                pa.py_buffer(data),
                read_options=pj.ReadOptions(block_size=len(data) + 64, use_threads=False),
                parse_options=pj.ParseOptions(
                    explicit_schema=self.arrow_schema,
                    unexpected_field_behavior=behaviour,
                    newlines_in_values=False,
                ),
            )
        except (pa.ArrowException, ValueError, UnicodeError, OSError):
            return None
        if table.num_rows != expected or not table.schema.equals(self.arrow_schema):
            return None
        while any(pa.types.is_struct(t) for t in table.schema.types):
            table = table.flatten()
        found: list[bool] = []

        def digits() -> bool:
            if not found:
                found.append(_DIGITS.search(piece) is not None)
            return found[0]

        return table.to_batches(), row_lines, len(nl), digits

    # -- keys named but not met in the first records --------------------------------------------

    def _check_pending(self) -> None:
        """A key named by --columns or --column-type that the first records do not hold must appear
        somewhere in the input (its JSON text is looked for, in one pass that stops once every
        such key is found)."""
        if not self.pending:
            return
        needles = {n: _needles(n) for n in self.pending}
        missing = set(needles)
        keep = max(len(x) for v in needles.values() for x in v)
        for spec in self.specs:
            tail = b""
            with open_stream(spec, max_ratio=self.options.max_ratio) as f:
                while missing:
                    data = f.read(8 << 20)
                    if not data:
                        break
                    buf = tail + data
                    for n in list(missing):
                        if any(x in buf for x in needles[n]):
                            missing.discard(n)
                    tail = buf[-keep:]
        if missing:
            name = next(n for n in self.pending if n in missing)
            listed = ", ".join(self.probe_keys[:50]) if self.probe_keys else "none"
            if name in self.options.column_types:
                raise SchemaError(
                    f"--column-type {name}=...: no key '{name}' in {self.source_of(name)}",
                    hint=f"keys in the first records are {listed}",
                )
            if name == self.options.text_column:
                raise SchemaError(
                    f"{self.source_of(name)}: no column '{name}' to tokenize",
                    hint=f"columns in the first records are {listed}; pass --column NAME",
                )
            raise OptionsError(
                f"{self.options.asked_by.get(name, '--columns')}: no column '{name}' in {self.source_of(name)}",
                hint=f"columns in the first records are {listed}",
            )


def _check_depth(piece, nl=None) -> None:
    """Raise _TooDeep for the first line of the piece nesting deeper than MAX_DEPTH, or holding
    more than MAX_COLUMNS keys (each a column: Python's json would build them all first)."""
    found = first_too_deep(piece, MAX_DEPTH, nl)
    if found is not None:
        line, offset = found
        start = bytes(piece[:offset]).rfind(b"\n") + 1
        raise _TooDeep(
            line,
            f"objects and arrays nested more than {MAX_DEPTH} levels deep",
            key_path(bytes(piece[start:offset]), offset - start),
            f"flatten the record (records are read up to {MAX_DEPTH} levels deep)",
        )
    wide = first_too_many_keys(piece, MAX_COLUMNS, nl)
    if wide is not None:
        raise _TooDeep(
            wide,
            f"a record of more than {MAX_COLUMNS} keys (each key is a column)",
            None,
            "split the record, or keep such data in one key (a list of numbers becomes one column)",
        )


def _too_deep(spec: InputSpec, line: int, e: _TooDeep, unit: str) -> InputError:
    """``unit``: what the reader counts records in (a line, or a JSON array's element)."""
    index, message, keys, hint = e.args
    return InputError(
        message, where=f"{spec.name}, {unit} {line + index + 1}" + (f", key '{keys}'" if keys else ""), hint=hint
    )


def _needles(name: str) -> list[bytes]:
    import json

    last = name.rsplit(".", 1)[-1]
    return list(dict.fromkeys([json.dumps(last).encode(), json.dumps(last, ensure_ascii=False).encode()]))


def _mode_of(piece: bytes) -> str:
    """``values`` when the first record of the input is not an object, else ``records``."""
    import json

    for raw in piece.split(b"\n"):
        if raw.strip(b" \t\r"):
            try:
                value = json.loads(raw)
            except (ValueError, RecursionError):
                return "records"  # the exact parser says what is wrong with it
            return "records" if isinstance(value, dict) else "values"
    return "records"


def _utf8(piece) -> bool:
    """Is the piece valid UTF-8 (Arrow's vectorised check, as it validates a string array)?"""
    import pyarrow as pa

    data = pa.Array.from_buffers(
        pa.large_string(), 1, [None, pa.py_buffer(np.array([0, len(piece)], dtype=np.int64)), pa.py_buffer(piece)]
    )
    try:
        data.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _split(piece: bytes, step: int) -> Iterator[bytes]:
    """Whole lines of ``piece`` in steps of about ``step`` bytes."""
    pos = 0
    while pos < len(piece):
        end = piece.find(b"\n", min(len(piece) - 1, pos + step - 1)) + 1 or len(piece)
        yield piece[pos:end]
        pos = end


def _arrow_schema(cols):
    """The fast parser's schema: columns nested as their keys are."""
    import pyarrow as pa

    tree: dict = {}
    for c in cols:
        node = tree
        for k in c.path[:-1]:
            node = node.setdefault(k, {})
        node[c.path[-1]] = arrow_type(read_kind(c))

    def fields(node: dict) -> list:
        return [pa.field(k, pa.struct(fields(v)) if isinstance(v, dict) else v) for k, v in node.items()]

    return pa.schema(fields(tree))
