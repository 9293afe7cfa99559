"""Writing a format (``convert``, ``shard`` and ``bucket``): the :class:`Writer` of one unit, the
records of the files it wrote, its options, and the descriptor's writing part
(:class:`WritingPart`: compressions, the schemas it holds, the manifest keys of a dataset)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import OptionsError
from ..manifest import DEFAULT_HASH
from ..schema import Batch, Schema
from .part import FormatPart


@dataclass
class FileRecord:
    """One written file, as the manifest records it (path relative to the dataset directory)."""

    path: str
    rows: int
    bytes: int
    digest: str
    hash: str = DEFAULT_HASH  # the algorithm of ``digest``
    column: str | None = None
    role: str | None = None  # which part of a column the file holds (memmap: data | values | offsets)

    def to_dict(self) -> dict[str, Any]:
        d = {"path": self.path, "rows": self.rows, "bytes": self.bytes, self.hash: self.digest}
        if self.column is not None:
            d["column"] = self.column
        if self.role is not None:
            d["role"] = self.role
        return d


@dataclass
class WriteOptions:
    compression: str | None = None  # one of the format's ``compressions`` (None: its default)
    hash: str = DEFAULT_HASH  # how every file is hashed (``HASHES``)
    row_group_bytes: int = 64 << 20  # in-memory bytes gathered before a block is written
    expected_rows: int | None = None  # known up front (files can be preallocated), or None
    memory: int = 64 << 20  # what the writer may hold: per-column costs are sized from it / columns
    # the dataset's files hold fixed 1-d columns whose widths differ from unit to unit (a padded
    # bucket each): a format whose readers unify its files' schemas writes them as lists (Parquet)
    widths_vary: bool = False
    # the unit's first row in the dataset (shard k: the rows of shards 0..k-1), for formats that
    # name rows (WebDataset's keys); 0 where units are not one order (buckets)
    first_row: int = 0


class Writer:
    """Writes one unit (one or more files named after ``stem``) into a temporary directory.

    ``write`` takes batches; ``close`` finishes, fsyncs and hashes every file and returns their
    records; ``abort`` releases handles after a failure (the caller removes the directory).
    """

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        self.directory = directory
        self.stem = stem
        self.schema = schema
        self.options = options
        self.rows = 0
        from ..runtime.hashing import preload_hash

        preload_hash(options.hash)

    @classmethod
    def check_schema(cls, schema: Schema, source: str) -> None:
        """Raise SchemaError if this format cannot hold the schema."""

    def write(self, batch: Batch) -> None:
        raise NotImplementedError

    def close(self) -> list[FileRecord]:
        raise NotImplementedError

    def abort(self) -> None:
        """Release handles after a failure (the temporary directory is removed by the caller)."""

    def manifest_extra(self) -> dict[str, Any]:
        """Keys this unit adds to the manifest (the same for every unit of a dataset)."""
        return {}


class ColumnBlock:
    """Scalar columns of one dtype gathered in one ``[columns, rows]`` buffer (a wide table's, for
    writers of a file or dataset per column): a batch goes in with one copy (``np.stack``), not a
    call per column; ``full()`` is called each time the buffer is full, and may reuse it."""

    def __init__(self, columns: int, rows: int, dtype, full, buf=None) -> None:
        """``buf``: the ``[columns, rows]`` array to gather into (rows contiguous, any row stride);
        a new one when None."""
        import numpy as np

        self.buf = np.empty((columns, rows), dtype=dtype) if buf is None else buf
        self.held = 0
        self.full = full

    def add_batch(self, batch, names: list[str]) -> None:
        """Add the columns ``names`` of ``batch``: its matrix whole when they are its rows
        (:meth:`Batch.matrix_of`), else column by column."""
        m = batch.matrix_of(names)
        self.add(None if m is not None else [batch.columns[n] for n in names], batch.num_rows, m)

    def add(self, cols: list | None, n: int, matrix=None) -> None:
        """Add ``n`` rows of the columns ``cols``; ``matrix``: the same as one ``[columns, n]``
        array (:meth:`Batch.matrix_of`), copied whole."""
        import numpy as np

        i = 0
        while i < n:
            k = min(self.buf.shape[1] - self.held, n - i)
            out = self.buf[:, self.held : self.held + k]
            if matrix is not None:
                np.copyto(out, matrix[:, i : i + k], casting="same_kind")
            else:
                part = cols if i == 0 and k == n else [c[i : i + k] for c in cols]
                np.stack(part, out=out, casting="same_kind")
            self.held += k
            i += k
            if self.held == self.buf.shape[1]:
                self.full()


class WritingPart(FormatPart):
    """The descriptor's writing part (the :class:`~.protocols.Writes` protocol), with defaults."""

    compressions: tuple[str, ...] = ()  # values of --compression it takes besides "none"
    default_compression: str | None = None  # what it does without --compression
    stem: str = "data"  # file stem of a one-unit dataset (convert); "" for one file per column
    kinds: tuple[str, ...] = ("fixed", "string", "binary", "sequence")  # column kinds it holds
    column_floor: int = 4 << 10  # the least memory its writer holds per column (wide tables)
    padded_buckets: bool = True  # holds a fixed column whose width differs from file to file (bucket --layout padded)

    def check_compression(self, compression: str | None) -> str | None:
        """The compression to write with (None: none or the default); OptionsError when not offered."""
        if compression is None:
            return None
        if compression == "none":
            return "none" if self.default_compression else None
        if compression not in self.compressions:
            opts = ", ".join(self.compressions)
            hint = f"choose {opts} or none" if opts else f"{self.name} is written uncompressed: drop the flag"
            raise OptionsError(f"--compression {compression} is not offered for {self.name}", hint=hint)
        return compression

    def writer_class(self) -> type[Writer]:
        raise NotImplementedError

    def check_schema(self, schema: Schema, source: str) -> None:
        """Refuse (SchemaError, one line naming the column) a schema this format cannot hold."""
        from ..errors import SchemaError

        for f in schema:
            if f.kind not in self.kinds:
                raise SchemaError(
                    f"{source}, column '{f.name}': {self.name} cannot hold {f.describe()} columns",
                    hint="leave the column out with --columns, or write a format that holds it",
                )
        self.writer_class().check_schema(schema, source)

    def size_linear(self, compression: str | None) -> bool:
        """Do a unit's bytes grow exactly linearly with its rows (so a sample fixes --shard-size)?"""
        return False

    def dataset_extra(self, schema: Schema, unit_extras: list[dict]) -> dict[str, Any]:
        """Manifest keys for the whole dataset, from its units' ``manifest_extra`` and its schema."""
        return dict(unit_extras[0]) if unit_extras else {}

    def bucket_extra(self, unit_extra: dict) -> dict[str, Any]:
        """Keys a bucket's manifest entry gets from its first unit's ``manifest_extra``."""
        return {}

    def finish_dataset(self, directory: str, manifest: dict) -> dict[str, Any]:
        """Write files that describe the whole dataset once every unit is written (in ``directory``,
        before the commit); returns the manifest keys that list them."""
        return {}
