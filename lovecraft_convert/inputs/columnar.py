"""What the Arrow-based inputs share (Parquet, Arrow IPC files and streams, Hugging Face
``save_to_disk`` directories): the schema of all their files, column selection (``--columns``
reads only those columns), ``--column-type``, nulls, and parts made of whole blocks (Parquet row
groups, Arrow record batches) for parallel workers.

Each kind is a subclass that lists its files (:meth:`ColumnarReader.open_files`), finds their
blocks (:meth:`ColumnarReader.load_blocks`) and reads a range of blocks as bounded Arrow record
batches (:meth:`ColumnarReader.read_file`); the type decisions are :mod:`.arrowtypes`'.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..errors import InputError, SchemaError
from ..schema import Batch, Schema
from ..selection import ColumnTypes
from .arrowtypes import (
    ARROW_ERRORS,
    Column,
    Converter,
    NeedsFloat,
    check_names,
    plan_columns,
    refusal,
    refuse,
    type_name,
)
from .base import Part, Reader, ReadOptions, SchemaChanged
from .spec import InputSpec

DAMAGED = "the file is damaged or not what its name says; re-create or re-download it"


@contextmanager
def reading(name: str, where: str = ""):
    """pyarrow's errors (corrupt pages, bad footers, checksum mismatches) as one InputError line."""
    try:
        yield
    except ARROW_ERRORS as e:
        text = " ".join(str(e).split()) or type(e).__name__
        text = text if len(text) <= 240 else text[:237] + "..."
        raise InputError(f"{name}{', ' + where if where else ''}: cannot be read ({text})", hint=DAMAGED) from None


def guarded(it, name: str, where: str = "") -> Iterator:
    """Items of a pyarrow iterator, its errors mapped by :func:`reading` (the consumer's are not)."""
    while True:
        with reading(name, where):
            try:
                item = next(it)
            except StopIteration:
                return
        yield item


@dataclass
class Block:
    """A unit of a file that is read whole or not at all: a Parquet row group, an Arrow record batch."""

    rows: int
    bytes: int  # on disk (progress)
    memory: int  # estimated bytes in memory once read


@dataclass
class SourceFile:
    spec: int  # the input it belongs to (a directory input has several files)
    path: str
    name: str  # for messages
    schema: object  # pa.Schema
    info: dict = field(default_factory=dict)  # what inspect shows of it
    blocks: list[Block] | None = None  # None until needed (Arrow streams are scanned for them)
    nulls: set[str] = field(default_factory=set)  # columns whose metadata says they hold nulls

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.blocks or [])


