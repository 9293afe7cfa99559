"""HDF5 output: one dataset per column in ``<stem>.h5``.

Chunks are chosen by us (about 1 MiB, whole rows) because h5py's automatic shapes for resizable
datasets can be absurdly small; the chunk cache is sized to hold a chunk of every column.
Fixed-size columns get fletcher32 checksums; text becomes UTF-8 variable-length strings and
sequences variable-length arrays.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import SchemaError
from ..schema import BINARY, FIXED, SEQUENCE, STRING, Batch, Schema, VarColumn
from ..util import fsync_path, sha256_file
from .base import FileRecord, WriteOptions, Writer

CHUNK_BYTES = 1 << 20


def chunk_rows(row_bytes: int, target: int = CHUNK_BYTES) -> int:
    return int(max(1, min(target // max(1, row_bytes), 1 << 20)))


def _create(h5py, path: str, cache_bytes: int):
    """A new file whose bytes depend only on what is written: no object timestamps anywhere (the
    root group's included), links in creation order, a chunk cache of ``cache_bytes``."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_obj_track_times(False)
    fcpl.set_link_creation_order(h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    fapl.set_cache(0, 521, cache_bytes, 0.75)
    fid = h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    return h5py.File(fid)


class Hdf5Writer(Writer):
    extension = ".h5"

    @classmethod
    def check_schema(cls, schema: Schema, source: str, input_format: str | None = None) -> None:
        for f in schema:
            dt = f.np_dtype
            if f.kind in (FIXED, SEQUENCE) and dt.kind in "MmUO":
                if dt.kind == "U":
                    continue  # stored as UTF-8 strings
                raise SchemaError(
                    f"column '{f.name}' has dtype {dt}, which HDF5 cannot hold", hint="write it to memmap"
                )

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        super().__init__(directory, stem, schema, options)
        import h5py

        self.h5py = h5py
        self.path = os.path.join(directory, f"{stem or 'data'}.h5")
        self.f = _create(h5py, self.path, max(4 << 20, 2 * CHUNK_BYTES * len(schema)))
        self.f.attrs["lovecraft_schema"] = str([fd.to_dict() for fd in schema])
        rows = options.expected_rows
        comp = options.compression
        self.dsets = {}
        for fd in schema:
            kw = {}
            if comp == "gzip":
                kw.update(compression="gzip", compression_opts=4, shuffle=True)
            elif comp == "lzf":
                kw.update(compression="lzf", shuffle=True)
            if fd.kind == FIXED and fd.np_dtype.kind != "U":
                dt = fd.np_dtype
                row_bytes = dt.itemsize * fd.row_size
                shape = (rows or 0, *fd.shape)
                ds = self.f.create_dataset(
                    fd.name, shape=shape, maxshape=(None, *fd.shape), dtype=dt,
                    chunks=(max(1, min(chunk_rows(row_bytes), rows or 1 << 30)), *fd.shape), fletcher32=True, track_times=False, **kw,
                )  # fmt: skip
            else:
                if fd.kind == STRING or fd.np_dtype.kind == "U":
                    dt = h5py.string_dtype("utf-8")
                elif fd.kind == BINARY:
                    dt = h5py.vlen_dtype(np.dtype("u1"))
                else:
                    dt = h5py.vlen_dtype(fd.np_dtype)
                ds = self.f.create_dataset(
                    fd.name, shape=(rows or 0,), maxshape=(None,), dtype=dt, chunks=(4096,), track_times=False, **kw
                )
            ds.attrs["kind"] = fd.kind
            ds.attrs["dtype"] = fd.dtype
            self.dsets[fd.name] = ds
        self.known = rows

    def write(self, batch: Batch) -> None:
        n = batch.num_rows
        start, stop = self.rows, self.rows + n
        for fd in self.schema:
            ds = self.dsets[fd.name]
            if self.known is None or stop > ds.shape[0]:
                ds.resize(stop, axis=0)
            col = batch.columns[fd.name]
            if isinstance(col, VarColumn):
                obj = np.empty(n, dtype=object)
                if fd.kind == STRING:
                    data = col.values.tobytes()
                    o = col.offsets
                    obj[:] = [data[o[i] : o[i + 1]].decode("utf-8") for i in range(n)]
                else:
                    obj[:] = np.split(col.values, col.offsets[1:-1]) if n else []
                ds[start:stop] = obj
            elif fd.np_dtype.kind == "U":
                obj = np.empty(n, dtype=object)
                obj[:] = col.tolist()
                ds[start:stop] = obj
            else:
                if n:
                    ds.write_direct(np.ascontiguousarray(col), dest_sel=np.s_[start:stop])
        self.rows = stop

    def close(self) -> list[FileRecord]:
        self.f.close()
        fsync_path(self.path)
        return [FileRecord(os.path.basename(self.path), self.rows, os.path.getsize(self.path), sha256_file(self.path))]

    def abort(self) -> None:
        try:
            self.f.close()
        except Exception:  # noqa: BLE001 - already failing; the temporary directory is removed
            pass
