"""Reading a format (``open_dataset`` and the loaders): the :class:`PartReader` of one shard's
files, what it is given (:class:`PartFiles`), and the descriptor's reading part
(:class:`ReadingPart`: the dtypes it gives back, what its manifest sections must say, the rows its
files can hold, a native tf.data pipeline)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..manifest import Spec
from ..schema import Batch, Field, Schema, row_nbytes
from .part import FormatPart

CORRUPT = "the file is corrupt; run `lovecraft verify` or re-create the dataset"


class PartReader:
    """One shard's (or bucket's) files. ``rows`` is known from the manifest.

    Every reader gives :class:`~lovecraft_convert.schema.Batch`es of the selected columns in large
    chunks; random-access ones also read a row range (``read``) or any set of rows (``take``).
    Columns come back in the types the files hold (:meth:`OutputFormat.storage_dtype`): fixed-shape
    arrays, :class:`~lovecraft_convert.schema.VarColumn`s or object arrays for variable-length rows.
    Files are opened on first use, never in ``__init__``, so a reader can be built in one process
    and used in another.
    """

    random_access = False
    # which end of each file opening it reads ("head": a header, "tail": a footer, None): the loaders
    # of a remote dataset fetch it with the part (storage/remote.py's range at that end)
    opens_at: str | None = None

    def __init__(self, rows: int, schema: Schema) -> None:
        self.rows = rows
        self.schema = schema

    def chunks(self, start: int, stop: int, chunk_rows: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        """Rows ``[start, stop)`` in batches of about ``chunk_rows``; ``rng`` permutes the order of the
        blocks (row groups for Parquet) for shuffling, never the rows inside a block."""
        blocks = range(start, stop, chunk_rows)
        if rng is not None and len(blocks) > 1:
            blocks = [blocks[i] for i in rng.permutation(len(blocks)).tolist()]
        for a in blocks:
            yield self.read(a, min(stop, a + chunk_rows))

    def block_starts(self) -> np.ndarray:
        """Where the part's blocks start (int64 row offsets, 0 first, ``rows`` last): the units a
        block shuffle permutes, each read whole by :meth:`read_block` (Parquet: row groups;
        TFRecord: the blocks of its index; otherwise runs of about 1 MiB)."""
        size = max(1, int(sum(row_nbytes(f) for f in self.schema)))
        n = max(1, (1 << 20) // size)
        return np.append(np.arange(0, self.rows, n, dtype=np.int64), np.int64(self.rows))

    def open_listing(self) -> None:
        """Read now what listing the part's blocks and their byte ranges reads (what ``opens_at``
        says: a footer, a header), so that a remote dataset's loader can open a window's parts at
        once before their blocks are listed."""
        self.block_starts()

    def read_block(self, k: int, rows: np.ndarray | None = None) -> Batch:
        """Block ``k``'s rows, or only ``rows`` of them (sorted indices within the block)."""
        starts = self.block_starts()
        a, b = int(starts[k]), int(starts[k + 1])
        if rows is None:
            return self.read(a, b)
        return self.take(np.asarray(rows, dtype=np.int64) + a)

    def read_blocks(self, blocks: list[tuple[int, np.ndarray | None]]) -> Batch:
        """Several blocks (``(k, rows)`` pairs as :meth:`read_block` takes them), in that order, as
        one batch (a format may decode them together)."""
        pieces = [self.read_block(k, rows) for k, rows in blocks]
        return pieces[0] if len(pieces) == 1 else Batch.concat(pieces)

    def read(self, start: int, stop: int) -> Batch:
        raise NotImplementedError

    def take(self, idx: np.ndarray) -> Batch:
        """Rows ``idx`` (int64, any order) as one batch, in that order."""
        raise NotImplementedError

    def byte_ranges(self, start: int, stop: int) -> list[tuple[str, int, int]] | None:
        """(file, first byte, end) of the bytes that reading rows ``[start, stop)`` reads, in the
        order it reads them: what a remote dataset's loader fetches ahead of the reader. None when
        the format cannot say (its files are then fetched whole)."""
        return None

    def block_ranges(self, k: int) -> list[tuple[str, int, int]] | None:
        """:meth:`byte_ranges` of block ``k`` (:meth:`block_starts`)."""
        starts = self.block_starts()
        return self.byte_ranges(int(starts[k]), int(starts[k + 1]))

    def close(self) -> None:
        pass


