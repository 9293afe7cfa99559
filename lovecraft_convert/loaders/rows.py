"""Rows that remember the batch they come from, so that PyTorch's ``default_collate`` puts a batch
back together with one slice per column instead of stacking every row.

The map-style dataset's ``__getitems__`` (PyTorch's batched fetch) reads a whole batch in one read
and returns it as a :class:`RowList` of :class:`Row` s; the iterable dataset yields rows as
:class:`Row` s. A :class:`Row` is a read-only mapping (``row["x"]``, ``dict(row)``), so a custom
``collate_fn`` sees what it expects. :func:`register` adds :func:`collate_rows` to
``default_collate``'s table of types (``default_collate_fn_map``, the extension point PyTorch
documents for custom types): rows of one batch, in order, come back as that batch; rows of
consecutive batches as one slice of each, concatenated; anything else one row at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np


class Row(Mapping):
    """Row ``i`` of a batch (a dict of tensors, arrays or lists)."""

    __slots__ = ("batch", "i")

    def __init__(self, batch: dict, i: int) -> None:
        self.batch = batch
        self.i = i

    def __getitem__(self, key: str) -> Any:
        return self.batch[key][self.i]

    def __iter__(self) -> Iterator[str]:
        return iter(self.batch)

    def __len__(self) -> int:
        return len(self.batch)

    def __repr__(self) -> str:
        return f"Row({dict(self)!r})"

    def __reduce__(self):  # sent alone (batch_size=None): as a plain dict of its values
        return dict, (dict(self),)


class RowList(Sequence):
    """The rows of one whole batch, in order (what ``__getitems__`` returns): a sequence whose
    :class:`Row` s are made only when asked for (``default_collate`` asks for none of them)."""

    __slots__ = ("batch", "n")

    def __init__(self, batch: dict, n: int) -> None:
        self.batch = batch
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [Row(self.batch, j) for j in range(*i.indices(self.n))]
        j = i + self.n if i < 0 else i
        if not 0 <= j < self.n:
            raise IndexError(f"row {i} of a batch of {self.n}")
        return Row(self.batch, j)

    def __iter__(self) -> Iterator[Row]:
        return (Row(self.batch, j) for j in range(self.n))

    def __repr__(self) -> str:
        return f"RowList({self.n} rows)"


def collate_rows(rows: list, *, collate_fn_map: dict | None = None) -> dict:
    """``default_collate`` of :class:`Row` s (see the module docstring)."""
    if type(rows) is RowList and rows.n == len(next(iter(rows.batch.values()), ())):
        return dict(rows.batch)
    if any(type(r) is not Row for r in rows):
        return _one_by_one(rows, collate_fn_map)
    batch, lo = rows[0].batch, rows[0].i
    consecutive = [r.i for r in rows] == list(range(lo, lo + len(rows)))
    if consecutive and all(r.batch is batch for r in rows):  # rows of one batch in order: a slice each
        return {key: col[lo : lo + len(rows)] for key, col in batch.items()}
    runs: list[tuple[dict, int, int]] = []
    for r in rows:
        if runs and runs[-1][0] is r.batch and runs[-1][2] == r.i:
            runs[-1] = (r.batch, runs[-1][1], r.i + 1)
        else:
            runs.append((r.batch, r.i, r.i + 1))
    if len({tuple(b) for b, _, _ in runs}) > 1:
        return _one_by_one(rows, collate_fn_map)
    out = {}
    for key in runs[0][0]:
        pieces = [b[key][lo:hi] for b, lo, hi in runs]
        out[key] = pieces[0] if len(pieces) == 1 else _concat(pieces)
    return out


def _concat(pieces: list):
    first = pieces[0]
    if isinstance(first, list):
        return [x for p in pieces for x in p]
    if isinstance(first, np.ndarray):
        if first.ndim >= 2 and len({p.shape[1:] for p in pieces}) > 1:
            raise _Ragged
        return np.concatenate(pieces)
    import torch

    if first.dim() >= 2 and len({tuple(p.shape[1:]) for p in pieces}) > 1:
        raise _Ragged
    return torch.cat(pieces)


class _Ragged(Exception):
    """Rows of batches padded to different lengths: collated one by one (which raises as usual)."""


def _one_by_one(rows: list, collate_fn_map: dict | None) -> dict:
    from torch.utils.data._utils.collate import collate

    return {key: collate([r[key] for r in rows], collate_fn_map=collate_fn_map) for key in rows[0]}


def register() -> None:
    """Teach ``default_collate`` about :class:`Row` (once per process; harmless when the table
    is not where PyTorch keeps it: rows are mappings, collated one by one)."""
    try:
        from torch.utils.data._utils.collate import default_collate_fn_map
    except ImportError:  # pragma: no cover - another PyTorch layout
        return
    default_collate_fn_map.setdefault(Row, _collate)


def _collate(rows: list, *, collate_fn_map: dict | None = None) -> dict:
    try:
        return collate_rows(rows, collate_fn_map=collate_fn_map)
    except _Ragged:
        return _one_by_one(rows, collate_fn_map)
