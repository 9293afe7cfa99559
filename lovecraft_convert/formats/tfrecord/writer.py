"""TFRecord output: one ``tf.train.Example`` per row, optionally GZIP-compressed.

Encoding is ours (see :mod:`.tfexample`): TensorFlow is neither needed nor imported to write.
The ``tf.io.parse_example`` feature spec goes into the manifest.
"""

from __future__ import annotations

import os
import zlib

from ...engine.writer import HashingWriter
from ...schema import Batch, Schema
from ..base import FileRecord, WriteOptions, Writer


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
        self.out = HashingWriter(self.path, hash=options.hash)
        if self.gzip:
            # A raw gzip member with mtime 0 and no name: the same input gives the same bytes.
            self.z = zlib.compressobj(6, zlib.DEFLATED, 31)
        else:
            self.z = None

    def write(self, batch: Batch) -> None:
        from .example import iter_encoded

        # pieces sized from the writer's memory: the queue holds two, the encoder's temporaries two or three
        piece = int(max(1 << 20, min(8 << 20, self.options.memory // 8)))
        for data in iter_encoded(batch, self.schema, piece):
            self.out.write(self.z.compress(data) if self.z else data)
        self.rows += batch.num_rows

    def close(self) -> list[FileRecord]:
        if self.z:
            self.out.write(self.z.flush())
        nbytes, digest = self.out.close()
        return [FileRecord(os.path.basename(self.path), self.rows, nbytes, digest, self.options.hash)]

    def abort(self) -> None:
        self.out.abort()

    def manifest_extra(self) -> dict:
        from .example import feature_spec

        return {"tfrecord": {"compression": "GZIP" if self.gzip else None, "feature_spec": feature_spec(self.schema)}}
