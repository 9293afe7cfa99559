"""Parquet output: zstd by default, row groups sized for reading, page checksums on.

Batches are gathered into row groups of about ``row_group_bytes`` (in memory, bounded by the
memory budget) so readers get few, large row groups whatever the input's batch size. N-d rows are
nested fixed-size lists (polars sees ``Array``), text is ``string``, sequences are ``list``.

pyarrow's writer keeps the metadata of every column chunk (~0.8 KiB each, and as much again while
it writes the footer) until it closes the file, so one file's memory grows with its row groups
times its columns: +3.2 MiB per row group of a 2,000-column table. When those would pass a quarter
of the writer's memory, the next row group starts a new file: ``data-00000.parquet``,
``data-00001.parquet``, ... (one file, as almost always, keeps its plain name). The manifest lists
the files of the unit in order.
"""

from __future__ import annotations

import json
import os

from ...errors import SchemaError
from ...runtime.durable import HashingWriter, named
from ...schema import FIXED, WIDE_COLUMNS, Batch, Schema
from ...storage.stream import move_streamed, open_stream
from ..writing import FileRecord, WriteOptions, Writer

# bytes per column chunk that pyarrow's writer holds until the footer (~0.8 KiB), and as much again
# while it writes the footer from them (measured: 17 MiB at the close of 5 row groups x 2,000 columns)
CHUNK_METADATA = 1600


