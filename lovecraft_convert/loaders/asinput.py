"""A lovecraft dataset directory as input (``convert`` or ``shard`` it again: another format,
other shards): the input kind ``dataset``, a reader built on the loaders (the kinds table of
:mod:`lovecraft_convert.inputs.kinds` names it by module path, as it names every reader, so the
inputs layer does not import the loaders above it). It reads through
:func:`~lovecraft_convert.loaders.open_dataset`, so only a complete dataset whose files match its
manifest is read, in the manifest's order; its shards are the parts of parallel workers. Values
come back as the dataset's schema says (a format that stores float16 as float32, such as TFRecord,
gives float16 again). A bucketed dataset (rows grouped and padded by length) is refused: convert
the dataset it was made from.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import InputError, SchemaError
from ..inputs.base import Part, Reader, ReadOptions
from ..inputs.spec import InputSpec
from ..schema import BINARY, FIXED, STRING, Batch, Field, Schema, VarColumn, row_nbytes


def _as_var(col, f: Field) -> VarColumn:
    """A variable-length column as a format's reader gives it (VarColumn or object array) as a VarColumn."""
    if isinstance(col, VarColumn):
        dt = np.dtype(np.uint8) if f.kind in (STRING, BINARY) else f.np_dtype
        return VarColumn(np.asarray(col.values).astype(dt, copy=False), np.asarray(col.offsets, dtype=np.int64))
    if f.kind in (STRING, BINARY):
        rows = [r.encode("utf-8") if isinstance(r, str) else bytes(r) for r in col]
        return (
            VarColumn.from_pylist(rows, np.uint8) if rows else VarColumn(np.zeros(0, np.uint8), np.zeros(1, np.int64))
        )
    arrs = [np.asarray(r, dtype=f.np_dtype).reshape(-1) for r in col]
    offs = np.zeros(len(arrs) + 1, dtype=np.int64)
    np.cumsum([len(a) for a in arrs], out=offs[1:])
    values = np.concatenate(arrs) if arrs else np.zeros(0, f.np_dtype)
    return VarColumn(values, offs)


class DatasetReader(Reader):
    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        super().__init__(specs, options)
        from .dataset import open_dataset

        self.datasets = []
        for spec in specs:
            if not spec.is_dir:
                raise InputError(f"{spec.name}: not a lovecraft dataset directory", hint="give the directory itself")
            ds = open_dataset(spec.path)
            if ds.bucketed:
                raise SchemaError(
                    f"{spec.name}: a bucketed dataset (its rows are grouped and padded by length) is not re-read",
                    hint="convert or shard the input it was bucketed from",
                )
            self.datasets.append(ds)
        first = self.datasets[0].schema
        for spec, ds in zip(specs[1:], self.datasets[1:], strict=True):
            if ds.schema != first:
                raise SchemaError(
                    f"{spec.name}: its columns differ from those of {specs[0].name}",
                    hint="give datasets with the same schema, or convert them separately",
                )
        self.schema = first
        wanted = [c for c in (options.columns or []) if c in first.names]
        self.read = Schema(tuple(first[c] for c in dict.fromkeys(wanted))) if wanted else first
        if wanted:
            self.datasets = [ds.select(self.read.names) for ds in self.datasets]
        self.rows = sum(len(ds) for ds in self.datasets)
        self._done = 0

    def _shard_bytes(self, ds, part) -> int:
        info = {f["path"]: f for f in ds.manifest["files"]}
        return sum(int(info.get(p, {}).get("bytes", 0)) for p in part.files)

    def _read(self, ds, group, part) -> Iterator[Batch]:
        step = max(1, int(self.options.batch_bytes // max(1.0, sum(row_nbytes(f) for f in self.read))))
        reader = ds.reader(group, part)
        try:
            for b in reader.chunks(0, part.rows, step):
                cols = {}
                for f in self.read:
                    c = b.columns[f.name]
                    if f.kind == FIXED:
                        cols[f.name] = np.asarray(c).astype(f.np_dtype, copy=False).reshape((b.num_rows, *f.shape))
                    else:
                        cols[f.name] = _as_var(c, f)
                yield Batch(cols, b.num_rows)
        finally:
            reader.close()
        self._done += self._shard_bytes(ds, part)

    def batches(self) -> Iterator[Batch]:
        self._done = 0
        for ds in self.datasets:
            for g in ds.groups:
                for p in g.parts:
                    yield from self._read(ds, g, p)

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        """One part per shard (a shard is read in bounded batches, whatever its size)."""
        parts: list[Part] = []
        g0 = 0
        for i, ds in enumerate(self.datasets):
            for k, p in enumerate(ds.groups[0].parts):
                parts.append(Part(len(parts), i, rows=(g0, g0 + p.rows), blocks=(i, k, k + 1)))
                g0 += p.rows
        return parts or [Part(0, 0, rows=(0, 0), blocks=(0, 0, 0))]

    def part_batches(self, part: Part) -> Iterator[Batch]:
        i, k, stop = part.blocks
        ds = self.datasets[i]
        g = ds.groups[0]
        for p in g.parts[k:stop]:
            yield from self._read(ds, g, p)

    def progress_total(self) -> int | None:
        return sum(int(f.get("bytes", 0)) for ds in self.datasets for f in ds.manifest["files"])

    def progress_done(self) -> int:
        return self._done

    def memory_bytes(self) -> int | None:
        return self.progress_total()

    def input_details(self, i: int) -> dict:
        ds = self.datasets[i]
        return {"rows": len(ds), "shards": ds.num_shards, "dataset_format": ds.format}