@dataclass
class PartFiles:
    """What a reader of one part gets from the manifest: absolute paths and their manifest entries."""

    paths: list[str]
    entries: list[dict]
    rows: int
    schema: Schema
    key: tuple  # (group, part): unique within the dataset


class ReadingPart(FormatPart):
    """The descriptor's reading part (the :class:`~.protocols.Reads` protocol), with defaults."""

    random_access: bool = False  # rows can be read by index (exact shuffles, map-style datasets)
    variable_as_objects: bool = False  # variable-length rows decode to Python objects (smaller steps)
    manifest_keys: tuple[str, ...] = ()  # the manifest sections this format adds (inspect shows them)
    manifest_spec: Spec | None = None  # the types of those sections' fields (manifest.check_shape)

    def storage_dtype(self, field: Field, manifest: dict | None = None) -> np.dtype:
        """The dtype a column's values have as this format's reader gives them back."""
        return field.np_dtype

    def manifest_problems(self, manifest: dict) -> list[str]:
        """This format's manifest fields that contradict the rest of the manifest, each a message
        naming the field, judged from the manifest alone (before any file is opened, once
        ``manifest_spec`` has checked their types)."""
        return []

    def check_manifest(self, manifest: dict, where: str) -> None:
        """Refuse (DatasetError naming ``where`` and the field) the first of :meth:`manifest_problems`."""
        found = self.manifest_problems(manifest)
        if found:
            from ..errors import DatasetError
            from ..manifest import EDITED

            raise DatasetError(f"{where}: {found[0]}", hint=EDITED, kind="manifest")

    def most_rows(self, sizes: list[int], entries: list[dict], schema: Schema, manifest: dict) -> int | None:
        """The most rows a part whose files are ``sizes`` bytes (their manifest ``entries``) can
        hold, or None when their sizes do not bound it (its reader then checks the rows against
        its files before allocating anything for them). ``open_dataset`` refuses a manifest that
        declares more, so nothing is sized from a count the files cannot hold."""
        return None

    def count_problem(
        self, sizes: list[int], entries: list[dict], rows: int, schema: Schema, manifest: dict
    ) -> str | None:
        """Why a part declaring ``rows`` rows cannot be its files (``sizes`` bytes, their manifest
        ``entries``), judged from the numbers alone (nothing is read or allocated), or None. By
        default: more rows than :meth:`most_rows`."""
        most = self.most_rows(sizes, entries, schema, manifest)
        if most is not None and rows > most:
            return f"declares {rows} rows; its files ({sum(sizes)} bytes) hold at most {most}"
        return None

    def open_part(self, files: PartFiles, manifest: dict, shared: dict) -> PartReader:
        """The reader of one part (``shared``: a dict kept per opened dataset, e.g. for caches)."""
        raise NotImplementedError

    def unit_file(self, files: list[str], where: str) -> str:
        """The one data file of a unit among ``files`` (formats that write one file per unit)."""
        mine = [p for p in files if p.endswith(self.extensions)] or files
        if len(mine) != 1:
            from ..errors import DatasetError

            raise DatasetError(
                f"{where} lists {len(mine)} {self.name} files, expected one",
                hint="re-create the dataset",
                kind="manifest",
            )
        return mine[0]

    def tf_dataset(self, ds, plan, input_context, start: tuple[int, int] = (0, 0)) -> tuple[Any, int] | None:
        """A native tf.data pipeline of ``plan``'s batches from ``start = (epoch, position)`` (each
        further pass the next epoch) and the batch count of its first pass, or None to use the
        generic one. Called for datasets that are not bucketed."""
        return None
