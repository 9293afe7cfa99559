"""TFRecord output: one ``tf.train.Example`` per row, optionally GZIP-compressed.

Encoding is ours (see :mod:`.tfexample`): TensorFlow is neither needed nor imported to write.
The ``tf.io.parse_example`` feature spec goes into the manifest. Records are written in blocks of
``block_records`` (each its own gzip member when compressed) and the file offset of every block
goes into the manifest (:mod:`.blocks`), so loaders can start at any block.
"""

from __future__ import annotations

import os
import zlib

from ...runtime.durable import HashingWriter
from ...schema import Batch, Schema
from ...storage.stream import open_stream
from ..writing import FileRecord, WriteOptions, Writer
from .blocks import block_records_for, encode_blocks


class TfrecordWriter(Writer):
    extension = ".tfrecord"

    @classmethod
    def check_schema(cls, schema: Schema, source: str) -> None:
        from .example import feature_kind

        for f in schema:
            feature_kind(f)

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        super().__init__(directory, stem, schema, options)
        self.gzip = (options.compression or "").lower() == "gzip"
        name = f"{stem or 'data'}.tfrecord" + (".gz" if self.gzip else "")
        self.path = os.path.join(directory, name)
        self.block_records = block_records(schema)
        self.offsets: list[int] = []  # file offset of every block's first byte
        self.nbytes = 0  # handed to the file so far
        self.out = HashingWriter(self.path, hash=options.hash, sink=open_stream(self.path))
        # gzip: a raw gzip member per block, mtime 0 and no name (the same input gives the same bytes)
        self.z = None

    def _put(self, data) -> None:
        if self.z is not None:
            data = self.z.compress(data)
        if len(data):
            self.out.write(data)
            self.nbytes += len(data)

    def _new_block(self) -> None:
        if self.z is not None:
            self._put_flush()
        self.offsets.append(self.nbytes)
        if self.gzip:
            self.z = zlib.compressobj(6, zlib.DEFLATED, 31)

    def _put_flush(self) -> None:
        tail = self.z.flush()
        self.z = None
        self.out.write(tail)
        self.nbytes += len(tail)

    def write(self, batch: Batch) -> None:
        from .example import iter_encoded

        # pieces sized from the writer's memory: the queue holds two, the encoder's temporaries two or three
        piece = int(max(1 << 20, min(8 << 20, self.options.memory // 8)))
        n, i = self.block_records, 0
        while i < batch.num_rows:
            if self.rows % n == 0:
                self._new_block()
            k = min(batch.num_rows - i, n - self.rows % n)
            part = batch if k == batch.num_rows else batch.slice(i, i + k)
            for data in iter_encoded(part, self.schema, piece):
                self._put(data)
            self.rows += k
            i += k

    def close(self) -> list[FileRecord]:
        if self.gzip and not self.offsets:  # no rows: one empty member, a valid gzip file
            self.z = zlib.compressobj(6, zlib.DEFLATED, 31)
        if self.z is not None:
            self._put_flush()
        nbytes, digest = self.out.close()
        self.offsets.append(nbytes)
        return [FileRecord(os.path.basename(self.path), self.rows, nbytes, digest, self.options.hash)]

    def abort(self) -> None:
        self.out.abort()

    def manifest_extra(self) -> dict:
        from .example import feature_spec

        return {
            "tfrecord": {
                "compression": "GZIP" if self.gzip else None,
                "feature_spec": feature_spec(self.schema),
                "blocks": {os.path.basename(self.path): encode_blocks(self.block_records, self.offsets)},
            }
        }


def block_records(schema: Schema) -> int:
    """Records per block for rows of ``schema`` (encoded Examples: values, names, framing)."""
    from ...schema import row_nbytes

    return block_records_for(sum(row_nbytes(f) + len(f.name) + 8 for f in schema) + 16)
