"""``convert``: inputs -> one dataset directory, in one streaming pass with bounded memory.

The memory budget (``--max-memory``) sizes every buffer: a batch is a fraction of it, so peak
memory depends on the budget and never on the input's size.
"""

from __future__ import annotations

import time
from typing import Any

from .. import manifest as mf
from ..engine.commit import OutputDir, commit_unit, output_dir
from ..engine.dedup import check_report, settle_report
from ..engine.pipeline import Progress, coalesce
from ..errors import InputError, Interrupted, OptionsError, SchemaError, spelled
from ..formats import get as get_format
from ..formats.writing import FileRecord, WriteOptions
from ..inputs import Reader, open_data, open_reader, paths_or_data
from ..runtime.interrupts import Signals
from ..runtime.readahead import Prefetch
from ..schema import Schema
from ..stats import BatchStats
from ..transforms.plan import OutputPlan
from .options import ConvertOptions, takes_options


@takes_options(ConvertOptions)
def convert(inputs: Any, output: str, *, argv: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Convert ``inputs`` into the dataset directory ``output``; returns the manifest written.

    ``inputs``: paths, globs or URIs (a list, or one), ``-`` for stdin; or data held in memory, read
    once in its order: a ``pyarrow.RecordBatchReader`` or anything exporting an Arrow stream
    (``__arrow_c_stream__``: a pyarrow Table, a polars or pandas DataFrame), a dict of arrays, or an
    iterable of dicts of arrays (NumPy arrays with rows on axis 0, or lists; each dict a batch).
    Keyword arguments are the fields of :class:`ConvertOptions` (the CLI's flags).
    """
    paths, data = paths_or_data(inputs)
    if data is not None:
        o = ConvertOptions(**kwargs)
        o.validate()
        budget = o.budget()
        reader = open_data(data, budget=budget, **o.read_kwargs())
    else:
        o, inputs = ConvertOptions.parse(paths, kwargs)
        budget = o.budget()
        reader = open_reader(inputs, budget=budget, **o.read_kwargs())
    if o.dedup and (data is not None or any(s.is_stdin for s in reader.specs)):
        raise OptionsError(
            "--dedup reads the input twice (once to decide, once to write); "
            + ("data held in memory" if data is not None else "stdin")
            + " is read once",
            hint="write it to a file first",
        )
    fmt = get_format(o.to)
    protect = [s.path for s in reader.specs if not s.is_stdin and s.path]
    check_report(o.dedup_report, output, protect)
    started = time.time()
    try:
        manifest = _convert_into(reader, fmt, o, output, protect, budget, started, argv)
    except BaseException:
        settle_report(o.dedup_report, ok=False)
        raise
    settle_report(o.dedup_report, ok=True)
    return manifest


def _convert_into(reader: Reader, fmt, o: ConvertOptions, output: str, protect, budget: int, started, argv):
    from ..inputs.base import SchemaChanged

    with Signals(), output_dir(output, overwrite=o.overwrite, protect=protect, budget=budget) as out:
        try:
            while True:
                try:
                    files, plan, rows, stats, report, extra, keep = _run_once(reader, fmt, out, o, budget)
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
            **plan.tokens_extra(),
            **read_extra(reader, plan),
            **keep,
            **fmt.dataset_extra(schema, [extra]),
        )
        manifest.update(fmt.finish_dataset(out.tmp, manifest))  # files that list the whole dataset
        out.commit(manifest)
    return manifest


def output_plan(reader: Reader, o: ConvertOptions) -> OutputPlan:
    """The output plan (:mod:`lovecraft_convert.transforms.plan`) of ``reader``'s batches for the
    options ``o``: ``--columns``, ``--tokenizer``, ``--stack-columns``, then ``--dtype`` and float16
    column types."""
    return OutputPlan.build(
        reader.schema,
        ", ".join(s.name for s in reader.specs),
        columns=o.columns,
        stack_columns=o.stack_columns,
        stacked=getattr(reader, "stacked", False),
        tokenizer=o.tokenizer,
        column=o.column,
        eos=o.eos,
        bos=o.bos,
        dtype=o.dtype,
        column_types=o.column_types,
        on_overflow=o.on_overflow,
        filter=o.filter,
        takes_column_types=reader.takes_column_types,
    )


def checked_plans(reader: Reader, o: ConvertOptions) -> OutputPlan:
    """:func:`output_plan`, with ``--dedup-columns`` resolved too. A ``--filter``, ``--columns`` or
    ``--dedup-columns`` that does not fit ``reader.schema`` may name a type or a column not met yet:
    CSV and JSON Lines types come from the first piece of the input and widen while it is read,
    and a JSON Lines key may first appear late. Such a reader then reads its input once, which
    raises SchemaChanged if the schema changes (the job starts over with the wider one); if
    nothing changes, the error stands. Only this error path pays the extra pass."""
    try:
        plan = output_plan(reader, o)
        dedup_of(reader, plan, o)
        return plan
    except (OptionsError, SchemaError):
        if getattr(reader, "widens", False):
            for _ in reader.batches():
                pass
        raise


def estimate_bytes(reader) -> int:
    """Roughly how many bytes the records take in memory (for the number of hash buckets of a
    shuffle)."""
    known = reader.memory_bytes()
    if known is not None:
        return known
    total = 0
    for s in reader.specs:
        size = s.size or (256 << 20)
        total += size * (6 if s.compression else 1)
    return total


def dedup_of(reader: Reader, plan: OutputPlan, o: ConvertOptions):
    """The :class:`~lovecraft_convert.transforms.dedup.Dedup` ``o`` asks of ``reader`` (None
    without ``--dedup``): ``--dedup-columns``, else the columns written."""
    if not o.dedup:
        return None
    from ..transforms.dedup import Dedup

    text = (o.column or "text") if o.tokenizer else None  # near's default column: the one tokenized
    near = o.near_params() if o.dedup == "near" else None
    return Dedup.resolve(o.dedup, o.dedup_columns, reader.schema, plan.source.names, near, text)


def dedup_pass(reader: Reader, plan: OutputPlan, o: ConvertOptions, scratch: str, budget: int):
    """Read the input once to decide which rows are duplicates (transforms/dedup.py), in
    ``scratch``; returns the drop set and the manifest's description of the dedup."""
    import os
    import shutil

    from ..engine.dedup import write_report
    from ..engine.near import decide_for, scan_for
    from ..transforms.dedup import DropSet

    dedup = dedup_of(reader, plan, o)
    shutil.rmtree(scratch, ignore_errors=True)  # what an attempt with narrower types left
    os.makedirs(scratch)
    keep = plan.filter.mask if plan.filter is not None else None
    # read ahead in a thread: the input is parsed (pyarrow, the GIL released) while this thread
    # hashes the batch before (hashlib releases it too), as the writing pass overlaps them
    with Prefetch(reader.batches(), 2, budget // 12) as batches:
        scan = scan_for(dedup, iter(batches), keep, reader.schema, 0, scratch, budget // 2)
    parts = decide_for(dedup, scratch, [scan], budget // 2)
    if o.dedup_report:
        one = reader.specs[0].name if len(reader.specs) == 1 else None
        write_report(o.dedup_report, scratch, parts, [scan], [{"file": one}])
    return DropSet(scratch, 0, parts), {**dedup.describe(), "partitions": parts}


def read_extra(reader: Reader, plan: OutputPlan) -> dict[str, Any]:
    """The manifest's sections about what was read (:meth:`~lovecraft_convert.inputs.Reader.manifest_extra`:
    a files input's labels, decoding, skipped files) and its ``notes``, the plan's first."""
    extra = dict(reader.manifest_extra())
    notes = list(plan.notes) + list(extra.pop("notes", []))
    return {**extra, **({"notes": notes} if notes else {})}


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
            hint=f"raise {spelled(f'--max-memory to {mib}MiB', f'max_memory to {mib}MiB')} or more, "
            "or stack numeric columns with --stack-columns",
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
    plan: OutputPlan | None = None,
    widths_vary: bool = False,
    first_row: int = 0,
):
    """Write the batches of ``source`` as the files of unit ``k`` named ``name`` through ``plan``'s
    last steps (statistics and downcast; None: the batches are written as they are, statistics
    taken) and commit them into ``work``; returns (file records, statistics, the writer's manifest
    keys). ``widths_vary``, ``first_row``: see :class:`~lovecraft_convert.formats.writing.WriteOptions`."""
    fmt = get_format(o.to)
    stats = BatchStats(schema)
    plan = plan if plan is not None else OutputPlan.identity(schema)

    def feed(writer) -> None:
        for batch in coalesce(source, budget // 16):
            writer.write(plan.finish(batch, stats))

    files, extra = commit_unit(
        work,
        k,
        lambda d: fmt.writer_class()(d, name, schema, write_options(o, budget, rows, widths_vary, first_row)),
        feed,
    )
    return files, stats, extra


def _run_once(reader: Reader, fmt, out: OutputDir, o: ConvertOptions, budget: int):
    import os
    import shutil

    plan = checked_plans(reader, o)
    schema = plan.schema
    source = ", ".join(s.name for s in reader.specs)
    fmt.check_schema(schema, source)
    check_memory(schema, fmt, budget, source)
    scratch = os.path.join(out.tmp, "_dedup")
    got = _one_pass(reader, fmt, out, o, budget, plan) if o.dedup == "exact" and not o.dedup_report else None
    if got is not None:
        return got
    drops, dedup = dedup_pass(reader, plan, o, scratch, budget) if o.dedup else (None, None)
    try:
        got = _write(reader, fmt, out, o, budget, plan, drops)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    keep = plan.removed_extra(plan.removed, plan.rows_read, dedup)
    return (*got, keep)


def _one_pass(reader: Reader, fmt, out: OutputDir, o: ConvertOptions, budget: int, plan: OutputPlan):
    """``--dedup exact`` decided while writing (:class:`~lovecraft_convert.transforms.dedup.SeenDigests`):
    the input read once, not twice, when the distinct rows' digests fit an eighth of the budget
    (16 bytes each, 786,432 rows at the default 256MiB). None when they do not (the writer
    aborted; the two passes follow, ``plan``'s counts reset): seen at the first batch for an input
    of more than twice as many rows, else once the table is full. Not with ``--dedup-report``,
    whose positions the two passes' spill holds. The rows kept, and so the bytes written, are the
    two passes' (tests/transforms/test_dedup.py)."""
    from ..transforms.dedup import SeenDigests, SeenFull

    dedup = dedup_of(reader, plan, o)
    seen = SeenDigests(dedup, reader.schema, budget // 8, estimate_bytes(reader))
    try:
        got = _write(reader, fmt, out, o, budget, plan, seen)
    except SeenFull:
        plan.keep.removed.clear()
        plan.keep.rows_read = 0
        return None
    finally:
        seen.table = None
    keep = plan.removed_extra(plan.removed, plan.rows_read, {**dedup.describe(), "partitions": 0})
    return (*got, keep)


def _write(reader: Reader, fmt, out: OutputDir, o: ConvertOptions, budget: int, plan: OutputPlan, drops):
    schema = plan.schema
    source = ", ".join(s.name for s in reader.specs)
    stats = BatchStats(schema)
    rows = 0
    # Reading (with the plan's first steps) starts before the writer is made (an HDF5 file of 2,000
    # datasets: ~0.2 s) and goes on while it writes: two batches wait, or more small ones (a wide
    # table's) up to budget/12 (measured, 2,000 columns at 64 MiB: HDF5 56 -> 68 MB/s, memmap 53 ->
    # 76; budget/8 cost Parquet 12 MiB of peak for no speed, the allocator's share included). A
    # wide table's small batches are gathered before the plan's last steps (statistics, downcast).
    kept = plan.keep_rows(reader.batches(), drops)
    known = reader.rows if plan.filter is None and drops is None else None  # rows removed: not known up front
    with Prefetch(coalesce(map(plan.prepare, kept), budget // 16), 2, budget // 12) as batches:
        writer = fmt.writer_class()(out.tmp, fmt.stem, schema, write_options(o, budget, known))
        progress = Progress(reader, o.progress)
        try:
            for batch in batches:
                batch = plan.finish(batch, stats)
                writer.write(batch)
                rows += batch.num_rows
                progress.update()
            files: list[FileRecord] = writer.close()
        except BaseException:
            writer.abort()
            raise
        finally:
            progress.close()
    if rows == 0 and plan.rows_read:
        raise InputError(
            f"{source}: all {plan.rows_read} rows were removed ({_reasons(plan.removed)})",
            hint="check --filter" if plan.removed.get("filter") else "check --dedup-columns",
        )
    if rows == 0:
        why = reader.nothing_read()
        raise InputError(
            f"{source}: {why or 'empty input (no records)'}", hint="check the files" if why else "check the file"
        )
    return files, plan, rows, stats.to_dict(), plan.report(), writer.manifest_extra()


def _reasons(removed: dict[str, int]) -> str:
    names = {"filter": "by --filter", "duplicate": "as duplicates"}
    return ", ".join(f"{n} {names.get(k, k)}" for k, n in removed.items() if n)
