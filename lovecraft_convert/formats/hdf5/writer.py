"""HDF5 output: one dataset per column in ``<stem>.h5``.

Chunks are chosen by us (about 1 MiB, whole rows) because h5py's automatic shapes for resizable
datasets can be absurdly small; the chunk cache is sized to hold a chunk of every column.
Fixed-size columns get fletcher32 checksums; text becomes UTF-8 variable-length strings and
sequences variable-length arrays.

Uncompressed fixed-size columns skip HDF5's chunk cache and filter pipeline: their chunks are
checksummed and written by a thread of ours (direct.py), the same chunks a cached write makes.
"""

from __future__ import annotations

import errno
import json
import os
from functools import partial

import numpy as np

from ...errors import SchemaError
from ...runtime.durable import hash_fsynced
from ...schema import BINARY, FIXED, SEQUENCE, STRING, Batch, Schema, VarColumn
from ..writing import FileRecord, WriteOptions, Writer
from .direct import DirectColumn, DirectGroup, Hdf5Thread, text_attributes

CHUNK_BYTES = 1 << 20  # the chunk size of a narrow table
MIN_CHUNK_BYTES = 4 << 10  # the smallest chunk a wide table gets (many columns, little memory)
# chunks at least this large are written from a thread (see direct.py); smaller ones (a wide
# table's, thousands per batch) in the caller's thread
THREADED_CHUNK = 256 << 10
GROUP_COLUMNS = 16  # scalar columns of one dtype, this many or more, are written as a DirectGroup


