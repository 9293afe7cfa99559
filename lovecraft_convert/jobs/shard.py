"""``shard``: many shards of a controlled size, optionally globally shuffled, written by parallel
units of work, resumable after a crash.

The run has two phases of units; each unit is a pure function of (a piece of the input, the
options) that leaves finished files in the work directory and returns a small JSON fragment, run by
the executor (:mod:`lovecraft_convert.engine.executors`) and journalled by the driver.

1. *Split* (one unit per part of the input: a ~64 MiB byte range of a CSV or text file cut at a
   record boundary, a row range of NPY files, or a whole compressed input): parse, downcast, and
   spill the records to frame files. With ``--shuffle`` each record goes to one of B hash buckets
   chosen by a seeded hash of (part, row): the scatter half of an external shuffle. Inputs that
   read any rows directly (memory-mapped NPY; a tree of files read as bytes, where every file is a
   row) skip this phase when not shuffled.
2. *Write* (one unit per shard): shard k holds rows [start_k, stop_k) of the global order (parts
   in input order; with ``--shuffle``, hash buckets in order, each permuted by a generator seeded
   with (seed, bucket)). The unit reads just those rows and commits the shard's files.

Parts and buckets depend only on the input and the options, never on ``--workers``, so the bytes
are the same whatever the parallelism.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import manifest as mf
from ..engine.driver import Run, run_job
from ..engine.frames import UnitSpill, frames_from_buffer, read_frame, write_frame
from ..engine.journal import SPILL, save_plan
from ..engine.meter import UnitMeter
from ..engine.units import discard, drop_spill, fetch, open_section, publish, unit, usable
from ..errors import LovecraftError, OverflowErrorF16, SchemaError
from ..formats import get as get_format
from ..formats import worker_setup
from ..inputs import Part, open_reader
from ..runtime.durable import throwaway
from ..schema import Batch, Schema
from ..stats import merged, raw
from ..transforms.shuffle import hash_bucket
from ..util import parse_size, trace
from .convert import check_memory, checked_plans, dedup_of, estimate_bytes, output_plan, read_extra, write_unit_files
from .options import ShardOptions, takes_options


def shard_name(k: int, n: int) -> str:
    return f"part-{k:05d}-of-{n:05d}"


@dataclass
class Context:
    """What every unit gets (picklable, JSON-able)."""

    inputs: list[str]
    options: dict[str, Any]
    work: str
    widened: dict[str, str]
    buckets: int  # 0: not shuffled
    out_schema: list[dict] | None = None
    place: dict | None = None  # where the run's objects go (engine/units.py), None for a local output
    dedup: dict | None = None  # --dedup: mode, columns, partitions (jobs/dedup.py), once decided

    @property
    def o(self) -> ShardOptions:
        return ShardOptions(**self.options)

    def budget(self) -> int:
        """The memory one unit may use: a quarter of --max-memory, so that up to four workers fit.

        Every size that shapes the output (batches, row groups, buckets) comes from this, never
        from the number of workers, so the bytes do not depend on --workers.
        """
        return parse_size(self.o.max_memory) // 4

    def reader(self, threads: bool = False, specs: list | None = None):
        """The reader of the inputs (``specs``: of only these, as the driver resolved them)."""
        reader = open_reader(self.inputs, budget=self.budget(), threads=threads, resolved=specs, **self.o.read_kwargs())
        reader.widen(self.widened)
        return reader


def unit_inputs(reader, part: Part) -> tuple[Part, list]:
    """``part`` as a reader of only the inputs it needs sees it, and those inputs as ``reader``
    resolved them (the leading ones that settle the schema, ``reader.probe_specs``, and the part's
    own; all of them for a reader that needs them all). So a unit of 100,000 small files opens its
    own files and the first, and looks at no other (each unit resolved every input: its cost grew
    with the input's file count)."""
    import dataclasses

    k = reader.probe_specs
    if k is None or len(reader.specs) <= k + len(part.spec_range):
        return part, list(reader.specs)
    idx = list(range(k)) + [i for i in part.spec_range if i >= k]
    local = {g: i for i, g in enumerate(idx)}
    stop = None if part.stop_spec is None else local[part.stop_spec - 1] + 1
    return dataclasses.replace(part, spec=local[part.spec], stop_spec=stop), [reader.specs[i] for i in idx]


# --------------------------------------------------------------------------------------------
# phase 1: one part
# --------------------------------------------------------------------------------------------


@unit
def split_unit(ctx: Context, part: Part, specs: list | None = None) -> dict[str, Any]:
    """Read one part of the input, downcast, spill to frame files (scatter when shuffling);
    ``specs``: the inputs the part needs (see :func:`unit_inputs`; None: every input)."""
    reader = ctx.reader(specs=specs)
    plan = output_plan(reader, ctx.o).at_row(part.rows[0] if part.rows else None)
    schema = plan.schema
    drops = None
    if ctx.dedup is not None:
        from ..transforms.dedup import DropSet

        drops = DropSet(os.path.join(ctx.work, SPILL), part.index, ctx.dedup["partitions"])
    rows = 0
    seed = ctx.o.seed or 0
    meter = UnitMeter(ctx.work, part.index, reader.progress_done)  # input bytes read, for the driver's bar
    # Spill files are not fsynced: the journal records their sizes and digests instead, and a
    # resumed run redoes any part whose files are missing, short or changed (a crash of the
    # machine, a damaged disk).
    spill = UnitSpill(os.path.join(ctx.work, SPILL), part.index, ctx.buckets)
    bucket_rows = [0] * ctx.buckets
    frames: list = []
    try:
        for batch in _gathered(plan.keep_rows(reader.part_batches(part), drops, part.index), ctx.budget() // 16):
            batch = plan(batch)
            if ctx.buckets:
                b_of = hash_bucket(seed, part.index, np.arange(rows, rows + batch.num_rows), ctx.buckets)
                order = np.argsort(b_of, kind="stable")
                counts = np.bincount(b_of, minlength=ctx.buckets)
                sorted_batch = batch.take(order)
                pos = 0
                for b in range(ctx.buckets):
                    n = int(counts[b])
                    if n:
                        write_frame(spill.file(b), sorted_batch.slice(pos, pos + n), schema, counted=True)
                        bucket_rows[b] += n
                        pos += n
            else:
                frames.append(write_frame(spill.file(0), batch, schema))
            rows += batch.num_rows
            meter.tick()
    except OverflowErrorF16 as e:
        e.part = part.index  # the row is placed by the driver, which knows the rows before the part
        raise
    finally:
        spill.close()
        nbytes = meter.close()
    files = {name: info for _b, name, info in publish(spill, ctx)}
    if ctx.buckets:
        result = {"buckets": {str(b): n for b, n in enumerate(bucket_rows) if n}, "files": files}
    else:
        result = {"frames": frames, "files": files}
    report = reader.report()  # what the reader counted (files skipped), merged for the manifest
    return {
        "phase": 1,
        "part": part.index,
        "rows": rows,
        "bytes": nbytes,
        "float16": plan.report(),
        **result,
        **({"report": report} if report else {}),
        **({"removed": plan.removed, "read": plan.rows_read} if plan.filter is not None or drops is not None else {}),
    }


def _gathered(batches: Iterator[Batch], target: int) -> Iterator[Batch]:
    """Small batches (a part of many small files gives one or more per file) gathered into batches
    of about ``target`` bytes: a frame each, not a frame per file."""
    held: list[Batch] = []
    size = 0
    for b in batches:
        if not held and b.nbytes >= target // 2:
            yield b
            continue
        held.append(b)
        size += b.nbytes
        if size >= target // 2:
            yield Batch.concat(held) if len(held) > 1 else held[0]
            held, size = [], 0
    if held:
        yield Batch.concat(held) if len(held) > 1 else held[0]


# --------------------------------------------------------------------------------------------
# phase 2: one shard
# --------------------------------------------------------------------------------------------


class _Order:
    """The global order of records, as the phase-1 journal describes it."""

    def __init__(self, ctx: Context, parts: list[dict], schema: Schema) -> None:
        self.ctx = ctx
        self.schema = schema
        self.parts = sorted(parts, key=lambda p: p["part"])
        if ctx.buckets:
            bucket_rows = [0] * ctx.buckets
            for p in self.parts:
                for b, n in p["buckets"].items():
                    bucket_rows[int(b)] += n
            self.starts = np.concatenate([[0], np.cumsum(bucket_rows)]).astype(np.int64)
        else:
            self.starts = np.concatenate([[0], np.cumsum([p["rows"] for p in self.parts])]).astype(np.int64)

    def batches(self, start: int, stop: int) -> Iterator[Batch]:
        step_bytes = max(1 << 20, self.ctx.budget() // 16)
        spans = []
        for i in range(len(self.starts) - 1):
            a, b = int(self.starts[i]), int(self.starts[i + 1])
            lo, hi = max(a, start), min(b, stop)
            if lo < hi:
                spans.append((i, a, lo, hi))
        if not self.ctx.buckets:
            for i, a, lo, hi in spans:
                yield from self._part(self.parts[i], lo - a, hi - a)
            return
        # buckets whose spill together fits a bucket's share of the budget are fetched at once: the
        # adjacent sections of each part's spill object in one ranged GET (engine/units.py)
        for group in self._groups(spans):
            got = fetch(self.ctx, [item for i, *_ in group for item in self._sections(i)])
            k = 0
            for i, a, lo, hi in group:
                n = len(self._sections(i))
                pieces, got[k : k + n] = got[k : k + n], [None] * n  # each bucket's bytes freed once used
                k += n
                batch = self._bucket(i, pieces)
                del pieces
                yield from _rechunk(batch.slice(lo - a, hi - a), step_bytes)

    def _sections(self, b: int) -> list[tuple[str, dict]]:
        """(name, journal info) of the spill of hash bucket ``b`` in each part that has rows in it."""
        out = []
        for p in self.parts:
            if p["buckets"].get(str(b)):
                name = f"u{p['part']:05d}-b{b:04d}.bin"
                out.append((name, p["files"][name]))
        return out

    def _groups(self, spans: list[tuple]) -> Iterator[list[tuple]]:
        cap = max(1, self.ctx.budget() // 4)
        group: list[tuple] = []
        held = 0
        for span in spans:
            size = sum(int(info["size"]) for _n, info in self._sections(span[0]))
            if group and held + size > cap:
                yield group
                group, held = [], 0
            group.append(span)
            held += size
        if group:
            yield group

    def _part(self, p: dict, lo: int, hi: int) -> Iterator[Batch]:
        name = f"u{p['part']:05d}.bin"
        with open_section(self.ctx, name, p["files"][name]) as f:
            pos = 0
            for offset, n in p["frames"]:
                if pos + n > lo and pos < hi:
                    batch = read_frame(f, offset, n, self.schema)
                    yield batch.slice(max(0, lo - pos), min(n, hi - pos))
                pos += n
                if pos >= hi:
                    break

    def _bucket(self, b: int, pieces: list[tuple]) -> Batch:
        frames = []
        for buf, name in pieces:
            frames.extend(frames_from_buffer(buf, self.schema, name))
        batch = Batch.concat(frames)
        del frames
        perm = np.random.default_rng([self.ctx.o.seed or 0, b]).permutation(batch.num_rows)
        return batch.take(perm)


def _rechunk(batch: Batch, step_bytes: int) -> Iterator[Batch]:
    rows = max(1, int(step_bytes // max(1, batch.nbytes / max(1, batch.num_rows))))
    for i in range(0, batch.num_rows, rows):
        yield batch.slice(i, i + rows)


@unit
def write_unit(
    ctx: Context,
    k: int,
    n_shards: int,
    start: int,
    stop: int,
    parts: list[dict] | None,
    mark: object = None,
    trial: bool = False,
) -> dict[str, Any]:
    """Write shard ``k`` (rows [start, stop) of the global order) and commit its files; ``mark``:
    where its rows are in the input, when it reads them there (see ``Reader.row_marks``);
    ``trial``: a trial shard, measured and deleted, whose files are not made durable."""
    if trial:
        with throwaway():
            return _write_shard(ctx, k, n_shards, start, stop, parts, mark)
    return _write_shard(ctx, k, n_shards, start, stop, parts, mark)


def _write_shard(
    ctx: Context, k: int, n_shards: int, start: int, stop: int, parts: list[dict] | None, mark: object
) -> dict[str, Any]:
    o = ctx.o
    plan = None
    if parts is None:  # read straight from the input (memory-mapped NPY, a tree of files)
        reader = ctx.reader()
        plan = output_plan(reader, o).at_row(start)
        schema = plan.schema
        source = map(plan.prepare, reader.row_range(start, stop, ctx.budget() // 16, mark))
    else:
        schema = Schema.from_list(ctx.out_schema)
        source = _Order(ctx, parts, schema).batches(start, stop)
    name = shard_name(k, n_shards)
    files, stats, extra = write_unit_files(
        ctx.work, k, name, schema, source, o, ctx.budget(), stop - start, plan, first_row=start
    )
    return {
        "phase": 2,
        "shard": k,
        "name": name,
        "rows": stop - start,
        "files": [f.to_dict() for f in files],
        "stats": stats.to_dict(),
        "float16": plan.report() if plan else {},
        "extra": extra,
        "stats_raw": raw(stats),
    }


# --------------------------------------------------------------------------------------------
# the job
# --------------------------------------------------------------------------------------------


@takes_options(ShardOptions)
def shard(inputs: list[str] | str, output: str, *, argv: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Write ``inputs`` as a sharded dataset directory ``output``; returns the manifest written.

    Keyword arguments are the fields of :class:`ShardOptions` (the CLI's flags).
    """
    o, inputs = ShardOptions.parse(inputs, kwargs)
    import pyarrow as pa

    # freed buffers handed back at once while the job runs, and the caller's pool put back after
    # (it was left swapped: every later allocation of the caller's pyarrow used another allocator)
    pool = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        probe = open_reader(inputs, budget=o.budget(), **o.read_kwargs())  # checks inputs and flags first
        return run_job(
            o,
            output=output,
            inputs=inputs,
            specs=probe.specs,
            sources=[s.describe() for s in probe.specs] + o.tokenizer_source(),
            body=lambda run: _run(o, run, probe),
            finish=get_format(o.to).finish_dataset,
            argv=argv,
            setup=worker_setup(),
        )
    finally:
        pa.set_memory_pool(pool)


def _run(o: ShardOptions, run: Run, probe) -> dict:
    from ..inputs.base import SchemaChanged

    direct = probe.random_rows and not o.shuffle and not (o.filter or o.dedup)
    dedup = None
    plan, journal, executor = run.plan, run.journal, run.executor
    fmt = get_format(o.to)
    while True:
        ctx = Context(run.inputs, o.to_dict(), run.work, dict(plan.get("widened", {})), 0, place=run.place)
        # the inputs as the probe resolved them (stat'ed and peeked at once, not again per pass);
        # stdin, copied into the work directory, is resolved anew
        reader = ctx.reader(specs=None if any(s.is_stdin for s in probe.specs) else probe.specs)
        try:
            out_plan = checked_plans(reader, o)
        except SchemaChanged as e:  # met reading the input once to settle its types (nothing written yet)
            plan["widened"] = {**plan.get("widened", {}), **e.widened}
            save_plan(run.work, plan)
            continue
        schema = out_plan.schema
        source = ", ".join(s.name for s in reader.specs)
        fmt.check_schema(schema, source)
        check_memory(schema, fmt, o.budget(), source)
        ctx.out_schema = schema.to_list()
        if direct:
            split = []
            total = reader.row_count()
            break
        trace("planning parts")
        parts = reader.partitions(o.part_bytes, mapper=executor.map_ordered)
        trace(f"{len(parts)} parts")
        if o.shuffle:
            est = estimate_bytes(reader)
            plan.setdefault("buckets", max(1, math.ceil(est / max(1, ctx.budget() // 4))))
            ctx.buckets = plan["buckets"]
        try:
            if o.dedup:
                from .dedup import run_dedup

                dd = dedup_of(reader, out_plan, o)
                dedup = run_dedup(ctx, parts, run, o, reader, dd, functools.partial(unit_inputs, reader))
            split = _phase1(ctx, parts, run, o, reader.progress_total(), reader)
        except SchemaChanged as e:
            plan["widened"] = {**plan.get("widened", {}), **e.widened}
            plan.pop("dedup_groups", None)  # from the scans of the narrower types: planned again
            save_plan(run.work, plan)
            journal.reset()
            drop_spill(run)
            shutil.rmtree(os.path.join(run.work, SPILL), ignore_errors=True)
            os.makedirs(os.path.join(run.work, SPILL))
            continue
        total = sum(p["rows"] for p in split)
        break
    if total == 0 and split and any(p.get("removed") for p in split):
        from .dedup import summed

        removed, read = summed(split)
        why = ", ".join(f"{n} {'by --filter' if k == 'filter' else 'as duplicates'}" for k, n in removed.items() if n)
        raise LovecraftError(f"{source}: all {read} rows were removed ({why})", hint="check --filter")
    if total == 0:
        reader.merge_reports([p.get("report") or {} for p in split or []])
        why = reader.nothing_read()
        raise LovecraftError(
            f"{source}: {why or 'empty input (no records)'}", hint="check the files" if why else "check the file"
        )
    trace(f"phase 1 done: {total} rows")
    bounds = _plan_shards(o, ctx, total, None if direct else split, run, reader)
    trace(f"{len(bounds)} shards planned")
    n = len(bounds)
    done = {e["shard"]: e for e in journal.phase(2) if e.get("of") == n}
    marks = reader.row_marks([a for a, _ in bounds] + [total]) if direct else None
    calls = [
        (ctx, k, n, a, b, None if direct else split, (marks[k], marks[k + 1]) if marks else None)
        for k, (a, b) in enumerate(bounds)
        if k not in done
    ]
    run.run_units(write_unit, calls, "writing", o.progress, done, "shard", tag={"of": n}, noun="shard")
    trace("phase 2 done")
    return _manifest(o, ctx, reader, out_plan, [done[k] for k in range(n)], split, total, dedup)


def _phase1(ctx: Context, parts: list[Part], run: Run, o: ShardOptions, input_bytes: int | None, reader) -> list[dict]:
    done = {e["part"]: e for e in usable(run, run.journal.phase(1))}
    calls = [(ctx, *unit_inputs(reader, p)) for p in parts if p.index not in done]
    try:
        run.run_units(split_unit, calls, "reading", o.progress, done, "part", input_bytes=input_bytes)
    except OverflowErrorF16 as e:
        raise _globalise(e, ctx, parts, done) from None
    return [done[p.index] for p in parts]


def _globalise(e: OverflowErrorF16, ctx: Context, parts: list[Part], done: dict) -> OverflowErrorF16:
    """Place in the input an error raised by a worker that only knew its part's rows.

    The parts before the failing one are counted (in this process) first; one of them may fail
    earlier in the input, and then its error is the one reported.
    """
    while e.row is None:
        p = e.part or 0
        try:
            for q in parts[:p]:
                if q.index not in done:
                    done[q.index] = split_unit(ctx, q)
        except OverflowErrorF16 as earlier:
            e = earlier
            continue
        e = e.at_row(sum(done[q.index]["rows"] for q in parts[:p]) + e.local_row + 1)
    return e


def _plan_shards(o: ShardOptions, ctx: Context, total: int, split, run: Run, reader) -> list[tuple[int, int]]:
    if o.num_shards is not None:
        if o.num_shards > total:
            raise SchemaError(
                f"--num-shards {o.num_shards} is more than the {total} records", hint="ask for fewer shards"
            )
        base, extra = divmod(total, o.num_shards)
        sizes = [base + (1 if k < extra else 0) for k in range(o.num_shards)]
    else:
        listed = getattr(reader, "listed_row_bytes", None)
        if o.rows_per_shard is None and split is None and listed is not None and listed() is not None:
            return _bounds_by_bytes(ctx, total, run, listed, parse_size(o.shard_size))
        if o.rows_per_shard is not None:
            per = o.rows_per_shard
        else:
            per = run.plan.get("rows_per_shard") or _rows_for_size(
                o, ctx, total, split, parse_size(o.shard_size), run, reader
            )
            run.plan["rows_per_shard"] = per
            save_plan(run.work, run.plan)
        sizes = [per] * (total // per) + ([total % per] if total % per else [])
    bounds = []
    a = 0
    for s in sizes:
        bounds.append((a, a + s))
        a += s
    return bounds


def _trial(run: Run, ctx: Context, rows: int, split) -> int:
    """The bytes of a trial shard of the first ``rows`` rows (written in a worker when there are
    workers: the main process stays small; then discarded)."""
    res = next(iter(run.executor.map(write_unit, [(ctx, 99999, 99999, 0, rows, split, None, True)])))
    discard(run.work, res)
    return sum(f["bytes"] for f in res["files"])


LISTED_OVERHEAD = 256  # bytes a row weighs beyond its listed ones (its path, a header), before scaling


def _bounds_by_bytes(ctx: Context, total: int, run: Run, listed, target: int) -> list[tuple[int, int]]:
    """``--shard-size`` for rows whose bytes the input lists (a tree of files read as they are,
    straight into the shards): each row weighs its listed bytes plus :data:`LISTED_OVERHEAD`, scaled
    by what a trial shard of the first rows (about two shards' bytes, at least 64 MiB) took per
    weight (the format's headers, its compression); the shards are cut where their rows' weight is
    nearest the target. A folder whose files' sizes vary along the listing (small files first, then
    large ones) so gets shards of the target size, where a number of rows measured on its first
    files gave shards 5x over or 10x under it. The scale is kept in the run's plan (a resumed run
    cuts the same shards); the listing is walked, not held."""
    scale = run.plan.get("bytes_per_listed_byte")
    if scale is None:
        cap, rows, weight = max(2 * target, 64 << 20), 0, 0
        for size in listed():
            rows += 1
            weight += size + LISTED_OVERHEAD
            if weight >= cap or rows >= 1 << 16:
                break
        scale = _trial(run, ctx, rows, None) / max(1, weight)
        run.plan["bytes_per_listed_byte"] = scale
        save_plan(run.work, run.plan)
    bounds: list[tuple[int, int]] = []
    a, held, k = 0, 0.0, 0
    for k, size in enumerate(listed()):
        w = scale * (size + LISTED_OVERHEAD)
        if k > a and held + w > target and target - held < held + w - target:  # nearer the target without it
            bounds.append((a, k))
            a, held = k, 0.0
        held += w
        if held >= target:
            bounds.append((a, k + 1))
            a, held = k + 1, 0.0
    if a < total:
        bounds.append((a, total))
    return bounds


def _rows_for_size(o: ShardOptions, ctx: Context, total: int, split, target: int, run: Run, reader) -> int:
    """Rows per shard for ``--shard-size``: measured by writing trial shards of the first rows.

    A sample gives bytes per row; then a trial shard of the estimated size corrects for what a
    sample misses (per-file overhead, chunk allocation, compression of a larger block).
    """

    def trial(rows: int) -> int:
        return _trial(run, ctx, rows, split)

    sample = min(total, 1 << 16)
    # rows of 100 KB (images): 65,536 of them would be the whole input written once more before
    # the first shard; a sample of about two shards' bytes (at least 64 MiB) says as much
    est = _row_bytes(reader, total, split)
    cap = max(2 * target, 64 << 20)
    capped = bool(est and sample * est > cap)
    if capped:
        sample = max(1, int(cap // est))
    per = max(1, int(round(target / (trial(sample) / sample))))
    if get_format(o.to).size_linear(o.compression) or (capped and sample >= per):
        return per  # bytes grow linearly with rows, or the sample was a shard or more: it settles it
    for _ in range(3):
        if per >= total:
            return per
        size = trial(per)
        if abs(size - target) <= 0.03 * target:
            break
        per = max(1, int(round(per * target / size)))
    return per


def _row_bytes(reader, total: int, split) -> float | None:
    """Roughly the bytes of a row: from the spilled frames (phase 1), else the reader's estimate."""
    if split:
        size = sum(int(f.get("size", 0)) for p in split for f in (p.get("files") or {}).values())
        return size / total if total and size else None
    known = reader.memory_bytes()
    return known / total if known and total else None


def _manifest(o: ShardOptions, ctx: Context, reader, out_plan, frags: list[dict], split, total: int, dedup) -> dict:
    from ..transforms.downcast import Downcast
    from .dedup import summed

    schema = out_plan.schema
    reports = [p["float16"] for p in (split or [])] + [fr["float16"] for fr in frags]
    float16 = {}
    if any(reports):
        names = next(r for r in reports if r)
        down = Downcast(schema, {k: v["target"] for k, v in names.items()}, o.on_overflow)
        for r in reports:
            if r:
                down.merge(r)
        float16 = down.report()
    fmt = get_format(o.to)
    reader.merge_reports([p.get("report") or {} for p in split or []])
    return mf.build_job(
        "shard",
        o,
        total,
        schema,
        ctx.buckets,
        shards=mf.shard_entries(frags),
        files=mf.unit_files(frags),
        stats=merged(schema, frags),
        float16=float16,
        sources=[s.describe() for s in reader.specs] + o.tokenizer_source(),
        **out_plan.tokens_extra(),
        **read_extra(reader, out_plan),
        **out_plan.removed_extra(*summed(split or []), dedup),
        **fmt.dataset_extra(schema, [fr["extra"] for fr in frags]),
    )
