"""source -> transforms -> sink: the one loop every command runs.

The memory budget (``--max-memory``) sizes every buffer: a batch is a fraction of it, so peak
memory depends on the budget and never on the input's size.
"""

from __future__ import annotations

import datetime
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import __version__
from .errors import Interrupted, SchemaError
from .formats import OUTPUT_FORMATS, READERS, WRITERS, load
from .formats.base import FileRecord, Reader, ReadOptions, WriteOptions
from .output import OutputDir
from .schema import Batch, Schema
from .sources import INPUT_FORMATS, resolve_inputs
from .stats import BatchStats
from .util import parse_size, put_while

MANIFEST_VERSION = 1
FLOAT_TARGETS = ("float16", "float32")


@dataclass
class ConvertOptions:
    """Everything ``convert`` takes besides inputs and output; the CLI's flags, by the same names."""

    to: str = "parquet"
    input_format: str | None = None
    dtype: str | None = None
    on_overflow: str = "error"
    max_memory: int | str = "256MiB"
    overwrite: bool = False
    compression: str | None = None
    column_types: dict[str, str] = field(default_factory=dict)
    columns: list[str] | None = None
    delimiter: str | None = None
    header: bool = True
    errors: str = "strict"
    max_expansion: float = 1000.0
    progress: bool | None = None  # None: on when stderr is a terminal

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.pop("progress", None)
        return d


def _validate(o: ConvertOptions) -> None:
    if o.to not in OUTPUT_FORMATS:
        raise SchemaError(f"unknown output format '{o.to}'", hint=f"use one of {', '.join(OUTPUT_FORMATS)}")
    if o.input_format is not None and o.input_format not in INPUT_FORMATS:
        raise SchemaError(f"unknown input format '{o.input_format}'", hint=f"use one of {', '.join(INPUT_FORMATS)}")
    if o.dtype is not None and o.dtype not in FLOAT_TARGETS:
        raise SchemaError(
            f"--dtype {o.dtype}: only float16 or float32 downcasting is offered", hint="use --dtype float16"
        )
    if o.on_overflow not in ("error", "clip"):
        raise SchemaError(f"--on-overflow {o.on_overflow}: use error or clip")
    valid = {
        "parquet": (None, "zstd", "snappy", "gzip", "none"),
        "hdf5": (None, "gzip", "lzf"),
        "tfrecord": (None, "gzip"),
    }
    if o.compression == "none" and o.to != "parquet":
        o.compression = None  # "none" is what every format does without the flag
    if o.compression is not None and o.compression not in valid.get(o.to, (None,)):
        opts = ", ".join(c for c in valid.get(o.to, (None,)) if c)
        hint = f"choose {opts} or none" if opts else f"{o.to} is written uncompressed: drop the flag"
        raise SchemaError(f"--compression {o.compression} is not offered for {o.to}", hint=hint)


def open_reader(inputs: list[str], o: ConvertOptions, budget: int, threads: bool = True) -> Reader:
    specs = resolve_inputs(list(inputs), o.input_format)
    formats = {s.format for s in specs}
    if len(formats) > 1:
        raise SchemaError(f"inputs mix formats ({', '.join(sorted(formats))})", hint="convert them separately")
    ropts = ReadOptions(
        batch_bytes=max(1 << 20, budget // 16),
        errors=o.errors,
        header=o.header,
        delimiter=o.delimiter,
        column_types={k: ("float32" if v == "float16" else v) for k, v in o.column_types.items()}
        if specs[0].format == "csv"
        else {},
        max_ratio=o.max_expansion,
        threads=threads,
    )
    if specs[0].format != "csv" and o.column_types:
        raise SchemaError("--column-type applies to CSV inputs only")
    cls = load(READERS, specs[0].format)
    reader = cls(specs, ropts)
    reader.format = specs[0].format
    return reader


class _Progress:
    def __init__(self, reader: Reader, enabled: bool | None) -> None:
        self.reader = reader
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=reader.progress_total(),
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                file=sys.stderr,
                dynamic_ncols=True,
                leave=False,
            )
        self.last = 0.0

    def update(self) -> None:
        if self.bar is None:
            return
        now = time.monotonic()
        if now - self.last < 0.1:
            return
        self.last = now
        self.bar.n = self.reader.progress_done()
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.n = self.reader.progress_done()
            self.bar.close()


class _SigTerm:
    """SIGTERM behaves like Ctrl-C: the temporary output is removed and the run exits 130."""

    def __enter__(self):
        self.old = None
        try:
            self.old = signal.signal(signal.SIGTERM, self._raise)
        except ValueError:  # not the main thread
            pass
        return self

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        return False


def _columns(reader: Reader, columns: list[str] | None) -> Schema:
    if not columns:
        return reader.schema
    missing = [c for c in columns if c not in reader.schema.names]
    if missing:
        raise SchemaError(f"--columns: no column '{missing[0]}'", hint=f"columns are {', '.join(reader.schema.names)}")
    return Schema(tuple(reader.schema[c] for c in columns))


