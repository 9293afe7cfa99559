"""``lovecraft shard``: many shards of a controlled size, optionally globally shuffled, written by
parallel worker processes, resumable after a crash.

The run has two phases of independent units of work; each unit is a pure function of (a piece of
the input, the options) that leaves finished files in the work directory and returns a small JSON
fragment, so the same units could run on many machines.

1. *Split* (one unit per part of the input: a ~64 MiB byte range of a CSV or text file cut at a
   record boundary, a row range of NPY files, or a whole compressed input): parse, downcast, and
   spill the records to a simple frame file (a sequence of ``.npy`` arrays). With ``--shuffle``
   each record goes to one of B bucket files chosen by a seeded hash of (part, row): the scatter
   half of an external shuffle. NPY inputs that are not shuffled skip this phase: their rows are
   read straight from the memory-mapped inputs.
2. *Write* (one unit per shard): shard k holds rows [start_k, stop_k) of the global order (parts
   in input order; with ``--shuffle``, buckets in order, each permuted by a generator seeded with
   (seed, bucket)). The unit reads just those rows, writes the shard under a temporary name,
   fsyncs, and renames it to ``part-0000k-of-0000S.<ext>``.

The parts and buckets depend only on the input and the options, never on ``--workers``, so the
bytes are the same whatever the parallelism. The work directory ``.<name>.partial`` holds a
journal (``journal.jsonl``) of every committed unit and the plan; ``--resume`` skips the units in
the journal. The dataset directory appears at the output path only when complete, manifest last.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import __version__
from .errors import Interrupted, LovecraftError, OverflowErrorF16, SchemaError
from .formats import WRITERS, load
from .formats.base import Part, WriteOptions
from .output import OutputDir
from .pipeline import MANIFEST_VERSION, ConvertOptions, _SigTerm, _validate, open_reader, output_schema, write_step
from .schema import Batch, Schema, VarColumn
from .stats import BatchStats
from .util import fsync_path, parse_size

PART_BYTES = 64 << 20
JOURNAL = "journal.jsonl"
PLAN = "plan.json"


@dataclass
class ShardOptions(ConvertOptions):
    """``convert``'s options plus the sharding ones (the CLI's flags, by the same names)."""

    shard_size: int | str | None = None
    rows_per_shard: int | None = None
    num_shards: int | None = None
    shuffle: bool = False
    seed: int | None = None
    workers: int | None = None
    resume: bool = False
    part_bytes: int = PART_BYTES

    def fingerprint(self) -> dict[str, Any]:
        """What must not change between a run and its ``--resume``."""
        d = self.to_dict()
        for k in ("workers", "resume", "overwrite", "progress"):
            d.pop(k, None)
        return d


_T0 = time.time()


def _trace(msg: str) -> None:
    """Phase timings on stderr when LOVECRAFT_TRACE is set (for benchmarking)."""
    if os.environ.get("LOVECRAFT_TRACE"):
        import sys

        print(f"[{time.time() - _T0:7.2f}s] {msg}", file=sys.stderr, flush=True)


def shard_name(k: int, n: int) -> str:
    return f"part-{k:05d}-of-{n:05d}"


# --------------------------------------------------------------------------------------------
# frame files: the spill format between the phases
# --------------------------------------------------------------------------------------------


def write_frame(f, batch: Batch, schema: Schema, counted: bool = False) -> tuple[int, int]:
    """Append a batch as raw column bytes (the schema says how to read them back); ``counted``
    frames start with their row count, so a file of them can be walked without an index."""
    offset = f.tell()
    if counted:
        f.write(np.int64(batch.num_rows).tobytes())
    for fd in schema:
        col = batch.columns[fd.name]
        if isinstance(col, VarColumn):
            f.write(np.ascontiguousarray(col.offsets, dtype=np.int64).data)
            f.write(np.ascontiguousarray(col.values, dtype=fd.np_dtype if fd.kind == "sequence" else np.uint8).data)
        else:
            f.write(np.ascontiguousarray(col, dtype=fd.np_dtype).reshape(-1).view(np.uint8).data)
    return offset, batch.num_rows


def frames_from_buffer(buf: bytes, schema: Schema) -> list[Batch]:
    """The counted frames of a whole frame file already in memory (views into ``buf``)."""
    out = []
    pos = 0
    while pos < len(buf):
        rows = int(np.frombuffer(buf, dtype=np.int64, count=1, offset=pos)[0])
        pos += 8
        cols: dict[str, Any] = {}
        for fd in schema:
            if fd.variable:
                offs = np.frombuffer(buf, dtype=np.int64, count=rows + 1, offset=pos)
                pos += offs.nbytes
                vdt = fd.np_dtype if fd.kind == "sequence" else np.dtype(np.uint8)
                vals = np.frombuffer(buf, dtype=vdt, count=int(offs[-1]), offset=pos)
                pos += vals.nbytes
                cols[fd.name] = VarColumn(vals, offs)
            else:
                a = np.frombuffer(buf, dtype=fd.np_dtype, count=rows * fd.row_size, offset=pos)
                pos += a.nbytes
                cols[fd.name] = a.reshape((rows, *fd.shape))
        out.append(Batch(cols, rows))
    return out


def read_frame(f, offset: int, rows: int, schema: Schema) -> Batch:
    f.seek(offset)
    cols: dict[str, Any] = {}
    for fd in schema:
        if fd.variable:
            offs = np.fromfile(f, dtype=np.int64, count=rows + 1)
            vdt = fd.np_dtype if fd.kind == "sequence" else np.dtype(np.uint8)
            vals = np.fromfile(f, dtype=vdt, count=int(offs[-1]))
            cols[fd.name] = VarColumn(vals, offs)
        else:
            a = np.fromfile(f, dtype=fd.np_dtype, count=rows * fd.row_size)
            cols[fd.name] = a.reshape((rows, *fd.shape))
    return Batch(cols, rows)


# --------------------------------------------------------------------------------------------
# the context every unit gets (picklable, JSON-able)
# --------------------------------------------------------------------------------------------


@dataclass
class Context:
    inputs: list[str]
    options: dict[str, Any]
    work: str
    widened: dict[str, str]
    buckets: int  # 0: not shuffled
    out_schema: list[dict] | None = None

    @property
    def o(self) -> ShardOptions:
        return ShardOptions(**self.options)

    def budget(self) -> int:
        """The memory one unit may use: a quarter of --max-memory, so that up to four workers fit.

        Every size that shapes the output (batches, row groups, buckets) comes from this, never
        from the number of workers, so the bytes do not depend on --workers.
        """
        return parse_size(self.o.max_memory) // 4

    def reader(self, threads: bool = False):
        reader = open_reader(self.inputs, self.o, self.budget(), threads=threads)
        if self.widened and hasattr(reader, "widened"):
            reader.widened.update(self.widened)
            reader.schema = reader._probe()
        return reader


def _transforms(ctx: Context, reader):
    return output_schema(reader, ctx.o)


def _select(batch: Batch, names: list[str]) -> Batch:
    if list(batch.columns) == names:
        return batch
    return Batch({n: batch.columns[n] for n in names}, batch.num_rows)


def _bucket_of(seed: int, part: int, rows: np.ndarray, buckets: int) -> np.ndarray:
    """A seeded hash (splitmix64) of (part, row) modulo the bucket count."""
    x = rows.astype(np.uint64) + np.uint64((part * 0x9E3779B97F4A7C15 + seed * 0xBF58476D1CE4E5B9) % (1 << 64))
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(buckets)).astype(np.int64)


def split_unit(ctx: Context, part: Part) -> dict[str, Any]:
    """Phase 1: read one part of the input, downcast, spill to frame files (scatter when shuffling)."""
    reader = ctx.reader()
    schema, down = _transforms(ctx, reader)
    if down is not None:
        down.row_offset = part.rows[0] if part.rows else None
    names = schema.names
    spill = os.path.join(ctx.work, "spill")
    rows = 0
    seed = ctx.o.seed or 0
    if ctx.buckets:
        paths = [os.path.join(spill, f"u{part.index:05d}-b{b:04d}.bin") for b in range(ctx.buckets)]
        files = [None] * ctx.buckets
        bucket_rows = [0] * ctx.buckets
    else:
        path = os.path.join(spill, f"u{part.index:05d}.bin")
        out = open(path + ".tmp", "wb")  # noqa: SIM115
        frames_list: list = []
    try:
        yield_batches = reader.part_batches(part)
        for batch in yield_batches:
            batch = _select(batch, names) if down is None else down(_select(batch, names))
            if ctx.buckets:
                b_of = _bucket_of(seed, part.index, np.arange(rows, rows + batch.num_rows), ctx.buckets)
                order = np.argsort(b_of, kind="stable")
                counts = np.bincount(b_of, minlength=ctx.buckets)
                sorted_batch = batch.take(order)
                pos = 0
                for b in range(ctx.buckets):
                    n = int(counts[b])
                    if n:
                        if files[b] is None:
                            files[b] = open(paths[b] + ".tmp", "wb")  # noqa: SIM115
                        write_frame(files[b], sorted_batch.slice(pos, pos + n), schema, counted=True)
                        bucket_rows[b] += n
                        pos += n
            else:
                frames_list.append(write_frame(out, batch, schema))
            rows += batch.num_rows
    except OverflowErrorF16 as e:
        e.part = part.index
        raise
    finally:
        handles = [f for f in files if f is not None] if ctx.buckets else [out]
        # Spill files are not fsynced: the journal records their sizes instead, and a resumed
        # run redoes any part whose files are missing or short (a crash of the machine).
        for f in handles:
            f.close()
    if ctx.buckets:
        for b, f in enumerate(files):
            if f is not None:
                os.rename(paths[b] + ".tmp", paths[b])
        result = {
            "buckets": {str(b): n for b, n in enumerate(bucket_rows) if n},
            "files": {os.path.basename(p): os.path.getsize(p) for b, p in enumerate(paths) if files[b] is not None},
        }
    else:
        os.rename(path + ".tmp", path)
        result = {"frames": frames_list, "files": {os.path.basename(path): os.path.getsize(path)}}
    return {"phase": 1, "part": part.index, "rows": rows, "float16": down.report() if down else {}, **result}


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
            self.bucket_rows = [0] * ctx.buckets
            for p in self.parts:
                for b, n in p["buckets"].items():
                    self.bucket_rows[int(b)] += n
            self.starts = np.concatenate([[0], np.cumsum(self.bucket_rows)]).astype(np.int64)
        else:
            self.starts = np.concatenate([[0], np.cumsum([p["rows"] for p in self.parts])]).astype(np.int64)

    @property
    def total(self) -> int:
        return int(self.starts[-1])

    def batches(self, start: int, stop: int) -> Iterator[Batch]:
        step_bytes = max(1 << 20, self.ctx.budget() // 16)
        for i in range(len(self.starts) - 1):
            a, b = int(self.starts[i]), int(self.starts[i + 1])
            lo, hi = max(a, start), min(b, stop)
            if lo >= hi:
                continue
            if self.ctx.buckets:
                yield from _rechunk(self._bucket(i).slice(lo - a, hi - a), step_bytes)
            else:
                yield from self._part(self.parts[i], lo - a, hi - a)

    def _part(self, p: dict, lo: int, hi: int) -> Iterator[Batch]:
        path = os.path.join(self.ctx.work, "spill", f"u{p['part']:05d}.bin")
        with open(path, "rb") as f:
            pos = 0
            for offset, n in p["frames"]:
                if pos + n > lo and pos < hi:
                    batch = read_frame(f, offset, n, self.schema)
                    yield batch.slice(max(0, lo - pos), min(n, hi - pos))
                pos += n
                if pos >= hi:
                    break

    def _bucket(self, b: int) -> Batch:
        pieces = []
        for p in self.parts:
            if not p["buckets"].get(str(b)):
                continue
            with open(os.path.join(self.ctx.work, "spill", f"u{p['part']:05d}-b{b:04d}.bin"), "rb") as f:
                pieces.extend(frames_from_buffer(f.read(), self.schema))
        batch = Batch.concat(pieces)
        del pieces
        perm = np.random.default_rng([self.ctx.o.seed or 0, b]).permutation(batch.num_rows)
        return batch.take(perm)


def _rechunk(batch: Batch, step_bytes: int) -> Iterator[Batch]:
    rows = max(1, int(step_bytes // max(1, batch.nbytes / max(1, batch.num_rows))))
    for i in range(0, batch.num_rows, rows):
        yield batch.slice(i, i + rows)


def write_unit(ctx: Context, k: int, n_shards: int, start: int, stop: int, parts: list[dict] | None) -> dict[str, Any]:
    """Phase 2: write shard ``k`` (rows [start, stop) of the global order) and commit its files."""
    o = ctx.o
    down = None
    if parts is None:  # NPY read directly
        reader = ctx.reader()
        schema, down = _transforms(ctx, reader)
        if down is not None:
            down.row_offset = start
        names = schema.names
        step = max(1, (ctx.budget() // 16) // max(1, reader.row_bytes))
        source = (_select(b, names) for b in reader._mapped(step, start, stop))
    else:
        schema = Schema.from_list(ctx.out_schema)
        source = _Order(ctx, parts, schema).batches(start, stop)
    name = shard_name(k, n_shards)
    files, stats, extra = commit_files(ctx.work, k, name, schema, source, o, ctx.budget(), stop - start, down)
    return {
        "phase": 2,
        "shard": k,
        "name": name,
        "rows": stop - start,
        "files": [f.to_dict() for f in files],
        "stats": stats.to_dict(),
        "float16": down.report() if down else {},
        "extra": extra,
        "stats_raw": _raw_stats(stats),
    }


def commit_files(
    work: str, k: int, name: str, schema: Schema, source, o: ConvertOptions, budget: int, rows: int, down=None
) -> tuple[list, BatchStats, dict]:
    """Write the batches of ``source`` as the files of one unit named ``name`` in a private
    temporary directory, then move them into ``work`` (fsynced): a unit's files appear complete
    or not at all."""
    tmp = os.path.join(work, f".unit-{k:05d}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.mkdir(tmp)
    writer_cls = load(WRITERS, o.to)
    wopts = WriteOptions(compression=o.compression, row_group_bytes=max(4 << 20, budget // 8), expected_rows=rows)
    writer = writer_cls(tmp, name, schema, wopts)
    stats = BatchStats(schema)
    try:
        for batch in source:
            write_step(batch, down, stats, writer)
        files = writer.close()
    except BaseException:
        writer.abort()
        raise
    extra = writer.manifest_extra()
    del writer, source
    _trim()
    for f in files:
        os.rename(os.path.join(tmp, f.path), os.path.join(work, f.path))
    fsync_path(work)
    os.rmdir(tmp)
    return files, stats, extra


def _raw_stats(stats: BatchStats) -> dict:
    return {
        k: {a: getattr(v, a) for a in ("count", "min", "max", "nan", "sum", "len_min", "len_max", "len_sum")}
        for k, v in stats.columns.items()
    }


# --------------------------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------------------------


def _trim() -> None:
    """Give freed heap back to the system (glibc keeps it otherwise)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _worker_init(parent: int | None = None) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # die with the parent: a killed run must not leave workers writing into its directory
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if parent is not None and os.getppid() != parent:  # it died before the line above: follow it
        os._exit(1)
    try:
        import pyarrow as pa

        pa.set_cpu_count(1)
        pa.set_io_thread_count(1)
        # hand freed buffers back at once: a caching allocator in every worker adds up
        pa.set_memory_pool(pa.system_memory_pool())
    except ImportError:
        pass


