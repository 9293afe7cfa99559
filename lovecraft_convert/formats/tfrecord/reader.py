"""Reading a TFRecord dataset's part into NumPy without TensorFlow.

Used by ``Dataset.batches()`` and the PyTorch loader (so neither needs TensorFlow, and nothing
TensorFlow-shaped crosses a fork), and by ``verify`` for fixed-shape datasets. Both CRCs are checked
on every record that is decoded, as TensorFlow's reader does. Runs of equal-length records of
fixed-shape numeric columns are decoded vectorised (:func:`.decode.decode_fixed`); anything else
record by record (:func:`.decode.decode_records`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ...schema import Batch, Schema
from ..base import PartReader
from .decode import decode_fixed, decode_records, kinds_of
from .framing import RecordRuns


class TfrecordReader(PartReader):
    """One ``.tfrecord`` / ``.tfrecord.gz`` file of ``tf.train.Example`` records."""

    def __init__(self, rows: int, schema: Schema, path: str, compression: str | None, strict: bool = False) -> None:
        super().__init__(rows, schema)
        self.path = path
        self.gzip = (compression or "").upper() == "GZIP" or path.endswith(".gz")
        self.kinds = kinds_of(schema)
        self.strict = strict
        self._layouts: dict = {}

    def chunks(self, start: int, stop: int, chunk_rows: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        pending: list[bytes] = []
        first = start + 1  # 1-based index of pending[0]
        done = start
        for kind, run in RecordRuns(self.path, self.gzip, self.rows).runs(start, stop):
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
                batch = decode_fixed(recs, self.schema, self.kinds, self._layouts, self.path)
                yield batch if batch is not None else self._slow([r.tobytes() for r in recs], done + 1)
                done += len(recs)
                first = done + 1
        if pending:
            yield self._slow(pending, first)

    def _slow(self, records: list[bytes], first: int) -> Batch:
        return decode_records(records, self.schema, where=self.path, first=first, strict=self.strict)
