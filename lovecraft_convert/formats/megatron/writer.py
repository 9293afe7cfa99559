"""Megatron output: ``<stem>.bin`` (the tokens of every document back to back) and ``<stem>.idx``.

The ``.bin`` is written as batches come, through the hashing writer. The index needs the counts
in its header and all lengths before all pointers, so the lengths (4 bytes per document) go to a
scratch file beside the output as they come, and ``close`` writes the index from it in bounded
pieces: header, lengths, pointers (their running sums), document index (``0..S``).
"""

from __future__ import annotations

import os

import numpy as np

from ...errors import SchemaError
from ...runtime.durable import HashingWriter, durable_files
from ...schema import Batch, Schema, VarColumn
from ...storage.stream import open_stream
from ..writing import FileRecord, WriteOptions, Writer
from .idx import PIECE, code_of, header, index_bytes, pieces

INT32_MAX = (1 << 31) - 1


class MegatronWriter(Writer):
    extension = ".bin"

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        super().__init__(directory, stem, schema, options)
        self.field = schema.fields[0]
        self.dtype = (
            self.field.np_dtype.newbyteorder("<") if self.field.np_dtype.byteorder == ">" else self.field.np_dtype
        )
        self.code = code_of(self.dtype)
        base = stem or "data"
        self.bin_path = os.path.join(directory, f"{base}.bin")
        self.idx_path = os.path.join(directory, f"{base}.idx")
        self.scratch_path = os.path.join(directory, f".{base}.lengths.tmp")
        self.bin = HashingWriter(self.bin_path, hash=options.hash, sink=open_stream(self.bin_path))
        self.scratch = open(self.scratch_path, "wb", buffering=1 << 20)  # noqa: SIM115 - closed in close/abort
        self.tokens = 0

    def write(self, batch: Batch) -> None:
        col = batch.columns[self.field.name]
        if not isinstance(col, VarColumn):
            raise SchemaError(f"column '{self.field.name}': Megatron files hold sequences, got fixed-size rows")
        offs = np.asarray(col.offsets, dtype=np.int64)
        lens = np.diff(offs)
        if len(lens) and int(lens.max()) > INT32_MAX:
            raise SchemaError(
                f"column '{self.field.name}': a document of {int(lens.max())} tokens; Megatron's index holds "
                f"lengths up to {INT32_MAX}",
                hint="split the document",
            )
        values = np.ascontiguousarray(np.asarray(col.values)[offs[0] : offs[-1]], dtype=self.dtype)
        if values.size:
            self.bin.write(values)
        self.scratch.write(lens.astype("<i4").tobytes())
        self.tokens += int(offs[-1] - offs[0])
        self.rows += batch.num_rows

    def close(self) -> list[FileRecord]:
        if self.rows and not self.tokens and durable_files():  # (a trial shard is only measured)
            # Megatron-Core maps the .bin, and cannot map an empty file
            raise SchemaError(
                f"column '{self.field.name}': none of the {self.rows} documents of "
                f"{os.path.basename(self.bin_path)} has a token, and Megatron-Core cannot open an empty .bin",
                hint="end each document with a token (--eos), or leave the empty documents out "
                "(--filter 'len(COLUMN) > 0', COLUMN the text column)",
            )
        nbytes, digest = self.bin.close()
        if nbytes != self.tokens * self.dtype.itemsize:
            raise RuntimeError(f"{self.bin_path}: wrote {nbytes} bytes for {self.tokens} tokens")
        self.scratch.close()
        n = self.rows
        out = HashingWriter(
            self.idx_path,
            preallocate=index_bytes(n, n + 1),
            hash=self.options.hash,
            sink=open_stream(self.idx_path),
        )
        # entries per piece from the writer's memory: the int32 lengths read, the int64 pointers
        # made from them and up to two pieces queued in the writer's thread (about 28 bytes each)
        step = max(1 << 14, min(PIECE, self.options.memory // 32))
        size = self.dtype.itemsize
        try:
            out.write(header(self.code, n, n + 1))
            with open(self.scratch_path, "rb") as f:
                for a, b in pieces(n, step):
                    out.write(np.fromfile(f, dtype="<i4", count=b - a))
                f.seek(0)
                pos = 0
                for a, b in pieces(n, step):
                    lens = np.fromfile(f, dtype="<i4", count=b - a)
                    ptr = np.empty(b - a, dtype="<i8")
                    if b > a:
                        ptr[0] = 0
                        np.cumsum(lens[:-1], dtype=np.int64, out=ptr[1:])
                        ptr *= size
                        ptr += pos
                        pos = int(ptr[-1]) + int(lens[-1]) * size
                    out.write(ptr)
            for a, b in pieces(n + 1, step):
                out.write(np.arange(a, b, dtype="<i8"))
            isize, idigest = out.close()
        except BaseException:
            out.abort()
            raise
        os.unlink(self.scratch_path)
        return [
            FileRecord(os.path.basename(self.bin_path), n, nbytes, digest, self.options.hash, self.field.name, "data"),
            FileRecord(os.path.basename(self.idx_path), n, isize, idigest, self.options.hash, self.field.name, "index"),
        ]

    def abort(self) -> None:
        self.bin.abort()
        if not self.scratch.closed:
            self.scratch.close()

    def manifest_extra(self) -> dict:
        return {"megatron": {"dtype": self.dtype.name, "dtype_code": self.code}}
