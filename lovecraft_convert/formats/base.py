"""What every reader and writer shares: the interfaces and the options they take."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..schema import Batch, Schema
from ..sources import InputSpec


@dataclass
class ReadOptions:
    """Options of the input readers (the CLI's input flags)."""

    batch_bytes: int = 32 << 20  # in-memory bytes of one batch, sized from --max-memory
    errors: str = "strict"  # text decoding: strict | replace
    header: bool = True
    delimiter: str | None = None
    column_types: dict[str, str] = field(default_factory=dict)
    max_ratio: float = 1000.0
    threads: bool = True  # False in shard workers: one process, one core


@dataclass(frozen=True)
class Part:
    """A unit of input that can be read on its own: a byte range of one file (``start``/``end``),
    a whole (compressed or piped) input (both None), or a row range of NPY inputs (``rows``)."""

    index: int
    spec: int = 0
    start: int | None = None
    end: int | None = None
    line0: int = 0  # lines before ``start`` (text), for error messages
    rows: tuple[int, int] | None = None


class Reader:
    """A source of bounded batches. ``schema`` is known after construction."""

    schema: Schema
    rows: int | None = None  # known up front (npy), else None

    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        self.specs = specs
        self.options = options

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

    def _byte_partitions(self, target_bytes: int, quoted: bool, mapper=None) -> list[Part]:
        """Byte ranges of plain files cut at record boundaries; other inputs whole."""
        from ..sources import split_points

        parts: list[Part] = []
        for i, spec in enumerate(self.specs):
            if spec.compression is not None or spec.is_stdin or spec.stdin_spool or not spec.size:
                parts.append(Part(len(parts), i))
                continue
            points = split_points(spec.path, spec.size, target_bytes, quoted=quoted, mapper=mapper)
            ends = [p[0] for p in points[1:]] + [spec.size]
            for (start, line0), end in zip(points, ends, strict=True):
                parts.append(Part(len(parts), i, start, end, line0))
        return parts

    def progress_total(self) -> int | None:
        """Total input bytes for progress (compressed size for compressed inputs)."""
        sizes = [s.size for s in self.specs]
        return None if any(x is None for x in sizes) else sum(sizes)  # type: ignore[misc]

    def progress_done(self) -> int:
        return 0


@dataclass
class FileRecord:
    """One written file, as the manifest records it (path relative to the dataset directory)."""

    path: str
    rows: int
    bytes: int
    sha256: str
    column: str | None = None
    role: str | None = None  # for memmap: "data" | "values" | "offsets"

    def to_dict(self) -> dict[str, Any]:
        d = {"path": self.path, "rows": self.rows, "bytes": self.bytes, "sha256": self.sha256}
        if self.column is not None:
            d["column"] = self.column
        if self.role is not None:
            d["role"] = self.role
        return d


@dataclass
class WriteOptions:
    compression: str | None = None  # hdf5: gzip|lzf ; tfrecord: gzip ; parquet: zstd (default)|snappy|none
    row_group_bytes: int = 64 << 20
    expected_rows: int | None = None


class Writer:
    """Writes one shard (one or more files) into a temporary dataset directory."""

    extension = ""

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        self.directory = directory
        self.stem = stem
        self.schema = schema
        self.options = options
        self.rows = 0

    @classmethod
    def check_schema(cls, schema: Schema, source: str, input_format: str | None = None) -> None:
        """Raise OutputError/SchemaError if this format cannot hold the schema."""

    def write(self, batch: Batch) -> None:
        raise NotImplementedError

    def close(self) -> list[FileRecord]:
        raise NotImplementedError

    def abort(self) -> None:
        """Release handles after a failure (the temporary directory is removed by the caller)."""

    def manifest_extra(self) -> dict[str, Any]:
        return {}