class _Runner:
    """Runs units in-process (``workers == 1``) or in a pool of spawned processes."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool = None
        if workers > 1:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(
                workers, mp_context=mp.get_context("spawn"), initializer=_worker_init, initargs=(os.getpid(),)
            )
            for _ in range(workers):  # start the workers now: they import while the main process plans
                self.pool.submit(int)
        else:
            try:
                import pyarrow as pa

                self._cpus = pa.cpu_count()
                pa.set_cpu_count(1)
            except ImportError:
                self._cpus = None

    def map_ordered(self, fn, calls: list[tuple]) -> list:
        """Results in the order of ``calls``."""
        if self.pool is None:
            return [fn(*args) for args in calls]
        return list(self.pool.map(fn, *zip(*calls, strict=True))) if calls else []

    def map(self, fn, calls: list[tuple]) -> Iterator[dict]:
        """Yield results as units finish (any order). The first error stops everything, once the
        units already running have finished: nothing writes into the work directory while the
        caller cleans it or starts again (a type-change restart empties the spill)."""
        if self.pool is None:
            for args in calls:
                yield fn(*args)
            return
        from concurrent.futures import FIRST_COMPLETED, wait

        pending = {self.pool.submit(fn, *args) for args in calls}
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()
        except Exception:
            wait([f for f in pending if not f.cancel()])
            raise
        finally:
            for fut in pending:
                fut.cancel()

    def close(self, kill: bool = False) -> None:
        if self.pool is not None:
            if kill:
                for p in list(getattr(self.pool, "_processes", {}).values()):
                    p.kill()
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        elif getattr(self, "_cpus", None):
            import pyarrow as pa

            pa.set_cpu_count(self._cpus)


class _Journal:
    def __init__(self, work: str) -> None:
        self.path = os.path.join(work, JOURNAL)
        self.entries: list[dict] = []
        if os.path.exists(self.path):
            with open(self.path) as f:
                for line in f:
                    try:
                        self.entries.append(json.loads(line))
                    except json.JSONDecodeError:
                        break  # a torn last line: that unit is redone
        self.f = open(self.path, "a")  # noqa: SIM115

    def add(self, entry: dict) -> None:
        self.f.write(json.dumps(entry) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())
        self.entries.append(entry)

    def phase(self, n: int) -> list[dict]:
        return [e for e in self.entries if e.get("phase") == n]

    def reset(self) -> None:
        self.f.close()
        os.unlink(self.path)
        self.entries = []
        self.f = open(self.path, "a")  # noqa: SIM115

    def close(self) -> None:
        self.f.close()


def shard(inputs: list[str] | str, output: str, *, argv: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Write ``inputs`` as a sharded dataset directory ``output``; returns the manifest written.

    Keyword arguments are the fields of :class:`ShardOptions` (the CLI's flags).
    """
    o = ShardOptions(**kwargs)
    _validate(o)
    given = [x is not None for x in (o.shard_size, o.rows_per_shard, o.num_shards)]
    if sum(given) != 1:
        raise SchemaError("give exactly one of --shard-size, --rows-per-shard, --num-shards")
    if o.shuffle and o.seed is None:
        raise SchemaError("--shuffle needs --seed N", hint="the seed makes the shuffle reproducible")
    if o.rows_per_shard is not None and o.rows_per_shard < 1 or o.num_shards is not None and o.num_shards < 1:
        raise SchemaError("--rows-per-shard and --num-shards must be at least 1")
    if isinstance(inputs, str):
        inputs = [inputs]
    if "-" in inputs and o.resume:
        raise SchemaError("--resume needs file inputs, not stdin")
    budget = parse_size(o.max_memory)
    if budget < 16 << 20:
        raise SchemaError(f"--max-memory {o.max_memory} is too small", hint="give at least 16MiB")
    workers = o.workers or os.cpu_count() or 1
    started = time.time()
    try:
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())
    except ImportError:
        pass
    probe = open_reader(list(inputs), o, budget)  # checks inputs and flags before anything is written
    protect = [s.path for s in probe.specs if not s.is_stdin]
    with _SigTerm(), OutputDir(output, overwrite=o.overwrite, protect=protect, resume=o.resume) as out:
        work = out.tmp
        os.makedirs(os.path.join(work, "spill"), exist_ok=True)
        if "-" in inputs:  # workers cannot share stdin: keep a copy in the work directory
            inputs = _spool_stdin(list(inputs), work, probe)
        fingerprint = {
            "options": o.fingerprint(),
            "sources": [s.describe() for s in probe.specs],
            "version": MANIFEST_VERSION,
        }
        plan = _load_plan(work, fingerprint, out.path)
        journal = _Journal(work)
        runner = _Runner(workers)
        try:
            manifest = _run(o, inputs, work, plan, journal, runner, probe, budget)
        except KeyboardInterrupt:
            runner.close(kill=True)
            journal.close()
            out.keep = True
            done = len(journal.phase(2))
            raise Interrupted(
                f"interrupted; {done} shard{'' if done == 1 else 's'} committed in {work}",
                hint="run the same command with --resume to finish, or --overwrite to start over",
            ) from None
        except BaseException:
            runner.close(kill=True)
            journal.close()
            raise
        runner.close()
        journal.close()
        manifest.update(
            {
                "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "argv": argv,
                "seconds": round(time.time() - started, 3),
                "workers": workers,
            }
        )
        for leftover in ("spill", JOURNAL, PLAN):
            p = os.path.join(work, leftover)
            shutil.rmtree(p) if os.path.isdir(p) else os.path.exists(p) and os.unlink(p)
        out.commit(manifest)
    return manifest