def convert(inputs: list[str] | str, output: str, *, argv: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Convert ``inputs`` into the dataset directory ``output``; returns the manifest written.

    Keyword arguments are the fields of :class:`ConvertOptions` (the CLI's flags).
    """
    o = ConvertOptions(**kwargs)
    _validate(o)
    if isinstance(inputs, str):
        inputs = [inputs]
    budget = parse_size(o.max_memory)
    if budget < 16 << 20:
        raise SchemaError(f"--max-memory {o.max_memory} is too small", hint="give at least 16MiB")
    from .formats.csv import SchemaChanged

    reader = open_reader(inputs, o, budget)
    writer_cls = load(WRITERS, o.to)
    protect = [s.path for s in reader.specs if not s.is_stdin]
    started = time.time()
    with _SigTerm(), OutputDir(output, overwrite=o.overwrite, protect=protect) as out:
        try:
            while True:
                try:
                    result = _run_once(reader, writer_cls, out, o, budget)
                    break
                except SchemaChanged:
                    out.reset()
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; nothing was written to {out.path}") from None
        files, schema, rows, stats, report, extra = result
        manifest = {
            "format": "lovecraft-dataset",
            "version": MANIFEST_VERSION,
            "complete": True,
            "created_by": f"lovecraft_convert {__version__}",
            "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": "convert",
            "argv": argv,
            "output_format": o.to,
            "options": o.to_dict(),
            "rows": rows,
            "schema": schema.to_list(),
            "shards": [{"index": 0, "rows": rows, "files": [f.path for f in files], "stats": stats}],
            "files": [f.to_dict() for f in files],
            "stats": stats,
            "float16": report,
            "sources": [s.describe() for s in reader.specs],
            "seconds": round(time.time() - started, 3),
            **extra,
        }
        out.commit(manifest)
    return manifest


def output_schema(reader: Reader, o: ConvertOptions):
    """The written schema (``--columns``, then ``--dtype``/float16 column types) and the downcast
    transform that produces it (None when nothing is downcast)."""
    from .transforms.downcast import Downcast

    schema = _columns(reader, o.columns)
    per_col = {k: v for k, v in o.column_types.items() if v == "float16"}
    down = Downcast.for_dtype(schema, o.dtype, per_col, o.on_overflow)
    if down is not None:
        down.source = ", ".join(s.name for s in reader.specs)
        schema = down.schema
    return schema, down


def _run_once(reader: Reader, writer_cls, out: OutputDir, o: ConvertOptions, budget: int):
    schema, down = output_schema(reader, o)
    source = ", ".join(s.name for s in reader.specs)
    writer_cls.check_schema(schema, source, getattr(reader, "format", None))
    wopts = WriteOptions(
        compression=o.compression, row_group_bytes=max(4 << 20, budget // 8), expected_rows=reader.rows
    )
    stem = "" if o.to == "memmap" else "data"
    writer = writer_cls(out.tmp, stem, schema, wopts)
    stats = BatchStats(schema)
    progress = _Progress(reader, o.progress)
    rows = 0
    try:
        for batch in prefetch(_select(reader.batches(), schema), depth=2):
            rows += write_step(batch, down, stats, writer)
            progress.update()
        files: list[FileRecord] = writer.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        progress.close()
    if rows == 0:
        from .errors import InputError

        raise InputError(f"{source}: empty input (no records)", hint="check the file")
    extra = writer.manifest_extra()
    return files, schema, rows, stats.to_dict(), (down.report() if down else {}), extra


def write_step(batch: Batch, down, stats: BatchStats, writer) -> int:
    """Statistics, downcast and write of one batch; returns its rows. Statistics of a downcast
    column are taken from the wide source (see :meth:`BatchStats.update`), which is cheaper."""
    if down is not None:
        stats.update(batch, down.targets)
        batch = down(batch)
    else:
        stats.update(batch)
    writer.write(batch)
    return batch.num_rows


def prefetch(it: Iterator[Batch], depth: int = 2) -> Iterator[Batch]:
    """Run ``it`` in a background thread, at most ``depth`` batches ahead (bounded memory).

    Parsing and decompression (pyarrow, zlib, zstd, NumPy) release the GIL, so reading the next
    batch overlaps with transforming and writing this one.
    """
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(x) -> bool:
        return put_while(q, x, lambda: not stop.is_set())

    def work() -> None:
        try:
            for item in it:
                if not put((item, None)):
                    return
            put((done, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            put((None, e))

    t = threading.Thread(target=work, name="lovecraft-reader", daemon=True)
    t.start()
    try:
        while True:
            item, err = q.get()
            if err is not None:
                raise err
            if item is done:
                return
            yield item
    finally:
        # Every put of the reader gives up once ``stop`` is set, so it needs no draining (draining
        # from here could block on a queue lock an interrupt left taken). It reads only; should it be
        # stuck in a read, it is a daemon thread and does not keep the process alive.
        stop.set()
        t.join(10.0)


def _select(batches: Iterator[Batch], schema: Schema) -> Iterator[Batch]:
    names = schema.names
    for b in batches:
        if list(b.columns) != names:
            b = Batch({n: b.columns[n] for n in names}, b.num_rows)
        yield b
