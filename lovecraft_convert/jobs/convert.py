"""``convert``: inputs -> one dataset directory, in one streaming pass with bounded memory.

The memory budget (``--max-memory``) sizes every buffer: a batch is a fraction of it, so peak
memory depends on the budget and never on the input's size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .. import manifest as mf
from ..engine.commit import OutputDir, commit_unit, output_dir
from ..engine.interrupts import Signals
from ..engine.pipeline import Prefetch, Progress, coalesce, write_step
from ..errors import InputError, Interrupted, OptionsError
from ..formats import get as get_format
from ..formats.base import FileRecord, WriteOptions
from ..inputs import Reader, open_reader
from ..schema import Batch, Schema
from ..stats import BatchStats
from .options import ConvertOptions, takes_options


@takes_options(ConvertOptions)
def convert(inputs: list[str] | str, output: str, *, argv: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Convert ``inputs`` into the dataset directory ``output``; returns the manifest written.

    Keyword arguments are the fields of :class:`ConvertOptions` (the CLI's flags).
    """
    from ..inputs.base import SchemaChanged

    o, inputs = ConvertOptions.parse(inputs, kwargs)
    budget = o.budget()
    reader = open_reader(inputs, budget=budget, **o.read_kwargs())
    fmt = get_format(o.to)
    protect = [s.path for s in reader.specs if not s.is_stdin]
    started = time.time()
    with Signals(), output_dir(output, overwrite=o.overwrite, protect=protect, budget=budget) as out:
        try:
            while True:
                try:
                    files, plan, rows, stats, report, extra = _run_once(reader, fmt, out, o, budget)
                    schema = plan.schema
                    break
                except SchemaChanged:
                    out.reset()
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; nothing was written to {out.path}") from None
        manifest = mf.build(
            command="convert",
            output_format=o.to,
            options=o.to_dict(),
            rows=rows,
            schema=schema.to_list(),
            shards=[{"index": 0, "rows": rows, "files": [f.path for f in files], "stats": stats}],
            files=[f.to_dict() for f in files],
            stats=stats,
            float16=report,
            sources=[s.describe() for s in reader.specs] + o.tokenizer_source(),
            argv=argv,
            seconds=round(time.time() - started, 3),
            **tokens_extra(plan),
            **read_extra(reader, plan),
            **fmt.dataset_extra(schema, [extra]),
        )
        manifest.update(fmt.finish_dataset(out.tmp, manifest))  # files that list the whole dataset
        out.commit(manifest)
    return manifest


def read_extra(reader: Reader, plan: OutputPlan) -> dict[str, Any]:
    """The manifest's sections about what was read (:meth:`~lovecraft_convert.inputs.Reader.manifest_extra`:
    a files input's labels, decoding, skipped files) and its ``notes``, the plan's first."""
    extra = dict(reader.manifest_extra())
    notes = list(plan.notes) + list(extra.pop("notes", []))
    return {**extra, **({"notes": notes} if notes else {})}


def tokens_extra(plan: OutputPlan) -> dict[str, Any]:
    """The manifest's ``tokenizer`` section of a tokenized dataset: which tokenizer, the text column,
    the markers' ids and the token dtype (nothing when nothing was tokenized)."""
    if plan.tokenize is None:
        return {}
    return {"tokenizer": {**plan.tokenize.tokens.describe(), "column": plan.tokenize.column}}


def select_columns(reader: Reader, columns: list[str] | None, stack_columns: list[str] | None = None) -> Schema:
    """The reader's schema with only ``columns`` (in that order); a column that ``stack_columns``
    makes stands for its members, in their order (the stack then takes their place)."""
    if not columns:
        return reader.schema
    if stack_columns:
        columns = _stack_members(columns, stack_columns, reader.schema.names)
    missing = [c for c in columns if c not in reader.schema.names]
    if missing:
        raise OptionsError(f"--columns: no column '{missing[0]}'", hint=f"columns are {', '.join(reader.schema.names)}")
    return Schema(tuple(reader.schema[c] for c in columns))


def _stack_members(columns: list[str], stack_columns: list[str], names: list[str]) -> list[str]:
    from ..selection import select
    from ..transforms.stack import parse

    stacks = dict(parse(spec) for spec in stack_columns)
    out: list[str] = []
    owner: dict[str, str] = {}
    for c in columns:
        if c not in stacks or c in names:
            out.append(c)
            continue
        members = select(names, stacks[c])
        for m in members:
            owner[m] = c
        out.extend(members)
    both = next((c for c in columns if c in owner), None)
    if both is not None:
        raise OptionsError(
            f"--columns names '{both}', which is stacked into '{owner[both]}'", hint=f"name '{owner[both]}' alone"
        )
    return out


@dataclass
class OutputPlan:
    """What is written from a reader's batches: ``prepare`` keeps the ``--columns``, tokenizes the
    ``--column`` (``--tokenizer``) and stacks the ``--stack-columns``; ``down`` (None when nothing
    is narrowed) then downcasts to ``schema``."""

    schema: Schema
    down: Any
    source: Schema  # the reader's columns that are kept, before tokenizing and stacking
    stack: Any = None
    tokenize: Any = None  # transforms.tokenize.Tokenize, or None
    notes: list[str] = field(default_factory=list)  # what the manifest's notes say of these choices

    def extra(self) -> dict[str, Any]:
        """The manifest's ``notes`` (what the run noticed and did not refuse), when there are any."""
        return {"notes": list(self.notes)} if self.notes else {}

    def prepare(self, batch: Batch) -> Batch:
        names = self.source.names
        if list(batch.columns) != names:
            batch = Batch({n: batch.columns[n] for n in names}, batch.num_rows)
        if self.tokenize is not None:
            batch = self.tokenize(batch)
        return self.stack(batch) if self.stack is not None else batch


