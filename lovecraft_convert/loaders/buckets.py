"""Bucketed datasets: rows grouped by sequence length, each batch from one bucket.

The manifest shape the ``bucket`` command writes::

    "buckets": [{"index": 0, "min_length": 1, "max_length": 16, "rows": 1000,
                 "files": ["bucket-00000.tokens.npy", "bucket-00000.length.npy", ...],
                 "layout": "padded" | "ragged",
                 "shards": [{"index": 0, "name": ..., "rows": ..., "files": [...]}, ...]}, ...]

(``shards`` is optional: without it the bucket is one shard holding ``files``.)

* ``schema`` lists the sequence column(s) with kind ``sequence`` and an integer ``length`` column
  (each row's true length).
* ``padded``: a sequence column's file in the bucket is dense, ``[rows, max_length]`` (padding after
  each row's end); ``ragged``: stored as in any dataset (memmap: values + offsets).
* ``files`` are paths listed in the manifest's ``files`` (with ``column``/``role`` for memmap),
  exactly like a shard's.

Batches (``Plan.raw_epoch``): every batch is from one bucket, the buckets' batches interleaved in a
seeded random order; sequence columns are padded to the bucket's ``max_length``
(``pad_to="bucket"``) or to the batch's longest row (``pad_to="batch"``), and ``length`` comes
with every batch.
"""

from __future__ import annotations

import numpy as np

from ..errors import DatasetError
from ..schema import FIXED, SEQUENCE, Batch, Field, Schema, VarColumn
from .common import Group, Part, convert_column, pad_rows, target_dtype

LENGTH = "length"
LAYOUTS = ("padded", "ragged")


def bucket_groups(ds) -> list[Group]:
    full = ds.full_schema
    read = list(ds.schema)
    if LENGTH in full.names and LENGTH not in ds.schema.names:
        read.append(full[LENGTH])  # lengths come with every batch, selected or not
    groups = []
    for i, b in enumerate(ds.manifest["buckets"]):
        layout = b.get("layout", "padded")
        if layout not in LAYOUTS:
            raise DatasetError(
                f"{ds.path}: bucket {b.get('index', i)} has an unknown layout {layout!r}",
                hint=f"this version reads {', '.join(LAYOUTS)}",
            )
        if layout == "padded" and LENGTH not in full.names:
            raise DatasetError(
                f"{ds.path}: a padded bucketed dataset needs a '{LENGTH}' column", hint="re-create it with lovecraft"
            )
        width = int(b["max_length"])
        fields = []
        for f in read:
            if f.kind == SEQUENCE and layout == "padded":
                fields.append(Field(f.name, FIXED, f.dtype, (width,)))
            else:
                fields.append(f)
        parts, start = [], 0
        for j, s in enumerate(b.get("shards") or [{"rows": b["rows"], "files": b["files"]}]):
            parts.append(Part((i, j), int(s["rows"]), start, list(s["files"])))
            start += int(s["rows"])
        groups.append(Group(i, parts, Schema(tuple(fields)), bucket=b))
    return groups


class BucketEmitter:
    """Turns one bucket's internal batch into the output dict (a class, so that plans pickle)."""

    def __init__(self, plan, g) -> None:
        self.plan = plan
        self.layout = g.bucket.get("layout", "padded")
        self.width = int(g.bucket["max_length"])
        self.selected = list(plan.ds.schema)
        self.seqs = [f.name for f in self.selected if f.kind == SEQUENCE]

    def __call__(self, batch: Batch) -> dict[str, np.ndarray]:
        plan = self.plan
        cols = batch.columns
        if LENGTH in cols:
            lengths = np.asarray(cols[LENGTH])
        else:  # ragged layout without a length column: from the first sequence column
            c = cols[self.seqs[0]]
            lengths = np.diff(c.offsets) if isinstance(c, VarColumn) else np.array([len(r) for r in c], np.int64)
        longest = int(lengths.max()) if len(lengths) else 0
        pad = self.width if plan.pad_to == "bucket" else longest
        out: dict[str, np.ndarray] = {}
        for f in self.selected:
            target = target_dtype(f, plan.float32)
            col = cols[f.name]
            if f.kind == SEQUENCE:
                if self.layout == "padded":
                    dense = col if pad == self.width else np.ascontiguousarray(col[:, :pad])
                    out[f.name] = dense if dense.dtype == target else dense.astype(target)
                else:
                    out[f.name] = pad_rows(col, target, pad, plan.pad_value)[0]
            else:
                out.update(convert_column(f.name, "fixed" if f.kind == FIXED else f.kind, target, col, plan.pad_value))
        out[LENGTH] = lengths.astype(np.int64, copy=False)
        return out
