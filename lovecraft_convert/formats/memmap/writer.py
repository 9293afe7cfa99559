"""NumPy .npy output that ``np.load(path, mmap_mode="r")`` maps.

One .npy per fixed-shape column. Variable-length columns (text lines, CSV strings, sequences)
become a flat ``<col>.values.npy`` plus ``<col>.offsets.npy`` (int64, rows + 1) so row ``i`` is
``values[offsets[i]:offsets[i+1]]``. ``<col>`` is the column's name, or an escape of it where the
name could not be a file name or two names could collide (names.py). Files are written sequentially with ``write()`` (not through
a mapping, so a full disk is an exception, not SIGBUS), hashed as they are written, and
preallocated when the row count is known. When it is not, the header reserves room for any shape
and is rewritten once the count is known.
"""

from __future__ import annotations

import functools
import os
import threading

import numpy as np

from ...runtime.durable import FileSystemSync, HashingWriter, finish_and_fsync
from ...runtime.hashing import hash_open
from ...runtime.interrupts import join
from ...schema import FIXED, Batch, Schema, VarColumn
from ..writing import ColumnBlock, FileRecord, WriteOptions, Writer
from .names import SCHEME, column_bases

HEADER_RESERVE = 256  # bytes: room for any realistic shape when the row count is not yet known


