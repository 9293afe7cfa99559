"""``shuffle="buffer"``: the shuffle the streaming formats had before the block order (kept for
comparison and for those who ask for it; it cannot resume mid-epoch).

The order of the shards (and of their blocks) is permuted and rows pass through a bounded shuffle
buffer of ``shuffle_buffer`` rows. Worker ``w`` of ``W`` reads a contiguous ``1/W`` of the rows of
the epoch's shard order (every record once across workers). Bucketed datasets interleave their
buckets' batches in a seeded order per worker.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..runtime.readahead import prefetch
from ..schema import Batch, Schema, VarColumn
from .common import BatchPlan, Group, to_object_rows
from .order import CHUNK_BYTES


def rows_of(plan: BatchPlan, g: Group, worker: tuple[int, int]) -> tuple[int, int]:
    w, n = worker
    return w * g.rows // n, (w + 1) * g.rows // n


def buffer_epoch(plan: BatchPlan, epoch: int, worker: tuple[int, int]) -> Iterator[tuple[Group, Batch]]:
    groups = plan.ds.groups
    if len(groups) == 1:
        for b in _group_batches(plan, groups[0], epoch, worker):
            yield groups[0], b
        return
    w, n = worker
    streams = [_group_batches(plan, g, epoch, worker) for g in groups]
    counts = [plan.nbatches(b - a) for a, b in (rows_of(plan, g, worker) for g in groups)]
    seq = np.repeat(np.arange(len(groups)), counts)
    plan.rng(epoch, 2, w, n).shuffle(seq)
    for k in seq.tolist():
        b = next(streams[k], None)
        if b is not None:
            yield groups[k], b


def _group_batches(plan: BatchPlan, g: Group, epoch: int, worker: tuple[int, int]) -> Iterator[Batch]:
    ds = plan.ds
    bs = plan.batch_size
    a, b = rows_of(plan, g, worker)
    parts = list(g.parts)
    perm = plan.rng(epoch, 0, g.index).permutation(len(parts))
    parts = [parts[i] for i in perm.tolist()]
    pieces, pos = [], 0
    for p in parts:
        lo, hi = max(a, pos), min(b, pos + p.rows)
        if lo < hi:
            pieces.append((p, p.start + lo - pos, p.start + hi - pos))
        pos += p.rows
    chunk = max(bs, CHUNK_BYTES // plan.row_bytes(g))
    if ds.random_access:
        chunk = max(bs, chunk // bs * bs)
    rng = plan.rng(epoch, 1, g.index, *worker)
    chunks = _chunks(plan, g, pieces, chunk, rng)
    if not ds.random_access and len(ds.groups) == 1:
        chunks = prefetch(chunks, depth=2)  # decoding overlaps with the consumer
    chunks = _shuffle_buffer(chunks, plan.shuffle_buffer, rng, g.schema)
    yield from rebatch(chunks, bs, plan.drop_remainder)


def _chunks(plan: BatchPlan, g: Group, pieces, chunk: int, rng) -> Iterator[Batch]:
    for p, lo, hi in pieces:
        lo, hi = max(lo, p.start), min(hi, p.start + p.rows)
        if lo < hi:
            yield from plan.ds.reader(g, p).chunks(lo - p.start, hi - p.start, chunk, rng)


def rebatch(chunks: Iterator[Batch], bs: int, drop: bool) -> Iterator[Batch]:
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
