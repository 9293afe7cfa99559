"""``verify`` of a Parquet dataset's unit: the file's schema against the manifest's, row groups of
plausible size, and every page read with its checksum verified; no nulls (lovecraft writes none)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from ...arrowconv import arrow_schema, batch_from_arrow, holds_nulls
from ...errors import SchemaError
from ...schema import Batch, Schema
from ..checking import CheckContext, FileProblem, Unit, short
from .reader import row_groups_difference, schema_difference


def check_unit(
    ctx: CheckContext, unit: Unit, schema: Schema, p: str, rows: int | None = None
) -> Iterator[tuple[Batch, str]]:
    """The checks of file ``p`` of ``unit``, which holds ``rows`` rows (the unit's when None)."""
    rows = unit.rows if rows is None else rows
    full = ctx.full(p)
    try:
        pf = pq.ParquetFile(full, page_checksum_verification=True, memory_map=True)
        md = pf.metadata
        got = pf.schema_arrow
    except (OSError, pa.ArrowException, ValueError) as e:
        raise FileProblem(p, f"cannot be opened as Parquet ({short(e)})") from None
    with pf:
        want = arrow_schema(schema)
        if got.names != want.names:
            raise FileProblem(p, f"holds columns {got.names}, the schema says {want.names}", "schema")
        why = schema_difference(got, schema)
        if why is not None:
            raise FileProblem(p, why, "schema")
        if md.num_rows != rows:
            raise FileProblem(p, f"holds {md.num_rows} rows, the manifest says {rows}", "rows")
        blocks = (ctx.manifest.get("parquet") or {}).get("blocks") or {}
        why = row_groups_difference(md, (blocks.get(p) or {}).get("rows"))
        if why is not None:
            raise FileProblem(p, why, "manifest")
        limit = max(1 << 30, 4 * ctx.budget)
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for c in range(rg.num_columns):
                n = rg.column(c).total_uncompressed_size
                if n > limit:
                    raise FileProblem(p, f"row group {g} claims {n} uncompressed bytes in one column (refused)")
        step = ctx.step_rows(schema)
        done = 0
        try:
            for rb in pf.iter_batches(batch_size=step, use_threads=False):
                for name in rb.schema.names:
                    if rb.column(name).null_count and not (name in schema.names and holds_nulls(schema[name])):
                        raise FileProblem(p, f"column '{name}' holds nulls near row {done + 1}", "schema")
                batch = batch_from_arrow(rb, schema)
                done += rb.num_rows
                yield batch, p
        except (OSError, pa.ArrowException, ValueError, SchemaError) as e:
            raise FileProblem(p, f"cannot be decoded after row {done} ({short(e)})") from None