@functools.lru_cache(maxsize=64)  # a wide table's thousands of files share one header
def npy_header(dtype: np.dtype, shape: tuple[int, ...], total: int | None = None) -> bytes:
    """An NPY v1.0 header; padded to ``total`` bytes when given (a multiple of 64)."""
    d = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)}
    text = repr(d).encode("latin1")
    size = total or ((10 + len(text) + 1 + 63) // 64) * 64
    pad = size - 10 - len(text) - 1
    if pad < 0:
        raise ValueError("npy header does not fit")
    body = text + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body


class _NpyFile:
    def __init__(
        self, path: str, dtype: np.dtype, row_shape: tuple[int, ...], rows: int | None, hash: str, threaded: bool
    ) -> None:
        self.path = path
        self.hash = hash
        self.dtype = dtype
        self.row_shape = row_shape
        self.known = rows
        self.rows = 0
        row_bytes = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
        if rows is not None:
            header = npy_header(dtype, (rows, *row_shape))
            self.out = HashingWriter(path, preallocate=len(header) + rows * row_bytes, hash=hash, threaded=threaded)
        else:  # the header is rewritten at close and the file hashed then: no hash on the way
            header = npy_header(dtype, (0, *row_shape), HEADER_RESERVE)
            self.out = HashingWriter(path, hash=None, threaded=threaded, readable=True)
        self.out.write(header)
        self.gather = bytearray()  # small pieces gathered into one write (many files: see coalesce)
        self.coalesce = 0

    def write(self, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr, dtype=self.dtype)
        self.rows += len(arr)
        if not arr.size:
            return
        data = arr.reshape(-1).view(np.uint8)
        if len(data) + len(self.gather) <= self.coalesce:
            self.gather += memoryview(data)
            return
        self._flush()
        if len(data) < self.coalesce:
            self.gather += memoryview(data)
        else:
            self.out.write(data)

    def write_now(self, arr: np.ndarray) -> None:
        """Write ``arr`` (contiguous, of the file's dtype) at once, past the gathering: the caller
        reuses its buffer (the writer of many files writes in the caller's thread)."""
        self._flush()
        self.rows += len(arr)
        self.out.write(arr.reshape(-1).view(np.uint8))

    def _flush(self) -> None:
        if self.gather:
            self.out.write(self.gather)
            self.gather = bytearray()

    def close(self, sync: bool = True, keep_open: bool = False) -> tuple[int, str]:
        """(bytes, digest); ``sync`` False leaves the fsync to the caller, ``keep_open`` the file
        open too (``self.out.f``), for the caller to fsync and close."""
        self._flush()
        unknown = self.known is None
        nbytes, digest = self.out.close(sync and not unknown, keep_open=unknown or keep_open)
        f = self.out.f
        try:
            if unknown:  # the header with the row count, the hash and the sync, on the descriptor
                # the data went through
                os.pwrite(f.fileno(), npy_header(self.dtype, (self.rows, *self.row_shape), HEADER_RESERVE), 0)
                digest = hash_open(f, self.hash, mapped=True)
                if sync:
                    os.fsync(f.fileno())
            elif self.known != self.rows:
                raise RuntimeError(f"{self.path}: wrote {self.rows} rows, expected {self.known}")
        except BaseException:
            f.close()
            raise
        if unknown and not keep_open:
            f.close()
        return nbytes, digest

    def abort(self) -> None:
        self.out.abort()


class _Group:
    """Scalar columns of one dtype gathered together (:class:`ColumnBlock`); each file is written
    when the block is full."""

    def __init__(
        self, names: list[str], files: list[_NpyFile], dtype: np.dtype, rows: int, fs: FileSystemSync | None
    ) -> None:
        self.names = names
        self.files = files
        self.fs = fs
        self.block = ColumnBlock(len(names), rows, dtype, self.flush)

    def flush(self) -> None:
        b = self.block
        if b.held:
            for j, nf in enumerate(self.files):
                nf.write_now(b.buf[j, : b.held])
            if self.fs is not None:
                self.fs.wrote(b.buf[:, : b.held].nbytes)
            b.held = 0


class MemmapWriter(Writer):
    extension = ".npy"

    @classmethod
    def check_schema(cls, schema: Schema, source: str) -> None:
        column_bases(schema.names, source)  # any header has distinct file names (see names.py)

    MANY = 8  # above this many files, each is written in the caller's thread and all are fsynced at once
    GATHER = 64 << 10  # the most gathered per file before a write

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        super().__init__(directory, stem, schema, options)
        self.bases = column_bases(schema.names)
        self.files: dict[str, list[tuple[str, _NpyFile]]] = {}
        count = sum(1 if f.kind == FIXED else 2 for f in schema)  # files
        self._limit = _room_for_files(count)
        self.many = count > self.MANY
        self._value_base = {f.name: 0 for f in schema if f.kind != FIXED}
        # a wide table's scalar columns of one dtype, gathered together
        self.groups: list[_Group] = []
        self.cap = 0
        # many files are made durable by one syncfs where that is safe (see FileSystemSync)
        self.fs = FileSystemSync(directory) if self.many else None
        if self.many:  # a wide table's columns arrive in pieces of a few hundred bytes per batch:
            # gathered per file (within the writer's share of the budget) into fewer, larger writes
            self.cap = min(self.GATHER, options.memory // max(1, count))
            by_dtype: dict[np.dtype, list[str]] = {}
            for f in schema:
                if f.kind == FIXED and not f.shape:
                    by_dtype.setdefault(f.np_dtype, []).append(f.name)
            for dt, names in by_dtype.items():
                if len(names) > self.MANY:
                    self.groups.append(_Group(names, [], dt, max(1, self.cap // dt.itemsize), self.fs))
        self.grouped = {n for g in self.groups for n in g.names}
        # Thousands of files take a while to create (~0.26 ms of kernel time each here): made by a
        # thread while the first batch is read, which the first write waits for
        self._opening: threading.Thread | None = None
        self._open_error: BaseException | None = None
        if self.many:
            self._opening = threading.Thread(target=self._open_all, name="lovecraft-create", daemon=True)
            self._opening.start()
        else:
            self._open_all()
            self._ready()

    def _open_all(self) -> None:
        rows = self.options.expected_rows
        try:
            for f in self.schema:
                base = self.bases[f.name]
                if f.kind == FIXED:
                    self.files[f.name] = [("data", self._open(f"{base}.npy", f.np_dtype, f.shape, rows))]
                else:
                    dt = np.dtype(np.uint8) if f.kind != "sequence" else f.np_dtype
                    offsets_rows = None if rows is None else rows + 1
                    self.files[f.name] = [("values", self._open(f"{base}.values.npy", dt, (), None))]
                    off = self._open(f"{base}.offsets.npy", np.dtype("<i8"), (), offsets_rows)
                    self.files[f.name].append(("offsets", off))
                    off.write(np.zeros(1, dtype=np.int64))
            if self.many:
                for nf in (nf for entries in self.files.values() for _, nf in entries):
                    nf.coalesce = self.cap
                for g in self.groups:
                    g.files = [self.files[n][0][1] for n in g.names]
        except BaseException as e:  # noqa: BLE001 - raised by the caller's next call
            self._open_error = e

    def _ready(self) -> None:
        """Wait for the files to be created; raise what failed."""
        if self._opening is not None:
            join(self._opening)
            self._opening = None
        if self._open_error is not None:
            raise self._open_error

    def _name(self, base: str) -> str:
        return f"{self.stem}.{base}" if self.stem else base

    def _open(self, base: str, dtype, shape, rows) -> _NpyFile:
        path = os.path.join(self.directory, self._name(base))
        return _NpyFile(path, np.dtype(dtype), tuple(shape), rows, self.options.hash, threaded=not self.many)

    def write(self, batch: Batch) -> None:
        self._ready()
        for g in self.groups:
            g.block.add_batch(batch, g.names)
        for name, entries in self.files.items():
            if name in self.grouped:
                continue
            col = batch.columns[name]
            if isinstance(col, VarColumn):
                entries[0][1].write(col.values)
                entries[1][1].write(col.offsets[1:] + self._value_base[name])
                self._value_base[name] += int(col.offsets[-1])
            else:
                entries[0][1].write(col)
        self.rows += batch.num_rows

    def close(self) -> list[FileRecord]:
        self._ready()
        for g in self.groups:
            g.flush()
        handles = [(name, role, nf) for name, entries in self.files.items() for role, nf in entries]
        if self.many:  # finished one after another (a header rewritten, the file hashed: ~70 us
            # each, less than handing it to a thread), each fsynced by one of 8 threads as soon as
            # it is, the next ones finished meanwhile

            def finish(nf: _NpyFile) -> tuple:
                return nf.close(sync=False, keep_open=True), nf.path, nf.out.f

            try:
                done = finish_and_fsync([nf for _, _, nf in handles], finish, fs=self.fs)
            finally:
                self.fs.close()
        else:
            done = [nf.close() for _, _, nf in handles]
        self._limit = _restore_limit(self._limit)
        return [
            FileRecord(os.path.basename(nf.path), self.rows, nbytes, digest, nf.hash, column=name, role=role)
            for (name, role, nf), (nbytes, digest) in zip(handles, done, strict=True)
        ]

    def manifest_extra(self) -> dict:
        return {"memmap": {"file_names": SCHEME}}

    def abort(self) -> None:
        if self._opening is not None:
            join(self._opening)
            self._opening = None
        for entries in list(self.files.values()):
            for _, nf in entries:
                nf.abort()
        if self.fs is not None:
            try:
                self.fs.close()
            except OSError:
                pass  # the run failed already: a background flush's error adds nothing
        self._limit = _restore_limit(self._limit)


def _room_for_files(count: int) -> tuple[int, int] | None:
    """A file per column stays open while the table is written: the soft limit of open files
    (``ulimit -n``, often 1024) raised to make room for ``count`` of them while the writer runs,
    within the hard limit, and put back by :func:`_restore_limit` (2,000 columns were a traceback,
    "Too many open files"). Returns the limits to put back (None: nothing changed); beyond the hard
    limit, one line."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    from ...errors import OutputError

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = count + 256  # the process's own files, the inputs', the other writers'
    if soft == resource.RLIM_INFINITY or need <= soft:
        return None
    if hard != resource.RLIM_INFINITY and need > hard:
        raise OutputError(
            f"memmap writes a file per column and holds them open: {count} files, more than this process "
            f"may open ({hard}, the hard limit of ulimit -n)",
            hint="stack the columns into one (--stack-columns), or write parquet or hdf5",
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return soft, hard


def _restore_limit(limit: tuple[int, int] | None) -> None:
    if limit is not None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, limit)
