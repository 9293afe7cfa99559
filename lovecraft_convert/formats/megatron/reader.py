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
            try:
                tokens = np.memmap(self.bin_path, dtype=index.dtype, mode="r")
            except ValueError:  # an empty file cannot be mapped
                tokens = np.zeros(0, dtype=index.dtype)
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
