"""Reading a Parquet dataset's part: ``ParquetFile.iter_batches`` in large batches, converted
without copying."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from ...errors import DatasetError
from ...schema import Batch, Schema
from ..base import CORRUPT, PartReader


class ParquetReader(PartReader):
    """``pyarrow.parquet.ParquetFile.iter_batches`` in large batches, converted without copying."""

    def __init__(self, rows: int, schema: Schema, path: str) -> None:
        super().__init__(rows, schema)
        self.path = path
        self._pf = None
        self._pid = None

    def _open(self):
        if self._pf is None or self._pid != os.getpid():
            import pyarrow.parquet as pq

            try:
                pf = pq.ParquetFile(self.path)
            except (OSError, ValueError) as e:
                raise DatasetError(f"{self.path}: cannot open ({e})", hint="the dataset is damaged") from None
            if pf.metadata.num_rows != self.rows:
                raise DatasetError(
                    f"{self.path}: holds {pf.metadata.num_rows} rows, the manifest says {self.rows}",
                    hint="the dataset is damaged; re-create it",
                )
            self._pf, self._pid = pf, os.getpid()
            md = pf.metadata
            self._rg_start = np.zeros(md.num_row_groups + 1, dtype=np.int64)
            for i in range(md.num_row_groups):
                self._rg_start[i + 1] = self._rg_start[i] + md.row_group(i).num_rows
        return self._pf

    def block_starts(self) -> np.ndarray:
        self._open()
        return self._rg_start

    def read_block(self, k: int, rows: np.ndarray | None = None) -> Batch:
        """Row group ``k`` (decoded whole; ``rows`` of it kept when given)."""
        import pyarrow as pa

        from ...arrowconv import batch_from_arrow

        pf = self._open()
        n = int(self._rg_start[k + 1] - self._rg_start[k])
        try:
            rbs = list(pf.iter_batches(batch_size=max(1, n), row_groups=[k], columns=self.schema.names))
        except (OSError, pa.ArrowException) as e:
            raise DatasetError(f"{self.path}: row group {k}: cannot read ({e})", hint=CORRUPT) from None
        parts = [batch_from_arrow(rb, self.schema) for rb in rbs]
        batch = parts[0] if len(parts) == 1 else Batch.concat(parts)
        return batch if rows is None else batch.take(np.asarray(rows, dtype=np.int64))

    def chunks(self, start: int, stop: int, chunk_rows: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        import pyarrow as pa

        from ...arrowconv import batch_from_arrow

        if stop <= start:
            return
        pf = self._open()
        rs = self._rg_start
        first = int(np.searchsorted(rs, start, side="right")) - 1
        last = int(np.searchsorted(rs, stop, side="left"))  # exclusive
        groups = list(range(first, last))
        names = self.schema.names
        # Shuffling reads row groups one at a time in a random order; otherwise all in one pass.
        shuffled = rng is not None and len(groups) > 1
        runs = [[g] for g in rng.permutation(groups).tolist()] if shuffled else [groups]
        for run in runs:
            pos = int(rs[run[0]])
            batches = pf.iter_batches(batch_size=chunk_rows, row_groups=run, columns=names, use_threads=True)
            while True:
                try:
                    rb = next(batches, None)
                except (OSError, pa.ArrowException) as e:  # a damaged page (checksum, decompression, dictionary)
                    raise DatasetError(
                        f"{self.path}: row groups {run[0]}..{run[-1]}: cannot read ({e})",
                        hint=CORRUPT,
                    ) from None
                if rb is None:
                    break
                n = rb.num_rows
                a, b = max(start, pos), min(stop, pos + n)
                pos += n
                if a >= b:
                    continue
                if a - (pos - n) or b - a != n:
                    rb = rb.slice(a - (pos - n), b - a)
                yield batch_from_arrow(rb, self.schema)
