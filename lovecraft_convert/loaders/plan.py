"""How a dataset is read in batches: :class:`Plan` holds the checked batching options and gives the
batches of an epoch for one reader, from any position of it.

* The rows of a dataset form one *group* (all its shards, in manifest order), or, for bucketed
  datasets, one group per bucket (see :mod:`.buckets`).
* The order of an epoch is a pure function of (seed, epoch) (:mod:`.order`): the group's rows in
  order; an exact permutation (random-access formats, ``shuffle=True`` or ``"exact"``); or permuted
  blocks and windows (``"blocks"``: Parquet and TFRecord with ``shuffle=True``). ``"buffer"`` is
  the older shuffle buffer (:mod:`.buffer`), which cannot resume.
* The epoch is read in *global steps*: reader ``j`` of ``J`` (ranks, times DataLoader workers) takes
  batch ``j`` of every step of ``J`` batches. A position of the epoch (rows; batches of the
  buckets' interleave for bucketed datasets) is all it takes to go on from there, with any
  ``J``: after every reader has taken ``k`` batches, the epoch's first ``k * J`` batches are done,
  whichever readers took them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import DatasetError
from ..schema import FIXED, SEQUENCE, Batch, row_nbytes
from .buckets import BucketEmitter
from .common import Group, Parts, Permutation, convert_column, target_dtype
from .fetch import attach, list_blocks
from .order import ALL, BlockCursor, BlockLayout, Cursor, ExactCursor, RangeCursor, StreamCursor, Wanted

SHUFFLE_BUFFER_BYTES = 64 << 20  # a window of the block order (shared by the buckets read at once)
MODES = ("exact", "blocks", "buffer")


class Plan:
    """Checked batching options; ``steps(e, reader, start)`` gives the batches of epoch ``e`` for
    ``reader = (j, J)`` from position ``start``. Deterministic in (seed, epoch, reader, start)."""

    def __init__(
        self,
        ds: Parts,
        batch_size: int,
        shuffle: bool | str,
        seed: int | None,
        drop_remainder: bool,
        dtype_float16: str = "float16",
        shuffle_buffer: int | None = None,
        pad_to: str = "bucket",
        pad_value: int | float = 0,
        split: str = "batches",
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size < 1:
            raise DatasetError(f"batch_size must be a positive integer, not {batch_size!r}")
        if dtype_float16 not in ("float16", "float32"):
            raise DatasetError(f"dtype_float16={dtype_float16!r}: use 'float16' or 'float32'")
        if pad_to not in ("bucket", "batch"):
            raise DatasetError(f"pad_to={pad_to!r}: use 'bucket' or 'batch'")
        if shuffle is True:
            mode = "exact" if ds.random_access else "blocks"
        elif shuffle is False or shuffle is None:
            mode = None
        elif shuffle in MODES:
            mode = shuffle
        else:
            raise DatasetError(f"shuffle={shuffle!r}: use True, False, 'exact', 'blocks' or 'buffer'")
        if mode == "exact" and not ds.random_access:
            raise DatasetError(
                f"{ds.path}: an exact shuffle needs random access, which {ds.format} does not offer",
                hint="use shuffle=True (permuted blocks and windows), or write memmap/hdf5",
            )
        if mode and seed is None:
            seed = int(np.random.SeedSequence().entropy % (1 << 63))
        self.ds = ds
        self.batch_size = int(batch_size)
        self.mode = mode
        self.seed = seed
        self.drop_remainder = bool(drop_remainder)
        self.float32 = dtype_float16 == "float32"
        self.dtype_float16 = dtype_float16
        self.pad_to = pad_to
        self.pad_value = pad_value
        self.split = split  # kept for callers; every mode splits by global steps but "buffer"
        if shuffle_buffer is None:  # one window per bucket read at the same time: they share the bytes
            row = sum(row_nbytes(f) for f in ds.schema) or 1
            shuffle_buffer = max(16 * self.batch_size, int(SHUFFLE_BUFFER_BYTES // len(ds.groups) // row))
        if isinstance(shuffle_buffer, bool) or not isinstance(shuffle_buffer, int | np.integer) or shuffle_buffer < 1:
            raise DatasetError(f"shuffle_buffer must be a positive number of rows, not {shuffle_buffer!r}")
        self.shuffle_buffer = int(shuffle_buffer)
        self.unit = "batches" if len(ds.groups) > 1 else "rows"
        self._emitters = {g.index: self._emitter(g) for g in ds.groups}
        self._perms: dict[tuple[int, int], Permutation] = {}
        self._interleaves: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    # -- identity (what a saved state must match) ----------------------------------------------

    def identity(self) -> dict[str, Any]:
        return {
            "dataset": self.ds.fingerprint,
            "shuffle": self.mode or False,
            "seed": self.seed if self.mode else None,
            "batch_size": self.batch_size,
            "drop_remainder": self.drop_remainder,
            "window": self.shuffle_buffer if self.mode in ("blocks", "buffer") else None,
            "unit": self.unit,
        }

    @property
    def resumable(self) -> bool:
        return self.mode != "buffer"

    def with_seed(self, seed: int | None) -> Plan:
        """The same options with another seed (a loader adopting the seed of a saved state)."""
        return Plan(
            self.ds,
            self.batch_size,
            self.mode or False,
            seed,
            self.drop_remainder,
            self.dtype_float16,
            self.shuffle_buffer,
            self.pad_to,
            self.pad_value,
            self.split,
        )

    # -- sizes --------------------------------------------------------------------------------

    def nbatches(self, rows: int) -> int:
        bs = self.batch_size
        return max(0, rows // bs if self.drop_remainder else -(-rows // bs))

    def end(self, epoch: int = 0) -> int:
        """Positions in an epoch: rows, or for bucketed datasets batches of the interleave."""
        if self.unit == "rows":
            return self.ds.groups[0].rows
        return sum(self.nbatches(g.rows) for g in self.ds.groups)

    def _steps_left(self, start: int) -> int:
        """Batches of the epoch from position ``start`` on (all readers together)."""
        if self.unit == "rows":
            return self.nbatches(self.end() - start)
        return max(0, self.end() - start)

    def count(self, epoch: int = 0, workers: int = 1, worker: int | None = None, start: int = 0) -> int:
        """Batches of one epoch from ``start`` for ``worker`` of ``workers`` (all workers when None)."""
        ws = range(workers) if worker is None else [worker]
        if self.mode == "buffer":
            from .buffer import rows_of

            return sum(
                self.nbatches(b - a) for g in self.ds.groups for w in ws for a, b in [rows_of(self, g, (w, workers))]
            )
        m = self._steps_left(start)
        return sum(len(range(w, m, workers)) for w in ws)

    # -- iteration ----------------------------------------------------------------------------

    def rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self.seed or 0, *key])

    _rng = rng  # the Keras PyDataset draws its permutations here

    def epoch(self, epoch: int, worker: tuple[int, int] = (0, 1)) -> Iterator[dict[str, np.ndarray]]:
        """The batches (output dicts) of ``epoch`` that belong to ``worker = (index, count)``."""
        for out, _ in self.steps(epoch, worker, 0):
            yield out

    def steps(self, epoch: int, reader: tuple[int, int] = (0, 1), start: int = 0) -> Iterator[tuple[dict, int]]:
        """``(batch, position)`` pairs: the output batches of ``reader = (j, J)`` from position
        ``start`` of ``epoch``, each with the position of the epoch once its global step is done."""
        for g, batch, pos in self.raw_steps(epoch, reader, start):
            yield self.emit(g, batch), pos

    def raw_steps(
        self, epoch: int, reader: tuple[int, int] = (0, 1), start: int = 0, source: Any = None
    ) -> Iterator[tuple]:
        """``(group, internal batch, position)`` triples (see :meth:`steps`). ``source``: what the
        parts are read with instead of the dataset (anything with its ``reader(group, part,
        own)``; a format's pipeline reading its records undecoded), not for bucketed datasets."""
        j, n = reader
        if not 0 <= j < n:
            raise DatasetError(f"worker {j} of {n} does not exist")
        if self.mode == "buffer":
            if start:
                raise DatasetError("shuffle='buffer' cannot start mid-epoch", hint="use shuffle=True")
            from .buffer import buffer_epoch

            for g, b in buffer_epoch(self, epoch, reader):
                yield g, b, None
            return
        if self.unit == "rows":
            yield from self._group_steps(self.ds.groups[0], epoch, j, n, start, source)
        else:
            yield from self._bucket_steps(epoch, j, n, start)

    def _group_steps(self, g: Group, epoch: int, j: int, n: int, start: int, source: Any = None) -> Iterator[tuple]:
        bs, rows = self.batch_size, g.rows
        m = self._steps_left(start)
        if j >= m:
            return
        cursor = self.cursor(g, epoch, Wanted(start, bs, j, n), background=True, source=source)
        try:
            for k in range(j, m, n):
                lo = start + k * bs
                yield g, cursor.rows(lo, min(rows, lo + bs)), min(rows, start + (k - j + n) * bs)
        finally:
            cursor.close()

    def interleave(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Bucketed datasets: the bucket of every batch of the epoch (in a seeded random order when
        shuffling, bucket by bucket otherwise), and its index among its bucket's batches."""
        got = self._interleaves.get(epoch)
        if got is None:
            groups = self.ds.groups
            counts = np.array([self.nbatches(g.rows) for g in groups], dtype=np.int64)
            seq = np.repeat(np.arange(len(groups)), counts)
            if self.mode:
                self.rng(epoch, 2, 0, 1).shuffle(seq)  # the key one reader used before the global order
            occ = np.empty(len(seq), dtype=np.int64)
            for k in range(len(groups)):
                at = np.flatnonzero(seq == k)
                occ[at] = np.arange(len(at))
            got = self._interleaves[epoch] = (seq, occ)
            while len(self._interleaves) > 2:
                self._interleaves.pop(next(iter(self._interleaves)))
        return got

    def _bucket_steps(self, epoch: int, j: int, n: int, start: int) -> Iterator[tuple]:
        seq, occ = self.interleave(epoch)
        groups, bs, total = self.ds.groups, self.batch_size, len(seq)
        cursors: dict[int, Cursor] = {}
        try:
            for m in range(start + j, total, n):
                k, t = int(seq[m]), int(occ[m])
                g = groups[k]
                cur = cursors.get(k)
                lo = t * bs
                if cur is None:  # from its first row read (nothing before it is asked for)
                    cur = cursors[k] = self.cursor(g, epoch, Wanted(lo, 1, 0, 1) if lo else ALL, background=False)
                yield g, cur.rows(lo, min(g.rows, lo + bs)), min(total, m - j + n)
        finally:
            for c in cursors.values():
                c.close()

    def permutation(self, g: Group, epoch: int) -> Permutation:
        key = (epoch, g.index)
        p = self._perms.get(key)
        if p is None:
            p = self._perms[key] = Permutation(g.rows, self.rng(epoch, 0, g.index))
            while len(self._perms) > max(2, len(self.ds.groups)):
                self._perms.pop(next(iter(self._perms)))
        return p

    def cursor(self, g: Group, epoch: int, wanted: Wanted, background: bool, source: Any = None) -> Cursor:
        """Reads positions of ``g``'s order in ``epoch`` (see :mod:`.order`), from the dataset's
        readers or ``source``'s."""
        ds = self.ds if source is None else source
        if self.mode == "exact":
            c: Cursor = ExactCursor(ds, g, self.permutation(g, epoch))
        elif self.mode == "blocks":
            list_blocks(ds, g)  # a remote dataset's footers, fetched at once
            layout = BlockLayout(ds, g, self.rng(epoch, 0, g.index), self.shuffle_buffer)
            key = (self.seed or 0, epoch, 3, g.index)
            c = BlockCursor(ds, g, layout, key, wanted, background)
        elif self.ds.random_access:
            c = RangeCursor(ds, g, wanted, self.row_bytes(g))
        else:
            c = StreamCursor(ds, g, self.row_bytes(g), background)
        return attach(self.ds, g, c, wanted.start)  # a remote dataset's: what it reads, fetched ahead

    @staticmethod
    def row_bytes(g: Group) -> int:
        return max(1, int(sum(row_nbytes(f) for f in g.schema)))

    # -- output -------------------------------------------------------------------------------

    def _emitter(self, g: Group):
        self._check_added(g)
        if g.bucket is not None:
            return BucketEmitter(self, g)
        steps = []
        simple = True
        for f in self.ds.schema:
            target = target_dtype(f, self.float32)
            if f.kind == FIXED:
                steps.append((f.name, "fixed", target))
                if target != np.dtype(g.schema[f.name].dtype) or target != self.ds.storage_dtype(f):
                    simple = False
            else:
                steps.append((f.name, f.kind, target))
                simple = False
        if simple:
            return None
        return steps

    def _check_added(self, g: Group) -> None:
        """A sequence's lengths are added to a batch as ``<name>_length``: that must not be a
        column's name, or the column would take the key and the true lengths be lost without a
        word. (A bucketed dataset's ``length`` is its own column: the lengths.)"""
        if g.bucket is not None:
            return
        names = set(self.ds.schema.names)
        for f in self.ds.schema:
            key = f"{f.name}_length"
            if f.kind == SEQUENCE and key in names:
                raise DatasetError(
                    f"{self.ds.path}: batches hold column '{f.name}' padded and its lengths as '{key}', which is "
                    "also a column of the dataset",
                    hint="open it with the columns to read, without one of them (open_dataset(path, columns=[...]))",
                )

    def emit(self, g: Group, batch: Batch) -> dict[str, np.ndarray]:
        """An internal batch as the output dict."""
        steps = self._emitters[g.index]
        if steps is None:
            return batch.columns
        if callable(steps):
            return steps(batch)
        out: dict[str, np.ndarray] = {}
        for name, kind, target in steps:
            out.update(convert_column(name, kind, target, batch.columns[name], self.pad_value))
        return out