def _spool_stdin(inputs: list[str], work: str, probe) -> list[str]:
    spec = next(s for s in probe.specs if s.is_stdin)
    path = os.path.join(
        work, "stdin" + {"gzip": ".gz", "bz2": ".bz2", "xz": ".xz", "zstd": ".zst"}.get(spec.compression or "", "")
    )
    src = spec.stdin_spool
    if src:
        shutil.copyfile(src, path)
    else:
        from .sources import stdin_buffer

        with open(path, "wb") as f:
            shutil.copyfileobj(stdin_buffer(), f, 4 << 20)
    return [path if x == "-" else x for x in inputs]


def _load_plan(work: str, fingerprint: dict, out_path: str) -> dict:
    path = os.path.join(work, PLAN)
    if os.path.exists(path):
        with open(path) as f:
            plan = json.load(f)
        if plan.get("fingerprint") != json.loads(json.dumps(fingerprint)):
            raise SchemaError(
                f"{out_path}: the unfinished run in {work} was made with other inputs or options",
                hint="run it with the same command and --resume, or pass --overwrite to start over",
            )
        return plan
    plan = {"fingerprint": fingerprint, "widened": {}}
    _save_plan(work, plan)
    return plan


def _save_plan(work: str, plan: dict) -> None:
    path = os.path.join(work, PLAN)
    with open(path + ".tmp", "w") as f:
        json.dump(plan, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)


