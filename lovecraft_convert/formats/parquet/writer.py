"""Parquet output: zstd by default, row groups sized for reading, page checksums on.

Batches are gathered into row groups of about ``row_group_bytes`` (in memory, bounded by the
memory budget) so readers get few, large row groups whatever the input's batch size. N-d rows are
nested fixed-size lists (polars sees ``Array``), text is ``string``, sequences are ``list``.
"""

from __future__ import annotations

import json
import os

from ...engine.writer import HashingWriter, named
from ...schema import Batch, Schema
from ..base import FileRecord, WriteOptions, Writer


class ParquetWriter(Writer):
    extension = ".parquet"

    @classmethod
    def check_schema(cls, schema: Schema, source: str) -> None:
        from ...arrowconv import arrow_schema

        arrow_schema(schema)

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        super().__init__(directory, stem, schema, options)
        import pyarrow.parquet as pq

        from ...arrowconv import arrow_schema

        self.path = os.path.join(directory, f"{stem or 'data'}.parquet")
        aschema = arrow_schema(schema).with_metadata({"lovecraft_schema": json.dumps(schema.to_list())})
        comp = options.compression or "zstd"
        # Written through our hashing writer: hashed as it goes, with direct I/O (see HashingWriter)
        self.out = HashingWriter(self.path, hash=options.hash)
        self.w = pq.ParquetWriter(
            self.out,
            aschema,
            compression="none" if comp == "none" else comp,
            write_page_checksum=True,
            write_statistics=True,
            # Dictionaries pay off for text and small-int columns, not for floats.
            use_dictionary=[f.name for f in schema if f.np_dtype.kind != "f"],
        )
        self.aschema = aschema
        self.pending: list = []
        self.pending_bytes = 0

    def write(self, batch: Batch) -> None:
        from ...arrowconv import to_arrow

        rb = to_arrow(batch, self.schema)
        self.pending.append(rb)
        self.pending_bytes += rb.nbytes
        self.rows += batch.num_rows
        if self.pending_bytes >= self.options.row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if not self.pending:
            return
        table = pa.Table.from_batches(self.pending, schema=self.aschema)
        try:
            self.w.write_table(table, row_group_size=table.num_rows)
        except OSError as e:
            raise named(e, self.path) from None
        self.pending = []
        self.pending_bytes = 0

    def close(self) -> list[FileRecord]:
        self._flush()
        try:
            self.w.close()  # writes the footer and closes self.out (fsync)
            nbytes, digest = self.out.close()
        except OSError as e:
            raise named(e, self.path) from None
        return [FileRecord(os.path.basename(self.path), self.rows, nbytes, digest, self.options.hash)]

    def abort(self) -> None:
        self.pending = []
        self.out.abort()  # first: a footer written now would go nowhere
        try:
            self.w.close()
        except Exception:  # noqa: BLE001 - already failing; the temporary directory is removed
            pass
