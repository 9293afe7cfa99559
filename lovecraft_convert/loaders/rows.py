"""Rows that remember the batch they come from, so that a batch's rows can be put back together
with one slice per column instead of stacking every row.

The map-style dataset's ``__getitems__`` (PyTorch's batched fetch) reads a whole batch in one read
and returns it as a :class:`RowList` of :class:`Row` s; the iterable dataset yields rows as
:class:`Row` s. A :class:`Row` is a read-only mapping (``row["x"]``, ``dict(row)``), so any
``collate_fn``, PyTorch's ``default_collate`` included, sees what it expects. :func:`collate` is
the ``collate_fn`` that knows them (``DataLoader(ds.to_torch(), batch_size=256, collate_fn=collate)``):
rows of one batch, in order, come back as that batch; rows of consecutive batches as one slice of
each, concatenated; anything else as ``default_collate`` makes it. Nothing is registered with
PyTorch (its ``default_collate_fn_map`` is process-wide): ``default_collate`` collates the rows one
by one, the same batches, more slowly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

_item = tuple.__getitem__  # a Row's own fields, past its mapping __getitem__


class Row(tuple):
    """Row ``i`` of a batch (a dict of tensors, arrays or lists), as a read-only mapping
    (``row["x"]``, ``dict(row)``; registered as a ``Mapping``).

    It is the pair ``(rows, i)`` of its batch's :class:`RowList` (which compares by identity)
    and its position, a tuple subclass: :func:`rows_of` makes a batch's rows in C
    (``tuple.__new__`` mapped over pairs: no Python call per row), and :func:`collate_rows`
    recognises the rows of one batch by comparing them with the expected pairs, also in C.
    ``Row(rows, i)`` makes one from Python; a single argument (as PyTorch's ``default_convert``
    tries for mappings) is refused, so a row is never rebuilt from its keys."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # a mapping of arrays: not hashable

    def __new__(cls, rows: RowList, i: int) -> Row:
        return tuple.__new__(cls, (rows, i))

    @property
    def batch(self) -> dict:
        return _item(self, 0).batch

    @property
    def i(self) -> int:
        return _item(self, 1)

    def __getitem__(self, key: str) -> Any:
        return _item(self, 0).batch[key][_item(self, 1)]

    def __iter__(self) -> Iterator[str]:
        return iter(_item(self, 0).batch)

    def __len__(self) -> int:
        return len(_item(self, 0).batch)

    def __contains__(self, key: object) -> bool:
        return key in _item(self, 0).batch

    keys = Mapping.keys
    items = Mapping.items
    values = Mapping.values
    get = Mapping.get

    def __repr__(self) -> str:
        return f"Row({dict(self)!r})"

    def __reduce__(self):  # sent alone (batch_size=None): as a plain dict of its values
        return dict, (dict(self),)


Mapping.register(Row)


def rows_of(held: RowList, positions: Iterator[int]) -> Iterator[Row]:
    """Rows ``positions`` of the batch ``held``, made as they are taken, in C."""
    return map(tuple.__new__, repeat(Row), zip(repeat(held), positions))


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
            return [Row(self, j) for j in range(*i.indices(self.n))]
        j = i + self.n if i < 0 else i
        if not 0 <= j < self.n:
            raise IndexError(f"row {i} of a batch of {self.n}")
        return Row(self, j)

    def __iter__(self) -> Iterator[Row]:
        return rows_of(self, iter(range(self.n)))

    def __repr__(self) -> str:
        return f"RowList({self.n} rows)"


def collate(rows: Sequence) -> Any:
    """A ``collate_fn`` for ``DataLoader``: the batch a list of :class:`Row` s comes from, put back
    together with one slice per column (see the module docstring); what ``default_collate`` makes of
    anything else (rows of batches padded to other lengths included)."""
    if len(rows) and all(type(r) is Row for r in (rows[0], rows[-1])):
        try:
            return collate_rows(rows)
        except _Ragged:
            pass
    from torch.utils.data import default_collate

    return default_collate(rows)


def collate_rows(rows: Sequence) -> dict:
    """Rows (:class:`Row` s, the first one at least) as one batch (see the module docstring)."""
    if type(rows) is RowList and rows.n == len(next(iter(rows.batch.values()), ())):
        return dict(rows.batch)
    held, lo = _item(rows[0], 0), _item(rows[0], 1)
    n = len(rows)
    # rows of one batch in order (the DataLoader's usual case): the same pairs, compared in C
    # (a RowList compares by identity)
    if list(rows) == list(zip(repeat(held), range(lo, lo + n))):
        return {key: col[lo : lo + n] for key, col in held.batch.items()}
    if any(type(r) is not Row for r in rows):
        raise _Ragged
    runs: list[tuple[dict, int, int]] = []
    for r in rows:
        b, i = _item(r, 0).batch, _item(r, 1)
        if runs and runs[-1][0] is b and runs[-1][2] == i:
            runs[-1] = (b, runs[-1][1], i + 1)
        else:
            runs.append((b, i, i + 1))
    if len({tuple(b) for b, _, _ in runs}) > 1:
        raise _Ragged
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
    """Rows that are not whole runs of batches of one layout: collated by ``default_collate``."""
