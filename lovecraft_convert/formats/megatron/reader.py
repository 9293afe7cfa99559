"""Reading a Megatron dataset's part for ``open_dataset``: the index and the tokens mapped, rows
sliced or gathered by the index's pointers (our own reader; megatron-core is not needed)."""

from __future__ import annotations

import numpy as np

from ...errors import DatasetError
from ...schema import Batch, Schema, VarColumn
from ..reading import CORRUPT, PartReader
from .idx import open_index


class MegatronReader(PartReader):
    random_access = True
    opens_at = "head"  # its header

    def __init__(self, rows: int, schema: Schema, bin_path: str, idx_path: str) -> None:
        super().__init__(rows, schema)
        self.bin_path = bin_path
        self.idx_path = idx_path
        self.name = schema.fields[0].name
        self._maps = None

    def _open(self):
        if self._maps is None:
            index = open_index(self.idx_path, self.idx_path)
            want = np.dtype(self.schema.fields[0].dtype)
            if index.dtype != want.newbyteorder("<"):
                raise DatasetError(
                    f"{self.idx_path}: holds {index.dtype.name} tokens, the manifest says {want.name}", hint=CORRUPT
                )
            if index.sequences != self.rows:
                raise DatasetError(
                    f"{self.idx_path}: holds {index.sequences} sequences, the manifest says {self.rows}", hint=CORRUPT
                )
            lengths, pointers, _ = index.arrays()
            tokens = _tokens(self.bin_path, index.dtype)
            self._maps = (lengths, pointers, tokens, index.dtype.itemsize)
        return self._maps

    def read(self, start: int, stop: int) -> Batch:
        lengths, pointers, tokens, isz = self._open()
        lens = np.asarray(lengths[start:stop], dtype=np.int64)
        offs = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        if stop <= start:
            return Batch({self.name: VarColumn(np.zeros(0, tokens.dtype), offs)}, 0)
        first = int(pointers[start])
        if first % isz == 0 and np.array_equal(pointers[start:stop], first + offs[:-1] * isz):  # back to back
            a = first // isz
            values = np.array(tokens[a : a + int(offs[-1])])
            if len(values) != offs[-1]:
                raise DatasetError(f"{self.bin_path}: shorter than its index says", hint=CORRUPT)
            return Batch({self.name: VarColumn(values, offs)}, stop - start)
        return self.take(np.arange(start, stop, dtype=np.int64))

    def byte_ranges(self, start: int, stop: int) -> list[tuple[str, int, int]] | None:
        """What reading sequences ``[start, stop)`` reads of a remote dataset's files: their
        lengths and pointers in the index, and the tokens between the first and the last."""
        lengths, pointers, tokens, isz = self._open()
        if isinstance(tokens, np.ndarray):
            return None
        if stop <= start:
            return []
        a = int(pointers[start])
        b = int(pointers[stop - 1]) + int(lengths[stop - 1]) * isz
        return [lengths.span(start, stop), pointers.span(start, stop), (self.bin_path, a, max(a, b))]

    def take(self, idx: np.ndarray) -> Batch:
        lengths, pointers, tokens, isz = self._open()
        lens = np.asarray(lengths[idx], dtype=np.int64)
        starts = np.asarray(pointers[idx], dtype=np.int64) // isz
        offs = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        total = int(offs[-1])
        if len(idx) and int((starts + lens).max()) > len(tokens):
            raise DatasetError(f"{self.bin_path}: shorter than its index says", hint=CORRUPT)
        if total == 0:
            return Batch({self.name: VarColumn(np.zeros(0, tokens.dtype), offs)}, len(idx))
        rel = np.arange(total, dtype=np.int64) - np.repeat(offs[:-1], lens)
        values = np.take(tokens, np.repeat(starts, lens) + rel)
        return Batch({self.name: VarColumn(values, offs)}, len(idx))

    def close(self) -> None:
        self._maps = None


def _tokens(path: str, dtype: np.dtype):
    """The ``.bin`` file's tokens: mapped, or for a remote dataset read as asked through the cache."""
    from ...storage import is_remote

    if is_remote(path):
        from ...storage.remote import registered
        from ...storage.remote_array import RemoteArray

        rf = registered(path)
        return RemoteArray(rf, dtype, (rf.size // dtype.itemsize,), 0)
    try:
        return np.memmap(path, dtype=dtype, mode="r")
    except ValueError:  # an empty file cannot be mapped
        return np.zeros(0, dtype=dtype)
