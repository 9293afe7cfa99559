"""The spill side of ``--dedup near`` (:mod:`lovecraft_convert.transforms.near` says how rows are
hashed): the same scan/decide structure as ``--dedup exact`` (:mod:`.dedup`), then connected
components on disk. Every step holds a bounded piece, whatever the input's size.

1. *Scan* (:func:`scan_near_part`, one per part): each row the filter keeps gets its MinHash
   signature, written to ``s<part>.bin`` (``[rows read, bands * band_rows]`` uint32, in position
   order, a row the filter removed all ones, so a row's signature is found by its position), and
   one entry per band, (128-bit band key, position), spilled in runs by fine partition exactly as
   the exact mode's digests (:class:`.dedup.RunWriter`).
2. *Decide* (:func:`decide_near_group`, one per group of fine partitions, planned from the counts
   the scans wrote by :func:`.dedup.plan_groups`): the group's entries sorted by (key, position);
   rows sharing a key are candidates: each is paired with the bucket's first row and with the row
   before it (a bucket of k rows gives at most 2(k - 1) pairs, not k(k - 1)/2). A pair is kept when
   its *estimated* Jaccard similarity (the fraction of equal values of the two signatures, read
   from the memory-mapped signature files) reaches the threshold; the kept pairs (edges) go to
   ``e<group>-edges.npy``.
3. *Components* (:func:`components`, one unit): a union-find whose parent array is a memory-mapped
   file on the spill disk over dense row numbers (the parts' rows back to back, from the row counts
   the scans recorded), the edges taken a block at a time, each root hooked under the smaller one,
   so that a component's root is its first row in input order. One pass over the array then writes
   every other row of each component, with its root, to the sorted drop files ``x0000-drop.npy`` /
   ``-kept.npy`` that the write step (:class:`~lovecraft_convert.transforms.dedup.DropSet`) and
   ``--dedup-report`` read.

Parts and groups depend only on the input and the options, and a component's root does not depend
on the order its edges are met, so the rows kept are the same for any number of workers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import OutputError
from ..schema import STRING, Batch, Schema, VarColumn
from ..transforms.dedup import ENTRY, PART_SHIFT, Dedup
from ..transforms.near import Hasher, NearParams
from .dedup import RunWriter, entries, plan_groups
from .frames import UnitSpill, file_crc

ROW_MASK = (1 << PART_SHIFT) - 1
COMPONENTS = "x0000"  # the drop files the components step writes (the drop set's one "partition")


def text_chunk(unit_budget: int) -> int:
    """Bytes of text hashed at once: the hashing's temporaries are about 40 bytes per byte of text."""
    return max(1 << 14, min(4 << 20, unit_budget // 160))


def _damaged(path: str, what: str) -> OutputError:
    return OutputError(
        f"dedup spill file {what}",
        where=path,
        hint="run the same command with --resume: the part that wrote it is read again",
    )


# -- 1. scan ---------------------------------------------------------------------------------------


def scan_near_part(
    batches: Iterator[Batch],
    keep,
    schema: Schema,
    dedup: Dedup,
    part: int,
    spill_dir: str,
    run_entries: int,
    chunk: int,
) -> dict[str, Any]:
    """Sign the rows of one part (``batches``, as read) that ``keep`` (a filter's mask function, or
    None) keeps, spill their band entries and write their signatures. Returns the fragment: rows
    ``read``, ``kept`` by the filter, the ``runs`` written and the ``files`` (``h<part>-b0000.bin``,
    ``-b0001.bin``: the entries and the runs' index, as the exact mode's; ``s<part>.bin``: the
    signatures)."""
    near = dedup.near
    assert near is not None and schema[dedup.columns[0]].kind == STRING
    hasher = Hasher(near, chunk)
    column = dedup.columns[0]
    runs = RunWriter(spill_dir, part, run_entries)
    sigs = UnitSpill(spill_dir, part, 0, prefix="s")
    base = part << PART_SHIFT
    read = kept = 0
    try:
        for batch in batches:
            n = batch.num_rows
            col = batch.columns[column]
            if keep is not None:
                rows = np.flatnonzero(keep(batch))
                if len(rows) < n:
                    col = col.take(rows)
            else:
                rows = np.arange(n)
            pos = base + read + rows.astype(np.int64)
            read += n
            kept += len(rows)
            sig = _signatures(hasher, col)
            out = sig
            if len(rows) < n:
                out = np.full((n, near.hashes), np.iinfo(np.uint32).max, dtype=np.uint32)
                out[rows] = sig
            if n:
                sigs.file(0).write(out.astype("<u4", copy=False).tobytes())
            if not len(rows):
                continue
            hi, lo = hasher.band_keys(sig)
            e = np.empty(hi.size, dtype=ENTRY)
            e["hi"], e["lo"], e["pos"] = hi.reshape(-1), lo.reshape(-1), np.repeat(pos, near.bands)
            runs.add(e)
        runs.flush()
    finally:
        runs.close()
        sigs.close()
    files = runs.publish()
    files.update({name: {"size": size, "crc32c": crc} for _b, name, size, crc in sigs.publish()})
    return {"part": part, "read": read, "kept": kept, "local": 0, "runs": runs.runs, "files": files}


def _signatures(hasher: Hasher, col: VarColumn) -> np.ndarray:
    offs = np.asarray(col.offsets, dtype=np.int64)
    values = np.asarray(col.values).reshape(-1).view(np.uint8)
    v = values[int(offs[0]) : int(offs[-1])]
    return hasher.signatures(v, offs - offs[0])


class Signatures:
    """The scans' signature files, memory-mapped, looked up by position."""

    def __init__(self, spill_dir: str, scans: list[dict], hashes: int) -> None:
        self.dir = spill_dir
        self.rows = {s["part"]: s["read"] for s in scans}
        self.hashes = hashes
        self.maps: dict[int, np.ndarray] = {}

    def _map(self, part: int) -> np.ndarray:
        m = self.maps.get(part)
        if m is None:
            path = os.path.join(self.dir, f"s{part:05d}.bin")
            rows = self.rows[part]
            size = os.path.getsize(path) if os.path.exists(path) else -1
            if size != rows * self.hashes * 4:
                raise _damaged(path, f"is cut short or missing ({size} bytes, not {rows * self.hashes * 4})")
            m = self.maps[part] = np.memmap(path, dtype="<u4", mode="r", shape=(rows, self.hashes))
            # read at random, both sides of the pairs: the first rows ascend in each group, but
            # each group spans the file again (with read-ahead on them: 28 GB read, not 7)
            _random_access(m)
        return m

    def get(self, pos: np.ndarray) -> np.ndarray:
        """The signatures of positions ``pos`` (``[len(pos), hashes]``)."""
        out = np.empty((len(pos), self.hashes), dtype=np.uint32)
        part = pos >> PART_SHIFT
        row = pos & ROW_MASK
        for p in np.unique(part).tolist():
            m = part == p
            out[m] = self._map(p)[row[m]]
        return out


def _random_access(m: np.memmap) -> None:
    """Tell the kernel a map is read at random (a signature of 4 * hashes bytes per candidate): no
    read-ahead around each fault. With read-ahead, a spill larger than the page cache can keep (a
    memory cap counts it) read ~128 KiB per signature looked up: 331 GB for 400,000 rows under a
    120 MiB cap, still going after 5 minutes; without, 7 GB in 103 s (uncapped: 12 s)."""
    import mmap

    mm = getattr(m, "_mmap", None)
    if mm is not None and hasattr(mmap, "MADV_RANDOM"):
        try:
            mm.madvise(mmap.MADV_RANDOM)
        except (OSError, ValueError):  # an empty map, or a kernel without it: read as it comes
            pass


# -- 2. decide -------------------------------------------------------------------------------------


def candidates(e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The candidate pairs (a < b, positions) of entries ``e``: in each bucket of equal keys, sorted
    by position, every row after the first paired with the first and with the row before it;
    without repeats, sorted."""
    order = np.lexsort((e["pos"], e["lo"], e["hi"]))
    hi, lo, pos = e["hi"][order], e["lo"][order], e["pos"][order]
    del order
    new = np.ones(len(pos), dtype=bool)
    new[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
    del hi, lo
    first = np.maximum.accumulate(np.where(new, np.arange(len(pos)), 0))
    later = np.flatnonzero(~new)
    chain = later[~new[later - 1]] if len(later) else later  # the row before is not the bucket's first
    a = np.concatenate([pos[first[later]], pos[chain - 1]])
    b = np.concatenate([pos[later], pos[chain]])
    if not len(a):
        return a, b
    pairs = np.unique(np.stack([a, b], axis=1), axis=0)
    return pairs[:, 0].copy(), pairs[:, 1].copy()


def decide_near_group(
    spill_dir: str, group: int, lo: int, hi: int, scans: list[dict], near: NearParams, block: int = 1 << 13
) -> dict[str, Any]:
    """Decide group ``group`` (fine partitions [lo, hi)): its candidate pairs whose signatures agree
    on at least :meth:`~lovecraft_convert.transforms.near.NearParams.need` values are written to
    ``e<group>-edges.npy`` (``[edges, 2]`` positions, sorted). ``block``: pairs compared at once."""
    pieces = []
    for s in sorted(scans, key=lambda s: s["part"]):
        pieces.extend(entries(spill_dir, s, lo, hi))
    e = np.concatenate(pieces) if pieces else np.zeros(0, dtype=ENTRY)
    del pieces
    a, b = candidates(e)
    del e
    sigs = Signatures(spill_dir, scans, near.hashes)
    need = near.need()
    keep = np.zeros(len(a), dtype=bool)
    for x in range(0, len(a), block):
        y = min(len(a), x + block)
        keep[x:y] = (sigs.get(a[x:y]) == sigs.get(b[x:y])).sum(axis=1) >= need
    edges = np.stack([a[keep], b[keep]], axis=1).astype("<i8")
    name = f"e{group:04d}-edges.npy"
    path = os.path.join(spill_dir, name)
    np.save(path + ".tmp.npy", edges)
    os.rename(path + ".tmp.npy", path)
    return {
        "partition": group,
        "candidates": int(len(a)),
        "edges": int(len(edges)),
        "files": {name: {"size": os.path.getsize(path), "crc32c": file_crc(path)}},
    }


# -- 3. components ---------------------------------------------------------------------------------


class _Forest:
    """A union-find over dense row numbers whose parent array is a memory-mapped file (a sparse
    file: 0 stands for a root, else the parent's number plus one). Every parent is a smaller number
    than its child, so a tree's root is its smallest row."""

    def __init__(self, path: str, rows: int) -> None:
        with open(path, "wb") as f:
            f.truncate(max(1, rows) * 8)
        self.up = np.memmap(path, dtype="<i8", mode="r+", shape=(max(1, rows),))

    def find(self, x: np.ndarray) -> np.ndarray:
        """The roots of ``x``; the nodes of ``x`` then point at them directly."""
        r = x.copy()
        while True:
            p = np.asarray(self.up[r])
            up = p != 0
            if not up.any():
                break
            r[up] = p[up] - 1
        moved = r != x
        if moved.any():
            self.up[x[moved]] = r[moved] + 1
        return r

    def union(self, u: np.ndarray, v: np.ndarray) -> None:
        """Join the trees of each pair (``u[i]``, ``v[i]``): each larger root under the smaller one."""
        while len(u):
            ru, rv = self.find(u), self.find(v)
            apart = ru != rv
            if not apart.any():
                return
            small, big = np.minimum(ru[apart], rv[apart]), np.maximum(ru[apart], rv[apart])
            o = np.lexsort((small, big))
            big, small = big[o], small[o]
            first = np.ones(len(big), dtype=bool)
            first[1:] = big[1:] != big[:-1]
            self.up[big[first]] = small[first] + 1  # a root met in several pairs: under the smallest
            u, v = u[apart], v[apart]


def _npy_from_raw(raw: str, path: str, count: int) -> None:
    """Write ``path`` (a .npy of ``count`` little-endian int64) from the raw file ``raw``, then
    remove ``raw``."""
    with open(path + ".tmp", "wb") as out, open(raw, "rb") as f:
        np.lib.format.write_array_header_1_0(out, {"descr": "<i8", "fortran_order": False, "shape": (count,)})
        while buf := f.read(1 << 20):
            out.write(buf)
    os.rename(path + ".tmp", path)
    os.unlink(raw)


def components(spill_dir: str, scans: list[dict], groups: int, block: int = 1 << 16) -> dict[str, Any]:
    """Join the rows the groups' edges connect and write, in position order, every row of each
    component but its first (``x0000-drop.npy``) and that first row (``-kept.npy``). ``block``:
    edges and rows handled at once."""
    scans = sorted(scans, key=lambda s: s["part"])
    parts = np.array([s["part"] for s in scans], dtype=np.int64)
    reads = np.array([s["read"] for s in scans], dtype=np.int64)
    starts = np.zeros(len(scans), dtype=np.int64)
    np.cumsum(reads[:-1], out=starts[1:])
    total = int(reads.sum())

    def dense(pos: np.ndarray) -> np.ndarray:
        part = pos >> PART_SHIFT
        slot = np.minimum(np.searchsorted(parts, part), len(parts) - 1)
        if (parts[slot] != part).any() or ((pos & ROW_MASK) >= reads[slot]).any():
            raise _damaged(spill_dir, "of edges names a row no scan read")
        return starts[slot] + (pos & ROW_MASK)

    def position(d: np.ndarray) -> np.ndarray:
        slot = np.searchsorted(starts, d, side="right") - 1
        return (parts[slot] << PART_SHIFT) | (d - starts[slot])

    forest_path = os.path.join(spill_dir, "c-parent.bin")
    forest = _Forest(forest_path, total)
    try:
        for g in range(groups):
            path = os.path.join(spill_dir, f"e{g:04d}-edges.npy")
            try:
                edges = np.load(path, mmap_mode="r")
            except (OSError, ValueError):
                raise _damaged(path, "is missing or damaged") from None
            for x in range(0, len(edges), block):
                chunk = np.asarray(edges[x : x + block])
                forest.union(dense(chunk[:, 0]), dense(chunk[:, 1]))
        raws = [os.path.join(spill_dir, f"{COMPONENTS}-{s}.raw") for s in ("drop", "kept")]
        count = 0
        with open(raws[0], "wb") as fd, open(raws[1], "wb") as fk:
            for x in range(0, total, block):
                up = np.asarray(forest.up[x : min(total, x + block)])
                d = np.flatnonzero(up) + x
                if not len(d):
                    continue
                fd.write(position(d).astype("<i8").tobytes())
                fk.write(position(forest.find(d)).astype("<i8").tobytes())
                count += len(d)
    finally:
        del forest
        os.unlink(forest_path)
    files = {}
    for raw, s in zip(raws, ("drop", "kept"), strict=True):
        name = f"{COMPONENTS}-{s}.npy"
        path = os.path.join(spill_dir, name)
        _npy_from_raw(raw, path, count)
        files[name] = {"size": os.path.getsize(path), "crc32c": file_crc(path)}
    return {"drops": count, "files": files}


def decide_near_here(spill_dir: str, scans: list[dict], cap_entries: int, near: NearParams) -> int:
    """Plan the groups, decide them and join the components in this process (``convert``,
    ``verify``); returns the drop set's number of partitions (1)."""
    groups = plan_groups(spill_dir, scans, cap_entries)
    for k, (lo, hi) in enumerate(groups):
        decide_near_group(spill_dir, k, lo, hi, scans, near)
    components(spill_dir, scans, len(groups))
    return 1


# -- either mode, in this process ------------------------------------------------------------------


def scan_for(
    dedup: Dedup, batches: Iterator[Batch], keep, schema: Schema, part: int, spill_dir: str, unit_budget: int
) -> dict[str, Any]:
    """The scan of one part for ``dedup``'s mode, sized from ``unit_budget``."""
    from ..transforms.dedup import run_entries

    if dedup.near is None:
        from .dedup import scan_part

        return scan_part(batches, keep, schema, dedup, part, spill_dir, run_entries(unit_budget))
    return scan_near_part(
        batches, keep, schema, dedup, part, spill_dir, run_entries(unit_budget), text_chunk(unit_budget)
    )


def group_cap(dedup: Dedup, unit_budget: int) -> int:
    """Entries one decision may hold: a near decision holds the candidate pairs besides its entries."""
    from ..transforms.dedup import group_entries

    return group_entries(unit_budget) // (1 if dedup.near is None else 2)


def decide_for(dedup: Dedup, spill_dir: str, scans: list[dict], unit_budget: int) -> int:
    """Decide every group for ``dedup``'s mode in this process; returns the drop set's partitions."""
    if dedup.near is None:
        from .dedup import decide_here

        return decide_here(spill_dir, scans, group_cap(dedup, unit_budget))
    return decide_near_here(spill_dir, scans, group_cap(dedup, unit_budget), dedup.near)
