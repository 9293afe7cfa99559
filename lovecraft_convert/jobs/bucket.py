"""``bucket``: variable-length sequences stored in length buckets, so that every training batch
drawn from one bucket carries little padding.

The run is ``shard``'s two phases on the same engine (work directory, journal, executor,
``--resume``):

1. *Split* (one unit per ~64 MiB part of the input): read lines (or CSV rows, or a dataset's
   column, :mod:`.sequences`), tokenize, apply ``--min-length``/``--max-length``, and spill the
   sequences sorted by length in grouped frames (:mod:`lovecraft_convert.engine.frames`), so any
   length range is one contiguous slice: a later unit reads exactly the bytes of its bucket.
   With ``--shuffle`` each row first goes to one of B hash buckets. Every part returns its exact
   length histogram.
2. *Plan*: the histograms add up to the exact length histogram of the input; ``--num-buckets K``
   boundaries come from :func:`~lovecraft_convert.transforms.bucketing.optimal_boundaries` (the
   fewest padded tokens), the token dtype from the vocabulary and every value seen.
3. *Write* (one unit per shard of each bucket): shard j of bucket k holds rows [a, b) of the
   bucket's order (parts in input order, shortest first within a spill frame; with ``--shuffle``
   hash buckets in order, each permuted by a generator seeded with (seed, bucket, hash bucket)).
   ``padded``: a dense ``[rows, max_length]`` column padded with ``--pad-id``; ``ragged``: the
   sequences as they are. Both carry a ``length`` column.

The manifest lists ``buckets`` (boundaries, rows, tokens, padded tokens and padding efficiency,
each bucket's shards and files) and, under ``bucketing``, the totals and the padded tokens saved
against one bucket padded to the longest sequence.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import manifest as mf
from ..engine.driver import Run, run_job
from ..engine.frames import Grouped, UnitSpill, gather_sorted, merge_hist, read_grouped, write_grouped
from ..engine.journal import SPILL
from ..engine.meter import UnitMeter
from ..engine.units import open_section, publish, spill_info, unit
from ..errors import LovecraftError, OptionsError, SchemaError
from ..formats import get as get_format
from ..formats import worker_setup
from ..inputs import Part
from ..schema import FIXED, SEQUENCE, Batch, Field, Schema, VarColumn
from ..stats import merged, raw
from ..transforms.shuffle import hash_bucket
from ..transforms.tokenize import ids_dtype, notes_of, token_description
from ..util import parse_size, trace
from .convert import write_unit_files
from .options import BucketOptions, takes_options
from .sequences import SeqContext, Sequences, drops_of, kept_counts, split_phase
from .shard import shard_name

LENGTH = "length"


def with_length(to: str, seq: Field) -> Schema:
    """The sequence column and ``length``, which a format holding sequences only leaves out (it
    stores every sequence's length itself)."""
    if FIXED in get_format(to).kinds:
        return Schema((seq, Field(LENGTH, FIXED, "<i4")))
    return Schema((seq,))


def check_layout(o: BucketOptions) -> None:
    """Refuse a layout of fixed-length rows for a format that holds sequences only."""
    fmt = get_format(o.to)
    if o.layout != "ragged" and FIXED not in fmt.kinds:
        raise OptionsError(
            f"--layout {o.layout}: {fmt.name} holds sequences as they are, not rows of one length",
            hint=f"use --layout ragged, or write the documents with `convert --to {fmt.name} --tokenizer ...`",
        )
    if o.layout == "padded" and not fmt.padded_buckets:
        raise OptionsError(
            f"--layout padded: {fmt.name} is written with one type per column for the whole dataset, and padded "
            "buckets are rows of a different length in each",
            hint="use --layout ragged (each row its own length) or --layout packed",
        )


@unit
def split_unit(ctx: SeqContext, part: Part) -> dict[str, Any]:
    """Phase 1: one part of the input, tokenized, filtered, sorted by length and spilled."""
    o = ctx.o
    src = ctx.source()
    limit = o.limit()
    B = ctx.hash_buckets
    spill = UnitSpill(os.path.join(ctx.work, SPILL), part.index, B)
    frames: list[list] = [[] for _ in range(len(spill))]
    hists: list[list] = [[] for _ in range(len(spill))]
    c = {"rows_in": 0, "rows": 0, "tokens_in": 0, "short": 0, "long": 0, "truncated": 0, "tokens_cut": 0}
    vmin = vmax = None
    dtypes: set[str] = set()
    row0 = 0
    meter = UnitMeter(ctx.work, part.index, src.progress_done)  # input bytes read, for the driver's bar
    try:
        for col, _first, _where in src.sequences(part, drops_of(ctx, part)):
            lens = np.diff(col.offsets)
            n = len(lens)
            c["rows_in"] += n
            c["tokens_in"] += int(lens.sum())
            keep = lens >= o.min_length if o.min_length else None
            if o.min_length:
                c["short"] += int(n - keep.sum())
            if limit is not None:
                over = lens > limit
                if keep is not None:
                    over &= keep
                if o.drop_longer or (not o.truncate):
                    c["long"] += int(over.sum())
                    keep = ~over if keep is None else keep & ~over
                else:
                    c["truncated"] += int(over.sum())
                    c["tokens_cut"] += int((lens[over] - limit).sum())
                    lens = np.minimum(lens, limit)
            idx = np.flatnonzero(keep) if keep is not None else np.arange(n)
            kl = lens[idx]
            starts = col.offsets[:-1][idx]
            if B:
                b_of = hash_bucket(o.seed or 0, part.index, row0 + idx, B)
                order = np.argsort(b_of * (int(kl.max(initial=0)) + 1) + kl, kind="stable")
                b_sorted = b_of[order]
            else:
                order = np.argsort(kl, kind="stable")
            sl = kl[order]
            ss = starts[order]
            dtypes.add(col.values.dtype.str)
            cuts = np.searchsorted(b_sorted, np.arange(B + 1)) if B else np.array([0, len(sl)])
            for b in range(len(spill)):
                a, z = int(cuts[b]), int(cuts[b + 1])
                if a == z:
                    continue
                piece = sl[a:z]
                values = gather_sorted(col.values, ss[a:z], piece)  # lengths ascend within a hash bucket
                if values.size:
                    lo, hi = values.min(), values.max()
                    vmin = lo if vmin is None else min(vmin, lo)
                    vmax = hi if vmax is None else max(vmax, hi)
                frames[b].append(write_grouped(spill.file(b), piece, values))
                u, first = np.unique(piece, return_index=True)
                hists[b].append((u, np.diff(np.append(first, len(piece)))))
            c["rows"] += len(idx)
            row0 += n
            meter.tick()
    finally:
        spill.close()
        nbytes = meter.close()
    files = {}
    for b, name, info in publish(spill, ctx):
        u, cnt = merge_hist(hists[b])
        files[name] = {"b": b, **info, "frames": frames[b], "hist": [u.tolist(), cnt.tolist()]}
    return {
        "phase": 1,
        "part": part.index,
        "bytes": nbytes,
        **c,
        "min": None if vmin is None else vmin.item(),
        "max": None if vmax is None else vmax.item(),
        "dtypes": sorted(dtypes),
        "files": files,
        **kept_counts(src, ctx),
    }


def _emit(pieces: Iterator, width: int | None, pad, dtype: np.dtype, column: str, step_bytes: int) -> Iterator[Batch]:
    """Output batches (bounded bytes) from Grouped or VarColumn pieces."""
    isz = dtype.itemsize
    for piece in pieces:
        if isinstance(piece, Grouped):
            n = piece.rows
            per = max(1, step_bytes // max(1, (width or int(piece.uniq.max(initial=1))) * isz))
            for r in range(0, n, per):
                g = piece.slice(r, min(n, r + per)) if n > per else piece
                lens = g.lengths().astype(np.int32)
                col = g.dense(width, pad, dtype) if width is not None else g.to_var()
                yield Batch({column: col, LENGTH: lens}, len(lens))
        else:
            lens_all = np.diff(piece.offsets)
            n = len(lens_all)
            per = max(1, step_bytes // max(1, (width or int(lens_all.max(initial=1))) * isz))
            for r in range(0, n, per):
                v = piece.slice(r, min(n, r + per)) if n > per else piece
                lens = np.diff(v.offsets)
                if width is not None:
                    dense = np.full((len(lens), width), pad, dtype=dtype)
                    dense[np.arange(width)[None, :] < lens[:, None]] = v.values[v.offsets[0] : v.offsets[-1]]
                    col = dense
                else:
                    col = VarColumn(v.values[v.offsets[0] : v.offsets[-1]], v.offsets - v.offsets[0])
                yield Batch({column: col, LENGTH: lens.astype(np.int32)}, len(lens))


def _pieces(ctx: SeqContext, unit: dict, dtype: np.dtype) -> Iterator:
    """The rows [a, b) of one bucket, in the bucket's order."""
    lo, hi, a, b = unit["lo"], unit["hi"], unit["a"], unit["b"]
    pos = 0
    if not ctx.hash_buckets:
        for name, frames, count, info in unit["files"]:
            if pos + count <= a:
                pos += count
                continue
            if pos >= b:
                break
            with open_section(ctx, name, info, sequential=False) as f:
                for offset, _rows in frames:
                    g = read_grouped(f, offset, lo, hi, dtype)
                    m = g.rows
                    if m and pos + m > a and pos < b:
                        yield g.slice(max(0, a - pos), min(m, b - pos))
                    pos += m
                    if pos >= b:
                        break
        return
    seed = ctx.o.seed or 0
    for hb, group in enumerate(unit["groups"]):
        count = sum(cnt for _n, _f, cnt, _i in group)
        if pos + count <= a or count == 0:
            pos += count
            continue
        if pos >= b:
            break
        pieces = []
        for name, frames, _cnt, info in group:
            with open_section(ctx, name, info, sequential=False) as f:
                for offset, _rows in frames:
                    g = read_grouped(f, offset, lo, hi, dtype)
                    if g.rows:
                        pieces.append(g.to_var())
        col = VarColumn.concat(pieces) if len(pieces) > 1 else pieces[0]
        del pieces
        perm = np.random.default_rng([seed, unit["bucket"], hb]).permutation(len(col))
        r0, r1 = max(0, a - pos), min(count, b - pos)
        yield col.take(perm[r0:r1])
        pos += count


@unit
def write_unit(ctx: SeqContext, unit: dict) -> dict[str, Any]:
    """Phase 2: shard ``j`` of bucket ``k``, committed as finished files."""
    o = ctx.o
    dtype = np.dtype(unit["dtype"])
    width = unit["hi"] if o.layout == "padded" else None
    column = unit["column"]
    if width is not None:
        schema = Schema((Field(column, FIXED, dtype.str, (width,)), Field(LENGTH, FIXED, "<i4")))
    else:
        schema = with_length(o.to, Field(column, SEQUENCE, dtype.str))
    pad = np.array(o.pad_id).astype(dtype)
    step = max(1 << 20, ctx.budget() // 16)
    source = _emit(_pieces(ctx, unit, dtype), width, pad, dtype, column, step)
    rows = unit["b"] - unit["a"]
    files, stats, extra = write_unit_files(
        ctx.work, unit["id"], unit["name"], schema, source, o, ctx.budget(), rows, widths_vary=width is not None
    )
    return {
        "phase": 2,
        "unit": unit["id"],
        "bucket": unit["bucket"],
        "shard": unit["shard"],
        "name": unit["name"],
        "rows": unit["b"] - unit["a"],
        "files": [f.to_dict() for f in files],
        "stats": stats.to_dict(),
        "stats_raw": raw(stats),
        "extra": extra,
    }


@takes_options(BucketOptions)
def bucket(inputs: list[str] | str, output: str, *, argv: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Write ``inputs`` as a length-bucketed dataset directory ``output``; returns the manifest.

    Keyword arguments are the fields of :class:`BucketOptions` (the CLI's flags).
    """
    o, inputs = BucketOptions.parse(inputs, kwargs)
    check_layout(o)
    probe = Sequences(inputs, o, o.budget() // 4, threads=True)  # checks inputs and flags first
    body = _run
    if o.layout == "packed":
        from .packed import run_packed as body
    return run_job(
        o,
        output=output,
        inputs=inputs,
        specs=probe.specs,
        sources=probe.describe_sources() + o.tokenizer_source(),
        body=lambda run: body(o, run, probe),
        command="bucket",
        protect_more=(os.path.abspath(probe.dataset),) if probe.dataset is not None else (),
        finish=get_format(o.to).finish_dataset,
        unit_noun="bucket shard" if o.layout != "packed" else "shard",
        argv=argv,
        setup=worker_setup(),
    )


def _estimate(probe: Sequences) -> int:
    """Bytes the sequences take spilled (for the number of hash buckets)."""
    est = sum((s.size or (256 << 20)) * (6 if s.compression else 1) for s in probe.specs) if probe.specs else 0
    if probe.dataset is not None:
        est = sum(f["bytes"] for f in probe.ds.manifest["files"])
    elif probe.memory_bytes() is not None:
        est = probe.memory_bytes()
    return est * (4 if probe.tokenizer is not None and probe.tokenizer.spill_dtype.itemsize == 4 else 1)


def _run(o: BucketOptions, run: Run, probe: Sequences) -> dict:
    journal = run.journal
    ctx, split = split_phase(o, run, probe, split_unit, _estimate)
    layout = _plan_buckets(o, probe, split, ctx)
    units = layout["units"]
    finished = {e["unit"]: e for e in journal.phase(2)}
    run.run_units(
        write_unit,
        [(ctx, u) for u in units if u["id"] not in finished],
        "writing",
        o.progress,
        finished,
        "unit",
        noun="shard",
    )
    trace("phase 2 done")
    return _manifest(o, probe, layout, [finished[u["id"]] for u in units], split, ctx.dedup)


def _choose_dtype(o: BucketOptions, probe: Sequences, split: list[dict]) -> np.dtype:
    mins = [p["min"] for p in split if p["min"] is not None]
    maxs = [p["max"] for p in split if p["max"] is not None]
    lo = min(mins) if mins else 0
    hi = max(maxs) if maxs else 0
    pad = o.pad_id
    if probe.tokenizer is not None:  # token ids: the smallest of uint8/uint16/int32 for the vocabulary
        return ids_dtype(lo, hi, probe.tokenizer.vocab_size, pad)
    dts = sorted({d for p in split for d in p["dtypes"]})
    dt = np.result_type(*[np.dtype(d) for d in dts]) if dts else np.dtype(np.int64)
    as_dt = np.array(pad).astype(dt)
    if as_dt.item() != pad:
        raise SchemaError(f"--pad-id {pad} does not fit the values' dtype {dt}", hint="choose a pad value that does")
    return dt


def _plan_buckets(o: BucketOptions, probe: Sequences, split: list[dict], ctx: SeqContext) -> dict:
    from ..transforms.bucketing import optimal_boundaries

    hist = merge_hist(
        [
            (np.array(f["hist"][0], np.int64), np.array(f["hist"][1], np.int64))
            for p in split
            for f in p["files"].values()
        ]
    )
    values, counts = hist
    total = int(counts.sum())
    rows_in = sum(p["rows_in"] for p in split)
    if rows_in == 0:
        raise LovecraftError(f"{probe.name}: empty input (no sequences)", hint="check the file")
    if total == 0:
        raise LovecraftError(
            f"{probe.name}: all {rows_in} sequences were dropped by --min-length/--max-length",
            hint="loosen the limits",
        )
    longest = int(values[-1])
    if o.boundaries is not None:
        bounds = [b for b in o.boundaries]
        if longest > bounds[-1]:
            bounds.append(longest)  # the rest: one more bucket up to the longest sequence
    else:
        bounds = optimal_boundaries((values, counts), o.num_buckets)
        # a bucket is at least one wide (formats cannot all hold zero-width rows): empty
        # sequences share the first bucket with length 1
        bounds = sorted({max(1, b) for b in bounds})
    dtype = _choose_dtype(o, probe, split)
    per_rows = o.rows_per_shard
    if o.shard_size is not None:
        row_bytes_unit = dtype.itemsize
        per_rows = None
        target = parse_size(o.shard_size)
    buckets = []
    lo = 0
    for k, hi in enumerate(bounds):
        sel = (values >= lo) & (values <= hi)
        n = int(counts[sel].sum())
        tokens = int((values[sel] * counts[sel]).sum())
        if n:
            buckets.append(
                {
                    "index": k,
                    "min_length": lo,
                    "max_length": int(hi),
                    "rows": n,
                    "tokens": tokens,
                    "padded": n * int(hi),
                }
            )
        lo = int(hi) + 1
    units = []
    uid = 0
    for bk in buckets:
        n = bk["rows"]
        if o.num_shards is not None:
            m = min(o.num_shards, n)
            base, extra = divmod(n, m)
            sizes = [base + (1 if i < extra else 0) for i in range(m)]
        else:
            if o.shard_size is not None:
                width = bk["max_length"] if o.layout == "padded" else bk["tokens"] / n
                per = max(1, int(target // max(1.0, width * row_bytes_unit + 4)))
            else:
                per = per_rows or n
            sizes = [per] * (n // per) + ([n % per] if n % per else [])
        a = 0
        for j, s in enumerate(sizes):
            stem = f"bucket-{bk['index']:05d}"
            if len(sizes) > 1:
                stem += "-" + shard_name(j, len(sizes))
            unit = {
                "id": uid,
                "bucket": bk["index"],
                "shard": j,
                "of": len(sizes),
                "name": stem,
                "lo": bk["min_length"],
                "hi": bk["max_length"],
                "a": a,
                "b": a + s,
                "dtype": dtype.str,
                "column": probe.column,
            }
            unit.update(_unit_files(ctx, split, bk["min_length"], bk["max_length"]))
            units.append(unit)
            uid += 1
            a += s
    return {
        "bounds": [int(b) for b in bounds],
        "buckets": buckets,
        "units": units,
        "dtype": dtype,
        "hist": hist,
        "hash_buckets": ctx.hash_buckets,
    }


def _count(hist: list, lo: int, hi: int) -> int:
    v = np.asarray(hist[0], dtype=np.int64)
    c = np.asarray(hist[1], dtype=np.int64)
    return int(c[(v >= lo) & (v <= hi)].sum())


def _unit_files(ctx: SeqContext, split: list[dict], lo: int, hi: int) -> dict:
    """The spill files a unit of lengths [lo, hi] reads: (name, frames, rows, where it is)."""
    if not ctx.hash_buckets:
        files = []
        for p in split:
            for name, f in p["files"].items():
                cnt = _count(f["hist"], lo, hi)
                if cnt:
                    files.append((name, f["frames"], cnt, spill_info(f)))
        return {"files": files}
    groups: list[list] = [[] for _ in range(ctx.hash_buckets)]
    for p in split:
        for name, f in p["files"].items():
            cnt = _count(f["hist"], lo, hi)
            if cnt:
                groups[f["b"]].append((name, f["frames"], cnt, spill_info(f)))
    return {"groups": groups}


def _manifest(
    o: BucketOptions, probe: Sequences, layout: dict, frags: list[dict], split: list[dict], dedup: dict | None = None
) -> dict:
    from .dedup import summed

    fmt = get_format(o.to)
    dtype = layout["dtype"]
    column = probe.column
    schema = with_length(o.to, Field(column, SEQUENCE, dtype.str))
    by_bucket: dict[int, list[dict]] = {}
    for fr in frags:
        by_bucket.setdefault(fr["bucket"], []).append(fr)
    values, counts = layout["hist"]
    total_rows = int(counts.sum())
    tokens = int((values * counts).sum())
    longest = int(values[-1])
    buckets = []
    padded_total = 0
    for bk in layout["buckets"]:
        shards = sorted(by_bucket[bk["index"]], key=lambda fr: fr["shard"])
        files = [f["path"] for fr in shards for f in fr["files"]]
        padded_total += bk["padded"]
        entry = {
            "index": bk["index"],
            "min_length": bk["min_length"],
            "max_length": bk["max_length"],
            "layout": o.layout,
            "rows": bk["rows"],
            "tokens": bk["tokens"],
            "padded_tokens": bk["padded"],
            "padding_efficiency": round(bk["tokens"] / bk["padded"], 6) if bk["padded"] else 1.0,
            "files": files,
            "shards": [
                {"index": fr["shard"], "name": fr["name"], "rows": fr["rows"], "files": [f["path"] for f in fr["files"]], "stats": fr["stats"]}
                for fr in shards
            ],
        }  # fmt: skip
        entry.update(fmt.bucket_extra(shards[0]["extra"]))
        buckets.append(entry)
    single = total_rows * max(1, longest)  # one bucket, at least one wide as every bucket is
    c = {k: sum(p[k] for p in split) for k in ("rows_in", "short", "long", "truncated", "tokens_cut")}
    bucketing = {
        "boundaries": layout["bounds"],
        "layout": o.layout,
        "pad_id": o.pad_id,
        "dtype": dtype.name,
        "tokenizer": token_description(probe.tokenizer, dtype.name),
        "input_sequences": c["rows_in"],
        "dropped_shorter": c["short"],
        "dropped_longer": c["long"],
        "truncated": c["truncated"],
        "tokens_removed_by_truncation": c["tokens_cut"],
        "rows": total_rows,
        "tokens": tokens,
        "longest": longest,
        "padded_tokens": padded_total,
        "padding_efficiency": round(tokens / padded_total, 6) if padded_total else 1.0,
        "single_bucket_padded_tokens": single,
        "padded_tokens_saved": single - padded_total,
        "length_histogram": [values.tolist(), counts.tolist()],
    }
    return mf.build_job(
        "bucket",
        o,
        total_rows,
        schema,
        layout["hash_buckets"],
        buckets=buckets,
        bucketing=bucketing,
        files=mf.unit_files(frags, ("bucket", "shard")),
        stats=merged(schema, frags),
        float16={},
        sources=probe.describe_sources() + o.tokenizer_source(),
        **notes_of(probe.tokenizer),
        **fmt.dataset_extra(schema, [fr["extra"] for fr in frags]),
        **probe.keep.extra(*summed(split), dedup),
    )
