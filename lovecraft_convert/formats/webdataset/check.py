"""``verify`` of a WebDataset unit: the tar read strictly (every header's checksum, the metadata
lovecraft writes, nothing but regular files, zero blocks to the end of the last record), every
sample's members named ``<key>.<extension>`` in the plan's order with keys that follow from the rows
before the unit, and every member decoded (text checked to be UTF-8)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ...schema import STRING, Batch, Schema, VarColumn
from ..checking import CheckContext, FileProblem, Unit
from ..items import bad_utf8_row
from .layout import DecodeProblem, file_member, plan
from .reader import TarIndex
from .tar import TarProblem


def first_row(manifest: dict, unit: Unit) -> int | None:
    """The dataset row the unit starts at, when its shards are one order (not buckets)."""
    if unit.bucket is not None or manifest.get("buckets"):
        return None
    row = 0
    for s in manifest.get("shards") or []:
        if not isinstance(s, dict):
            return None
        if list(s.get("files") or []) == list(unit.files):
            return row
        row += int(s.get("rows") or 0)
    return None


def check_unit(ctx: CheckContext, unit: Unit, schema: Schema, p: str) -> Iterator[tuple[Batch, str]]:
    try:
        member = file_member(ctx.manifest)
        index = TarIndex(
            ctx.full(p), plan(schema, file_member=member), unit.rows, strict=True, first=first_row(ctx.manifest, unit)
        )
    except (TarProblem, DecodeProblem) as e:
        raise FileProblem(p, str(e)) from None
    step = max(1, ctx.step_rows(schema))
    try:
        for a in range(0, unit.rows, step):
            b = min(unit.rows, a + step)
            try:
                batch = index.decode(np.arange(a, b, dtype=np.int64), schema.names)
            except (DecodeProblem, ValueError) as e:
                raise FileProblem(p, str(e)) from None
            for f in schema:
                col = batch.columns[f.name]
                if f.kind == STRING and isinstance(col, VarColumn):
                    bad = bad_utf8_row(col.values, col.offsets)
                    if bad is not None:
                        raise FileProblem(p, f"sample {a + bad}: column '{f.name}' is not valid UTF-8")
            yield batch, p
    finally:
        index.close()
