"""Reading a TFRecord dataset's part into NumPy without TensorFlow.

Used by ``Dataset.batches()`` and the PyTorch loader (so neither needs TensorFlow, and nothing
TensorFlow-shaped crosses a fork), and by ``verify`` for fixed-shape datasets. Both CRCs are checked
on every record that is decoded, as TensorFlow's reader does. Runs of equal-length records of
fixed-shape numeric columns are decoded with one layout (:func:`.decode.decode_fixed`); records of
any other columns (text, bytes, float64, sequences) as whole columns (:func:`.decode.decode_span`);
only records that our writer would not have written, record by record.

The file's block index (the manifest's, :mod:`.blocks`) lets a read start at any block: ``chunks``
from any row and ``read_block`` of any block cost what they read, not what comes before. A file
written without one is indexed on first use when uncompressed (its record headers walked once); a
gzip file without one can only be read from its start.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...runtime.readahead import Prefetch
from ...schema import FIXED, Batch, Schema, row_nbytes
from ...storage import input_size
from ..reading import PartReader
from .blocks import block_records_for, decode_blocks, scan_index
from .decode import decode_fixed, decode_records, decode_span, kinds_of
from .framing import RecordRuns, Records

RECORD = "record"  # the column of a records reader's batches
# records of several blocks decoded together, up to about this many bytes: enough records per call
# to spread NumPy's cost per call, few enough bytes for the records and their columns to stay in a
# core's cache while each column's pass goes over them
GROUP_BYTES = 2 << 20
DECODE_THREADS = 2  # groups of a window decoded at once


class TfrecordReader(PartReader):
    """One ``.tfrecord`` / ``.tfrecord.gz`` file of ``tf.train.Example`` records."""

    def __init__(
        self,
        rows: int,
        schema: Schema,
        path: str,
        compression: str | None,
        strict: bool = False,
        *,
        blocks: dict | None = None,
        raw: bool = False,
    ) -> None:
        super().__init__(rows, schema)
        self.raw = raw  # records undecoded: one column RECORD of serialized Examples (bytes objects)
        self.path = path
        self.gzip = (compression or "").upper() == "GZIP" or path.endswith(".gz")
        self.kinds = kinds_of(schema)
        self.all_fixed = all(f.kind == FIXED for f in schema)
        self.strict = strict
        self._blocks = blocks  # the manifest's entry of the file's blocks (None: written without)
        self._block_records = blocks.get("records") if isinstance(blocks, dict) else None
        self._offsets: np.ndarray | None = None
        self._indexed = False
        self._layouts: dict = {}

    def records_reader(self) -> TfrecordReader:
        """A reader of the same file whose batches are the records themselves, undecoded (both CRCs
        checked): one column :data:`RECORD` of ``bytes`` (what ``tf.io.parse_example`` takes)."""
        compression = "GZIP" if self.gzip else None
        return TfrecordReader(self.rows, self.schema, self.path, compression, blocks=self._blocks, raw=True)

    # -- blocks -------------------------------------------------------------------------------

    @property
    def block_records(self) -> int:
        if not isinstance(self._block_records, int) or self._block_records < 1:
            self._block_records = block_records_for(sum(row_nbytes(f) + len(f.name) + 8 for f in self.schema) + 16)
        return self._block_records

    def _load_index(self) -> np.ndarray | None:
        """The offsets of the blocks (k + 1, the file size last), or None (gzip written without one)."""
        if not self._indexed:
            if self._blocks is not None:
                size = input_size(self.path)
                self._block_records, self._offsets = decode_blocks(self._blocks, self.rows, size, self.path)
            elif not self.gzip:
                self._offsets = scan_index(self.path, False, self.block_records)
            self._indexed = True
        return self._offsets

    def block_starts(self) -> np.ndarray:
        n = self.block_records
        return np.append(np.arange(0, self.rows, n, dtype=np.int64), np.int64(self.rows))

    def _origin(self, block: int, whole_file: bool) -> tuple[int, int, int | None] | None:
        offsets = self._load_index()
        if offsets is None or block >= len(offsets) - 1:
            return None
        at = int(offsets[block])
        return at, block * self.block_records, None if whole_file else int(offsets[block + 1]) - at

    def byte_ranges(self, start: int, stop: int) -> list[tuple[str, int, int]] | None:
        """The bytes of the blocks holding records ``[start, stop)`` (None without an index: a gzip
        file written as one stream is read from its start)."""
        offsets = self._load_index()
        if offsets is None or stop <= start:
            return None if offsets is None else []
        n = self.block_records
        a, b = start // n, min(len(offsets) - 1, -(-stop // n))
        return [(self.path, int(offsets[a]), int(offsets[b]))]

    def read_block(self, k: int, rows: np.ndarray | None = None) -> Batch:
        n = self.block_records
        lo, hi = k * n, min(self.rows, (k + 1) * n)
        runs = RecordRuns(self.path, self.gzip, self.rows).runs(lo, hi, self._origin(k, False))
        return self._decode(runs, lo, rows)

    def read_blocks(self, blocks: list[tuple[int, np.ndarray | None]]) -> Batch:
        """Several blocks (``(k, rows)`` as :meth:`read_block` takes them), in that order: their
        records decoded together, some 2 MiB at a time (a block is up to about 1 MiB: decoded alone, a
        window of many would pay NumPy's cost per call once per block and column). The records are
        read and framed (both CRCs checked: mostly Python) in a reader thread, a group or two ahead,
        and the groups decoded by :data:`DECODE_THREADS` threads (NumPy, which releases the GIL), so
        that all of it overlaps; the threads end before this returns or raises, and at most a few
        groups are in flight. Fixed-shape numeric records keep their one-layout decoder, a block
        at a time."""
        if self.all_fixed or self.raw:
            return super().read_blocks(blocks)
        pieces: list[Batch] = []
        pending: deque = deque()
        pool = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="lovecraft-decode")
        try:
            with Prefetch(self._groups(blocks), depth=2) as groups:
                for recs in groups:
                    pending.append(pool.submit(self._records, recs))
                    while len(pending) > DECODE_THREADS:
                        pieces.append(pending.popleft().result())
                pieces.extend(f.result() for f in pending)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if not pieces:
            return self._decode(iter(()), 0, None)
        return pieces[0] if len(pieces) == 1 else Batch.concat(pieces)

    def _groups(self, blocks: list[tuple[int, np.ndarray | None]]) -> Iterator[Records]:
        """The records of ``blocks`` (framed, both CRCs checked), some :data:`GROUP_BYTES` at a time."""
        group: list[Records] = []
        size = 0
        for k, rows in blocks:
            n = self.block_records
            lo, hi = k * n, min(self.rows, (k + 1) * n)
            runs = RecordRuns(self.path, self.gzip, self.rows).runs(lo, hi, self._origin(k, False))
            for recs in self._selected(runs, lo, rows):
                group.append(recs)
                size += int(recs.lens.sum()) if len(recs) else 0
                if size >= GROUP_BYTES:
                    yield Records.concat(group)
                    group, size = [], 0
        if group:
            yield Records.concat(group)

    def _selected(self, runs, first: int, rows: np.ndarray | None) -> Iterator[Records]:
        """The records of ``runs`` (which start at record ``first``), only ``rows`` of them (sorted,
        relative to ``first``) when given."""
        at = first
        sel = None if rows is None else np.asarray(rows, dtype=np.int64) + first
        for _, recs in runs:
            n = len(recs)
            if sel is not None:
                a, b = np.searchsorted(sel, [at, at + n])
                if a == b:
                    at += n
                    continue
                if b - a < n:
                    recs = recs.select(sel[a:b] - at)
            yield recs
            at += n

    def _decode(self, runs, first: int, rows: np.ndarray | None) -> Batch:
        """The records of ``runs`` (which start at record ``first``), only ``rows`` of them (sorted
        indices relative to ``first``) when given."""
        pieces = [self._records(recs) for recs in self._selected(runs, first, rows)]
        if not pieces:
            if self.raw:
                return Batch({RECORD: np.empty(0, dtype=object)}, 0)
            return decode_records([], self.schema, where=self.path, first=first + 1, strict=self.strict)
        return pieces[0] if len(pieces) == 1 else Batch.concat(pieces)

    def _records(self, recs: Records) -> Batch:
        """Decoded records: a run of one length through the fixed-layout decoder when the columns are
        all fixed-shape numbers, anything else as whole columns (or one by one)."""
        if self.raw:
            return Batch({RECORD: recs.objects()}, len(recs))
        if recs.matrix is not None and self.all_fixed:
            batch = decode_fixed(recs.matrix, self.schema, self.kinds, self._layouts, self.path)
            if batch is not None:
                return batch
        return decode_span(recs, self.schema, where=self.path, strict=self.strict, kinds=self.kinds)

    # -- sequential ---------------------------------------------------------------------------

    def chunks(self, start: int, stop: int, chunk_rows: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        origin = self._origin(start // self.block_records, True) if start else None
        runs = RecordRuns(self.path, self.gzip, self.rows).runs(start, stop, origin, span_records=chunk_rows)
        for _, recs in runs:
            for a in range(0, len(recs), chunk_rows):
                yield self._records(recs if len(recs) <= chunk_rows else recs.slice(a, a + chunk_rows))
