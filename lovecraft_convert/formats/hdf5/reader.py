"""Reading an HDF5 dataset's part: one ``.h5`` file, one dataset per column.

An open HDF5 file is closed before any ``fork()`` (``os.register_at_fork``) and reopened on next
use, so no HDF5 handle ever crosses a fork.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict

import numpy as np

from ...errors import DatasetError
from ...schema import BINARY, FIXED, STRING, Batch, Field, Schema
from ..reading import CORRUPT, PartReader

_OPEN_H5: weakref.WeakSet = weakref.WeakSet()
_H5_LOCK = threading.Lock()


def _close_quietly(f) -> None:
    try:
        f.close()
    except Exception:  # noqa: BLE001 - closing is best effort (closed already, or at exit)
        pass


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
    opens_at = "head"  # its header

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

            from .links import pointing_elsewhere

            with _H5_LOCK:
                source = self._source()
                try:
                    f = h5py.File(source, "r", rdcc_nbytes=4 << 20)
                except OSError as e:
                    raise DatasetError(f"{self.path}: cannot open ({e})", hint="the dataset is damaged") from None
                if not isinstance(source, str):
                    # h5py's fileobj driver calls back into Python when HDF5 closes the file: left
                    # open until the C library's own exit handler (a reader still held by an
                    # abandoned iterator), it did so after the interpreter was gone and the
                    # process died of SIGSEGV. Closed at Python's exit instead, while it still runs.
                    weakref.finalize(self, _close_quietly, f)
                why = pointing_elsewhere(f, set(self.schema.names))
                if why is not None:
                    f.close()
                    raise DatasetError(
                        f"{self.path}: {why}", hint="a dataset's files hold their own data; re-create the dataset"
                    )
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

    def _source(self):
        """The path, or for a remote dataset's file a file object reading it through the cache
        (h5py reads Python file objects with its ``fileobj`` driver)."""
        from ...storage import is_remote, open_input

        return open_input(self.path, buffering=0) if is_remote(self.path) else self.path  # HDF5 reads what it needs

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
            if fd.kind == FIXED and ds.dtype.kind in "OSU":  # fixed-width text, as the schema's dtype
                return _fixed_text(fd, ds.asstr()[start:stop] if fd.np_dtype.kind == "U" else ds[start:stop])
            if fd.kind == STRING:
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
        from ...storage import is_remote

        if (
            is_remote(self.path)  # no memory map of a remote file: its chunks come through the chunk cache
            or ds.chunks is None
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
        text = fd.kind == STRING or (fd.kind == FIXED and fd.np_dtype.kind == "U")
        raw = ds.asstr()[uniq] if text else ds[uniq]
        if fd.kind == FIXED and fd.np_dtype.kind in "SU":
            raw = _fixed_text(fd, raw)
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
            try:
                ds.read_direct(block, np.s_[a:b])
            except OSError as e:  # a chunk that fails its checksum (a damaged file): named, as above
                raise DatasetError(
                    f"{self.path}: column '{name}', rows {a}..{b - 1}: cannot read ({e})", hint=CORRUPT
                ) from None
            self.cache.put(key, block)
        return block


def _fixed_text(fd: Field, raw) -> np.ndarray:
    """A fixed-width text column (NumPy ``S``/``U``) as its schema's dtype, whatever h5py gave
    (fixed-length bytes; variable-length strings as objects): bytes kept as they are, NULs inside
    a value included; the loaders check columns against that dtype."""
    return np.asarray(raw).astype(fd.np_dtype, copy=False)
