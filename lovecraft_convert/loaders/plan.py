"""How a dataset is read in batches: :class:`Plan` holds the checked batching options and gives the
batches of an epoch for one worker, deterministic in (seed, epoch, worker).

* The rows of a dataset form one *group* (all its shards, in manifest order), or, for bucketed
  datasets, one group per bucket (see :mod:`.buckets`).
* Random-access formats shuffle exactly: each epoch draws a permutation of the group's rows
  (seeded by ``(seed, epoch)``) and a batch is one gather of its indices. Without shuffling, rows
  are read in large contiguous chunks and sliced into batches.
* Streaming formats shuffle the order of the shards (and of their blocks) and pass rows through a
  bounded shuffle buffer (``shuffle_buffer`` rows). ``shuffle="buffer"`` asks for the same on
  random-access formats.
* Splitting for workers and ranks: worker ``g`` of ``W`` gets, with exact shuffling, every ``W``-th
  batch of the epoch; without, a contiguous ``1/W`` of the batches; for streaming formats a
  contiguous ``1/W`` of the rows of the epoch's shard order. Every record is seen exactly once per
  epoch across the ``W`` workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from ..engine.pipeline import prefetch
from ..errors import DatasetError
from ..schema import FIXED, Batch, Schema, VarColumn, row_nbytes
from .buckets import BucketEmitter
from .common import Group, Permutation, convert_column, target_dtype, to_object_rows

if TYPE_CHECKING:  # pragma: no cover
    from .dataset import Dataset

CHUNK_BYTES = 8 << 20  # rows read per call: large contiguous reads
SHUFFLE_BUFFER_BYTES = 64 << 20


class Plan:
    """Checked batching options; ``epoch(e, worker)`` gives the batches of epoch ``e`` for worker
    ``worker = (g, W)``. Deterministic in (seed, epoch, worker)."""

    def __init__(
        self,
        ds: Dataset,
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
        if not isinstance(batch_size, int | np.integer) or batch_size < 1:
            raise DatasetError(f"batch_size must be a positive integer, not {batch_size!r}")
        if dtype_float16 not in ("float16", "float32"):
            raise DatasetError(f"dtype_float16={dtype_float16!r}: use 'float16' or 'float32'")
        if pad_to not in ("bucket", "batch"):
            raise DatasetError(f"pad_to={pad_to!r}: use 'bucket' or 'batch'")
        if shuffle is True:
            mode = "exact" if ds.random_access else "buffer"
        elif shuffle is False or shuffle is None:
            mode = None
        elif shuffle in ("exact", "buffer"):
            mode = shuffle
        else:
            raise DatasetError(f"shuffle={shuffle!r}: use True, False, 'exact' or 'buffer'")
        if mode == "exact" and not ds.random_access:
            raise DatasetError(
                f"{ds.path}: an exact shuffle needs random access, which {ds.format} does not offer",
                hint="use shuffle=True (shard order and a shuffle buffer), or write memmap/hdf5",
            )
        if mode and seed is None:
            seed = int(np.random.SeedSequence().entropy % (1 << 63))
        self.ds = ds
        self.batch_size = int(batch_size)
        self.mode = mode
        self.seed = seed
        self.drop_remainder = bool(drop_remainder)
        self.float32 = dtype_float16 == "float32"
        self.pad_to = pad_to
        self.pad_value = pad_value
        self.split = split  # "batches" (whole batches per worker) or "rows" (row ranges per worker)
        if shuffle_buffer is None:  # one buffer per bucket read at the same time: they share the bytes
            row = sum(row_nbytes(f) for f in ds.schema) or 1
            shuffle_buffer = max(16 * self.batch_size, int(SHUFFLE_BUFFER_BYTES // len(ds.groups) // row))
        if shuffle_buffer < 1:
            raise DatasetError(f"shuffle_buffer must be positive, not {shuffle_buffer}")
        self.shuffle_buffer = int(shuffle_buffer)
        self._emitters = {g.index: self._emitter(g) for g in ds.groups}

    # -- sizes --------------------------------------------------------------------------------

    def _nbatches(self, rows: int) -> int:
        bs = self.batch_size
        return rows // bs if self.drop_remainder else -(-rows // bs)

    def _split(self, g: Group, worker: tuple[int, int]) -> tuple[str, int, int]:
        """How worker ``(w, n)`` gets its share of group ``g``: ("stride", w, n) every n-th batch of
        the epoch, ("batches", first, stop) a contiguous run of its batches, or ("rows", a, b)."""
        w, n = worker
        if self.ds.random_access and self.mode != "buffer" and self.split == "batches":
            if self.mode == "exact":
                return ("stride", w, n)
            nb = self._nbatches(g.rows)
            return ("batches", w * nb // n, (w + 1) * nb // n)
        return ("rows", w * g.rows // n, (w + 1) * g.rows // n)

    def group_count(self, g: Group, worker: tuple[int, int]) -> int:
        how, a, b = self._split(g, worker)
        if how == "stride":
            return len(range(a, self._nbatches(g.rows), b))
        if how == "batches":
            return b - a
        return self._nbatches(b - a)

    def count(self, epoch: int = 0, workers: int = 1, worker: int | None = None) -> int:
        """Batches of one epoch for ``worker`` of ``workers`` (all workers when None)."""
        ws = range(workers) if worker is None else [worker]
        return sum(self.group_count(g, (w, workers)) for g in self.ds.groups for w in ws)

    # -- iteration ----------------------------------------------------------------------------

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self.seed or 0, *key])

    def epoch(self, epoch: int, worker: tuple[int, int] = (0, 1)) -> Iterator[dict[str, np.ndarray]]:
        """The batches (output dicts) of ``epoch`` that belong to ``worker = (index, count)``."""
        for g, batch in self.raw_epoch(epoch, worker):
            yield self.emit(g, batch)

    def raw_epoch(self, epoch: int, worker: tuple[int, int] = (0, 1)) -> Iterator[tuple[Group, Batch]]:
        w, n = worker
        if not 0 <= w < n:
            raise DatasetError(f"worker {w} of {n} does not exist")
        groups = self.ds.groups
        if len(groups) == 1:
            for b in self._group_batches(groups[0], epoch, worker):
                yield groups[0], b
            return
        # Buckets: every batch from one bucket; buckets interleaved in a seeded random order (so
        # training does not go from short to long), each bucket's batches spread over the epoch.
        streams = [self._group_batches(g, epoch, worker) for g in groups]
        counts = [self.group_count(g, worker) for g in groups]
        seq = np.repeat(np.arange(len(groups)), counts)
        if self.mode:
            self._rng(epoch, 2, w, n).shuffle(seq)
        for k in seq.tolist():
            b = next(streams[k], None)
            if b is not None:
                yield groups[k], b

    def _group_batches(self, g: Group, epoch: int, worker: tuple[int, int]) -> Iterator[Batch]:
        bs = self.batch_size
        how, a, b = self._split(g, worker)
        ds = self.ds
        if how == "stride":
            order = Permutation(g.rows, self._rng(epoch, 0, g.index))
            nb = self._nbatches(g.rows)
            take = ds.reader(g, g.parts[0]).take if len(g.parts) == 1 else (lambda i: ds.take_rows(g, i))
            for k in range(a, nb, b):
                yield take(order[k * bs : min(g.rows, (k + 1) * bs)])
            return
        if how == "batches":
            lo, hi = a * bs, min(g.rows, b * bs)
            chunk = max(bs, (CHUNK_BYTES // self._row_bytes(g)) // bs * bs)
            yield from _rebatch(self._chunks(g, [(p, lo, hi) for p in g.parts], chunk, None), bs, self.drop_remainder)
            return
        if ds.random_access and self.mode == "exact":  # rows [a, b) of the epoch's permutation
            order = Permutation(g.rows, self._rng(epoch, 0, g.index))
            for i in range(a, b, bs):
                j = min(b, i + bs)
                if j - i < bs and self.drop_remainder:
                    break
                yield ds.take_rows(g, order[i:j])
            return
        # rows [a, b) of the epoch's part order (shuffled: parts and blocks permuted, then a buffer)
        parts = list(g.parts)
        if self.mode:
            perm = self._rng(epoch, 0, g.index).permutation(len(parts))
            parts = [parts[i] for i in perm.tolist()]
        pieces, pos = [], 0
        for p in parts:
            lo, hi = max(a, pos), min(b, pos + p.rows)
            if lo < hi:
                pieces.append((p, p.start + lo - pos, p.start + hi - pos))
            pos += p.rows
        chunk = max(bs, CHUNK_BYTES // self._row_bytes(g))
        if ds.random_access:
            chunk = max(bs, chunk // bs * bs)
        rng = self._rng(epoch, 1, g.index, *worker) if self.mode else None
        chunks = self._chunks(g, pieces, chunk, rng)
        if not ds.random_access and len(ds.groups) == 1:
            chunks = prefetch(chunks, depth=2)  # decoding overlaps with the consumer
        if self.mode:
            chunks = _shuffle_buffer(chunks, self.shuffle_buffer, rng, g.schema)
        yield from _rebatch(chunks, bs, self.drop_remainder)

    def _chunks(self, g: Group, pieces, chunk: int, rng) -> Iterator[Batch]:
        """Rows ``[lo, hi)`` (group coordinates) of each part in ``pieces``, in large chunks."""
        for p, lo, hi in pieces:
            lo, hi = max(lo, p.start), min(hi, p.start + p.rows)
            if lo < hi:
                yield from self.ds.reader(g, p).chunks(lo - p.start, hi - p.start, chunk, rng)

    @staticmethod
    def _row_bytes(g: Group) -> int:
        return max(1, int(sum(row_nbytes(f) for f in g.schema)))

    # -- output -------------------------------------------------------------------------------

    def _emitter(self, g: Group):
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


def _rebatch(chunks: Iterator[Batch], bs: int, drop: bool) -> Iterator[Batch]:
    """Chunks of any size as batches of exactly ``bs`` rows (the last may be short unless ``drop``)."""
    carry: Batch | None = None
    for c in chunks:
        n = c.num_rows
        start = 0
        if carry is not None:
            need = bs - carry.num_rows
            if n < need:
                carry = Batch.concat([carry, c])
                continue
            yield Batch.concat([carry, c.slice(0, need)])
            carry = None
            start = need
        full = start + (n - start) // bs * bs
        if start == 0 and full == n == bs:
            yield c
            continue
        cols = c.columns
        if all(isinstance(v, np.ndarray) for v in cols.values()):
            names = list(cols)
            arrays = list(cols.values())
            for i in range(start, full, bs):
                yield Batch(dict(zip(names, [a[i : i + bs] for a in arrays], strict=True)), bs)
        else:
            for i in range(start, full, bs):
                yield c.slice(i, i + bs)
        if full < n:
            carry = c.slice(full, n)
    if carry is not None and carry.num_rows and not drop:
        yield carry


def _objectify(b: Batch, schema: Schema) -> Batch:
    """Variable-length columns as object arrays, so that rows can be scattered into a buffer."""
    if not any(isinstance(c, VarColumn) for c in b.columns.values()):
        return b
    cols = {}
    for name, c in b.columns.items():
        cols[name] = to_object_rows(c, schema[name].kind) if isinstance(c, VarColumn) else c
    return Batch(cols, b.num_rows)


def _shuffle_buffer(
    chunks: Iterator[Batch], capacity: int, rng: np.random.Generator, schema: Schema
) -> Iterator[Batch]:
    """A bounded shuffle buffer of ``capacity`` rows: each incoming row replaces a random row of the
    buffer, which goes out (the rows that go out are a uniform draw from the buffer); at the end the
    buffer goes out in random order. Every row goes out exactly once."""
    pool: Batch | None = None
    for c in chunks:
        c = _objectify(c, schema)
        if pool is None or pool.num_rows < capacity:
            pool = c if pool is None else Batch.concat([pool, c])
            if pool.num_rows < capacity:
                continue
            extra = pool.num_rows - capacity
            perm = rng.permutation(pool.num_rows)
            if extra:
                yield pool.take(perm[:extra])
            pool = pool.take(perm[extra:])  # a private, writable copy
            continue
        for s in range(0, c.num_rows, capacity):
            piece = c.slice(s, s + capacity)
            pos = rng.choice(capacity, size=piece.num_rows, replace=False)
            out = pool.take(pos)
            for name, col in pool.columns.items():
                col[pos] = piece.columns[name]
            yield out
    if pool is not None and pool.num_rows:
        yield pool.take(rng.permutation(pool.num_rows))
