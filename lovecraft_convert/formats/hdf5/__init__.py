"""HDF5: one ``.h5`` file per unit, one dataset per column, ~1 MiB chunks with fletcher32; a
bucketed dataset also gets ``buckets.h5``, a group per bucket linking its files (:mod:`.index`)."""

from __future__ import annotations

from ..base import Idents, OutputFormat, py_str


class Hdf5Format(OutputFormat):
    name = "hdf5"
    title = "one HDF5 file per shard, a dataset per column (h5py)"
    extensions = (".h5", ".hdf5")
    compressions = ("gzip", "lzf")
    random_access = True
    variable_as_objects = True
    manifest_keys = ("hdf5_index",)
    column_floor = 16 << 10  # an open dataset's own structures plus two of the smallest chunks

    def writer_class(self):
        from .writer import Hdf5Writer

        return Hdf5Writer

    def finish_dataset(self, directory, manifest):
        if not manifest.get("buckets"):
            return {}
        from .index import write_for

        return {"hdf5_index": write_for(directory, manifest)}

    def open_part(self, files, manifest, shared):
        from .reader import ChunkCache, Hdf5Reader

        cache = shared.get("chunk_cache")
        if cache is None:  # one budget for all the shards' chunks
            cache = shared["chunk_cache"] = ChunkCache(shared.get("hdf5_cache_bytes", 512 << 20))
        path = self.unit_file(files.paths, f"shard {files.key[1]}")
        return Hdf5Reader(files.rows, files.schema, path, cache, key=files.key)

    def check_unit(self, ctx, unit, schema):
        from .check import check_unit

        return check_unit(ctx, unit, schema, self.checked_unit_file(unit))

    def extra_files(self, manifest):
        idx = manifest.get("hdf5_index")
        return None if idx is None else {"hdf5_index": idx}

    def check_extra(self, ctx, path):
        if not ctx.manifest.get("buckets"):
            from ..base import FileProblem

            return [FileProblem(path, "an index of buckets in a dataset without buckets", "manifest")]
        from .index import check

        return check(ctx.full(path), path, ctx.manifest["buckets"])

    def load_snippets(self, path, manifest):
        import os

        schema = [f for f in manifest.get("schema") or [] if isinstance(f, dict)]
        files = [f for f in manifest.get("files") or [] if isinstance(f, dict)]
        many = len(manifest.get("shards") or []) > 1 or bool(manifest.get("buckets"))
        paths = [x["path"] for x in files]
        first = os.path.join(path, paths[0]) if paths else os.path.join(path, "data.h5")
        lines = ["import h5py", ""]
        idents = Idents(reserved=("h5py", "f", "path"))
        names = {id(f): idents.take(str(f.get("name"))) for f in schema}
        if many:
            lines.append(f"for path in {[os.path.join(path, p) for p in paths]!r}:")
            lines.append('    with h5py.File(path, "r") as f:')
            for f in schema:
                lines.append(f"        {names[id(f)]} = f[{py_str(f['name'])}][:]")
        else:
            lines.append(f'with h5py.File({py_str(first)}, "r") as f:')
            for f in schema:
                suffix = ".asstr()[:]" if f.get("kind") == "string" else "[:]"
                lines.append(f"    {names[id(f)]} = f[{py_str(f['name'])}]{suffix}  # or slice [a:b] for part of it")
        return {"h5py": "\n".join(lines)}


FORMAT = Hdf5Format()
