"""webdataset: POSIX tar shards of ``<key>.<extension>`` members, read by ``webdataset.WebDataset``
(and by ``tar`` itself): one ``.tar`` per unit, ``data.tar`` for convert,
``part-00003-of-00064.tar`` for shard. How each column becomes a member: :mod:`.layout`; the tar
itself: :mod:`.tar`.

Layout (the four parts, :mod:`lovecraft_convert.formats.protocols`): writes: :mod:`.writer`
(``WebdatasetWriter``: tar headers of a batch made at once, items from
:mod:`lovecraft_convert.formats.items`); reads: :mod:`.reader` (the tar's members indexed as two
integers each, random access by row); checks: :mod:`.check` (every header and member decoded as the
layout says); describes: this module (webdataset and tar snippets).
"""

from __future__ import annotations

import os

from ..base import OutputFormat
from ..describing import py_str


class WebdatasetFormat(OutputFormat):
    name = "webdataset"
    title = "WebDataset tar shards (<key>.<ext> members), read with webdataset.WebDataset or tar"
    extensions = (".tar",)
    random_access = True
    kinds = ("fixed", "string", "binary", "sequence", "string_list")

    def writer_class(self):
        from .writer import WebdatasetWriter

        return WebdatasetWriter

    manifest_keys = ("webdataset",)

    def dataset_extra(self, schema, unit_extras):
        from .layout import file_member_of

        member = file_member_of(schema)
        return {"webdataset": {"file_member": member}} if member else {}

    def most_rows(self, sizes, entries, schema, manifest):
        return sum(size // 512 for size in sizes)  # a sample has a header of 512 bytes at least

    def open_part(self, files, manifest, shared):
        from ...manifest import schema_of
        from .reader import WebdatasetReader

        path = self.unit_file(files.paths, f"shard {files.key[1]}")
        from .layout import file_member

        member = file_member(manifest)
        return WebdatasetReader(files.rows, files.schema, schema_of(manifest, "webdataset"), path, member)

    def check_unit(self, ctx, unit, schema):
        from .check import check_unit

        return check_unit(ctx, unit, schema, self.checked_unit_file(unit))

    def load_snippets(self, path, manifest):
        files = [f for f in manifest.get("files") or [] if isinstance(f, dict)]
        urls = [os.path.join(path, str(f.get("path"))) for f in files]
        src = py_str(urls[0]) if len(urls) == 1 else f"{urls!r}"
        lines = [
            "import webdataset as wds",
            "",
            f"ds = wds.WebDataset({src}, shardshuffle=False).decode()",
            "sample = next(iter(ds))  # a dict: __key__, and one entry per member extension",
        ]
        return {"webdataset": "\n".join(lines), "tar": f"tar -tvf {urls[0] if urls else path}"}


FORMAT = WebdatasetFormat()