class ParquetWriter(Writer):
    extension = ".parquet"

    @classmethod
    def check_schema(cls, schema: Schema, source: str) -> None:
        from ...arrowconv import arrow_schema

        for f in schema:
            if f.kind == FIXED and 0 in f.shape:  # (Arrow's fixed-size lists hold at least one value)
                axis = f.shape.index(0) + 1
                raise SchemaError(
                    f"{source}, column '{f.name}': rows of shape {f.shape} hold no values (axis {axis} has length 0), "
                    "which Parquet cannot hold: a fixed-size list has at least one value",
                    hint="write memmap, hdf5 or tfrecord, or leave the column out",
                )
        arrow_schema(schema)

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        super().__init__(directory, stem, schema, options)
        from ...arrowconv import ArrowBatches, arrow_schema

        self.base = stem or "data"
        # a padded bucket's rows as list<T> (WriteOptions.widths_vary): the buckets' files then share
        # one schema, so that pyarrow, pandas and polars open the directory (fixed-size lists of
        # different widths do not unify). Parquet stores both as repeated values: the same bytes.
        self.aschema = arrow_schema(schema, options.widths_vary).with_metadata(
            {"lovecraft_schema": json.dumps(schema.to_list())}
        )
        self.to_arrow = ArrowBatches(schema, self.aschema, options.widths_vary)
        comp = options.compression or "zstd"
        self.writer_options = dict(
            compression="none" if comp == "none" else comp,
            write_page_checksum=True,
            write_statistics=True,
            # Dictionaries pay off for text and small-int columns, not for floats.
            use_dictionary=[f.name for f in schema if f.np_dtype.kind != "f"],
        )
        # row groups per file: their footer metadata within a quarter of the writer's memory (a
        # 2,000-column table under a 64 MiB budget: a row group per file, peak 120 MiB against 124
        # with two, in as much time; absolute RssAnon, medians of 5)
        self.max_groups = max(1, (options.memory // 4) // (CHUNK_METADATA * max(1, len(schema))))
        # a wide table of one number type: its batches gathered into one [columns, rows] block per
        # row group (a copy per batch), written as one record batch whose columns are slices of it
        # (one array per column and row group, not per batch: ~11% of a 2,000-column run). Four
        # times row_group_bytes (a third of the budget): a row group otherwise costs about three
        # times its size to write (batches gathered, converted), this one is written from the block
        # without a copy; and pyarrow's costs per column chunk (a zstd context and statistics per
        # page, metadata) are paid per row group: 2,000 columns of 250 MB in 3.5 s against 4.4 s
        # with blocks half this size (medians of 5)
        self.block = None
        dt = self.to_arrow.dtype
        rows = 4 * options.row_group_bytes // (len(schema) * dt.itemsize) if dt is not None else 0
        if len(schema) >= WIDE_COLUMNS and rows >= 16:  # else a row group per batch
            from ..writing import ColumnBlock

            self.block = ColumnBlock(len(schema), rows, dt, self._flush)
        self.done: list[FileRecord] = []  # the files finished (a wide table's first ones)
        # the rows of each finished file's row groups, as its footer says (the manifest's
        # parquet.blocks: a reader plans an epoch of a remote dataset without fetching every footer)
        self.row_groups: dict[str, list[int]] = {}
        self.pending: list = []
        self.pending_bytes = 0
        self._start(os.path.join(directory, f"{self.base}.parquet"))

    def _start(self, path: str) -> None:
        import pyarrow.parquet as pq

        self.path = path
        # Written through our hashing writer: hashed as it goes, with direct I/O, or straight to
        # the object store when the run writes to one (see HashingWriter)
        self.out = HashingWriter(path, hash=self.options.hash, sink=open_stream(path))
        self.footer: list = []  # the written file's metadata, appended by pyarrow at close
        self.w = pq.ParquetWriter(self.out, self.aschema, metadata_collector=self.footer, **self.writer_options)
        self.groups = 0  # row groups in this file
        self.file_rows = 0

    def _finish(self) -> FileRecord:
        try:
            self.w.close()  # writes the footer and closes self.out (fsync)
            nbytes, digest = self.out.close()
        except OSError as e:
            raise named(e, self.path) from None
        md = self.footer[-1]
        self.row_groups[os.path.basename(self.path)] = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
        return FileRecord(os.path.basename(self.path), self.file_rows, nbytes, digest, self.options.hash)

    def _next_file(self) -> None:
        rec = self._finish()
        if not self.done:  # now that there are several, the first one is numbered too
            first = os.path.join(self.directory, f"{self.base}-00000.parquet")
            if self.out.sink is not None:
                move_streamed(self.path, first)
            else:
                os.replace(self.path, first)
            self.row_groups[os.path.basename(first)] = self.row_groups.pop(rec.path)
            rec.path = os.path.basename(first)
        self.done.append(rec)
        self._start(os.path.join(self.directory, f"{self.base}-{len(self.done):05d}.parquet"))

    def write(self, batch: Batch) -> None:
        if self.block is not None:
            self.block.add_batch(batch, self.to_arrow.names)
            self.rows += batch.num_rows
            return
        rb = self.to_arrow(batch)
        self.pending.append(rb)
        self.pending_bytes += rb.nbytes
        self.rows += batch.num_rows
        if self.pending_bytes >= self.options.row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self.block is not None and self.block.held:
            b = self.block
            self.pending = [self.to_arrow.from_matrix(b.buf[:, : b.held], b.buf)]
            b.held = 0  # refilled only after the row group is written below
        if not self.pending:
            return
        if self.groups >= self.max_groups:
            self._next_file()
        table = pa.Table.from_batches(self.pending, schema=self.aschema)
        try:
            self.w.write_table(table, row_group_size=table.num_rows)
        except OSError as e:
            raise named(e, self.path) from None
        self.groups += 1
        self.file_rows += table.num_rows
        self.pending = []
        self.pending_bytes = 0

    def close(self) -> list[FileRecord]:
        self._flush()
        return [*self.done, self._finish()]

    def manifest_extra(self) -> dict:
        return {"parquet": {"blocks": {name: {"rows": rows} for name, rows in self.row_groups.items()}}}

    def abort(self) -> None:
        self.pending = []
        self.out.abort()  # first: a footer written now would go nowhere
        try:
            self.w.close()
        except Exception:  # noqa: BLE001 - already failing; the temporary directory is removed
            pass
        self.w.is_open = False  # closed or failed: its __del__ would close it again (and ask for its footer)
