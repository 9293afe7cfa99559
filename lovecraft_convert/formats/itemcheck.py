"""``verify`` of a unit made of item files (:mod:`.itemfile`: MDS shards, litdata chunks): each file's
table against its size and its manifest rows, its preamble against the one the schema gives, and
every item decoded (text columns checked to be UTF-8), in steps of rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from ..schema import STRING, Batch, Schema, VarColumn
from .checking import CheckContext, FileProblem, Unit
from .itemfile import TableFile, TableProblem
from .items import bad_utf8_row


def check_unit(
    ctx: CheckContext,
    unit: Unit,
    schema: Schema,
    ext: str,
    preamble: bytes,
    decode: Callable,
    problems: tuple[type[Exception], ...] = (),
) -> Iterator[tuple[Batch, str]]:
    mine = [p for p in unit.files if p.endswith(ext)]
    if not mine or len(mine) != len(unit.files):
        others = ", ".join(unit.files) or "none"
        raise FileProblem(unit.first, f"{unit.label} lists {others}; expected {ext} files only", "manifest")
    total = 0
    step = max(1, ctx.step_rows(schema))
    for p in mine:
        rows = ctx.info.get(p, {}).get("rows")
        rows = unit.rows if rows is None and len(mine) == 1 else rows
        try:
            tf = TableFile(ctx.full(p), len(preamble))
        except TableProblem as e:
            raise FileProblem(p, str(e)) from None
        try:
            if tf.count != rows:
                raise FileProblem(p, f"holds {tf.count} items, the manifest says {rows}", "rows")
            if tf.preamble() != preamble:
                raise FileProblem(p, "its configuration is not the one the manifest's schema gives", "schema")
            for a in range(0, tf.count, step):
                b = min(tf.count, a + step)
                offs = tf.span(a, b)
                try:
                    batch = decode(tf.buf, offs[:-1], np.diff(offs), schema, schema.names)
                except (ValueError, *problems) as e:
                    raise FileProblem(p, f"items {a}..{b - 1}: {e}") from None
                for f in schema:
                    col = batch.columns[f.name]
                    if f.kind == STRING and isinstance(col, VarColumn):
                        bad = bad_utf8_row(col.values, col.offsets)
                        if bad is not None:
                            raise FileProblem(p, f"item {a + bad}: column '{f.name}' is not valid UTF-8")
                yield batch, p
        finally:
            tf.close()
        total += tf.count
    if total != unit.rows:
        raise FileProblem(mine[-1], f"{unit.label}'s files hold {total} rows, the manifest says {unit.rows}", "rows")