class ColumnarReader(Reader):
    takes_column_types = True
    takes_logical_types = True
    columnar = True
    title = "Arrow"

    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        super().__init__(specs, options)
        for spec in specs:
            if spec.is_stdin:
                raise InputError(
                    f"<stdin>: {self.title} input is read from a file (by its blocks), not a pipe",
                    hint="save it to a file first",
                )
            if spec.compression is not None:
                raise InputError(
                    f"{spec.name}: a {spec.compression}-compressed {self.title} file cannot be read in place",
                    hint=f"decompress it first ({self.title} files compress their contents themselves)",
                )
        self.files: list[SourceFile] = self.open_files()
        if not self.files:
            raise InputError(f"{', '.join(s.name for s in specs)}: no data files", hint="check the input")
        self.widened: dict[str, str] = {}
        self.value_refused: dict[str, str] = {}  # (inspect) column -> why its values cannot be read
        self._done = 0
        self._plan()
        notes = {c.name: {"input_type": type_name(c.atype), **c.note} for c in self.read_columns if c.note}
        for spec in specs:
            spec.notes = {"columns": notes} if notes else None

    # -- what the kinds provide -------------------------------------------------------------------

    def open_files(self) -> list[SourceFile]:
        raise NotImplementedError

    def load_blocks(self, mapper=None) -> None:
        """Fill ``blocks`` of every file (``mapper``: an ordered map for the scanning, e.g. over workers)."""

    def read_file(self, f: SourceFile, blocks: tuple[int, int] | None, row0: int = 0) -> Iterator[tuple[object, int]]:
        """Record batches of blocks ``[b0, b1)`` of ``f`` (all of it when None), each of at most about
        ``batch_bytes`` in memory, with the row of the file (0-based) where each starts (``row0``:
        the rows of the file before block ``b0``)."""
        raise NotImplementedError

    # -- the schema ---------------------------------------------------------------------------

    def _plan(self) -> None:
        first = self.files[0]
        types = self.options.column_types
        if types:  # selections (a name, a range, a pattern) resolved against the leaf columns
            leaves = [c.name for c in plan_columns(first.schema, {}, {})]
            types = ColumnTypes(types).resolve(leaves, first.name)
        cols = plan_columns(first.schema, types, self.widened)
        for c in cols:  # (inspect) columns whose values no output can hold, found while reading
            if c.name in self.value_refused:
                refuse(c, self.value_refused[c.name])
        check_names(cols, first.name)
        early = {
            c.name: "float64"
            for c in cols
            if c.how == "number"
            and not c.to_float
            and c.field.np_dtype.kind != "f"
            and any(c.name in f.nulls for f in self.files)
        }
        if early:  # the files' statistics say these int/bool columns hold nulls
            self.widened.update(early)
            cols = plan_columns(first.schema, types, self.widened)
        for f in self.files[1:]:
            if f.schema.equals(first.schema, check_metadata=False):
                continue
            self._same_columns(cols, plan_columns(f.schema, types, self.widened), f, first)
        readable = [c for c in cols if not c.refused]
        wanted = self.options.columns
        if wanted:
            by_name = {c.name: c for c in cols}
            read: list[Column] = []
            for w in wanted:
                c = by_name.get(w)
                if c is not None and c.refused:
                    raise refusal(c, first.name, [x.name for x in readable])
                if c is not None and c not in read:
                    read.append(c)
        else:
            bad = next((c for c in cols if c.refused), None)
            if bad is not None and not self.options.lenient:
                raise refusal(bad, first.name, [x.name for x in readable])
            read = readable
        self.columns = cols
        self.read_columns = read
        self.converter = Converter(read, self.options.errors)
        self.schema = Schema(tuple(c.field for c in readable))

    def _same_columns(self, cols: list[Column], other: list[Column], f: SourceFile, first: SourceFile) -> None:
        if [c.name for c in cols] != [c.name for c in other]:
            raise SchemaError(
                f"{f.name}: columns {[c.name for c in other]} differ from the first input's ({first.name}) "
                f"{[c.name for c in cols]}",
                hint="give inputs with the same columns, or convert them separately",
            )
        for a, b in zip(cols, other, strict=True):
            if a.field != b.field or a.how != b.how:
                raise SchemaError(
                    f"{f.name}, column '{a.name}': {type_name(b.atype)}, but {type_name(a.atype)} in {first.name}",
                    hint="give inputs with the same column types, or convert them separately",
                )

    def widen(self, widened: dict[str, str]) -> None:
        if widened:
            self.widened.update(widened)
            self._plan()

    def _convert(self, rb, f: SourceFile, row0: int) -> Batch:
        import pyarrow as pa

        try:
            return self.converter.batch(rb, f.name, row0)
        except NeedsFloat as e:  # met a null in an int/bool column: start over reading it as float64
            self.widened[e.name] = "float64"
            self._plan()
            raise SchemaChanged(dict(self.widened)) from None
        except InputError as e:  # inspect lists a column it cannot read (and why) and reads the others
            name, problem = getattr(e, "not_exact", (None, None))
            if name is None or not self.options.lenient or name in self.value_refused:
                raise
            self.value_refused[name] = problem
            self._plan()
            raise SchemaChanged(dict(self.widened)) from None
        except pa.ArrowException as e:  # whatever pyarrow refuses in these values: one line, no traceback
            text = " ".join(str(e).split())[:240]
            raise InputError(
                f"{f.name}, rows {row0 + 1}-{row0 + rb.num_rows}: cannot be read ({text})", hint=DAMAGED
            ) from None

    # -- reading ------------------------------------------------------------------------------

    def batches(self) -> Iterator[Batch]:
        self._done = 0  # bytes of the blocks read (compressed row groups, record batches)
        for f in self.files:
            for rb, row0 in self.read_file(f, None):
                yield self._convert(rb, f, row0)

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        """Whole blocks, gathered while they hold less than ``target_bytes`` (in memory); a block
        is never split (a row group larger than a part is one part, read in bounded batches)."""
        self.load_blocks(mapper)
        parts: list[Part] = []
        g = 0
        for fi, f in enumerate(self.files):
            start, rows, size, b0 = 0, 0, 0, 0
            for bi, b in enumerate(f.blocks):
                if rows and size + b.memory > target_bytes:
                    parts.append(
                        Part(len(parts), f.spec, line0=start, rows=(g + start, g + start + rows), blocks=(fi, b0, bi))
                    )
                    start, rows, size, b0 = start + rows, 0, 0, bi
                if not rows:
                    b0 = bi
                rows += b.rows
                size += b.memory
            if rows:
                parts.append(
                    Part(
                        len(parts),
                        f.spec,
                        line0=start,
                        rows=(g + start, g + start + rows),
                        blocks=(fi, b0, len(f.blocks)),
                    )
                )
            g += f.rows
        return parts or [Part(0, 0, rows=(0, 0), blocks=(0, 0, 0))]

    def part_batches(self, part: Part) -> Iterator[Batch]:
        fi, b0, b1 = part.blocks
        if b0 == b1:
            return
        f = self.files[fi]
        for rb, row0 in self.read_file(f, (b0, b1), part.line0):
            yield self._convert(rb, f, row0)

    # -- figures ------------------------------------------------------------------------------

    def progress_done(self) -> int:
        return self._done

    def memory_bytes(self) -> int | None:
        self.load_blocks()
        return sum(b.memory for f in self.files for b in f.blocks)

    def column_info(self) -> dict[str, dict]:
        nulls = self.converter.nulls
        out = {}
        for c in self.columns:
            d = {"input_type": type_name(c.atype), **c.note}
            if c.name in nulls:
                d["nulls"] = nulls[c.name]
            inside = self.converter.null_elements.get(c.name)
            if inside:  # elements of lists (a float's NaN, a string's ""), apart from missing lists
                d["null_elements"] = inside
            if c.refused:
                d["refused"] = c.problem
            out[c.name] = d
        return out

    def input_details(self, i: int) -> dict:
        mine = [f for f in self.files if f.spec == i]
        if len(mine) == 1:
            return dict(mine[0].info)
        out: dict = {"files": len(mine)}
        inside: set[str] = set()
        for f in mine:
            for k, v in f.info.items():
                if isinstance(v, int) and not isinstance(v, bool):
                    out[k] = out.get(k, 0) + v
            inside.update(f.info.get("compression_inside", "").split("+"))
        if inside - {""}:
            out["compression_inside"] = "+".join(sorted(inside - {""}))
        return out
