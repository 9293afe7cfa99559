"""litdata output: one chunk file per unit (``part-00003-of-00064.bin``; ``data.bin`` for convert), more
when a unit's items outgrow the 4 GiB a uint32 table can address; ``index.json`` is written once
every unit is (:meth:`~.LitdataFormat.finish_dataset`), from the manifest's file list."""

from __future__ import annotations

from ...schema import Batch, Schema
from ..itemfile import TableWriter
from ..items import stream
from ..writing import FileRecord, WriteOptions, Writer
from .layout import item_pieces, leaf_format


class LitdataWriter(Writer):
    extension = ".bin"

    @classmethod
    def check_schema(cls, schema: Schema, source: str) -> None:
        for f in schema:
            leaf_format(f, source)

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        super().__init__(directory, stem, schema, options)
        self.table = TableWriter(directory, stem or "data", ".bin", b"", options, "a litdata chunk")

    def write(self, batch: Batch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        for bufs, lens in stream(item_pieces(self.schema, batch), n):
            self.table.add(bufs, lens)
        self.rows += n

    def close(self) -> list[FileRecord]:
        return self.table.close()

    def abort(self) -> None:
        self.table.abort()
