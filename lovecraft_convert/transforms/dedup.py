"""``--dedup exact``: drop rows whose chosen columns are byte-identical to an earlier row's, in
bounded memory whatever the input's size. (``--dedup near`` is another mode of the same structure:
its hashing in :mod:`.near`, its spill, decision and components in
:mod:`lovecraft_convert.engine.near`; :class:`Dedup` and :class:`DropSet` serve both.)

The decision is made before the rows are written, in three steps that each hold a bounded piece:

1. *Scan* (:func:`~lovecraft_convert.engine.dedup.scan_part`, one per part of the input): every
   row the filter keeps gets a 128-bit digest of its chosen columns (XXH3-128, 16 bytes, over each
   column's bytes preceded by their length as 8 bytes, so ``('ab', 'c')`` and ``('a', 'bc')``
   differ) and its position: ``part << 40 | row`` (its row in the part, counting every row read).
   Rows repeating a digest already seen in the same batch are decided at once (dropped, kept: the
   batch's first); the batch's first occurrences become (digest, position) entries, held up to a
   bound and written as *runs* sorted by fine partition (the digest's top 12 bits: 4,096 fine
   partitions), with an index of each fine partition's offset and CRC32C per run. A value repeated
   in every row therefore costs one entry per batch, not one per row.
2. *Decide* (:func:`~lovecraft_convert.engine.dedup.decide_partition`, one per group of
   consecutive fine partitions, grouped from the counts the scans wrote so that each fits a unit's
   budget whatever the input's size or skew): the group's entries from every part, sorted by
   (digest, position): the first of each digest is kept, the others dropped. The dropped
   positions, sorted, with the position each duplicated, go to two ``.npy`` files.
3. *Drop* (:class:`DropSet`): the rows are read again, and each batch's dropped positions are
   looked up in the sorted files, memory-mapped (a binary search per batch, nothing loaded whole).

Parts and groups depend only on the input and the options, so the rows kept are the same for
any number of workers. Digests are compared, not the rows: two different rows are taken for
duplicates only if their 128-bit digests collide, which for n distinct rows happens with
probability below n^2 / 2^129 (10^-19 for ten billion rows). The positions are ``--dedup-report``'s
(:func:`~lovecraft_convert.engine.dedup.write_report`). The digests and the drop set live here; the
spill of the scan, the decision and the report, which write spill files, in :mod:`..engine.dedup`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from xxhash import xxh3_128_digest

from ..errors import OptionsError
from ..schema import STRING, STRING_LIST, Batch, Schema, VarColumn
from .near import NearParams

MODES = ("exact", "near")  # near: MinHash over text (transforms/near.py, engine/near.py)
PART_SHIFT = 40  # a position is part << 40 | row: up to 2^40 rows per part, 2^23 parts
ENTRY = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("pos", "<i8")])
DECIDE_BYTES = 96  # what deciding holds per entry at its peak (entries, sort order, sorted copies)
FINE_BITS = 12
DIGEST = "xxh3-128"  # what a row's digest is (the manifest says it; a resume checks it: options.py)
FINE = 1 << FINE_BITS  # fine hash partitions (the digest's top bits), grouped into decisions by their counts


@dataclass(frozen=True)
class Dedup:
    """What ``--dedup`` asks: the ``mode``, the ``columns`` compared (resolved against the reader's
    schema by :meth:`resolve`) and, for ``near``, its parameters."""

    mode: str
    columns: tuple[str, ...]
    near: NearParams | None = None

    @classmethod
    def resolve(
        cls,
        mode: str,
        columns: list[str] | None,
        schema: Schema,
        default: list[str],
        near: NearParams | None = None,
        text: str | None = None,
    ) -> Dedup:
        """``columns`` (None: ``default``, the columns written) checked against ``schema``. For
        ``near``: one text column, by default ``text`` (the command's text column; None: none, the
        user is asked to name one)."""
        if mode not in MODES:
            raise OptionsError(f"--dedup {mode}: use one of {', '.join(MODES)}")
        if mode == "near":
            cols = list(columns) if columns else ([text] if text else [])
            if len(cols) != 1:
                raise OptionsError(
                    "--dedup near compares one text column: "
                    + (f"--dedup-columns names {len(cols)}" if cols else "name it with --dedup-columns"),
                    hint="e.g. --dedup-columns text",
                )
        else:
            cols = list(columns) if columns else list(default)
        twice = next((c for i, c in enumerate(cols) if c in cols[:i]), None)
        if columns and twice is not None:
            raise OptionsError(f"--dedup-columns names '{twice}' twice", hint="name each column once")
        missing = [c for c in cols if c not in schema.names]
        if missing:
            raise OptionsError(
                f"--dedup-columns: no column '{missing[0]}'", hint=f"columns are {', '.join(schema.names)}"
            )
        if mode == "near":
            f = schema[cols[0]]
            if f.kind != STRING:
                raise OptionsError(
                    f"--dedup near: column '{f.name}' is {f.describe()}, not text",
                    hint="name a text column with --dedup-columns, or use --dedup exact",
                )
            return cls(mode, tuple(cols), (near or NearParams()).check())
        return cls(mode, tuple(cols))

    def describe(self) -> dict[str, Any]:
        if self.near is not None:
            return {"mode": self.mode, "columns": list(self.columns), "minhash": self.near.to_dict()}
        return {"mode": self.mode, "columns": list(self.columns), "digest": DIGEST}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Dedup:
        """The inverse of :meth:`describe` (what a unit is given)."""
        near = NearParams.from_dict(d["minhash"]) if d.get("minhash") else None
        return cls(d["mode"], tuple(d["columns"]), near)


def run_entries(unit_budget: int) -> int:
    """Entries a scan holds before writing them as a run (an eighth of the unit's budget)."""
    return max(1 << 12, unit_budget // 8 // ENTRY.itemsize)


def group_entries(unit_budget: int) -> int:
    """Entries one decision may hold (it holds about :data:`DECIDE_BYTES` per entry at its peak)."""
    return max(1 << 12, unit_budget // DECIDE_BYTES)


# -- digests ---------------------------------------------------------------------------------------


def row_digests(batch: Batch, schema: Schema, columns: tuple[str, ...]) -> np.ndarray:
    """The 128-bit digest of each row's ``columns`` (``[rows, 2]`` uint64): XXH3-128 over each
    column's bytes, each preceded by its length (8 bytes, little-endian)."""
    n = batch.num_rows
    parts = [_row_bytes(batch.columns[c], schema[c].kind, n) for c in columns]
    if len(parts) == 1:  # a comprehension joined once: half the time of a loop filling a bytearray
        mv, starts, ends = parts[0]
        digests = [xxh3_128_digest((b - a).to_bytes(8, "little") + mv[a:b]) for a, b in zip(starts, ends, strict=True)]
    else:
        digests = []
        for i in range(n):
            framed = (
                (ends[i] - starts[i]).to_bytes(8, "little") + mv[starts[i] : ends[i]] for mv, starts, ends in parts
            )
            digests.append(xxh3_128_digest(b"".join(framed)))
    return np.frombuffer(b"".join(digests), dtype="<u8").reshape(n, 2)


def _row_bytes(col, kind: str, n: int) -> tuple[memoryview, list[int], list[int]]:
    """A column as (bytes, row starts, row ends)."""
    if isinstance(col, VarColumn) and kind == STRING_LIST:
        rows = []
        for i in range(n):
            inner = col.row(i)
            rows.append(
                b"".join(len(s).to_bytes(8, "little") + s for s in (inner.row(j).tobytes() for j in range(len(inner))))
            )
        data = b"".join(rows)
        ends = np.cumsum([len(r) for r in rows], dtype=np.int64)
        return memoryview(data), [0, *ends[:-1].tolist()], ends.tolist()
    if isinstance(col, VarColumn):
        values = np.ascontiguousarray(col.values)
        size = values.dtype.itemsize
        offs = (col.offsets - col.offsets[0]) * size
        raw = values.reshape(-1).view(np.uint8)[int(col.offsets[0]) * size :]
        return memoryview(raw), offs[:-1].tolist(), offs[1:].tolist()
    arr = np.ascontiguousarray(col)
    width = arr.dtype.itemsize * (int(np.prod(arr.shape[1:])) if arr.ndim > 1 else 1)
    starts = np.arange(n, dtype=np.int64) * width
    return memoryview(arr.reshape(-1).view(np.uint8)), starts.tolist(), (starts + width).tolist()


def first_in_batch(digests: np.ndarray) -> np.ndarray:
    """For each row, the row of the batch where its digest first appears."""
    if len(digests) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = np.ascontiguousarray(digests).view("V16").reshape(-1)
    _u, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)].astype(np.int64)


# -- one pass, when the digests fit in memory ------------------------------------------------------


class SeenFull(Exception):
    """The distinct rows' digests outgrew what :class:`SeenDigests` may hold: decide in two passes."""


SEEN_LOAD = 0.75  # the table's fill at most (linear probing: ~8 probes for a new digest at this load)


class SeenDigests:
    """``--dedup exact`` decided in the writing pass itself, for a ``convert`` whose distinct rows
    fit: the digests seen so far in a hash table of ``uint64[slots, 2]`` (16 bytes a slot, at most
    :data:`SEEN_LOAD` full, doubled as it fills), probed and filled a batch at a time with NumPy.
    A row is kept when its digest (the same XXH3-128 as the two passes compare) is new, so the
    rows kept are the same as theirs: each digest's first occurrence in input order among the rows
    the filter keeps. ``limit``: the bytes the table may take (a doubling holds both tables);
    :class:`SeenFull` when it would need more, and the job starts over in two passes."""

    def __init__(self, dedup: Dedup, schema: Schema, limit: int, input_bytes: int | None = None) -> None:
        self.columns, self.schema = dedup.columns, schema
        self.limit = limit
        self.input_bytes = input_bytes
        self.table = np.zeros((1 << 12, 2), dtype=np.uint64)
        self.zero = False  # the digest (0, 0) was seen
        self.count = 0

    def most(self) -> int:
        """The distinct digests the largest table within the limit holds."""
        size = 1 << 12
        while (2 * size + size) * 16 <= self.limit:  # the doubling to 2 * size holds both tables
            size *= 2
        return int(SEEN_LOAD * size)

    def first_seen(self, batch: Batch, mask: np.ndarray) -> np.ndarray:
        """``mask`` (the rows the filter keeps) without the rows whose digest was seen before
        (in this batch or an earlier one). On the first batch, an input whose rows (its size over
        this batch's bytes per row) are more than twice what the table can hold is
        :class:`SeenFull` at once, before it is read any further."""
        if self.input_bytes is not None and batch.num_rows:
            rows = self.input_bytes * batch.num_rows / max(1, batch.nbytes)
            self.input_bytes = None
            if rows > 2 * self.most():
                raise SeenFull
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            return mask
        sub = batch if len(idx) == batch.num_rows else batch.take(idx)
        d = row_digests(sub, self.schema, self.columns)
        first = np.unique(np.ascontiguousarray(d).view("V16").reshape(-1), return_index=True)[1]
        first.sort()
        new = self._add(d[first])
        out = np.zeros(len(mask), dtype=bool)
        out[idx[first[new]]] = True
        return out

    def _add(self, keys: np.ndarray) -> np.ndarray:
        """Put distinct ``keys`` (``uint64[k, 2]``) in the table; True where one was not there."""
        if (self.count + len(keys)) > SEEN_LOAD * len(self.table):
            self._grow(self.count + len(keys))
        table, m = self.table, len(self.table) - 1
        slot = (keys[:, 0] & np.uint64(m)).astype(np.int64)
        new = np.zeros(len(keys), dtype=bool)
        zero = (keys[:, 0] == 0) & (keys[:, 1] == 0)  # (0, 0) marks an empty slot: that digest is a flag
        if zero.any():
            new[zero] = not self.zero
            self.zero = True
        todo = np.flatnonzero(~zero)
        while len(todo):
            s = slot[todo]
            there = table[s]
            found = (there[:, 0] == keys[todo, 0]) & (there[:, 1] == keys[todo, 1])
            empty = (there[:, 0] == 0) & (there[:, 1] == 0)
            _, won = np.unique(s[empty], return_index=True)  # one key per empty slot this round
            winners = todo[empty][won]
            table[slot[winners]] = keys[winners]
            new[winners] = True
            left = np.ones(len(todo), dtype=bool)
            left[found] = False
            left[np.flatnonzero(empty)[won]] = False
            moved = left & ~empty  # taken by another key: the next slot (a loser tries its slot again)
            slot[todo[moved]] = (slot[todo[moved]] + 1) & m
            todo = todo[left]
        self.count += int(np.count_nonzero(new))
        return new

    def _grow(self, need: int) -> None:
        size = len(self.table)
        while need > SEEN_LOAD * size:
            size *= 2
        if (size + len(self.table)) * 16 > self.limit:
            raise SeenFull
        old = self.table[(self.table[:, 0] != 0) | (self.table[:, 1] != 0)]
        self.table = np.zeros((size, 2), dtype=np.uint64)
        self.count = int(self.zero)
        if len(old):
            self._add(old)


# -- 3. drop ---------------------------------------------------------------------------------------


def _mapped(path: str) -> np.ndarray:
    if path.endswith(".npy"):
        return np.load(path, mmap_mode="r")
    if os.path.getsize(path) == 0:
        return np.zeros(0, dtype="<i8")
    return np.memmap(path, dtype="<i8", mode="r")


class DropSet:
    """The positions dropped as duplicates, sorted on disk and memory-mapped: the decided
    partitions' (``x*-drop.npy``) and, for part ``part``, the rows its scan decided within a
    batch (``l<part>-b0000.bin``)."""

    def __init__(self, spill_dir: str, part: int, parts: int, local: bool = True) -> None:
        self.sources: list[tuple[np.ndarray, np.ndarray]] = []
        for p in range(parts):
            path = os.path.join(spill_dir, f"x{p:04d}-drop.npy")
            if os.path.exists(path):
                self.sources.append((_mapped(path), _mapped(path[: -len("drop.npy")] + "kept.npy")))
        self.local: tuple[np.ndarray, np.ndarray] | None = None
        lp = os.path.join(spill_dir, f"l{part:05d}-b0000.bin")
        if local and os.path.exists(lp):
            self.local = (_mapped(lp), _mapped(os.path.join(spill_dir, f"l{part:05d}-b0001.bin")))

    def between(self, lo: int, hi: int, with_kept: bool = False):
        """The dropped positions in ``[lo, hi)``, sorted (and, ``with_kept``, the position each
        duplicated)."""
        got, kept = [], []
        for drop, k in [*self.sources, *([self.local] if self.local is not None else [])]:
            a, b = np.searchsorted(drop, [lo, hi])
            if a < b:
                got.append(np.asarray(drop[a:b]))
                if with_kept:
                    kept.append(np.asarray(k[a:b]))
        if not got:
            empty = np.zeros(0, dtype=np.int64)
            return (empty, empty) if with_kept else empty
        d = np.concatenate(got)
        o = np.argsort(d, kind="stable")
        return (d[o], np.concatenate(kept)[o]) if with_kept else d[o]

    def kept_of(self, positions: np.ndarray) -> np.ndarray:
        """``positions`` with each one that a partition dropped replaced by the one it duplicated
        (a batch's first occurrence may itself repeat an earlier batch's row)."""
        out = positions.copy()
        for drop, k in self.sources:
            i = np.searchsorted(drop, positions)
            hit = i < len(drop)
            hit[hit] = np.asarray(drop[i[hit]]) == positions[hit]
            out[hit] = np.asarray(k[i[hit]])
        return out
