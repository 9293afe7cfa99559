"""``bucket --layout packed --seq-len L``: every sequence (with its ``--bos``/``--eos``) concatenated,
in input order or in a seeded document order (``--shuffle --seed``), cut into rows of exactly L
tokens. The last partial row is dropped and counted in the manifest, or padded with ``--pad-id``
(``--pad-last``). Each row records where its documents start (``doc_starts``: positions 0..L-1,
ascending; a row inside one long document has none), so a training loop can keep attention within
documents.

The run is ``bucket``'s on the same engine (work directory, journal, executor, ``--resume``):

1. *Split* (one unit per part of the input): sequences read and tokenized (:mod:`.sequences`),
   spilled in input order as plain frames (each document's offsets and its tokens); with
   ``--shuffle`` each document goes to one of B hash-bucket files, chosen by a seeded hash of
   (part, document). Each part returns its documents, tokens and value range.
2. *Plan*: the token stream is the parts' frames in order (shuffled: the hash buckets in order,
   each one's documents permuted by a generator seeded with (seed, bucket)); T tokens make T // L
   rows (one more with ``--pad-last``), split into shards by ``--num-shards``, ``--rows-per-shard``
   or ``--shard-size`` (one shard without them).
3. *Write* (one unit per shard): rows [a, b) are tokens [a L, b L) of the stream; the unit reads
   the frames that cover them (a shuffled hash bucket whole: each is a fraction of the budget) and
   cuts rows in batches of bounded size.

Shards are ``part-00000-of-00004.<ext>`` with columns ``tokens`` (``[rows, L]``) and ``doc_starts``
(a sequence column, int32). Parts, hash buckets and batch sizes come from the input and the
options only, so the bytes do not depend on ``--workers``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import manifest as mf
from ..engine.driver import Run
from ..engine.frames import UnitSpill, frame_from_buffer, read_frame, write_frame
from ..engine.journal import SPILL
from ..engine.meter import UnitMeter
from ..engine.units import fetch, open_section, publish, spill_info, unit
from ..errors import LovecraftError, SchemaError
from ..formats import get as get_format
from ..inputs import Part
from ..schema import FIXED, SEQUENCE, Batch, Field, Schema, VarColumn
from ..stats import merged, raw
from ..transforms.shuffle import hash_bucket
from ..transforms.tokenize import ids_dtype, notes_of, token_description
from ..util import parse_size
from .convert import write_unit_files
from .options import BucketOptions
from .sequences import SeqContext, Sequences, drops_of, kept_counts, split_phase
from .shard import shard_name

TOKENS = "tokens"
DOC_STARTS = "doc_starts"


def _frame_schema(dtype: str) -> Schema:
    return Schema((Field("s", SEQUENCE, dtype),))


# --------------------------------------------------------------------------------------------
# phase 1: one part, in input order
# --------------------------------------------------------------------------------------------


@unit
def split_unit(ctx: SeqContext, part: Part) -> dict[str, Any]:
    """Read and tokenize one part; spill its documents in input order (or to hash buckets)."""
    o = ctx.o
    B = ctx.hash_buckets
    spill = UnitSpill(os.path.join(ctx.work, SPILL), part.index, B)
    frames: list[list] = [[] for _ in range(len(spill))]
    docs = tokens = row0 = 0
    vmin = vmax = None
    dtypes: set[str] = set()
    src = ctx.source()
    meter = UnitMeter(ctx.work, part.index, src.progress_done)  # input bytes read, for the driver's bar
    try:
        for col, _first, _where in src.sequences(part, drops_of(ctx, part)):
            offs = np.asarray(col.offsets, dtype=np.int64)
            col = VarColumn(np.asarray(col.values)[offs[0] : offs[-1]], offs - offs[0])
            n = len(col)
            if col.values.size:
                lo, hi = col.values.min(), col.values.max()
                vmin = lo if vmin is None else min(vmin, lo)
                vmax = hi if vmax is None else max(vmax, hi)
            dt = col.values.dtype.str
            dtypes.add(dt)
            if B:
                b_of = hash_bucket(o.seed or 0, part.index, np.arange(row0, row0 + n), B)
                order = np.argsort(b_of, kind="stable")
                col_sorted = col.take(order)
                cuts = np.searchsorted(b_of[order], np.arange(B + 1))
            else:
                col_sorted, cuts = col, np.array([0, n])
            for b in range(len(spill)):
                a, z = int(cuts[b]), int(cuts[b + 1])
                if a == z:
                    continue
                piece = col_sorted.slice(a, z)
                offset, rows = write_frame(spill.file(b), Batch({"s": piece}, z - a), _frame_schema(dt))
                frames[b].append([offset, rows, int(piece.offsets[-1]), dt])
            docs += n
            tokens += int(offs[-1] - offs[0])
            row0 += n
            meter.tick()
    finally:
        spill.close()
        nbytes = meter.close()
    files = {name: {"b": b, **info, "frames": frames[b]} for b, name, info in publish(spill, ctx)}
    return {
        "phase": 1,
        "part": part.index,
        "docs": docs,
        "tokens": tokens,
        "min": None if vmin is None else vmin.item(),
        "max": None if vmax is None else vmax.item(),
        "dtypes": sorted(dtypes),
        "files": files,
        "bytes": nbytes,
        **kept_counts(src, ctx),
    }


# --------------------------------------------------------------------------------------------
# phase 2: one shard of rows
# --------------------------------------------------------------------------------------------


def _group_docs(ctx: SeqContext, group: dict, dtype: np.dtype) -> VarColumn:
    """Every document of a group's frames, in order, as ``dtype`` (its spill files fetched whole,
    at once)."""
    got = fetch(ctx, [(name, info) for name, _frames, info in group["files"]])
    pieces = []
    for (_name, frames, _info), (buf, where) in zip(group["files"], got, strict=True):
        for offset, rows, _tokens, dt in frames:
            col = frame_from_buffer(buf, offset, rows, _frame_schema(dt), where).columns["s"]
            pieces.append(VarColumn(col.values.astype(dtype, copy=False), col.offsets))
    del got
    return VarColumn.concat(pieces) if len(pieces) > 1 else pieces[0]


def _stream(ctx: SeqContext, unit: dict, dtype: np.dtype, lo: int, hi: int, step: int) -> Iterator[tuple]:
    """Tokens [lo, hi) of the stream in pieces of at most about ``step`` tokens, as (tokens, the
    stream positions where documents start among them)."""
    seed = ctx.o.seed or 0
    for group in unit["groups"]:
        g0 = group["start"]
        if group.get("hb") is None:  # in input order: only the frames that overlap
            pos = g0
            for name, frames, info in group["files"]:
                with open_section(ctx, name, info) as f:
                    for offset, rows, tokens, dt in frames:
                        a, z = max(lo, pos), min(hi, pos + tokens)
                        if a < z:
                            col = read_frame(f, offset, rows, _frame_schema(dt)).columns["s"]
                            yield from _cut(col, pos, a, z, dtype, step)
                        pos += tokens
                        if pos >= hi:
                            return
            continue
        col = _group_docs(ctx, group, dtype)  # shuffled: the whole hash bucket, its documents permuted
        perm = np.random.default_rng([seed, group["hb"]]).permutation(len(col))
        lens = np.diff(col.offsets)[perm]
        ends = np.cumsum(lens)
        a, z = max(lo, g0) - g0, min(hi, g0 + group["tokens"]) - g0
        first = int(np.searchsorted(ends, a, side="right"))
        last = int(np.searchsorted(ends, z, side="left")) + 1
        i = first
        gather = max(1, step // 8)  # a gather's index arrays take 16 bytes per token
        while i < min(last, len(perm)):  # a bounded run of documents at a time
            base = int(ends[i - 1]) if i else 0
            j = max(i + 1, int(np.searchsorted(ends, base + gather, side="right")))
            j = min(j, last, len(perm))
            piece = col.take(perm[i:j])
            yield from _cut(piece, g0 + base, g0 + max(a, base), g0 + min(z, int(ends[j - 1])), dtype, step)
            i = j


def _cut(col: VarColumn, pos: int, a: int, z: int, dtype: np.dtype, step: int) -> Iterator[tuple]:
    """Tokens [a, z) of ``col``, whose first token is at stream position ``pos``."""
    offs = np.asarray(col.offsets, dtype=np.int64)
    starts = pos + offs[:-1][np.diff(offs) > 0]  # empty documents start nowhere
    for s in range(a, z, step):
        e = min(z, s + step)
        vals = np.asarray(col.values[s - pos : e - pos], dtype=dtype)
        yield vals, starts[(starts >= s) & (starts < e)]


def _rows(pieces: Iterator[tuple], L: int, first: int, rows: int, pad, dtype, per: int) -> Iterator[Batch]:
    """Batches of ``per`` rows (the last fewer) of L tokens from the stream pieces, the first row
    starting at stream position ``first``; tokens left over for less than a row make the last row,
    padded with ``pad`` (``--pad-last``: only the unit of the last row gets them)."""
    buf: list[np.ndarray] = []
    sts: list[np.ndarray] = []
    have = done = 0

    def emit(vals: np.ndarray, starts: np.ndarray, k: int) -> Batch:
        p0 = first + done * L
        bounds = np.searchsorted(starts, p0 + np.arange(k + 1, dtype=np.int64) * L)
        rel = ((starts - p0) % L).astype(np.int32)
        return Batch({TOKENS: vals.reshape(k, L), DOC_STARTS: VarColumn(rel, bounds - bounds[0])}, k)

    def take(k: int) -> Batch:
        nonlocal buf, sts, have, done
        allv, alls = np.concatenate(buf), np.concatenate(sts)
        cut = int(np.searchsorted(alls, first + (done + k) * L))
        out = emit(allv[: k * L], alls[:cut], k)
        buf, sts, have = [allv[k * L :]], [alls[cut:]], len(allv) - k * L
        done += k
        return out

    for vals, starts in pieces:
        buf.append(vals)
        sts.append(starts)
        have += len(vals)
        while have >= per * L and done < rows:
            yield take(min(per, rows - done))
    k = min(have // L, rows - done)
    if k:
        yield take(k)
    if done < rows:  # the padded last row (--pad-last)
        allv = np.concatenate(buf) if buf else np.zeros(0, dtype)
        alls = np.concatenate(sts) if sts else np.zeros(0, np.int64)
        row = np.full(L, pad, dtype=dtype)
        row[: len(allv)] = allv
        yield emit(row, alls, 1)


@unit
def write_unit(ctx: SeqContext, unit: dict) -> dict[str, Any]:
    """Phase 2: shard ``k`` (rows [a, b)), committed as finished files."""
    o = ctx.o
    L = o.seq_len
    dtype = np.dtype(unit["dtype"])
    schema = packed_schema(L, dtype)
    step_bytes = max(1 << 20, ctx.budget() // 16)
    per = max(1, step_bytes // (L * dtype.itemsize))
    a, b, total = unit["a"], unit["b"], unit["total"]
    lo, hi = a * L, min(b * L, total)
    pieces = _stream(ctx, unit, dtype, lo, hi, max(L, step_bytes // dtype.itemsize))
    pad = np.array(o.pad_id).astype(dtype)
    source = _rows(pieces, L, lo, b - a, pad, dtype, per)
    files, stats, extra = write_unit_files(ctx.work, unit["id"], unit["name"], schema, source, o, ctx.budget(), b - a)
    return {
        "phase": 2,
        "shard": unit["id"],
        "name": unit["name"],
        "rows": b - a,
        "files": [f.to_dict() for f in files],
        "stats": stats.to_dict(),
        "stats_raw": raw(stats),
        "extra": extra,
    }


def packed_schema(L: int, dtype: np.dtype) -> Schema:
    return Schema((Field(TOKENS, FIXED, dtype.str, (L,)), Field(DOC_STARTS, SEQUENCE, "<i4")))


# --------------------------------------------------------------------------------------------
# the job
# --------------------------------------------------------------------------------------------


def run_packed(o: BucketOptions, run: Run, probe: Sequences) -> dict:
    """The body of ``bucket --layout packed`` (run by :func:`.bucket.bucket`): documents spilled
    by part, then cut into rows of ``--seq-len`` tokens by shard."""
    journal = run.journal
    ctx, split = split_phase(o, run, probe, split_unit, _estimate)
    layout = _plan(o, probe, split, ctx)
    units = layout["units"]
    finished = {e["shard"]: e for e in journal.phase(2) if e.get("of") == len(units)}
    calls = [(ctx, u) for u in units if u["id"] not in finished]
    run.run_units(write_unit, calls, "writing", o.progress, finished, "shard", tag={"of": len(units)}, noun="shard")
    return _manifest(o, probe, layout, [finished[u["id"]] for u in units], split, ctx.dedup)


def _estimate(probe: Sequences) -> int:
    """Bytes the documents take spilled (for the number of hash buckets)."""
    if probe.dataset is not None:
        return sum(f["bytes"] for f in probe.ds.manifest["files"])
    est = sum((s.size or (256 << 20)) * (6 if s.compression else 1) for s in probe.specs)
    return est * (probe.tokenizer.dtype.itemsize if probe.tokenizer is not None else 1)  # a token per byte at most


def _choose_dtype(o: BucketOptions, probe: Sequences, split: list[dict]) -> np.dtype:
    mins = [p["min"] for p in split if p["min"] is not None]
    maxs = [p["max"] for p in split if p["max"] is not None]
    lo, hi = (min(mins) if mins else 0), (max(maxs) if maxs else 0)
    pad = o.pad_id if o.pad_last else 0
    if probe.tokenizer is not None:  # token ids: the smallest of uint8/uint16/int32 for the vocabulary
        return ids_dtype(lo, hi, probe.tokenizer.vocab_size, pad)
    dts = sorted({d for p in split for d in p["dtypes"]})
    dt = np.result_type(*[np.dtype(d) for d in dts]) if dts else np.dtype(np.int64)
    if np.array(pad).astype(dt).item() != pad:
        raise SchemaError(f"--pad-id {pad} does not fit the values' dtype {dt}", hint="choose a pad value that does")
    return dt


def _plan(o: BucketOptions, probe: Sequences, split: list[dict], ctx: SeqContext) -> dict:
    L = o.seq_len
    groups = []
    if ctx.hash_buckets:
        for hb in range(ctx.hash_buckets):
            files = [(n, f["frames"], spill_info(f)) for p in split for n, f in p["files"].items() if f["b"] == hb]
            groups.append({"hb": hb, "files": files, "tokens": sum(fr[2] for _, frs, _i in files for fr in frs)})
    else:
        for p in split:
            files = [(n, f["frames"], spill_info(f)) for n, f in p["files"].items()]
            groups.append({"hb": None, "files": files, "tokens": p["tokens"]})
    pos = 0
    for g in groups:
        g["start"] = pos
        pos += g["tokens"]
    total, docs = pos, sum(p["docs"] for p in split)
    if docs == 0:
        raise LovecraftError(f"{probe.name}: empty input (no sequences)", hint="check the file")
    full, rem = divmod(total, L)
    rows = full + (1 if o.pad_last and rem else 0)
    if rows == 0:
        raise LovecraftError(
            f"{probe.name}: all {total} tokens are fewer than one row of --seq-len {L}",
            hint="lower --seq-len, or pass --pad-last to pad the one row",
        )
    dtype = _choose_dtype(o, probe, split)
    sizes = _shard_sizes(o, rows, L * dtype.itemsize + 8 + 4 * docs / rows)
    units, a = [], 0
    for k, n in enumerate(sizes):
        lo, hi = a * L, min((a + n) * L, total)
        mine = [g for g in groups if g["tokens"] and g["start"] < hi and g["start"] + g["tokens"] > lo]
        name = shard_name(k, len(sizes))
        units.append({"id": k, "name": name, "a": a, "b": a + n, "total": total, "dtype": dtype.str, "groups": mine})
        a += n
    return {
        "units": units,
        "dtype": dtype,
        "tokens": total,
        "docs": docs,
        "rows": rows,
        "rem": rem,
        "hash_buckets": ctx.hash_buckets,
    }


def _shard_sizes(o: BucketOptions, rows: int, row_bytes: float) -> list[int]:
    if o.num_shards is not None:
        m = min(o.num_shards, rows)
        base, extra = divmod(rows, m)
        return [base + (1 if i < extra else 0) for i in range(m)]
    if o.shard_size is not None:
        per = max(1, int(parse_size(o.shard_size) // max(1.0, row_bytes)))
    else:
        per = o.rows_per_shard or rows
    return [per] * (rows // per) + ([rows % per] if rows % per else [])


def _manifest(
    o: BucketOptions, probe: Sequences, layout: dict, frags: list[dict], split: list[dict], dedup: dict | None = None
) -> dict:
    from .dedup import summed

    fmt = get_format(o.to)
    L = o.seq_len
    schema = packed_schema(L, layout["dtype"])
    rows, total, rem = layout["rows"], layout["tokens"], layout["rem"]
    padded = (L - rem) if (o.pad_last and rem) else 0
    packing = {
        "seq_len": L,
        "documents": layout["docs"],
        "tokens": total,
        "rows": rows,
        "order": "shuffled" if o.shuffle else "input",
        "dtype": layout["dtype"].name,
        "tokenizer": token_description(probe.tokenizer, layout["dtype"].name),
        "dropped_tokens": 0 if o.pad_last else rem,
        "dropped_partial_row": bool(rem) and not o.pad_last,
        "pad_last": o.pad_last,
        "pad_id": o.pad_id,
        "padding_tokens": padded,
        "padding_efficiency": round((rows * L - padded) / (rows * L), 6),
    }
    return mf.build_job(
        "bucket",
        o,
        rows,
        schema,
        layout["hash_buckets"],
        shards=mf.shard_entries(frags),
        files=mf.unit_files(frags),
        stats=merged(schema, frags),
        float16={},
        sources=probe.describe_sources() + o.tokenizer_source(),
        packing=packing,
        **notes_of(probe.tokenizer),
        **fmt.dataset_extra(schema, [fr["extra"] for fr in frags]),
        **probe.keep.extra(*summed(split), dedup),
    )
