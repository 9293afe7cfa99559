"""Parquet: one file per unit (several for a table so wide that one file's footer would outgrow the
memory budget), zstd by default, page checksums, large row groups; read by pyarrow,
pandas, polars, duckdb and Spark without us (the manifest's ``_`` name keeps it out of their way).

Layout (the four parts, :mod:`lovecraft_convert.formats.protocols`): writes: :mod:`.writer`
(``ParquetWriter``: page checksums, row groups sized from the budget); reads: :mod:`.reader` (by
row group, the unit of a block shuffle); checks: :mod:`.check` (every page read with its
checksum, the schema against the manifest's); describes: this module (pyarrow, pandas, polars,
duckdb snippets).
"""

from __future__ import annotations

import os

from ...manifest import POSITIVE, ListOf, MapOf, Obj
from ..base import OutputFormat
from ..describing import py_str

# the rows of each file's row groups (what its footer says): a reader plans an epoch (blocks are
# row groups) without opening every file first, which for a remote dataset is a GET per file
SECTION = Obj({}, {"blocks": MapOf(Obj({"rows": ListOf(POSITIVE)}))})


class ParquetFormat(OutputFormat):
    name = "parquet"
    title = "one Parquet file per shard (pyarrow, pandas, polars, duckdb)"
    extensions = (".parquet",)
    compressions = ("zstd", "snappy", "gzip")
    default_compression = "zstd"
    kinds = ("fixed", "string", "binary", "sequence", "string_list")  # lists of strings as list<string>
    manifest_keys = ("parquet",)
    manifest_spec = Obj({}, {"parquet": SECTION})

    def writer_class(self):
        from .writer import ParquetWriter

        return ParquetWriter

    def dataset_extra(self, schema, unit_extras):
        blocks = {}
        for extra in unit_extras:  # every unit's files
            blocks.update(((extra.get("parquet") or {}).get("blocks")) or {})
        return {"parquet": {"blocks": dict(sorted(blocks.items()))}} if blocks else {}

    def open_part(self, files, manifest, shared):
        from .reader import ParquetReader

        mine = [(p, e) for p, e in zip(files.paths, files.entries, strict=True) if p.endswith(self.extensions)]
        if not mine:
            self.unit_file(files.paths, f"shard {files.key[1]}")  # the one-line error
        rows = [int(e.get("rows", files.rows)) for _, e in mine] if len(mine) > 1 else [files.rows]
        footers = shared.setdefault("parquet_footers", {})  # read once per process, whichever reader opens it
        blocks = (manifest.get("parquet") or {}).get("blocks") or {}
        groups = [(blocks.get(e.get("path")) or {}).get("rows") for _, e in mine]
        return ParquetReader(files.rows, files.schema, [p for p, _ in mine], rows, footers, groups)

    def check_unit(self, ctx, unit, schema):
        from .check import check_unit

        mine = [p for p in unit.files if p.endswith(self.extensions)]
        if len(mine) <= 1:
            yield from check_unit(ctx, unit, schema, self.checked_unit_file(unit))
            return
        for p in mine:  # a wide table's unit written as several files: each holds its manifest rows
            rows = int(ctx.info.get(p, {}).get("rows", -1))
            yield from check_unit(ctx, unit, schema, p, rows)

    def stray_reason(self, name):
        if not os.path.basename(name).startswith(("_", ".")):  # pyarrow's ignore_prefixes
            return "pyarrow, pandas and dask read every file whose name does not start with _ or . as Parquet"
        return None

    def load_snippets(self, path, manifest):
        return {
            "polars": f"import polars as pl\n\ndf = pl.read_parquet({py_str(os.path.join(path, '*.parquet'))})",
            "pyarrow": f"import pyarrow.parquet as pq\n\ntable = pq.read_table({py_str(path)})",
            "pandas": f"import pandas as pd\n\ndf = pd.read_parquet({py_str(path)})",
        }


FORMAT = ParquetFormat()
