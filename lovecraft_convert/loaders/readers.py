"""Readers of one shard (or bucket) of a dataset, one class per output format.

Every reader gives :class:`~lovecraft_convert.schema.Batch`es of the selected columns in large chunks
(``chunks(start, stop, chunk_rows)``); the random-access ones (memmap, HDF5) also read a row range
(``read``) or any set of rows (``take``). Columns come back in the types the files hold: fixed-shape
NumPy arrays, :class:`~lovecraft_convert.schema.VarColumn`s (memmap, Parquet) or object arrays of
``str`` / ``bytes`` / arrays (HDF5, TFRecord's slow path) for variable-length rows. Turning them into
what the user asked for (float16 or float32, padded sequences) is :mod:`.dataset`'s job.

Files are opened on first use, never in ``__init__``, so a reader can be built in one process and
used in another. An open HDF5 file is closed before any ``fork()`` (``os.register_at_fork``) and
reopened on next use, so no HDF5 handle ever crosses a fork.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from tokenize import TokenError

import numpy as np

from ..errors import DatasetError
from ..schema import BINARY, FIXED, STRING, Batch, Field, Schema, VarColumn


class PartReader:
    """One shard's (or bucket's) files. ``rows`` is known from the manifest."""

    random_access = False

    def __init__(self, rows: int, schema: Schema) -> None:
        self.rows = rows
        self.schema = schema

    def chunks(self, start: int, stop: int, chunk_rows: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        """Rows ``[start, stop)`` in batches of about ``chunk_rows``; ``rng`` permutes the order of the
        blocks (row groups for Parquet) for shuffling, never the rows inside a block."""
        blocks = range(start, stop, chunk_rows)
        if rng is not None and len(blocks) > 1:
            blocks = [blocks[i] for i in rng.permutation(len(blocks)).tolist()]
        for a in blocks:
            yield self.read(a, min(stop, a + chunk_rows))

    def read(self, start: int, stop: int) -> Batch:
        raise NotImplementedError

    def take(self, idx: np.ndarray) -> Batch:
        """Rows ``idx`` (int64, any order) as one batch, in that order."""
        raise NotImplementedError

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# memmap
# --------------------------------------------------------------------------------------------


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
                if "data" in roles:
                    cols[f.name] = _load(roles["data"], self.rows)
                elif "values" in roles and "offsets" in roles:
                    offs = _load(roles["offsets"], self.rows + 1)
                    cols[f.name] = (_load(roles["values"], None), offs)
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


CORRUPT = "the file is corrupt; run `lovecraft verify` or re-create the dataset"


def _load(path: str, rows: int | None) -> np.ndarray:
    try:
        with warnings.catch_warnings():  # a damaged header can read as a "Python 2" one: the checks below judge it
            warnings.simplefilter("ignore", UserWarning)
            a = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, SyntaxError, TokenError) as e:  # a damaged header fails NumPy's parse
        raise DatasetError(f"{path}: cannot map ({e})", hint="the dataset is damaged; run `lovecraft verify`") from None
    if rows is not None and a.shape[0] != rows:
        raise DatasetError(
            f"{path}: holds {a.shape[0]} rows, the manifest says {rows}", hint="the dataset is damaged; re-create it"
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


# --------------------------------------------------------------------------------------------
# HDF5
# --------------------------------------------------------------------------------------------

_OPEN_H5: weakref.WeakSet = weakref.WeakSet()
_H5_LOCK = threading.Lock()


def _close_before_fork() -> None:
    for r in list(_OPEN_H5):
        r.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_close_before_fork)


class ChunkCache:
    """An LRU of decoded HDF5 chunks under one byte budget, shared by a dataset's shards."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: OrderedDict = OrderedDict()
        self.nbytes = 0
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            block = self.items.get(key)
            if block is not None:
                self.items.move_to_end(key)
            return block

    def put(self, key, block: np.ndarray) -> None:
        with self.lock:
            if key in self.items:
                return
            self.items[key] = block
            self.nbytes += block.nbytes
            while self.nbytes > self.capacity and len(self.items) > 1:
                _, old = self.items.popitem(last=False)
                self.nbytes -= old.nbytes


