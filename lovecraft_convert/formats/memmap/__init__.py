"""memmap: NumPy ``.npy`` files that ``np.load(path, mmap_mode="r")`` maps, one per fixed-shape
column (``<col>.values.npy`` + ``<col>.offsets.npy`` for variable-length ones) and unit; ``<col>``
the column's name, or its escape where that could not be a file name or could collide (names.py)."""

from __future__ import annotations

import os

from ..base import Idents, OutputFormat, py_str


class MemmapFormat(OutputFormat):
    name = "memmap"
    title = "NumPy .npy files per column (np.load(..., mmap_mode='r'))"
    extensions = (".npy",)
    random_access = True
    stem = ""

    def writer_class(self):
        from .writer import MemmapWriter

        return MemmapWriter

    def size_linear(self, compression):
        return True

    def most_rows(self, sizes, entries, schema, manifest):
        """Each column's file holds its rows back to back (after a header): an offsets file 8
        bytes a row, a data file the row's bytes."""
        from ...schema import row_nbytes

        fields = {f.name: f for f in schema}
        most = None
        for size, e in zip(sizes, entries, strict=True):
            role, f = e.get("role") or "data", fields.get(e.get("column"))
            if role == "offsets":
                n = size // 8
            elif role == "data" and f is not None and not f.variable and row_nbytes(f) > 0:
                n = size // int(row_nbytes(f))
            else:
                continue
            most = n if most is None else min(most, n)
        return most

    def open_part(self, files, manifest, shared):
        from ...errors import DatasetError
        from .reader import MemmapReader

        roles: dict[str, dict[str, str]] = {}
        for full, info in zip(files.paths, files.entries, strict=True):
            if "column" not in info:
                raise DatasetError(f"{full}: the manifest does not say which column it holds", hint="re-create it")
            roles.setdefault(info["column"], {})[info.get("role") or "data"] = full
        return MemmapReader(files.rows, files.schema, roles)

    def check_unit(self, ctx, unit, schema):
        from .check import check_unit

        return check_unit(ctx, unit, schema)

    def stat_file(self, ctx, unit, column, key):
        from .check import stat_file

        return stat_file(ctx, unit, column, key)

    def load_snippets(self, path, manifest):
        schema = [f for f in manifest.get("schema") or [] if isinstance(f, dict)]
        files = [f for f in manifest.get("files") or [] if isinstance(f, dict)]
        many = len(manifest.get("shards") or []) > 1 or bool(manifest.get("buckets"))
        lines = ["import numpy as np", ""]
        idents = Idents(reserved=("np",))
        for f in schema:
            mine = [x for x in files if x.get("column") == f.get("name")]
            v = idents.take(str(f.get("name")), ("",) if f.get("kind") == "fixed" else ("_values", "_offsets"))
            for role in ("data", "values", "offsets"):
                paths = [x["path"] for x in mine if (x.get("role") or "data") == role]
                if not paths:
                    continue
                var = v if role == "data" else f"{v}_{role}"
                if many:
                    lines.append(
                        f'{var} = [np.load(f, mmap_mode="r") for f in '
                        f"{[os.path.join(path, p) for p in paths]!r}]  # one array per shard"
                    )
                else:
                    lines.append(f'{var} = np.load({py_str(os.path.join(path, paths[0]))}, mmap_mode="r")')
            if f.get("kind") != "fixed" and any((x.get("role") or "data") == "values" for x in mine):
                lines.append(f"# row i of '{f['name']}': {v}_values[{v}_offsets[i]:{v}_offsets[i + 1]]")
            elif f.get("kind") != "fixed":  # a padded bucket's sequences: dense files
                pad = (manifest.get("bucketing") or {}).get("pad_id", 0)
                lines.append(
                    f"# each bucket's '{f['name']}' is [rows, its max_length], padded with {pad} after each row's "
                    "length (the 'length' column)"
                )
        return {"numpy": "\n".join(lines)}


FORMAT = MemmapFormat()