def output_schema(reader: Reader, o: ConvertOptions) -> OutputPlan:
    """The written schema (``--columns``, ``--tokenizer``, ``--stack-columns``, then
    ``--dtype``/float16 column types) and the transforms that produce it."""
    from ..transforms.downcast import Downcast

    where = ", ".join(s.name for s in reader.specs)
    tokenize = None
    if o.tokenizer is not None:
        from ..transforms.tokenize import Tokenize, Tokens

        tokenize = Tokenize(reader.schema, Tokens(o.tokenizer, o.eos, o.bos), o.column, o.columns, where)
        source = Schema(tuple(reader.schema[n] for n in tokenize.source_names))
        schema = tokenize.schema
    else:
        source = select_columns(reader, o.columns, o.stack_columns)
        schema = source
    stack = None
    if o.stack_columns and not getattr(reader, "stacked", False):  # (a reader may have stacked them as it read)
        from ..transforms.stack import Stack

        stack = Stack(source, list(o.stack_columns), where)
        schema = stack.schema
    per_col = {}
    if "float16" in o.column_types.values():  # read as float32, then narrowed with the float16 report
        from ..selection import ColumnTypes

        typed = ColumnTypes(o.column_types).resolve(reader.schema.names, where, strict=False)
        per_col = {k: v for k, v in typed.items() if v == "float16"}
    note = Downcast.left_alone(schema, o.dtype, per_col)
    down = Downcast.for_dtype(schema, o.dtype, per_col, o.on_overflow)
    if down is not None:
        down.source = where
        schema = down.schema
    return OutputPlan(schema, down, source, stack, tokenize, [note] if note else [])


READ_COLUMN_FLOOR = 8 << 10  # what reading holds per column at least (the CSV parser's per-column state)
FIXED_FLOOR = 8 << 20  # what a run holds whatever its columns (batches in flight, pools)


def check_memory(schema: Schema, fmt, budget: int, source: str) -> None:
    """Refuse (one line saying how much it needs) a table too wide for the memory budget: every
    per-column cost is sized from the budget, down to a floor below which no progress is made."""
    per = READ_COLUMN_FLOOR + fmt.column_floor
    need = FIXED_FLOOR + len(schema) * per
    if need > budget:
        mib = -(-need // (1 << 20))
        raise OptionsError(
            f"{source}: {len(schema)} columns need at least {mib} MiB to be written as {fmt.name} "
            f"({per >> 10} KiB per column), more than --max-memory {budget >> 20}MiB",
            hint=f"raise --max-memory to {mib}MiB or more, or stack numeric columns with --stack-columns",
        )


def write_options(
    o: ConvertOptions, budget: int, rows: int | None, widths_vary: bool = False, first_row: int = 0
) -> WriteOptions:
    return WriteOptions(
        compression=o.compression,
        hash=o.hash,
        row_group_bytes=max(1 << 20, budget // 12),  # a row group costs about three times its size to write
        expected_rows=rows,
        memory=budget // 4,
        widths_vary=widths_vary,
        first_row=first_row,
    )


def write_unit_files(
    work: str,
    k: int,
    name: str,
    schema: Schema,
    source,
    o: ConvertOptions,
    budget: int,
    rows: int,
    down=None,
    widths_vary: bool = False,
    first_row: int = 0,
):
    """Write the batches of ``source`` as the files of unit ``k`` named ``name`` (statistics and
    downcast on the way) and commit them into ``work``; returns (file records, statistics, the
    writer's manifest keys). ``widths_vary``, ``first_row``: see
    :class:`~lovecraft_convert.formats.base.WriteOptions`."""
    fmt = get_format(o.to)
    stats = BatchStats(schema)

    def feed(writer) -> None:
        for batch in coalesce(source, budget // 16):
            write_step(batch, down, stats, writer)

    files, extra = commit_unit(
        work,
        k,
        lambda d: fmt.writer_class()(d, name, schema, write_options(o, budget, rows, widths_vary, first_row)),
        feed,
    )
    return files, stats, extra


def _run_once(reader: Reader, fmt, out: OutputDir, o: ConvertOptions, budget: int):
    plan = output_schema(reader, o)
    schema, down = plan.schema, plan.down
    source = ", ".join(s.name for s in reader.specs)
    fmt.check_schema(schema, source)
    check_memory(schema, fmt, budget, source)
    stats = BatchStats(schema)
    rows = 0
    # Reading starts before the writer is made (an HDF5 file of 2,000 datasets: ~0.2 s) and goes
    # on while it writes: two batches wait, or more small ones (a wide table's) up to budget/12
    # (measured, 2,000 columns at 64 MiB: HDF5 56 -> 68 MB/s, memmap 53 -> 76; budget/8 cost
    # Parquet 12 MiB of peak for no speed, the allocator's share included)
    with Prefetch(coalesce(map(plan.prepare, reader.batches()), budget // 16), 2, budget // 12) as batches:
        writer = fmt.writer_class()(out.tmp, fmt.stem, schema, write_options(o, budget, reader.rows))
        progress = Progress(reader, o.progress)
        try:
            for batch in batches:
                rows += write_step(batch, down, stats, writer)
                progress.update()
            files: list[FileRecord] = writer.close()
        except BaseException:
            writer.abort()
            raise
        finally:
            progress.close()
    if rows == 0:
        raise InputError(f"{source}: empty input (no records)", hint="check the file")
    return files, plan, rows, stats.to_dict(), (down.report() if down else {}), writer.manifest_extra()