def chunk_rows(row_bytes: int, target: int = CHUNK_BYTES) -> int:
    return int(max(1, min(target // max(1, row_bytes), 1 << 20)))


VLEN_CHUNK_ROWS = 4096  # rows of a variable-length column's chunk (16-byte references: 64 KiB)


def vlen_chunk_rows(rows: int | None) -> int:
    """Rows per chunk of a variable-length column: :data:`VLEN_CHUNK_ROWS`, or for a known length
    the same number of chunks cut equal, so that the last is not a whole chunk for a few rows
    (4,097 rows in chunks of 4,096 stored 64 KiB a column for the last row: shard sizes jumped by
    a quarter of a MiB there, and 1 MiB shards of a table of text came out 15% under)."""
    if not rows:
        return VLEN_CHUNK_ROWS
    n = -(-rows // VLEN_CHUNK_ROWS)
    return -(-rows // n)


def chunk_target(columns: int, memory: int) -> int:
    """Bytes per chunk: ~1 MiB, less when half the writer's memory shared by every column's
    chunk being filled would not hold that many (the other half: chunks on their way to disk)."""
    return int(max(MIN_CHUNK_BYTES, min(CHUNK_BYTES, memory // max(1, 2 * columns))))


def create_file(h5py, path: str, cache_bytes: int, slots: int = 521, metadata_bytes: int = 8 << 20):
    """A new file whose bytes depend only on what is written: no object timestamps anywhere (the
    root group's included), links in creation order, a chunk cache of ``cache_bytes`` (and
    ``slots`` hash slots: few for wide tables, whose caches hold two chunks) per dataset."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_obj_track_times(False)
    fcpl.set_link_creation_order(h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    fapl.set_cache(0, slots, cache_bytes, 0.75)
    # The metadata cache (object headers, chunk indexes) at a fixed size: left adaptive, it starts
    # at 2 MiB and keeps resizing, and a wide table's thousands of datasets, each opened for its
    # chunks (see DirectGroup), then cost three times as much per chunk (measured: ~70 against ~25 us)
    cfg = fapl.get_mdc_config()
    cfg.set_initial_size = True
    cfg.initial_size = cfg.min_size = cfg.max_size = metadata_bytes
    fapl.set_mdc_config(cfg)
    fid = h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    return h5py.File(fid)


def _text_attrs(fd) -> list[tuple[bytes, bytes]]:
    """The column's attributes: its ``kind`` and ``dtype``, as (name, UTF-8 text) pairs."""
    return [(b"kind", fd.kind.encode()), (b"dtype", fd.dtype.encode())]


def _text_type(h5py):
    """The type and space of a text attribute, as h5py stores a ``str``: a variable-length UTF-8
    scalar."""
    return h5py.h5t.py_create(h5py.string_dtype("utf-8"), logical=True), h5py.h5s.create(h5py.h5s.SCALAR)


def _disk_error(e: Exception, path: str) -> Exception:
    """h5py reports a failed write (a full disk, mostly when the chunk cache is flushed on close) as
    an OSError or RuntimeError whose text holds HDF5's ``errno = 28``: make it the OSError it is,
    naming the file, so the output reports the full disk; any other error is returned unchanged."""
    for code in (errno.ENOSPC, errno.EDQUOT):
        if (isinstance(e, OSError) and e.errno == code) or f"errno = {code}," in str(e):
            return OSError(code, os.strerror(code), path)
    return e


def _fixed(ds, start: int, col: np.ndarray) -> None:
    """Rows of a fixed-size column through the low-level write (a third of h5py's per-call cost)."""
    from h5py import h5s

    fspace = ds.id.get_space()
    fspace.select_hyperslab((start,) + (0,) * (col.ndim - 1), col.shape)
    ds.id.write(h5s.create_simple(col.shape), fspace, col)


def _vlen(ds, start: int, obj) -> None:
    """Variable-length numeric rows, through the low-level write: h5py's ``ds[a:b] = obj``
    turns rows that all have the same length into a 2-d array and fails to broadcast it."""
    from h5py import h5s, h5t

    fspace = ds.id.get_space()
    fspace.select_hyperslab((start,), (len(obj),))
    ds.id.write(h5s.create_simple((len(obj),)), fspace, obj, mtype=h5t.py_create(ds.dtype))


def _strings(ds, start: int, stop: int, obj, name: str, fixed: bool = False) -> None:
    try:
        ds[start:stop] = obj
    except ValueError as e:
        if "NUL" not in str(e):
            raise
        i = next(i for i, v in enumerate(obj) if isinstance(v, str) and "\x00" in v)
        raise SchemaError(
            f"column '{name}', row {start + i + 1}: holds a NUL character, which HDF5 strings cannot store",
            hint="remove it from the input, or write "
            + ("parquet or memmap (fixed-width text)" if fixed else "parquet, tfrecord or memmap"),
        ) from None


class Hdf5Writer(Writer):
    extension = ".h5"

    @classmethod
    def check_schema(cls, schema: Schema, source: str) -> None:
        for f in schema:
            if not f.name or "/" in f.name or "\x00" in f.name or f.name in (".", ".."):
                raise SchemaError(
                    f"{source}, column {f.name!r}: cannot be the name of an HDF5 dataset "
                    "(empty, '.', '..', or holding '/' or NUL)",
                    hint="rename the column in the input (a CSV: its header, or read it with --no-header), or write memmap, parquet or tfrecord",
                )
            dt = f.np_dtype
            if f.kind in (FIXED, SEQUENCE) and dt.kind in "MmUO":
                if dt.kind == "U":
                    continue  # stored as UTF-8 strings
                raise SchemaError(
                    f"{source}, column '{f.name}' has dtype {dt}, which HDF5 cannot hold",
                    hint="write it to memmap or parquet",
                )

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        super().__init__(directory, stem, schema, options)
        self.path = os.path.join(directory, f"{stem or 'data'}.h5")
        self.f = None
        # A table of unknown length is held until it outgrows a quarter of the writer's memory:
        # one that ends first is written knowing its length, so its chunks are no longer than it
        # (made for an unknown length, each column's one chunk of up to 1 MiB is stored whole:
        # 500 rows of 5 columns made a 5.4 MB file)
        self.held: list[Batch] | None = [] if options.expected_rows is None else None
        self.held_rows = self.held_bytes = 0
        if self.held is None:
            self._create(options.expected_rows)
        else:  # imported while the first batches come (h5py's own modules: ~50 ms)
            from ...runtime.hashing import preload

            preload("h5py")

    def _create(self, rows: int | None) -> None:
        """The file and its datasets, for ``rows`` rows (None: unknown, they grow)."""
        import h5py

        self.h5py = h5py
        schema, options = self.schema, self.options
        comp = options.compression
        # Fixed-size columns of an uncompressed file are written as whole chunks of ours, the
        # others through HDF5's chunk cache (per dataset: the chunk being filled and one more).
        cached = comp is not None or any(f.kind != FIXED or f.np_dtype.kind == "U" for f in schema)
        self.chunk_bytes = chunk_target(len(schema), options.memory)
        # every HDF5 call after the file's creation, in order; chunks in flight hold half the memory
        self.io = Hdf5Thread(self.path, options.memory // 2, threaded=self.chunk_bytes >= THREADED_CHUNK)
        if not cached and not self.io.threaded:
            # nothing in flight and no cache: the chunks being filled hold 5/4 of the writer's share
            # (2,000 columns at --max-memory 64MiB: 20 MiB). Each chunk costs an open, a write and
            # a close (~45 us), so longer chunks than the share allows made the run ~8% faster
            # (alternating runs, 4.40 against 4.78 s) for ~4 MiB more at the peak
            self.chunk_bytes = chunk_target(len(schema), 5 * options.memory // 2)
        cache = 2 * self.chunk_bytes if cached else 0
        self.f = create_file(h5py, self.path, cache, slots=521 if len(schema) < 64 else 17)
        from . import native

        with self.io.lock:  # the library calls bound to this file (native.py), or None: h5py's
            self.native = native.for_file(self.f.id.id, self.path)
        self.f.attrs["lovecraft_schema"] = json.dumps(schema.to_list())  # JSON, as in Parquet files
        self.dsets = {}
        self.row_shapes: dict[str, tuple] = {}  # each dataset's shape after its first axis
        self.direct: dict[str, DirectColumn] = {}
        kw = {}
        if comp == "gzip":
            kw.update(compression="gzip", compression_opts=4, shuffle=True)
        elif comp == "lzf":
            kw.update(compression="lzf", shuffle=True)

        def per_chunk_of(fd) -> int:
            row_bytes = fd.np_dtype.itemsize * fd.row_size
            return max(1, min(chunk_rows(row_bytes, self.chunk_bytes), rows or 1 << 30))

        # a wide table's scalar columns of one dtype (written directly, GROUP_COLUMNS or more):
        # gathered and checksummed together, see DirectGroup
        by_dtype: dict[tuple, list[str]] = {}
        if not self.io.threaded and not kw:
            for fd in schema:
                if fd.kind == FIXED and fd.np_dtype.kind != "U" and not fd.shape and fd.np_dtype.itemsize:
                    by_dtype.setdefault((fd.np_dtype, per_chunk_of(fd)), []).append(fd.name)
        by_dtype = {k: names for k, names in by_dtype.items() if len(names) >= GROUP_COLUMNS}
        self.grouped = {n for names in by_dtype.values() for n in names}
        protos: dict[tuple, tuple] = {}  # fixed-size datasets' creation properties and type, by layout
        spaces: dict[tuple, object] = {}  # their dataspaces, by shape
        self.text = text = _text_type(h5py)
        # Every column grouped, in one group (a wide feature matrix): after the first, the datasets
        # are made in a thread while the first chunks are gathered (see Hdf5Thread.first)
        later: list | None = [] if len(by_dtype) == 1 and len(self.grouped) == len(schema) else None
        for fd in schema:
            if fd.kind == FIXED and fd.np_dtype.kind != "U":
                dt = fd.np_dtype
                row_bytes = dt.itemsize * fd.row_size
                shape = (rows or 0, *fd.shape)
                per_chunk = per_chunk_of(fd)
                key = (dt.str, per_chunk, fd.shape, tuple(sorted(kw.items())))
                if key in protos:  # the same properties as the first such dataset (a wide table's
                    # thousands: h5py's create_dataset costs several times the low-level call)
                    dcpl, tid = protos[key]
                    space = spaces.get((shape, fd.shape))
                    if space is None:
                        top = tuple(d or h5py.h5s.UNLIMITED for d in fd.shape)
                        space = spaces[shape, fd.shape] = h5py.h5s.create_simple(shape, (h5py.h5s.UNLIMITED, *top))
                    if later is not None:
                        later.append((fd.name, tid, space, dcpl))
                        self.row_shapes[fd.name] = fd.shape
                        continue
                    if fd.name in self.grouped and self.native is not None:  # closed at once: the C call
                        with self.io.lock:
                            made = self.native.create_closed(fd.name.encode(), tid.id, space.id, dcpl.id)
                        if made:
                            self.row_shapes[fd.name] = fd.shape
                            continue
                    ds = h5py.Dataset(h5py.h5d.create(self.f.id, fd.name.encode(), tid, space, dcpl=dcpl))
                else:
                    # (an axis of length 0: rows of no values. HDF5 chunks have no axis of length 0
                    # and fewer than 2**32 elements, so such a column is chunked by 1 on each row
                    # axis, whatever the others' lengths, and its axis of length 0 may grow)
                    row_chunk = tuple(1 for _ in fd.shape) if 0 in fd.shape else fd.shape
                    ds = self.f.create_dataset(
                        fd.name, shape=shape, maxshape=(None, *(d or None for d in fd.shape)), dtype=dt,
                        chunks=(per_chunk, *row_chunk), fletcher32=True, track_times=False, **kw,
                    )  # fmt: skip
                    protos[key] = (ds.id.get_create_plist(), ds.id.get_type())
                if not kw and row_bytes and fd.name not in self.grouped:
                    self.direct[fd.name] = DirectColumn(ds, per_chunk, self.io)
            else:
                if fd.kind == STRING or fd.np_dtype.kind == "U":
                    dt = h5py.string_dtype("utf-8")
                elif fd.kind == BINARY:
                    dt = h5py.vlen_dtype(np.dtype("u1"))
                else:
                    dt = h5py.vlen_dtype(fd.np_dtype)
                ds = self.f.create_dataset(
                    fd.name, shape=(rows or 0,), maxshape=(None,), dtype=dt, chunks=(vlen_chunk_rows(rows),),
                    track_times=False, **kw,
                )  # fmt: skip
            self.row_shapes[fd.name] = ds.shape[1:]
            if fd.name in self.grouped:  # closed at once (its memory reused by the next one):
                ds.id.close()  # the group opens it for its chunks; attributes at close()
            else:
                text_attributes(ds.id, _text_attrs(fd), text)
                self.dsets[fd.name] = ds
        if later:
            self.io.first(partial(self._make_closed, later))
        self.known = rows
        self.extent = rows or 0  # the datasets' current length
        self.groups = [
            (names, DirectGroup(self.f.id, names, dt, per_chunk, self.io, extent=self.extent, native=self.native))
            for (dt, per_chunk), names in by_dtype.items()
        ]

    def _make_closed(self, made: list[tuple]) -> None:
        """Datasets ``(name, type, space, creation properties)`` made and closed, in order (through
        the library calls where they may be used, see native.py)."""
        h5py, fid, bound = self.h5py, self.f.id, self.native
        for name, tid, space, dcpl in made:
            with self.io.lock:
                if bound is None or not bound.create_closed(name.encode(), tid.id, space.id, dcpl.id):
                    h5py.h5d.create(fid, name.encode(), tid, space, dcpl=dcpl).close()  # for its error

    def write(self, batch: Batch) -> None:
        if self.held is not None:
            self.held.append(batch)
            self.held_rows += batch.num_rows
            self.held_bytes += batch.nbytes
            if self.held_bytes <= self.options.memory // 4:
                return
            self._replay(None)  # not a small table: written as it comes from here on
            return
        try:
            self._write(batch)
        except (OSError, RuntimeError) as e:
            raise _disk_error(e, self.path) from None

    def _replay(self, rows: int | None) -> None:
        """Create the file (for ``rows`` rows, None: unknown) and write the batches held, each
        let go once written."""
        held, self.held = self.held[::-1], None
        try:
            self._create(rows)
            while held:
                self._write(held.pop())
        except (OSError, RuntimeError) as e:
            raise _disk_error(e, self.path) from None

    def _write(self, batch: Batch) -> None:
        """The batch's HDF5 calls handed to the HDF5 thread, in column order; what can be done
        here (decoding text into objects, gathering chunks) is done here, overlapping them."""
        n = batch.num_rows
        start, stop = self.rows, self.rows + n
        io = self.io
        # Datasets of unknown length grow by doubling (a resize per column is a call per column),
        # and are cut to their length at close.
        grow = stop > self.extent
        grown = stop if self.known is not None else max(stop, 2 * self.extent)
        for names, group in self.groups:
            if grow:  # the grouped datasets are resized as their next chunks are written
                group.target = grown
            group.block.add_batch(batch, names)
        for fd in self.schema:
            if fd.name in self.grouped:
                continue
            ds = self.dsets[fd.name]
            if grow:
                io.add(partial(ds.id.set_extent, (grown, *self.row_shapes[fd.name])))
            col = batch.columns[fd.name]
            if isinstance(col, VarColumn):
                obj = np.empty(n, dtype=object)
                if fd.kind == STRING:
                    data = col.values.tobytes()
                    o = col.offsets
                    obj[:] = [data[o[i] : o[i + 1]].decode("utf-8") for i in range(n)]
                    io.add(partial(_strings, ds, start, stop, obj, fd.name), col.nbytes)
                elif n:
                    for i, row in enumerate(np.split(col.values, col.offsets[1:-1])):
                        obj[i] = row  # one by one: rows of equal length would make numpy build a 2-d array
                    io.add(partial(_vlen, ds, start, obj), col.nbytes)
            elif fd.np_dtype.kind == "U":
                obj = np.empty(n, dtype=object)
                obj[:] = col.tolist()
                io.add(partial(_strings, ds, start, stop, obj, fd.name, True), col.nbytes)
            elif fd.name in self.direct:
                self.direct[fd.name].add(col)
            elif n:
                io.add(partial(_fixed, ds, start, np.ascontiguousarray(col)), col.nbytes)
        self.rows = stop
        if grow:
            self.extent = grown
        io.flush()

    def close(self) -> list[FileRecord]:
        if self.held is not None:  # the whole table, and now its length
            self._replay(self.held_rows or None)
        try:
            # Chunks still in the cache are written here. Flushed before closing: a full disk then
            # fails with every object still open, which a close does not leave (see abort()).
            for d in self.direct.values():
                d.finish()
            by_name = {fd.name: fd for fd in self.schema}
            for names, group in self.groups:
                group.target = self.rows
                group.finish([_text_attrs(by_name[n]) for n in names], self.text)
            if self.extent != self.rows:
                for fd in self.schema:
                    if fd.name in self.grouped:
                        continue
                    self.io.add(partial(self.dsets[fd.name].id.set_extent, (self.rows, *self.row_shapes[fd.name])))
            self.io.close()
            self.groups = []
            self.f.flush()
            self.f.close()
            digest = hash_fsynced(self.path, self.options.hash)
        except (OSError, RuntimeError) as e:
            raise _disk_error(e, self.path) from None
        return [
            FileRecord(os.path.basename(self.path), self.rows, os.path.getsize(self.path), digest, self.options.hash)
        ]

    def abort(self) -> None:
        """Discard the file. After a full disk, HDF5 still holds dirty chunks and metadata: a close
        that fails to write them leaves datasets half-closed inside the library, and freeing them
        later crashes the interpreter (SIGSEGV at exit, after our error message). So empty the
        file (freeing its blocks) and flush until nothing is left to write, then close."""
        self.held = None
        io = getattr(self, "io", None)
        if io is not None:
            io.abort()
        if self.f is None or not self.f.id.valid:  # nothing created yet, or closed
            return
        for _ in range(64):
            try:
                os.truncate(self.path, 0)
            except OSError:
                pass
            try:
                self.f.flush()
                break
            except Exception:  # noqa: BLE001 - each attempt writes what fits; try again
                continue
        try:
            self.f.close()
        except Exception:  # noqa: BLE001 - already failing; the temporary directory is removed
            pass
