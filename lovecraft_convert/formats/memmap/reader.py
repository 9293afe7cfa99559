"""Reading a memmap dataset's part: ``np.load(mmap_mode="r")`` of each column's files."""

from __future__ import annotations

import warnings
from tokenize import TokenError

import numpy as np

from ...errors import DatasetError
from ...schema import SEQUENCE, Batch, Schema, VarColumn
from ..base import PartReader


class MemmapReader(PartReader):
    """``np.load(mmap_mode="r")`` of each column's files; slices and ``np.take`` copy into RAM."""

    random_access = True

    def __init__(self, rows: int, schema: Schema, files: dict[str, dict[str, str]]) -> None:
        super().__init__(rows, schema)
        self.files = files  # column -> role -> absolute path
        self._cols: dict[str, object] | None = None

    def _open(self) -> dict[str, object]:
        if self._cols is None:
            cols: dict[str, object] = {}
            for f in self.schema:
                roles = self.files.get(f.name, {})
                if "data" in roles and not f.variable:
                    cols[f.name] = _load(roles["data"], self.rows, f.np_dtype, f.shape, f.name)
                elif "values" in roles and "offsets" in roles and f.variable:
                    offs = _load(roles["offsets"], self.rows + 1, np.dtype(np.int64), (), f.name)
                    vdt = f.np_dtype if f.kind == SEQUENCE else np.dtype(np.uint8)
                    cols[f.name] = (_load(roles["values"], None, vdt, (), f.name), offs)
                else:
                    raise DatasetError(f"the manifest lists no memmap file for column '{f.name}'", hint="re-create it")
            self._cols = cols
        return self._cols

    def read(self, start: int, stop: int) -> Batch:
        out: dict[str, object] = {}
        for name, c in self._open().items():
            if isinstance(c, tuple):
                values, offsets = c
                offs = np.array(offsets[start : stop + 1], dtype=np.int64)
                out[name] = VarColumn(np.array(values[offs[0] : offs[-1]]), offs - offs[0])
            else:
                out[name] = c[start:stop].copy()
        return Batch(out, stop - start)

    def take(self, idx: np.ndarray) -> Batch:
        out: dict[str, object] = {}
        for name, c in self._open().items():
            if isinstance(c, tuple):
                out[name] = _take_var(c[0], c[1], idx)
            else:
                # np.take on the mapping: measured 2x faster than fancy indexing, and faster than
                # sorting the indices and un-sorting the rows (the rows are in the page cache or not,
                # whatever their order within a batch).
                out[name] = np.take(c, idx, axis=0)
        return Batch(out, len(idx))

    def close(self) -> None:
        self._cols = None


def _load(path: str, rows: int | None, dtype: np.dtype, shape: tuple, column: str) -> np.ndarray:
    """``path`` mapped, checked against what the manifest says it holds: ``rows`` rows (any when
    None) of ``shape`` and ``dtype`` (column ``column``'s)."""
    try:
        with warnings.catch_warnings():  # a damaged header can read as a "Python 2" one: the checks below judge it
            warnings.simplefilter("ignore", UserWarning)
            a = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, SyntaxError, TokenError) as e:  # a damaged header fails NumPy's parse
        raise DatasetError(f"{path}: cannot map ({e})", hint="the dataset is damaged; run `lovecraft verify`") from None
    if a.ndim == 0 or (rows is not None and a.shape[0] != rows):
        raise DatasetError(
            f"{path}: holds {a.shape[0] if a.ndim else 'no'} rows, the manifest says {rows}",
            hint="the dataset is damaged; re-create it",
        )
    if a.dtype.newbyteorder("=") != np.dtype(dtype).newbyteorder("=") or tuple(a.shape[1:]) != tuple(shape):
        said = f"{np.dtype(dtype).name}{list(shape) if shape else ''}"
        raise DatasetError(
            f"{path}: holds {a.dtype.name}{list(a.shape[1:]) if a.ndim > 1 else ''} rows, the manifest's schema says "
            f"column '{column}' is {said}",
            hint="the manifest was edited or damaged; re-create the dataset",
        )
    return a.view(np.ndarray)  # a plain ndarray view: cheaper slices, copies are ndarrays


def _take_var(values: np.ndarray, offsets: np.ndarray, idx: np.ndarray) -> VarColumn:
    starts = np.take(offsets, idx)
    lens = np.take(offsets, idx + 1) - starts
    offs = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    if len(idx) == 0 or offs[-1] == 0:
        return VarColumn(np.array(values[:0]), offs)
    rel = np.arange(offs[-1], dtype=np.int64) - np.repeat(offs[:-1], lens)
    return VarColumn(np.take(values, np.repeat(starts, lens) + rel), offs)