def _run(o: ShardOptions, inputs, work, plan, journal: _Journal, runner: _Runner, probe, budget) -> dict:
    from .formats.csv import SchemaChanged

    direct = getattr(probe, "format", None) == "npy" and probe.mapped and not o.shuffle
    while True:
        ctx = Context(list(inputs), o.to_dict(), work, dict(plan.get("widened", {})), 0)
        reader = ctx.reader()
        schema, _ = _transforms(ctx, reader)
        source = ", ".join(s.name for s in reader.specs)
        load(WRITERS, o.to).check_schema(schema, source, getattr(reader, "format", None))
        ctx.out_schema = schema.to_list()
        _trace("planning parts")
        parts = reader.partitions(o.part_bytes, mapper=runner.map_ordered)
        _trace(f"{len(parts)} parts")
        if o.shuffle:
            est = _estimate_bytes(reader)
            ctx.buckets = max(1, math.ceil(est / max(1, ctx.budget() // 4)))
            plan.setdefault("buckets", ctx.buckets)
            ctx.buckets = plan["buckets"]
        if direct:
            split = []
            total = reader.rows
        else:
            try:
                split = _phase1(ctx, parts, journal, runner, o)
            except SchemaChanged as e:
                plan["widened"] = {**plan.get("widened", {}), **e.widened}
                _save_plan(work, plan)
                journal.reset()
                shutil.rmtree(os.path.join(work, "spill"), ignore_errors=True)
                os.makedirs(os.path.join(work, "spill"))
                continue
            total = sum(p["rows"] for p in split)
        break
    if total == 0:
        raise LovecraftError(f"{source}: empty input (no records)", hint="check the file")
    _trace(f"phase 1 done: {total} rows")
    bounds = _plan_shards(o, ctx, total, split if not direct else None, schema, plan, work, runner)
    _trace(f"{len(bounds)} shards planned")
    n = len(bounds)
    done = {e["shard"]: e for e in journal.phase(2) if e.get("of") == n}
    calls = [(ctx, k, n, a, b, None if direct else split) for k, (a, b) in enumerate(bounds) if k not in done]
    bar = _bar(o, len(calls), "writing")
    try:
        for res in runner.map(write_unit, calls):
            res["of"] = n
            journal.add(res)
            done[res["shard"]] = res
            bar.update()
    finally:
        bar.close()
    _trace("phase 2 done")
    frags = [done[k] for k in range(n)]
    return _manifest(o, ctx, reader, schema, frags, split, total)


def _intact(ctx: Context, entry: dict) -> bool:
    """Are a journalled part's spill files all there, at the sizes recorded?"""
    spill = os.path.join(ctx.work, "spill")
    for name, size in entry.get("files", {}).items():
        p = os.path.join(spill, name)
        if not os.path.exists(p) or os.path.getsize(p) != size:
            return False
    return True


def _phase1(ctx: Context, parts: list[Part], journal: _Journal, runner: _Runner, o: ShardOptions) -> list[dict]:
    done = {e["part"]: e for e in journal.phase(1) if _intact(ctx, e)}
    calls = [(ctx, p) for p in parts if p.index not in done]
    bar = _bar(o, len(calls), "reading")
    try:
        for res in runner.map(split_unit, calls):
            journal.add(res)
            done[res["part"]] = res
            bar.update()
    except OverflowErrorF16 as e:
        raise _globalise(e, ctx, parts, done) from None
    finally:
        bar.close()
    return [done[p.index] for p in parts]


def _globalise(e: OverflowErrorF16, ctx: Context, parts: list[Part], done: dict) -> OverflowErrorF16:
    """Put the global row into an error raised by a worker that only knew its part's rows.

    The parts before the failing one are counted (in this process) first; one of them may fail
    earlier in the input, and then its error is the one reported.
    """
    while "{ROW}" in e.message:
        p = getattr(e, "part", 0)
        try:
            for q in parts[:p]:
                if q.index not in done:
                    done[q.index] = split_unit(ctx, q)
        except OverflowErrorF16 as earlier:
            e = earlier
            continue
        before = sum(done[q.index]["rows"] for q in parts[:p])
        e.message = e.message.replace("{ROW}", str(before + getattr(e, "local_row", 0) + 1))
    return e


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(o: ShardOptions, total: int, desc: str):
    import sys

    enabled = sys.stderr.isatty() if o.progress is None else o.progress
    if not enabled or total == 0:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="unit", file=sys.stderr, leave=False, dynamic_ncols=True)


def _estimate_bytes(reader) -> int:
    """Roughly how many bytes the records take in memory (for the number of shuffle buckets)."""
    total = 0
    for s in reader.specs:
        size = s.size or (256 << 20)
        total += size * (6 if s.compression else 1)
    return total


def _plan_shards(
    o: ShardOptions, ctx: Context, total: int, split, schema: Schema, plan: dict, work: str, runner: _Runner
) -> list[tuple[int, int]]:
    if o.num_shards is not None:
        if o.num_shards > total:
            raise SchemaError(
                f"--num-shards {o.num_shards} is more than the {total} records", hint="ask for fewer shards"
            )
        base, extra = divmod(total, o.num_shards)
        sizes = [base + (1 if k < extra else 0) for k in range(o.num_shards)]
    else:
        if o.rows_per_shard is not None:
            per = o.rows_per_shard
        else:
            per = plan.get("rows_per_shard") or _rows_for_size(
                o, ctx, total, split, parse_size(o.shard_size), work, runner
            )
            plan["rows_per_shard"] = per
            _save_plan(work, plan)
        sizes = [per] * (total // per) + ([total % per] if total % per else [])
    bounds = []
    a = 0
    for s in sizes:
        bounds.append((a, a + s))
        a += s
    return bounds


def _rows_for_size(o: ShardOptions, ctx: Context, total: int, split, target: int, work: str, runner) -> int:
    """Rows per shard for ``--shard-size``: measured by writing trial shards of the first rows.

    A sample gives bytes per row; then a trial shard of the estimated size corrects for what a
    sample misses (per-file overhead, chunk allocation, compression of a larger block).
    """

    def trial(rows: int) -> int:  # in a worker when there are workers: the main process stays small
        res = next(iter(runner.map(write_unit, [(ctx, 99999, 99999, 0, rows, split)])))
        for f in res["files"]:
            os.unlink(os.path.join(work, f["path"]))
        return sum(f["bytes"] for f in res["files"])

    sample = min(total, 1 << 16)
    per = max(1, int(round(target / (trial(sample) / sample))))
    if o.to in ("tfrecord", "memmap") and o.compression is None:
        return per  # bytes grow linearly with rows: the sample settles it
    for _ in range(3):
        if per >= total:
            return per
        size = trial(per)
        if abs(size - target) <= 0.03 * target:
            break
        per = max(1, int(round(per * target / size)))
    return per


def merged_stats(schema: Schema, frags: list[dict]) -> dict:
    """The dataset's statistics from its units' raw ones (``stats_raw`` of each journal entry)."""
    from .stats import ColumnStats

    overall = {}
    for fd in schema:
        st = ColumnStats(fd.kind, fd.np_dtype)
        for fr in frags:
            part = ColumnStats(fd.kind, fd.np_dtype)
            for k, v in fr["stats_raw"][fd.name].items():
                setattr(part, k, v)
            st.merge(part)
        overall[fd.name] = st.to_dict()
    return overall


def _manifest(o: ShardOptions, ctx: Context, reader, schema: Schema, frags: list[dict], split, total: int) -> dict:
    from .transforms.downcast import Downcast

    overall = merged_stats(schema, frags)
    reports = [p["float16"] for p in (split or [])] + [fr["float16"] for fr in frags]
    float16 = {}
    if any(reports):
        names = next(r for r in reports if r)
        down = Downcast(schema, {k: v["target"] for k, v in names.items()}, o.on_overflow)
        for r in reports:
            if r:
                down.merge(r)
        float16 = down.report()
    extra = frags[0]["extra"] if frags else {}
    return {
        "format": "lovecraft-dataset",
        "version": MANIFEST_VERSION,
        "complete": True,
        "created_by": f"lovecraft_convert {__version__}",
        "command": "shard",
        "output_format": o.to,
        "options": o.to_dict(),
        "rows": total,
        "schema": schema.to_list(),
        "shuffle": {"seed": o.seed, "buckets": ctx.buckets} if o.shuffle else None,
        "shards": [
            {
                "index": fr["shard"],
                "name": fr["name"],
                "rows": fr["rows"],
                "files": [f["path"] for f in fr["files"]],
                "stats": fr["stats"],
            }
            for fr in frags
        ],
        "files": [{**f, "shard": fr["shard"]} for fr in frags for f in fr["files"]],
        "stats": overall,
        "float16": float16,
        "sources": [s.describe() for s in reader.specs],
        **extra,
    }
