"""WebDataset output: one ``.tar`` per unit (``data.tar`` for convert, ``part-00003-of-00064.tar``
for shard), samples appended as they come through the hashing writer (and so straight to the object
store when the run writes to one). Members are gathered into runs of about 4 MiB; a value larger
than that goes in pieces, so no value is held twice."""

from __future__ import annotations

import os

import numpy as np

from ...engine.writer import HashingWriter
from ...schema import FIXED, Batch, Schema, VarColumn
from ...storage.stream import open_stream
from ..base import FileRecord, WriteOptions, Writer
from .layout import CLS, JSON, NPY, RAW, json_rows, key, npy_dtype, npy_header, plan
from .tar import end_of_archive, member_header, padding

RUN = 4 << 20
PIECE = 8 << 20
ZEROS = bytes(512)


class WebdatasetWriter(Writer):
    extension = ".tar"

    @classmethod
    def check_schema(cls, schema: Schema, source: str) -> None:
        plan(schema, source)

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        super().__init__(directory, stem, schema, options)
        self.plan = plan(schema)
        self.path = os.path.join(directory, f"{stem or 'data'}.tar")
        self.out = HashingWriter(self.path, hash=options.hash, sink=open_stream(self.path))
        self.written = 0

    def _sources(self, batch: Batch) -> list[tuple[str, np.ndarray, object]]:
        """Per member: its extension, each row's data size, and a function of the row giving its data."""
        n = batch.num_rows
        out = []
        for m in self.plan.members:
            if m.kind == JSON:
                data = json_rows(self.plan.json, [batch.columns[f.name] for f in self.plan.json], n)
                out.append((m.ext, np.fromiter(map(len, data), np.int64, n), data.__getitem__))
                continue
            f = m.field
            col = batch.columns[f.name]
            if m.kind == CLS:
                data = [str(x).encode("ascii") for x in np.asarray(col).reshape(n).tolist()]
                out.append((m.ext, np.fromiter(map(len, data), np.int64, n), data.__getitem__))
            elif m.kind == RAW and isinstance(col, VarColumn):
                offs = np.asarray(col.offsets, dtype=np.int64)
                values = np.asarray(col.values, dtype=np.uint8)
                starts = offs[:-1].tolist()
                ends = offs[1:].tolist()
                out.append((m.ext, np.diff(offs), lambda i, v=values, s=starts, e=ends: v[s[i] : e[i]]))
            elif m.kind == RAW:  # fixed-width bytes (NumPy strips their trailing NULs)
                data = np.asarray(col).reshape(n).tolist()
                out.append((m.ext, np.fromiter(map(len, data), np.int64, n), data.__getitem__))
            elif m.kind == NPY and f.kind == FIXED:
                dt = npy_dtype(f)
                rows = np.ascontiguousarray(col, dtype=dt).reshape(n, -1).view(np.uint8)
                head = npy_header(np.lib.format.dtype_to_descr(dt), tuple(f.shape))
                size = np.full(n, len(head) + rows.shape[1], np.int64)
                out.append((m.ext, size, lambda i, h=head, r=rows: (h, r[i])))
            else:  # NPY of a sequence: a header per length
                dt = npy_dtype(f)
                offs = np.asarray(col.offsets, dtype=np.int64)
                values = np.ascontiguousarray(np.asarray(col.values)[offs[0] : offs[-1]], dtype=dt)
                offs = offs - offs[0]
                descr = np.lib.format.dtype_to_descr(dt)
                lens = np.diff(offs)
                heads = [npy_header(descr, (k,)) for k in lens.tolist()]
                size = np.fromiter(map(len, heads), np.int64, n) + lens * dt.itemsize
                view = values.view(np.uint8)
                b = offs * dt.itemsize
                out.append((m.ext, size, lambda i, h=heads, v=view, b=b: (h[i], v[b[i] : b[i + 1]])))
        return out

    def write(self, batch: Batch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        sources = self._sources(batch)
        sizes = [s[1].tolist() for s in sources]
        base = self.options.first_row + self.rows
        buf = bytearray()
        for i in range(n):
            k = key(base + i)
            for (ext, _, get), size in zip(sources, sizes, strict=True):
                buf += member_header(f"{k}.{ext}", size[i])
                data = get(i)
                for part in data if isinstance(data, tuple) else (data,):
                    if len(buf) + len(part) > PIECE:
                        self._flush(buf)
                        buf = bytearray()
                        view = memoryview(part).cast("B")
                        for a in range(0, len(view), PIECE):
                            self._flush(bytes(view[a : a + PIECE]))
                    else:
                        buf += memoryview(part).cast("B") if not isinstance(part, bytes) else part
                buf += ZEROS[: padding(size[i])]
            if len(buf) >= RUN:
                self._flush(buf)
                buf = bytearray()
        if buf:
            self._flush(buf)
        self.rows += n

    def _flush(self, data) -> None:
        self.out.write(data)
        self.written += len(data)

    def close(self) -> list[FileRecord]:
        self._flush(end_of_archive(self.written))
        nbytes, digest = self.out.close()
        return [FileRecord(os.path.basename(self.path), self.rows, nbytes, digest, self.options.hash)]

    def abort(self) -> None:
        self.out.abort()
