"""mds: MosaicML Streaming's shard format, read by ``streaming.StreamingDataset(local=dir)`` or
``remote="s3://..."``: ``.mds`` shard files (one per unit: ``data.mds`` for convert,
``part-00003-of-00064.mds`` for shard) and ``index.json``, which lists them and is written once
every unit is. How each column kind is encoded: :mod:`.layout`.

Layout (the four parts, :mod:`lovecraft_convert.formats.protocols`): writes: :mod:`.writer` over the
shared item files (:mod:`lovecraft_convert.formats.itemfile`), ``index.json`` in ``finish_dataset``
(:mod:`lovecraft_convert.formats.tableindex`); reads: :mod:`lovecraft_convert.formats.itemreader`
with this layout's decoder; checks: :mod:`lovecraft_convert.formats.itemcheck` and the index made
again from the manifest; describes: this module (StreamingDataset snippet, local or remote).
"""

from __future__ import annotations

import os

from ...manifest import COUNT, HEX64, STR, Obj
from ..base import OutputFormat
from ..describing import py_str

FILE_ENTRY = Obj({"path": STR, "bytes": COUNT}, {"rows": COUNT, "blake3": HEX64, "sha256": HEX64})


class MdsFormat(OutputFormat):
    name = "mds"
    title = "MosaicML Streaming shards (.mds + index.json), read with streaming.StreamingDataset"
    extensions = (".mds",)
    random_access = True
    reads_remote = True  # StreamingDataset(remote="s3://...") / StreamingDataset("s3://...")
    padded_buckets = False  # an index.json of one encoding per column: ndarray:<dtype>:<width> cannot vary
    kinds = ("fixed", "string", "binary", "sequence", "string_list")
    manifest_keys = ("mds_index",)
    manifest_spec = Obj({}, {"mds_index": FILE_ENTRY})

    def writer_class(self):
        from .writer import MdsWriter

        return MdsWriter

    def finish_dataset(self, directory, manifest):
        from ...manifest import schema_of
        from ..tableindex import write_index
        from .layout import INDEX_NAME, index_bytes

        data = index_bytes(schema_of(manifest, INDEX_NAME), manifest["files"])
        return {"mds_index": write_index(directory, INDEX_NAME, data, manifest)}

    def extra_files(self, manifest):
        idx = manifest.get("mds_index")
        return None if idx is None else {"mds_index": idx}

    def check_extra(self, ctx, path):
        from ...manifest import schema_of
        from ..tableindex import check_index
        from .layout import index_bytes

        return check_index(ctx, path, lambda m: index_bytes(schema_of(m, path), m["files"]), "MDS index")

    def most_rows(self, sizes, entries, schema, manifest):
        return sum(max(0, size - 8) // 4 for size in sizes)  # a table entry per sample

    def open_part(self, files, manifest, shared):
        from ...manifest import schema_of
        from ..itemreader import TableReader
        from .layout import DecodeProblem, decode, preamble

        full = schema_of(manifest, "mds")
        hash = (manifest.get("options") or {}).get("hash", "blake3")
        rows = [int(e.get("rows", files.rows)) for e in files.entries] if len(files.paths) > 1 else [files.rows]
        return TableReader(
            files.rows,
            files.schema,
            files.paths,
            rows,
            decode,
            full,
            lambda s: len(preamble(s, hash)),
            (DecodeProblem,),
        )

    def check_unit(self, ctx, unit, schema):
        from ..itemcheck import check_unit
        from .layout import DecodeProblem, decode, preamble

        hash = (ctx.manifest.get("options") or {}).get("hash", "blake3")
        return check_unit(ctx, unit, schema, ".mds", preamble(schema, hash), decode, (DecodeProblem,))

    def stray_reason(self, name):
        if name.endswith(".mds") or name.endswith(".mds.zstd") or os.path.basename(name) == "index.json":
            return "a shard or index that StreamingDataset would read"
        return None

    def load_snippets(self, path, manifest):
        idx = manifest.get("mds_index") or {}
        where = os.path.dirname(str(idx.get("path", "index.json")))
        root = path.rstrip("/") + ("/" + where if where else "")
        if "://" in root:
            ds = f'StreamingDataset(remote={py_str(root)}, local="/tmp/mds-cache", shuffle=False)'
        else:
            ds = f"StreamingDataset(local={py_str(root)}, shuffle=False)"
        lines = [
            "from streaming import StreamingDataset",
            "",
            f"ds = {ds}",
            "sample = ds[0]  # a dict: column name -> value",
        ]
        return {"streaming": "\n".join(lines)}


FORMAT = MdsFormat()
