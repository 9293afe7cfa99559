"""Reading a TFRecord dataset's part into NumPy without TensorFlow.

Used by ``Dataset.batches()`` and the PyTorch loader (so neither needs TensorFlow, and nothing
TensorFlow-shaped crosses a fork), and by ``verify`` for fixed-shape datasets. Both CRCs are checked
on every record that is decoded, as TensorFlow's reader does. Runs of equal-length records of
fixed-shape numeric columns are decoded vectorised (:func:`.decode.decode_fixed`); anything else
record by record (:func:`.decode.decode_records`).

The file's block index (the manifest's, :mod:`.blocks`) lets a read start at any block: ``chunks``
from any row and ``read_block`` of any block cost what they read, not what comes before. A file
written without one is indexed on first use when uncompressed (its record headers walked once); a
gzip file without one can only be read from its start.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ...schema import Batch, Schema, row_nbytes
from ...storage import input_size
from ..base import PartReader
from .blocks import block_records_for, decode_blocks, scan_index
from .decode import decode_fixed, decode_records, kinds_of
from .framing import RecordRuns


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
    ) -> None:
        super().__init__(rows, schema)
        self.path = path
        self.gzip = (compression or "").upper() == "GZIP" or path.endswith(".gz")
        self.kinds = kinds_of(schema)
        self.strict = strict
        self._blocks = blocks  # the manifest's entry of the file's blocks (None: written without)
        self._block_records = blocks.get("records") if isinstance(blocks, dict) else None
        self._offsets: np.ndarray | None = None
        self._indexed = False
        self._layouts: dict = {}

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

    def _decode(self, runs, first: int, rows: np.ndarray | None) -> Batch:
        """The records of ``runs`` (which start at record ``first``), only ``rows`` of them (sorted
        indices relative to ``first``) when given."""
        pieces: list[Batch] = []
        pending: list[bytes] = []
        pending_at = first
        at = first  # record index of the next record in ``runs``
        sel = None if rows is None else np.asarray(rows, dtype=np.int64) + first

        def flush() -> None:
            nonlocal pending
            if pending:
                pieces.append(self._slow(pending, pending_at + 1))
                pending = []

        for kind, run in runs:
            if kind == "one":
                if sel is None or _has(sel, at):
                    if not pending:
                        pending_at = at
                    pending.append(run)
                at += 1
                continue
            flush()
            n = len(run)
            if sel is not None:
                a, b = np.searchsorted(sel, [at, at + n])
                if a == b:
                    at += n
                    continue
                if b - a < n:
                    run = run[sel[a:b] - at]
            pieces.append(self._fast(run, at + 1))
            at += n
        flush()
        if not pieces:
            return self._slow([], first + 1)
        return pieces[0] if len(pieces) == 1 else Batch.concat(pieces)

    def _fast(self, recs: np.ndarray, first: int) -> Batch:
        """Equal-length records (a 2-D array of payloads); ``first``: the 1-based index of the first."""
        batch = decode_fixed(recs, self.schema, self.kinds, self._layouts, self.path)
        return batch if batch is not None else self._slow([r.tobytes() for r in recs], first)

    # -- sequential ---------------------------------------------------------------------------

    def chunks(self, start: int, stop: int, chunk_rows: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        pending: list[bytes] = []
        first = start + 1  # 1-based index of pending[0]
        done = start
        origin = self._origin(start // self.block_records, True) if start else None
        for kind, run in RecordRuns(self.path, self.gzip, self.rows).runs(start, stop, origin):
            if kind == "one":
                pending.append(run)
                if len(pending) >= chunk_rows:
                    yield self._slow(pending, first)
                    done += len(pending)
                    first, pending = done + 1, []
                continue
            if pending:
                yield self._slow(pending, first)
                done += len(pending)
                first, pending = done + 1, []
            for a in range(0, len(run), chunk_rows):
                recs = run[a : a + chunk_rows]
                yield self._fast(recs, done + 1)
                done += len(recs)
                first = done + 1
        if pending:
            yield self._slow(pending, first)

    def _slow(self, records: list[bytes], first: int) -> Batch:
        return decode_records(records, self.schema, where=self.path, first=first, strict=self.strict)


def _has(sorted_ids: np.ndarray, x: int) -> bool:
    i = int(np.searchsorted(sorted_ids, x))
    return i < len(sorted_ids) and int(sorted_ids[i]) == x
