"""Reading a part made of item files (:mod:`.itemfile`: MDS shards, litdata chunks) for the loaders:
random access through each file's table, blocks of about 1 MiB of items, rows decoded by the
format's function from the mapped files."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from ..errors import DatasetError
from ..schema import Batch, Schema
from .base import CORRUPT, PartReader
from .itemfile import TableFile, TableProblem

BLOCK_BYTES = 1 << 20

# decode(buf, starts, lens, schema, wanted) -> Batch; raises ValueError (or the format's own
# exception, given as ``problems``) on samples that are not what the schema says
Decode = Callable[[np.ndarray, np.ndarray, np.ndarray, Schema, list[str]], Batch]


class TableReader(PartReader):
    """The rows of ``paths`` (item files, ``file_rows`` items each, in order)."""

    random_access = True

    def __init__(
        self,
        rows: int,
        schema: Schema,
        paths: list[str],
        file_rows: list[int],
        decode: Decode,
        full_schema: Schema | None = None,
        preamble: Callable[[Schema], int] | None = None,
        problems: tuple[type[Exception], ...] = (),
    ) -> None:
        """``full_schema``: every column the files hold (``schema`` may be a selection of them);
        ``preamble``: its length from the full schema, when the format has one."""
        super().__init__(rows, schema)
        self.paths = list(paths)
        self.file_rows = list(file_rows)
        self.decode = decode
        self.full = full_schema or schema
        self.preamble = preamble
        self.problems = (ValueError, *problems)
        self.starts = np.concatenate([[0], np.cumsum(self.file_rows)]).astype(np.int64)
        self._files: list[TableFile] | None = None
        self._pid = None
        self._blocks: np.ndarray | None = None

    def _open(self) -> list[TableFile]:
        if self._files is None or self._pid != os.getpid():
            files = []
            pre = self.preamble(self.full) if self.preamble is not None else None
            for path, want in zip(self.paths, self.file_rows, strict=True):
                try:
                    tf = TableFile(path, pre)
                except (OSError, ValueError) as e:
                    raise DatasetError(f"{path}: cannot open ({e})", hint=CORRUPT) from None
                except TableProblem as e:
                    raise DatasetError(f"{path}: {e}", hint=CORRUPT) from None
                if tf.count != want:
                    raise DatasetError(f"{path}: holds {tf.count} items, the manifest says {want}", hint=CORRUPT)
                files.append(tf)
            self._files, self._pid = files, os.getpid()
        return self._files

    def block_starts(self) -> np.ndarray:
        """Runs of about 1 MiB of items, never across files (from the tables: exact sizes)."""
        if self._blocks is None:
            out = [np.zeros(1, np.int64)]
            for k, tf in enumerate(self._open()):
                base = int(self.starts[k])
                offs = tf.span(0, tf.count)
                marks = np.arange(int(offs[0]), int(offs[-1]), BLOCK_BYTES, dtype=np.int64)
                cuts = np.unique(np.searchsorted(offs[:-1], marks, side="left"))
                cuts = cuts[(cuts > 0) & (cuts < tf.count)]
                out.append(base + cuts)
                out.append(np.array([base + tf.count], np.int64))
            starts = np.unique(np.concatenate(out))
            self._blocks = starts
        return self._blocks

    def _decode(self, k: int, local: np.ndarray) -> Batch:
        tf = self._open()[k]
        offs = tf.offsets
        starts = offs[local].astype(np.int64)
        lens = offs[local + 1].astype(np.int64) - starts
        if tf.remote is None:
            buf = tf.buf
        else:  # only the span these items occupy, through the cache
            lo = int(starts.min()) if len(starts) else tf.head
            hi = int((starts + lens).max()) if len(starts) else lo
            buf, starts = tf.bytes_of(lo, hi), starts - lo
        try:
            return self.decode(buf, starts, lens, self.full, self.schema.names)
        except self.problems as e:
            raise DatasetError(f"{tf.path}: {e}", hint=CORRUPT) from None

    def read(self, start: int, stop: int) -> Batch:
        pieces = []
        for k in range(len(self.paths)):
            a, b = max(start, int(self.starts[k])), min(stop, int(self.starts[k + 1]))
            if a < b:
                base = int(self.starts[k])
                pieces.append(self._decode(k, np.arange(a - base, b - base, dtype=np.int64)))
        if not pieces:
            return self._decode(0, np.zeros(0, np.int64)) if self.paths else Batch({}, 0)
        return pieces[0] if len(pieces) == 1 else Batch.concat(pieces)

    def take(self, idx: np.ndarray) -> Batch:
        idx = np.asarray(idx, dtype=np.int64)
        if len(self.paths) == 1:
            return self._decode(0, idx)
        which = np.searchsorted(self.starts, idx, side="right") - 1
        order = np.argsort(which, kind="stable")
        pieces = []
        for k in np.unique(which).tolist():
            sel = order[which[order] == k]
            pieces.append(self._decode(k, idx[sel] - int(self.starts[k])))
        batch = Batch.concat(pieces) if len(pieces) > 1 else pieces[0]
        back = np.empty(len(idx), dtype=np.int64)
        back[order] = np.arange(len(idx))
        return batch.take(back) if len(pieces) > 1 else batch

    def close(self) -> None:
        if self._files is not None:
            for tf in self._files:
                tf.close()
        self._files = None