class Hdf5Reader(PartReader):
    """One ``.h5`` file, one dataset per column.

    Sequential reads go through ``read_direct`` into a fresh array (one HDF5 call per column per
    chunk). Random rows (``take``) come from an LRU cache of whole HDF5 chunks read with
    ``read_direct``: a chunk is decoded (checksum, decompression) once while it stays cached,
    instead of once per row as with h5py's point selections.
    """

    random_access = True

    def __init__(
        self, rows: int, schema: Schema, path: str, cache: ChunkCache | None = None, key: object = None
    ) -> None:
        super().__init__(rows, schema)
        self.path = path
        self.cache = cache if cache is not None else ChunkCache(512 << 20)
        self.key = key if key is not None else path
        self._f = None
        self._dsets: dict[str, object] = {}
        self._raws: dict[str, object] = {}
        self._pid = os.getpid()

    def _open(self) -> dict[str, object]:
        if self._f is None or self._pid != os.getpid():
            import h5py

            with _H5_LOCK:
                try:
                    f = h5py.File(self.path, "r", rdcc_nbytes=4 << 20)
                except OSError as e:
                    raise DatasetError(f"{self.path}: cannot open ({e})", hint="the dataset is damaged") from None
                dsets = {}
                for fd in self.schema:
                    if fd.name not in f:
                        f.close()
                        raise DatasetError(f"{self.path}: no dataset '{fd.name}'", hint="the dataset is damaged")
                    ds = f[fd.name]
                    if ds.shape[0] != self.rows:
                        f.close()
                        raise DatasetError(
                            f"{self.path}: '{fd.name}' holds {ds.shape[0]} rows, the manifest says {self.rows}",
                            hint="the dataset is damaged; re-create it",
                        )
                    dsets[fd.name] = ds
                self._f, self._dsets, self._pid = f, dsets, os.getpid()
                _OPEN_H5.add(self)
        return self._dsets

    def close(self) -> None:
        f, self._f = self._f, None
        self._dsets = {}
        self._raws = {}
        if f is not None and self._pid == os.getpid():
            try:
                f.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def _read_col(self, fd: Field, ds, start: int, stop: int):
        n = stop - start
        try:
            if fd.kind == FIXED and ds.dtype.kind not in "OSU":
                out = np.empty((n, *ds.shape[1:]), dtype=ds.dtype)
                if n:
                    ds.read_direct(out, np.s_[start:stop])
                return out
            if fd.kind == STRING or ds.dtype.kind in "OSU" and fd.kind == FIXED:
                return ds.asstr()[start:stop] if n else np.empty(0, dtype=object)
            raw = ds[start:stop] if n else np.empty(0, dtype=object)
        except (OSError, UnicodeDecodeError) as e:
            raise DatasetError(
                f"{self.path}: column '{fd.name}', rows {start}..{stop - 1}: cannot read ({e})", hint=CORRUPT
            ) from None
        if fd.kind == BINARY:
            out = np.empty(n, dtype=object)
            out[:] = [bytes(x) for x in raw]
            return out
        return raw  # SEQUENCE: object array of 1-d arrays

    def read(self, start: int, stop: int) -> Batch:
        dsets = self._open()
        return Batch({fd.name: self._read_col(fd, dsets[fd.name], start, stop) for fd in self.schema}, stop - start)

    def take(self, idx: np.ndarray) -> Batch:
        dsets = self._open()
        out: dict[str, object] = {}
        for fd in self.schema:
            ds = dsets[fd.name]
            raw = self._raw(fd.name, ds) if fd.kind == FIXED else None
            if raw is not None:
                out[fd.name] = self._take_raw(fd.name, ds, raw, idx)
            elif fd.kind == FIXED and ds.dtype.kind not in "OSU" and ds.chunks is not None:
                out[fd.name] = self._take_chunked(fd, ds, idx)
            else:
                order = np.argsort(idx, kind="stable")
                s = idx[order]
                col = self._read_points(fd, ds, s)
                res = np.empty(len(idx), dtype=object) if col.dtype == object else np.empty_like(col)
                res[order] = col
                out[fd.name] = res
        return Batch(out, len(idx))

    # Random rows of unfiltered chunks (no compression: at most the fletcher32 checksum, as our
    # writer makes them) are read from the file through a memory map at the chunks' byte offsets,
    # which HDF5 reports (H5Dchunk_iter). Each chunk is first read once through HDF5, so that its
    # checksum is verified, before any of its rows is taken from the map.

    def _raw(self, name: str, ds):
        cached = self._raws.get(name, False)
        if cached is not False:
            return cached
        self._raws[name] = raw = self._raw_layout(ds)
        return raw

    def _raw_layout(self, ds):
        dt = ds.dtype
        if (
            ds.chunks is None
            or ds.chunks[1:] != ds.shape[1:]
            or dt.kind not in "biuf"
            or dt.byteorder == ">"
            or ds.compression is not None
            or ds.shuffle
            or ds.scaleoffset is not None
            or not hasattr(ds.id, "chunk_iter")
        ):
            return None
        cr = ds.chunks[0]
        row_bytes = dt.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64))
        size = cr * row_bytes + (4 if ds.fletcher32 else 0)
        nchunks = -(-self.rows // cr)
        offsets = np.full(nchunks, -1, dtype=np.int64)
        ok = [True]

        def visit(info) -> None:
            c = info.chunk_offset[0] // cr
            if info.size != size or info.filter_mask != 0 or not 0 <= c < nchunks:
                ok[0] = False
            else:
                offsets[c] = info.byte_offset

        try:
            ds.id.chunk_iter(visit)
        except Exception:  # noqa: BLE001 - an HDF5 without chunk iteration: use the chunk cache
            return None
        if not ok[0] or (offsets < 0).any() or row_bytes == 0:
            return None
        raw = np.memmap(self.path, dtype=np.uint8, mode="r")
        if int(offsets.max()) + cr * row_bytes > len(raw):
            return None
        word = next(w for w in (8, 4, 2, 1) if row_bytes % w == 0 and not (offsets % w).any())
        words = raw[: len(raw) // word * word].view(f"u{word}")
        return words, offsets // word, cr, row_bytes // word, np.zeros(nchunks, dtype=bool)

    def _take_raw(self, name: str, ds, raw, idx: np.ndarray) -> np.ndarray:
        words, offsets, cr, row_words, verified = raw
        c = idx // cr
        todo = np.unique(c[~verified[c]])
        for k in todo.tolist():
            a = k * cr
            b = min(self.rows, a + cr)
            scratch = np.empty((b - a, *ds.shape[1:]), dtype=ds.dtype)
            try:
                ds.read_direct(scratch, np.s_[a:b])
            except OSError as e:
                raise DatasetError(
                    f"{self.path}: column '{name}', rows {a}..{b - 1}: cannot read ({e})",
                    hint=CORRUPT,
                ) from None
            verified[k] = True
        start = offsets[c] + (idx - c * cr) * row_words
        if row_words * words.itemsize >= 16 << 10:  # large rows: a slice copy each, not an index per word
            out = np.empty((len(idx), row_words), dtype=words.dtype)
            for i, a in enumerate(start.tolist()):
                out[i] = words[a : a + row_words]
        else:  # (np.take with out= is buffered: slower)
            out = np.take(words, start[:, None] + np.arange(row_words, dtype=np.int64))
        return out.view(ds.dtype).reshape((len(idx), *ds.shape[1:]))

    def _read_points(self, fd: Field, ds, s: np.ndarray):
        uniq, inv = np.unique(s, return_inverse=True)
        raw = ds.asstr()[uniq] if fd.kind == STRING else ds[uniq]
        if fd.kind == BINARY:
            tmp = np.empty(len(raw), dtype=object)
            tmp[:] = [bytes(x) for x in raw]
            raw = tmp
        return raw[inv]

    def _take_chunked(self, fd: Field, ds, idx: np.ndarray) -> np.ndarray:
        rows_per_chunk = ds.chunks[0]
        out = np.empty((len(idx), *ds.shape[1:]), dtype=ds.dtype)
        cid = idx // rows_per_chunk
        order = np.argsort(cid, kind="stable")
        scid = cid[order]
        bounds = np.flatnonzero(np.diff(scid)) + 1
        starts = np.concatenate(([0], bounds))
        stops = np.concatenate((bounds, [len(idx)]))
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            c = int(scid[a])
            block = self._chunk(fd.name, ds, c, rows_per_chunk)
            sel = order[a:b]
            out[sel] = np.take(block, idx[sel] - c * rows_per_chunk, axis=0)
        return out

    def _chunk(self, name: str, ds, c: int, rows_per_chunk: int) -> np.ndarray:
        key = (self.key, name, c)
        block = self.cache.get(key)
        if block is None:
            a = c * rows_per_chunk
            b = min(self.rows, a + rows_per_chunk)
            block = np.empty((b - a, *ds.shape[1:]), dtype=ds.dtype)
            ds.read_direct(block, np.s_[a:b])
            self.cache.put(key, block)
        return block


# --------------------------------------------------------------------------------------------
# Parquet
# --------------------------------------------------------------------------------------------


class ParquetReader(PartReader):
    """``pyarrow.parquet.ParquetFile.iter_batches`` in large batches, converted without copying."""

    def __init__(self, rows: int, schema: Schema, path: str) -> None:
        super().__init__(rows, schema)
        self.path = path
        self._pf = None
        self._pid = None

    def _open(self):
        if self._pf is None or self._pid != os.getpid():
            import pyarrow.parquet as pq

            try:
                pf = pq.ParquetFile(self.path)
            except (OSError, ValueError) as e:
                raise DatasetError(f"{self.path}: cannot open ({e})", hint="the dataset is damaged") from None
            if pf.metadata.num_rows != self.rows:
                raise DatasetError(
                    f"{self.path}: holds {pf.metadata.num_rows} rows, the manifest says {self.rows}",
                    hint="the dataset is damaged; re-create it",
                )
            self._pf, self._pid = pf, os.getpid()
            md = pf.metadata
            self._rg_start = np.zeros(md.num_row_groups + 1, dtype=np.int64)
            for i in range(md.num_row_groups):
                self._rg_start[i + 1] = self._rg_start[i] + md.row_group(i).num_rows
        return self._pf

    def chunks(self, start: int, stop: int, chunk_rows: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        import pyarrow as pa

        from ..arrowconv import batch_from_arrow

        if stop <= start:
            return
        pf = self._open()
        rs = self._rg_start
        first = int(np.searchsorted(rs, start, side="right")) - 1
        last = int(np.searchsorted(rs, stop, side="left"))  # exclusive
        groups = list(range(first, last))
        names = self.schema.names
        # Shuffling reads row groups one at a time in a random order; otherwise all in one pass.
        shuffled = rng is not None and len(groups) > 1
        runs = [[g] for g in rng.permutation(groups).tolist()] if shuffled else [groups]
        for run in runs:
            pos = int(rs[run[0]])
            batches = pf.iter_batches(batch_size=chunk_rows, row_groups=run, columns=names, use_threads=True)
            while True:
                try:
                    rb = next(batches, None)
                except (OSError, pa.ArrowException) as e:  # a damaged page (checksum, decompression, dictionary)
                    raise DatasetError(
                        f"{self.path}: row groups {run[0]}..{run[-1]}: cannot read ({e})",
                        hint=CORRUPT,
                    ) from None
                if rb is None:
                    break
                n = rb.num_rows
                a, b = max(start, pos), min(stop, pos + n)
                pos += n
                if a >= b:
                    continue
                if a - (pos - n) or b - a != n:
                    rb = rb.slice(a - (pos - n), b - a)
                yield batch_from_arrow(rb, self.schema)


# --------------------------------------------------------------------------------------------
# helpers shared by the loaders
# --------------------------------------------------------------------------------------------


def to_object_rows(c, kind: str) -> np.ndarray:
    """A variable-length column as an object array: ``str`` (string), ``bytes`` (binary), arrays."""
    if not isinstance(c, VarColumn):
        if kind == BINARY and len(c) and not isinstance(c[0], bytes):
            out = np.empty(len(c), dtype=object)
            out[:] = [bytes(x) for x in c]
            return out
        return c
    n = len(c)
    out = np.empty(n, dtype=object)
    o = c.offsets.tolist()
    if kind in (STRING, BINARY):
        data = c.values.tobytes()
        if kind == STRING:
            try:
                out[:] = [data[o[i] : o[i + 1]].decode("utf-8") for i in range(n)]
            except UnicodeDecodeError as e:
                raise DatasetError(
                    f"a text column holds invalid UTF-8 ({e.reason})",
                    hint="the dataset is damaged; run `lovecraft verify` or re-create it",
                ) from None
        else:
            out[:] = [data[o[i] : o[i + 1]] for i in range(n)]
    else:
        out[:] = [c.values[o[i] : o[i + 1]] for i in range(n)] if n else []
    return out


def pad_rows(c, dtype: np.dtype, length: int | None, pad_value=0) -> tuple[np.ndarray, np.ndarray]:
    """A sequence column (VarColumn or object array of arrays) as ``(padded [n, L], lengths)``.

    ``L`` is ``length`` when given (rows longer than it are an error), else the longest row.
    """
    if isinstance(c, VarColumn):
        lens = np.diff(c.offsets)
    else:
        lens = np.fromiter((len(r) for r in c), dtype=np.int64, count=len(c))
    longest = int(lens.max()) if len(lens) else 0
    L = longest if length is None else int(length)
    if longest > L:
        raise DatasetError(f"a sequence of length {longest} does not fit the padded length {L}", hint="re-create it")
    out = np.full((len(lens), L), pad_value, dtype=dtype)
    if isinstance(c, VarColumn):
        total = int(c.offsets[-1])
        if total:
            rows = np.repeat(np.arange(len(lens)), lens)
            cols = np.arange(total, dtype=np.int64) - np.repeat(c.offsets[:-1], lens)
            out[rows, cols] = c.values
    else:
        for i, r in enumerate(c):
            out[i, : len(r)] = r
    return out, lens
