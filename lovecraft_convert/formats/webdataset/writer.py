"""WebDataset output: one ``.tar`` per unit (``data.tar`` for convert, ``part-00003-of-00064.tar``
for shard), samples appended as they come through the hashing writer (and so straight to the object
store when the run writes to one).

A sample is laid out as an item of pieces (:mod:`..items`): each member's header (all rows' headers
made at once with NumPy, :func:`.tar.headers`), its data, its padding; runs of small samples are
built in one buffer each, and a large sample's pieces go to the hashing writer as they are (its
values not copied: the writer thread hashes and writes them from the batch's own arrays).
"""

from __future__ import annotations

import os

import numpy as np

from ...runtime.durable import HashingWriter
from ...schema import FIXED, Batch, Schema, VarColumn
from ...storage.stream import open_stream
from ..items import Const, Fixed, Piece, Var, fixed_bytes, lengths, stream, var_bytes
from ..writing import FileRecord, WriteOptions, Writer
from .layout import (
    CLS,
    JSON,
    KEY_DIGITS,
    PATH_COLUMN,
    RAW,
    file_exts,
    file_member_of,
    json_rows,
    key,
    npy_dtype,
    npy_header,
    optional,
    plan,
)
from .tar import BLOCK, end_of_archive, headers, member_header


def _joined(data: list[bytes]) -> Var:
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, data), np.int64, len(data)), out=offsets[1:])
    return Var(np.frombuffer(b"".join(data), dtype=np.uint8), offsets)


class WebdatasetWriter(Writer):
    extension = ".tar"

    @classmethod
    def check_schema(cls, schema: Schema, source: str) -> None:
        plan(schema, source, file_member_of(schema))

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        super().__init__(directory, stem, schema, options)
        self.plan = plan(schema, file_member=file_member_of(schema))
        self.path = os.path.join(directory, f"{stem or 'data'}.tar")
        self.out = HashingWriter(self.path, hash=options.hash, sink=open_stream(self.path))
        self.written = 0

    def _data(self, m, batch: Batch) -> list[Piece]:
        """The data of member ``m`` in every row of ``batch``."""
        n = batch.num_rows
        if m.kind == JSON:
            return [_joined(json_rows(self.plan.json, [batch.columns[f.name] for f in self.plan.json], n))]
        f = m.field
        col = batch.columns[f.name]
        if m.kind == CLS:
            return [_joined([str(x).encode("ascii") for x in np.asarray(col).reshape(n).tolist()])]
        if m.kind == RAW and isinstance(col, VarColumn):
            return [Var(np.asarray(col.values, dtype=np.uint8), np.asarray(col.offsets, dtype=np.int64))]
        if m.kind == RAW:  # fixed-width bytes (NumPy strips their trailing NULs)
            return [_joined(np.asarray(col).reshape(n).tolist())]
        dt = npy_dtype(f)
        descr = np.lib.format.dtype_to_descr(dt)
        if f.kind == FIXED:
            return [Const(npy_header(descr, tuple(f.shape))), fixed_bytes(np.asarray(col), dt)]
        offs = np.asarray(col.offsets, dtype=np.int64)
        heads = _joined([npy_header(descr, (k,)) for k in np.diff(offs).tolist()])
        return [heads, var_bytes(np.asarray(col.values).astype(dt, copy=False), offs, dt.itemsize)]

    def _pieces(self, batch: Batch) -> list[Piece]:
        """Every row's sample: per member, its header, data and padding (an empty value of an
        optional member: none of them, :func:`.layout.optional`)."""
        n = batch.num_rows
        keys = np.arange(n, dtype=np.int64) + self.options.first_row + self.rows
        width = max(KEY_DIGITS, len(str(int(keys[-1])))) if n else KEY_DIGITS
        mixed = width != KEY_DIGITS and len(str(int(keys[0]))) != width  # keys of two widths
        data = [self._data(m, batch) for m in self.plan.members]
        sizes = [lengths(d, n) for d in data]
        left_out = self._left_out(sizes, n)
        out: list[Piece] = []
        for m, d, size, gone in zip(self.plan.members, data, sizes, left_out, strict=True):
            exts = file_exts(self.plan, batch.columns[PATH_COLUMN], n) if m.per_file else None
            one = exts is None or len(set(exts)) == 1
            ext = exts[0] if exts else m.ext
            head = None if mixed or not one or gone is not None else headers(keys, width, ext, size)
            if head is None:  # one by one (pax headers where needed; none for a member left out)
                names = [f"{key(k)}.{exts[i] if exts else m.ext}" for i, k in enumerate(keys.tolist())]
                skip = gone.tolist() if gone is not None else [False] * n
                head_piece: Piece = _joined(
                    [b"" if g else member_header(x, s) for x, s, g in zip(names, size.tolist(), skip, strict=True)]
                )
            else:
                head_piece = Fixed(head)
            pads = -size % BLOCK
            pad_offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(pads, out=pad_offsets[1:])
            out += [head_piece, *d, Var(np.zeros(int(pad_offsets[-1]), np.uint8), pad_offsets)]
        return out

    def _left_out(self, sizes: list[np.ndarray], n: int) -> list[np.ndarray | None]:
        """Per member, the rows whose member is left out (bool[n]; None: none): an optional
        member's empty values, but never every member of a sample (the first is then kept, empty,
        so that the sample and its key are in the tar)."""
        members = self.plan.members
        gone: list[np.ndarray | None] = [
            (size == 0) if optional(m) and n and not size.all() else None
            for m, size in zip(members, sizes, strict=True)
        ]
        if all(optional(m) for m in members) and all(g is not None for g in gone):
            none_left = np.logical_and.reduce([g for g in gone if g is not None])
            if none_left.any():
                gone[0] = gone[0] & ~none_left
        return gone

    def write(self, batch: Batch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        for bufs, _ in stream(self._pieces(batch), n):
            for buf in bufs:  # a large value goes to the hashing writer as it is, not copied
                self._flush(buf)
        self.rows += n

    def _flush(self, data) -> None:
        if len(data):
            self.out.write(data)
            self.written += len(data)

    def close(self) -> list[FileRecord]:
        self._flush(end_of_archive(self.written))
        nbytes, digest = self.out.close()
        return [FileRecord(os.path.basename(self.path), self.rows, nbytes, digest, self.options.hash)]

    def abort(self) -> None:
        self.out.abort()
