"""What every input reader shares: the options it takes, the parts it splits into, its interface."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..schema import Batch, Schema
from .spec import InputSpec
from .split import split_points


class SchemaChanged(Exception):
    """A column had to be widened (int -> float -> string) by a value met late in the input: the
    job starts over with the reader's new types, so the final types hold every value.

    ``widened`` maps columns to the type names they now have (readers in other processes get them
    through :meth:`Reader.widen`).
    """

    def __init__(self, widened: dict[str, str] | None = None) -> None:
        super().__init__(widened)
        self.widened = dict(widened or {})


@dataclass
class ReadOptions:
    """Options of the input readers (the CLI's input flags)."""

    batch_bytes: int = 32 << 20  # in-memory bytes of one batch, sized from --max-memory
    errors: str = "strict"  # text decoding: strict | replace
    header: bool = True
    delimiter: str | None = None
    column_types: dict[str, str] = field(default_factory=dict)
    skip_rows: int = 0  # CSV: lines before the header (or the first row)
    comment: str | None = None  # CSV: lines starting with it are skipped
    na_values: tuple[str, ...] = ()  # CSV: strings read as missing in columns of numbers and booleans
    column_names: list[str] | None = None  # CSV: the names of the columns (a file without a header)
    max_ratio: float = 1000.0
    threads: bool = True  # False in shard workers: one process, one core
    piece_bytes: int | None = None  # CSV: the size of the pieces read (None: from batch_bytes; tests make it tiny)
    columns: list[str] | None = None  # --columns: readers that can read only these do (Parquet, Arrow, JSON Lines)
    text_column: str | None = None  # one of ``columns``: the text a tokenizer reads (named so when missing)
    lenient: bool = False  # inspect: columns no output can hold are left out (and described), not refused
    stack_columns: list[str] | None = None  # --stack-columns: a CSV wider than csvwide.MAX_COLUMNS is stacked as read
    files: dict | None = None  # the files inputs' options (--decode, --metadata...): filedecode.check_options
    asked_by: dict[str, str] = field(default_factory=dict)  # a column of ``columns`` -> the flag that named it


@dataclass(frozen=True)
class Part:
    """A unit of input that can be read on its own: a byte range of one file (``start``/``end``),
    a whole (compressed or piped) input (both None), whole small files ``[spec, stop_spec)``
    gathered up to the target size (``stop_spec``), a row range of NPY inputs (``rows``), or
    blocks ``[b0, b1)`` of file ``f`` of a columnar input (``blocks``: Parquet row groups, Arrow
    record batches; ``rows`` is then the range of the whole input they hold, ``line0`` the rows of
    the file before them)."""

    index: int
    spec: int = 0
    start: int | None = None
    end: int | None = None
    line0: int = 0  # lines before ``start`` (text), for error messages
    rows: tuple[int, int] | None = None
    blocks: tuple[int, int, int] | None = None  # (file, b0, b1)
    stop_spec: int | None = None  # whole inputs ``[spec, stop_spec)``: small files gathered into one part

    @property
    def spec_range(self) -> range:
        """The inputs the part reads (one, unless it gathers whole small files)."""
        return range(self.spec, self.stop_spec if self.stop_spec is not None else self.spec + 1)


class Reader:
    """A source of bounded batches. ``schema`` is known after construction."""

    schema: Schema
    rows: int | None = None  # known up front (npy), else None
    takes_column_types = False  # --column-type applies (CSV, JSON Lines, columnar inputs)
    takes_csv_syntax = False  # --skip-rows and --comment apply (CSV)
    takes_logical_types = False  # --column-type takes timestamp, date, category (CSV, JSON Lines, columnar)
    late_columns = False  # columns may first appear late in the input (JSON Lines keys): widen() adds them
    random_rows = False  # row_range() reads any rows without a pass over the input (mapped NPY, files)
    columnar = False  # named columns, each read apart (Parquet, Arrow, HDF5): a job may read one alone
    takes_file_options = False  # --decode, --metadata, --on-bad-file apply (files, WebDataset)
    widens = False  # types are inferred from the first piece and widened while read (CSV, JSON Lines, a sidecar)

    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        self.specs = specs
        self.options = options

    def open_spec(self, spec: InputSpec, stream=None):
        """``stream``, or the input's decompressed stream, kept as the one progress counts."""
        from .streams import open_stream

        if stream is None:
            stream = open_stream(spec, max_ratio=self.options.max_ratio)
        self._stream = stream
        return stream

    def prepare_rereads(self, types: tuple[str, ...] | list[str]) -> None:
        """For readers that start over when a column's type widens: stdin spooled to a file so it
        can be read again, and every ``--column-type`` one of the ``types`` this reader knows."""
        from ..errors import SchemaError
        from .streams import spool_stdin

        for spec in self.specs:
            if spec.is_stdin and not spec.stdin_spool:
                spool_stdin(spec)
        from ..schema import Logical

        logical = self.takes_logical_types
        unknown = {
            k: v for k, v in self.options.column_types.items() if v not in types and not (logical and Logical.parse(v))
        }
        if unknown:
            k, v = next(iter(unknown.items()))
            more = ", timestamp[UNIT], date, category" if logical else ""
            raise SchemaError(f"--column-type {k}={v}: unknown type", hint=f"use one of {', '.join(types)}{more}")

    def batches(self) -> Iterator[Batch]:
        raise NotImplementedError

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        """Split the input into parts of about ``target_bytes`` that can be read independently.

        The split depends only on the input and ``target_bytes`` (never on the number of workers),
        so the same input always gives the same parts. Compressed and piped inputs are one part.
        ``mapper(fn, calls)`` runs the counting pass (an ordered map, e.g. over worker processes).
        """
        return [Part(i, i) for i in range(len(self.specs))]

    def part_batches(self, part: Part) -> Iterator[Batch]:
        raise NotImplementedError

    def row_range(self, start: int, stop: int, step_bytes: int, mark: object = None) -> Iterator[Batch]:
        """Rows ``[start, stop)`` of the input (readers with ``random_rows`` only); ``mark``: where
        they are, as :meth:`row_marks` gave it (None: found from the start of the input)."""
        raise NotImplementedError

    def row_count(self) -> int:
        """The rows of an input with ``random_rows``, known without reading them."""
        assert self.rows is not None
        return self.rows

    def row_marks(self, starts: list[int]) -> list | None:
        """For readers with ``random_rows`` that can only find a row by a pass over the rows before
        it (a tree of files): for each of ``starts`` (ascending row numbers; the input's row count
        for its end), a small picklable value that lets :meth:`row_range` start there at once, all
        found in one pass. None: rows are found at once anyway (memory-mapped arrays)."""
        return None

    def source_of(self, column: str) -> str:
        """The input a column comes from, for messages (all inputs, unless each is a column)."""
        return ", ".join(s.name for s in self.specs)

    def widen(self, widened: dict[str, str]) -> None:
        """Read columns with the wider types another run of this reader settled on (CSV, JSON Lines)."""

    # the leading inputs a reader needs to settle its schema as a reader of every input does
    # (CSV: the first file's header and rows): a reader of those and of a part's files reads that
    # part as one of every input would, so a unit of work opens only its own files. None: all.
    probe_specs: int | None = None

    def _byte_partitions(self, target_bytes: int, quoted: bool, mapper=None, **split) -> list[Part]:
        """Byte ranges of plain files cut at record boundaries; other inputs whole; runs of whole
        files of known size gathered into parts of up to ``target_bytes`` (100,000 small files
        are a few parts, not 100,000). ``split``: the CSV keywords of :func:`~.split.split_points`."""
        parts: list[Part] = []
        run: list[int] = []  # small files not yet in a part
        held = 0

        def gather() -> None:
            nonlocal held
            if run:
                parts.append(Part(len(parts), run[0], stop_spec=run[-1] + 1 if len(run) > 1 else None))
                run.clear()
                held = 0

        for i, spec in enumerate(self.specs):
            if spec.size is not None and spec.size <= target_bytes and not (spec.is_stdin or spec.stdin_spool):
                if run and held + spec.size > target_bytes:
                    gather()
                run.append(i)
                held += spec.size
                continue
            gather()
            if spec.compression is not None or spec.is_stdin or spec.stdin_spool or not spec.size:
                parts.append(Part(len(parts), i))
                continue
            points = split_points(spec.path, spec.size, target_bytes, quoted=quoted, mapper=mapper, **split)
            ends = [p[0] for p in points[1:]] + [spec.size]
            for (start, line0), end in zip(points, ends, strict=True):
                parts.append(Part(len(parts), i, start, end, line0))
        gather()
        return parts

    def progress_total(self) -> int | None:
        """Total input bytes for progress (compressed size for compressed inputs)."""
        sizes = [s.size for s in self.specs]
        return None if any(x is None for x in sizes) else sum(sizes)  # type: ignore[misc]

    def progress_done(self) -> int:
        return 0

    def memory_bytes(self) -> int | None:
        """Estimated in-memory bytes of all the records (shuffle buckets are sized from it); None
        when only the input's size is known."""
        return None

    def column_info(self) -> dict[str, dict]:
        """What ``inspect`` shows of each column beyond its values: the input's own type, the
        nulls met so far (inputs that have nulls), a type decision."""
        return {}

    def report(self) -> dict:
        """What reading a part counted that the manifest records (files skipped): returned by the
        unit that read it, handed to :meth:`merge_reports` of the reader that writes the manifest."""
        return {}

    def merge_reports(self, reports: list[dict]) -> None:
        """Take the :meth:`report` of every part (read by workers) as if this reader had read them."""

    def manifest_extra(self) -> dict:
        """Sections the manifest records about what was read (a files input's labels, decoding,
        skipped files), ``notes`` among them (said in the summary too)."""
        return {}

    def nothing_read(self) -> str | None:
        """Why a run that wrote no row read none, when the reader knows better than "empty input"
        (a files or WebDataset input whose every file or sample was skipped, ``skipped``: how many,
        and the first reasons)."""
        skipped = getattr(self, "skipped", None)
        if skipped is None or not skipped.count:
            return None
        noun = getattr(self, "skipped_noun", "file")
        every = f"the {noun}" if skipped.count == 1 else f"all {skipped.count} {noun}s"
        return f"{every} {'was' if skipped.count == 1 else 'were'} skipped (--on-bad-file skip): {skipped.listing()}"

    def input_details(self, i: int) -> dict:
        """What ``inspect`` shows of input ``i`` beyond its size (row groups, record batches...)."""
        return {}
