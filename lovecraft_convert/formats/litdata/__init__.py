"""litdata: Lightning's optimized chunks, read by ``litdata.StreamingDataset(dir)`` (or an ``s3://``
URI): chunk files (one per unit: ``data.bin`` for convert, ``part-00003-of-00064.bin`` for shard)
and ``index.json``, which lists them and is written once every unit is. How each column kind is
stored: :mod:`.layout`.

Layout (the four parts, :mod:`lovecraft_convert.formats.protocols`): writes: :mod:`.writer` over the
shared item files (:mod:`lovecraft_convert.formats.itemfile`), ``index.json`` in ``finish_dataset``
(:mod:`lovecraft_convert.formats.tableindex`); reads: :mod:`lovecraft_convert.formats.itemreader`
with this layout's decoder; checks: :mod:`lovecraft_convert.formats.itemcheck` and the index made
again from the manifest; describes: this module (litdata snippet, local or remote).
"""

from __future__ import annotations

import os

from ...manifest import Obj
from ..base import OutputFormat
from ..describing import py_str
from ..mds import FILE_ENTRY


class LitdataFormat(OutputFormat):
    name = "litdata"
    title = "litdata chunks (.bin + index.json), read with litdata.StreamingDataset"
    extensions = (".bin",)
    random_access = True
    reads_remote = True  # StreamingDataset(remote="s3://...") / StreamingDataset("s3://...")
    kinds = ("fixed", "string", "binary", "sequence", "string_list")
    manifest_keys = ("litdata_index",)
    manifest_spec = Obj({}, {"litdata_index": FILE_ENTRY})

    def writer_class(self):
        from .writer import LitdataWriter

        return LitdataWriter

    def finish_dataset(self, directory, manifest):
        from ...manifest import schema_of
        from ..tableindex import write_index
        from .layout import INDEX_NAME, index_bytes

        data = index_bytes(schema_of(manifest, INDEX_NAME), manifest["files"])
        return {"litdata_index": write_index(directory, INDEX_NAME, data, manifest)}

    def extra_files(self, manifest):
        idx = manifest.get("litdata_index")
        return None if idx is None else {"litdata_index": idx}

    def check_extra(self, ctx, path):
        from ...manifest import schema_of
        from ..tableindex import check_index
        from .layout import index_bytes

        return check_index(ctx, path, lambda m: index_bytes(schema_of(m, path), m["files"]), "litdata index")

    def most_rows(self, sizes, entries, schema, manifest):
        return sum(max(0, size - 8) // (4 + 4 * len(schema)) for size in sizes)  # a table entry and sizes per item

    def open_part(self, files, manifest, shared):
        from ...manifest import schema_of
        from ..itemreader import TableReader
        from .layout import DecodeProblem, decode

        full = schema_of(manifest, "litdata")
        rows = [int(e.get("rows", files.rows)) for e in files.entries] if len(files.paths) > 1 else [files.rows]
        return TableReader(files.rows, files.schema, files.paths, rows, decode, full, lambda s: 0, (DecodeProblem,))

    def check_unit(self, ctx, unit, schema):
        from ..itemcheck import check_unit
        from .layout import DecodeProblem, decode

        return check_unit(ctx, unit, schema, ".bin", b"", decode, (DecodeProblem,))

    def stray_reason(self, name):
        if name.endswith(".bin") or os.path.basename(name) == "index.json":
            return "a chunk or index that litdata's StreamingDataset would read"
        return None

    def load_snippets(self, path, manifest):
        idx = manifest.get("litdata_index") or {}
        where = os.path.dirname(str(idx.get("path", "index.json")))
        root = path.rstrip("/") + ("/" + where if where else "")
        lines = [
            "import litdata",
            "",
            f"ds = litdata.StreamingDataset({py_str(root)})",
            "item = ds[0]  # a dict: column name -> value",
            "loader = litdata.StreamingDataLoader(ds, batch_size=64)",
        ]
        return {"litdata": "\n".join(lines)}


FORMAT = LitdataFormat()
