"""``lovecraft bucket``: variable-length sequences stored in length buckets, so that every training
batch drawn from one bucket carries little padding.

The run is ``shard``'s two phases (same work directory, journal, workers and ``--resume``):

1. *Split* (one unit per ~64 MiB part of the input): read lines (or CSV rows, or a dataset's
   column), tokenize, apply ``--min-length``/``--max-length``, and spill the sequences sorted by
   length. A spill frame stores the distinct lengths, how many rows have each, and the values of
   the rows in that order, so any length range is one contiguous slice of the frame: a later
   unit reads exactly the bytes of its bucket, and nothing is sorted twice. With ``--shuffle``
   each row first goes to one of B hash buckets (a seeded hash of (part, row)). Every part returns
   its exact length histogram.
2. *Plan*: the histograms add up to the exact length histogram of the input; ``--num-buckets K``
   boundaries come from :func:`~.transforms.bucketing.optimal_boundaries` (the fewest padded
   tokens), the token dtype from the vocabulary and every value seen.
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
from .errors import InputError, Interrupted, LovecraftError, SchemaError
from .formats.base import Part
from .output import OutputDir
from .pipeline import MANIFEST_VERSION, _SigTerm, _validate, open_reader
from .schema import FIXED, SEQUENCE, Batch, Field, Schema, VarColumn
from .sharding import (
    PART_BYTES,
    ShardOptions,
    _bar,
    _bucket_of,
    _Journal,
    _load_plan,
    _raw_stats,
    _Runner,
    _save_plan,
    _spool_stdin,
    _trace,
    commit_files,
    merged_stats,
    shard_name,
)
from .util import parse_size

LENGTH = "length"
TOKENIZER_PART_BYTES = 16 << 20
LAYOUTS = ("padded", "ragged")
MANIFEST = "_manifest.json"

# frame dtypes (a code in the frame header says which)
_CODES = ["|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<f2", "<f4", "<f8", "|b1"]
TOKEN_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.int32))


@dataclass
class BucketOptions(ShardOptions):
    """``shard``'s options plus the bucketing ones (the CLI's flags, by the same names)."""

    tokenizer: str = "bytes"
    column: str | None = None
    ragged: bool = False
    num_buckets: int | None = None
    boundaries: list[int] | None = None
    max_length: int | None = None
    truncate: bool = False
    drop_longer: bool = False
    min_length: int = 0
    layout: str = "padded"
    pad_id: int | float = 0


def _check(o: BucketOptions) -> None:
    _validate(o)
    if (o.num_buckets is None) == (o.boundaries is None):
        raise SchemaError("give exactly one of --num-buckets and --boundaries")
    if o.num_buckets is not None and o.num_buckets < 1:
        raise SchemaError("--num-buckets must be at least 1")
    if o.boundaries is not None:
        b = list(o.boundaries)
        if not b or any(not isinstance(x, int) or x < 1 for x in b) or b != sorted(set(b)):
            raise SchemaError(
                f"--boundaries {','.join(map(str, b))}: give increasing positive lengths", hint="e.g. 32,64,128"
            )
    if o.layout not in LAYOUTS:
        raise SchemaError(f"--layout {o.layout}: use padded or ragged")
    if o.truncate and o.drop_longer:
        raise SchemaError("give only one of --truncate and --drop-longer")
    if o.max_length is not None and o.max_length < 1:
        raise SchemaError("--max-length must be at least 1")
    if (o.truncate or o.drop_longer) and o.max_length is None and o.boundaries is None:
        flag = "--truncate" if o.truncate else "--drop-longer"
        raise SchemaError(f"{flag} needs --max-length L (or --boundaries: the last one is the limit)")
    if o.max_length is not None and not (o.truncate or o.drop_longer):
        raise SchemaError(
            f"--max-length {o.max_length}: say what happens to longer sequences",
            hint="add --truncate or --drop-longer",
        )
    if o.min_length < 0:
        raise SchemaError("--min-length must be at least 0")
    if o.max_length is not None and o.min_length > o.max_length:
        raise SchemaError(f"--min-length {o.min_length} is more than --max-length {o.max_length}")
    if o.shuffle and o.seed is None:
        raise SchemaError("--shuffle needs --seed N", hint="the seed makes the shuffle reproducible")
    if sum(x is not None for x in (o.shard_size, o.rows_per_shard, o.num_shards)) > 1:
        raise SchemaError("give at most one of --shard-size, --rows-per-shard, --num-shards")
    if o.dtype is not None:
        raise SchemaError("--dtype does not apply to bucket", hint="token and value dtypes are chosen from the data")
    if o.columns:
        raise SchemaError("--columns does not apply to bucket", hint="use --column NAME")


def _limit(o: BucketOptions) -> int | None:
    """The longest sequence kept (longer ones are truncated or dropped), if any."""
    if o.max_length is not None:
        return o.max_length
    if (o.truncate or o.drop_longer) and o.boundaries:
        return o.boundaries[-1]
    return None


# --------------------------------------------------------------------------------------------
# where sequences come from
# --------------------------------------------------------------------------------------------


def _dataset_dir(inputs: list[str]) -> str | None:
    if len(inputs) == 1 and os.path.isdir(inputs[0]) and os.path.exists(os.path.join(inputs[0], MANIFEST)):
        return inputs[0]
    return None


def _as_var(col, kind: str) -> VarColumn:
    if isinstance(col, VarColumn):
        return col
    rows = list(col)
    if kind == "string":
        return VarColumn.from_pylist([r.encode() if isinstance(r, str) else bytes(r) for r in rows], np.uint8)
    arrs = [np.asarray(r).reshape(-1) for r in rows]
    dt = arrs[0].dtype if arrs else np.dtype(np.int64)
    lens = np.fromiter((len(a) for a in arrs), dtype=np.int64, count=len(arrs))
    offs = np.zeros(len(arrs) + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    values = np.concatenate(arrs) if arrs else np.zeros(0, dt)
    return VarColumn(values, offs)


class Sequences:
    """The input as sequences: ``partitions`` like a reader's, ``sequences(part)`` yields
    (VarColumn of tokens or values, first line or row of the batch, 'line' | 'row')."""

    def __init__(self, inputs: list[str], o: BucketOptions, budget: int, threads: bool = False) -> None:
        from .transforms.tokenize import load_tokenizer

        self.o = o
        self.tokenizer = None
        self.dataset = _dataset_dir(inputs)
        if self.dataset is not None:
            from .loaders import open_dataset

            ds = open_dataset(self.dataset)
            var = [f for f in ds.schema if f.kind in (SEQUENCE, "string")]
            if o.column is None:
                if len(var) != 1:
                    names = ", ".join(f.name for f in var) or "none"
                    raise SchemaError(
                        f"{self.dataset}: say which column holds the sequences (variable-length columns: {names})",
                        hint="pass --column NAME",
                    )
                fld = var[0]
            else:
                if o.column not in ds.schema.names:
                    raise SchemaError(
                        f"{self.dataset}: no column '{o.column}'", hint=f"columns are {', '.join(ds.schema.names)}"
                    )
                fld = ds.schema[o.column]
                if fld.kind not in (SEQUENCE, "string"):
                    raise SchemaError(
                        f"{self.dataset}: column '{fld.name}' holds {fld.describe()}, not sequences or text",
                        hint="choose a variable-length column",
                    )
            if ds.bucketed:
                raise SchemaError(f"{self.dataset}: is already bucketed", hint="bucket its source instead")
            self.ds = ds.select(fld.name)
            self.field = fld
            self.kind = "dataset"
            if fld.kind == "string":
                self.tokenizer = load_tokenizer(o.tokenizer)
                self.column = "tokens"
            else:
                self.column = fld.name
            self.specs = []
            self.name = self.dataset
            return
        ropts = ShardOptions(**{k: v for k, v in o.to_dict().items() if k in ShardOptions.__dataclass_fields__})
        ropts.column_types = {}
        ropts.columns = None
        if o.ragged:  # rows of any length: read as lines, parsed here
            ropts.input_format = "text"
        probe = open_reader(inputs, ropts, budget, threads=threads)
        fmt = probe.format
        self.specs = probe.specs
        self.name = ", ".join(s.name for s in probe.specs)
        if o.ragged:
            if o.column is not None:
                raise SchemaError("--ragged reads whole rows; drop --column")
            self.reader = probe
            self.kind = "ragged"
            self.column = "values"
            self.source_column = "text"
            return
        if fmt == "npy":
            raise SchemaError(
                f"{self.name}: an NPY array has rows of one length, there is nothing to bucket",
                hint="bucket text lines, ragged CSV rows (--ragged) or a dataset's variable-length column",
            )
        self.reader = probe
        if fmt == "csv":
            names = probe.schema.names
            if o.column is None:
                raise SchemaError(
                    f"{self.name}: say which CSV column holds the text (columns: {', '.join(names)}), "
                    "or pass --ragged to read each row as a sequence of numbers",
                    hint="pass --column NAME or --ragged",
                )
            if o.column not in names:
                raise SchemaError(f"{self.name}: no column '{o.column}'", hint=f"columns are {', '.join(names)}")
            if probe.schema[o.column].kind != "string":
                raise SchemaError(
                    f"{self.name}: column '{o.column}' is {probe.schema[o.column].describe()}, not text",
                    hint="give a text column, or --ragged for rows of numbers",
                )
            self.kind = "csv"
            self.source_column = o.column
        else:
            if o.column is not None:
                raise SchemaError(f"--column applies to CSV and dataset inputs; {self.name} is {fmt}")
            self.kind = "text"
            self.source_column = "text"
        self.tokenizer = load_tokenizer(o.tokenizer)
        self.column = "tokens"

    # -- parts --------------------------------------------------------------------------------

    def partitions(self, target: int, mapper=None) -> list[Part]:
        if self.kind == "dataset":
            parts = []
            for gi, g in enumerate(self.ds.groups):
                for pi, _ in enumerate(g.parts):
                    parts.append(Part(len(parts), 0, rows=(gi, pi)))
            return parts
        return self.reader.partitions(target, mapper=mapper)

    def describe_sources(self) -> list[dict]:
        if self.kind == "dataset":
            from .util import sha256_file

            return [
                {
                    "path": os.path.abspath(self.dataset),
                    "format": "dataset",
                    "column": self.field.name,
                    "rows": len(self.ds),
                    "manifest_sha256": sha256_file(os.path.join(self.dataset, MANIFEST)),
                }
            ]
        return [s.describe() for s in self.specs]

    def sequences(self, part: Part) -> Iterator[tuple[VarColumn, int, str]]:
        if self.kind == "dataset":
            gi, pi = part.rows
            g = self.ds.groups[gi]
            p = g.parts[pi]
            reader = self.ds.reader(g, p)
            chunk = max(1024, (self.o_budget() // 16) // 256)
            row = 0
            for batch in reader.chunks(0, p.rows, chunk):
                col = _as_var(batch.columns[self.field.name], self.field.kind)
                yield (self.tokenizer.encode(col) if self.tokenizer else col), row, "row"
                row += batch.num_rows
            return
        first_part = part.start in (None, 0) and part.spec == 0
        line = part.line0
        for batch in self.reader.part_batches(part):
            col = batch.columns[self.source_column]
            if self.kind == "ragged":
                yield from self._ragged(col, line, first_part and line == part.line0, part)
                line += batch.num_rows
                continue
            where = "line" if self.kind == "text" else "row"
            yield self.tokenizer.encode(col), line, where
            line += batch.num_rows

    def o_budget(self) -> int:
        return parse_size(self.o.max_memory) // 4

    def _ragged(self, lines: VarColumn, line0: int, first: bool, part: Part) -> Iterator[tuple[VarColumn, int, str]]:
        """Rows of a CSV file as numeric sequences: every field a number; blank lines skipped;
        a first line that is not numbers is a header (unless --no-header)."""
        raw = lines.values.view(np.uint8)
        offs = lines.offsets
        lens = np.diff(offs)
        spec = self.reader.specs[part.spec]
        delim = (self.o.delimiter or ("\t" if spec.name.endswith((".tsv", ".tsv.gz")) else ",")).encode()
        data = raw.tobytes()
        o = offs.tolist()
        keep = np.flatnonzero(lens > 0)
        if first and len(keep):
            head = data[o[keep[0]] : o[keep[0] + 1]]
            try:
                np.array(head.split(delim)).astype(np.float64)
            except ValueError:
                if not self.o.header:
                    raise InputError(
                        f"{spec.name}, line {line0 + int(keep[0]) + 1}: {head.split(delim)[0][:40]!r} is not a number",
                        hint="--ragged reads every field as a number",
                    ) from None
                keep = keep[1:]
        rows = [data[o[i] : o[i + 1]] for i in keep.tolist()]
        if not rows:
            return
        fields = delim.join(rows).split(delim)
        counts = np.fromiter((r.count(delim) + 1 for r in rows), dtype=np.int64, count=len(rows))
        arr = np.array(fields)
        try:
            values = arr.astype(np.int64)
        except (ValueError, OverflowError):
            try:
                values = arr.astype(np.float64)
            except ValueError:
                cum = np.cumsum(counts)
                for i, f in enumerate(fields):
                    try:
                        float(f)
                    except ValueError:
                        r = int(np.searchsorted(cum, i, side="right"))
                        col = i - (int(cum[r - 1]) if r else 0) + 1
                        raise InputError(
                            f"{spec.name}, line {line0 + int(keep[r]) + 1}, column {col}: "
                            f"{f.decode('utf-8', 'replace')[:40]!r} is not a number",
                            hint="--ragged reads every field as a number; fix the row",
                        ) from None
                raise
        out = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=out[1:])
        yield VarColumn(values, out), line0, "line"


# --------------------------------------------------------------------------------------------
# spill frames: rows sorted by length, grouped
# --------------------------------------------------------------------------------------------


def gather_sorted(values: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """``values[starts[i] : starts[i] + lens[i]]`` for every i, concatenated; ``lens`` ascending.

    Rows of one length are copied as one 2-D fancy index over a strided view of ``values`` (a view
    whose row s is ``values[s:]``): one call per distinct length, a memcpy per row, no index
    array per element.
    """
    total = int(lens.sum())
    out = np.empty(total, dtype=values.dtype)
    if total == 0:
        return out
    isz = values.itemsize
    view = np.lib.stride_tricks.as_strided(
        values, shape=(len(values), int(lens[-1])), strides=(isz, isz), writeable=False
    )
    uniq, first = np.unique(lens, return_index=True)
    ends = np.append(first[1:], len(lens))
    pos = 0
    for ln, a, b in zip(uniq.tolist(), first.tolist(), ends.tolist(), strict=True):
        if ln:  # only view[s, :ln] is read, always inside values
            n = (b - a) * ln
            out[pos : pos + n].reshape(b - a, ln)[...] = view[starts[a:b], :ln]
            pos += n
    return out


def write_grouped(f, lengths_sorted: np.ndarray, values: np.ndarray) -> list[int]:
    """Append a frame of rows sorted by length; returns [offset, rows]."""
    offset = f.tell()
    uniq, first = np.unique(lengths_sorted, return_index=True)
    counts = np.diff(np.append(first, len(lengths_sorted)))
    code = _CODES.index(values.dtype.str)
    f.write(np.array([len(lengths_sorted), len(uniq), values.size, code], dtype=np.int64).data)
    f.write(uniq.astype(np.int64).data)
    f.write(counts.astype(np.int64).data)
    f.write(np.ascontiguousarray(values).view(np.uint8).data)
    return [offset, len(lengths_sorted)]


class Grouped:
    """Rows sorted by length: ``counts[i]`` rows of length ``uniq[i]``, values in that order."""

    __slots__ = ("uniq", "counts", "values")

    def __init__(self, uniq: np.ndarray, counts: np.ndarray, values: np.ndarray) -> None:
        self.uniq, self.counts, self.values = uniq, counts, values

    @property
    def rows(self) -> int:
        return int(self.counts.sum())

    def slice(self, r0: int, r1: int) -> Grouped:
        ends = np.cumsum(self.counts)
        starts = ends - self.counts
        c = np.clip(np.minimum(ends, r1) - np.maximum(starts, r0), 0, None)
        skipped = np.clip(r0 - starts, 0, self.counts)
        v0 = int((self.uniq * skipped).sum())
        nv = int((self.uniq * c).sum())
        keep = c > 0
        return Grouped(self.uniq[keep], c[keep], self.values[v0 : v0 + nv])

    def lengths(self) -> np.ndarray:
        return np.repeat(self.uniq, self.counts)

    def to_var(self) -> VarColumn:
        offs = np.zeros(self.rows + 1, dtype=np.int64)
        np.cumsum(self.lengths(), out=offs[1:])
        return VarColumn(self.values, offs)

    def dense(self, width: int, pad, dtype: np.dtype) -> np.ndarray:
        out = np.full((self.rows, width), pad, dtype=dtype)
        r = v = 0
        for ln, c in zip(self.uniq.tolist(), self.counts.tolist(), strict=True):
            if ln:
                out[r : r + c, :ln] = self.values[v : v + c * ln].reshape(c, ln)
            r += c
            v += c * ln
        return out


def read_grouped(f, offset: int, lo: int, hi: int, dtype: np.dtype) -> Grouped:
    """The rows of the frame at ``offset`` whose length is in [lo, hi], as ``dtype``."""
    f.seek(offset)
    rows, nu, nv, code = np.fromfile(f, dtype=np.int64, count=4).tolist()
    uniq = np.fromfile(f, dtype=np.int64, count=nu)
    counts = np.fromfile(f, dtype=np.int64, count=nu)
    i0, i1 = np.searchsorted(uniq, lo, side="left"), np.searchsorted(uniq, hi, side="right")
    src = np.dtype(_CODES[code])
    v0 = int((uniq[:i0] * counts[:i0]).sum())
    n = int((uniq[i0:i1] * counts[i0:i1]).sum())
    f.seek(offset + 32 + 16 * nu + v0 * src.itemsize)
    vals = np.fromfile(f, dtype=src, count=n)
    if len(vals) != n:
        raise LovecraftError(f"{f.name}: spill file is short", hint="run again with --overwrite")
    if src != dtype:
        vals = vals.astype(dtype)
    return Grouped(uniq[i0:i1], counts[i0:i1], vals)


def _merge_hist(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not pairs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    v = np.concatenate([p[0] for p in pairs]).astype(np.int64)
    c = np.concatenate([p[1] for p in pairs]).astype(np.int64)
    uniq, inv = np.unique(v, return_inverse=True)
    return uniq, np.bincount(inv, weights=c, minlength=len(uniq)).astype(np.int64)


# --------------------------------------------------------------------------------------------
# the units
# --------------------------------------------------------------------------------------------


@dataclass
class BContext:
    inputs: list[str]
    options: dict[str, Any]
    work: str
    hash_buckets: int  # 0: not shuffled

    @property
    def o(self) -> BucketOptions:
        return BucketOptions(**self.options)

    def budget(self) -> int:
        return parse_size(self.o.max_memory) // 4

    def source(self) -> Sequences:
        return Sequences(self.inputs, self.o, self.budget())


def split_unit(ctx: BContext, part: Part) -> dict[str, Any]:
    """Phase 1: one part of the input, tokenized, filtered, sorted by length and spilled."""
    o = ctx.o
    src = ctx.source()
    limit = _limit(o)
    B = ctx.hash_buckets
    spill = os.path.join(ctx.work, "spill")
    names = [f"u{part.index:05d}-b{b:04d}.bin" for b in range(B)] if B else [f"u{part.index:05d}.bin"]
    handles: list = [None] * len(names)
    frames: list[list] = [[] for _ in names]
    hists: list[list] = [[] for _ in names]
    c = {"rows_in": 0, "rows": 0, "tokens_in": 0, "short": 0, "long": 0, "truncated": 0, "tokens_cut": 0}
    vmin = vmax = None
    dtypes: set[str] = set()
    row0 = 0
    try:
        for col, _first, _where in src.sequences(part):
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
                b_of = _bucket_of(o.seed or 0, part.index, row0 + idx, B)
                order = np.argsort(b_of * (int(kl.max(initial=0)) + 1) + kl, kind="stable")
                b_sorted = b_of[order]
            else:
                order = np.argsort(kl, kind="stable")
            sl = kl[order]
            ss = starts[order]
            dtypes.add(col.values.dtype.str)
            cuts = np.searchsorted(b_sorted, np.arange(B + 1)) if B else np.array([0, len(sl)])
            for b in range(len(names)):
                a, z = int(cuts[b]), int(cuts[b + 1])
                if a == z:
                    continue
                piece = sl[a:z]
                values = gather_sorted(col.values, ss[a:z], piece)  # lengths ascend within a hash bucket
                if values.size:
                    lo, hi = values.min(), values.max()
                    vmin = lo if vmin is None else min(vmin, lo)
                    vmax = hi if vmax is None else max(vmax, hi)
                if handles[b] is None:
                    handles[b] = open(os.path.join(spill, names[b] + ".tmp"), "wb")  # noqa: SIM115
                frames[b].append(write_grouped(handles[b], piece, values))
                u, first = np.unique(piece, return_index=True)
                hists[b].append((u, np.diff(np.append(first, len(piece)))))
            c["rows"] += len(idx)
            row0 += n
    finally:
        for h in handles:
            if h is not None:
                h.close()
    files = {}
    for b, name in enumerate(names):
        if handles[b] is None:
            continue
        p = os.path.join(spill, name)
        os.rename(p + ".tmp", p)
        u, cnt = _merge_hist(hists[b])
        files[name] = {
            "b": b,
            "size": os.path.getsize(p),
            "frames": frames[b],
            "hist": [u.tolist(), cnt.tolist()],
        }
    return {
        "phase": 1,
        "part": part.index,
        **c,
        "min": None if vmin is None else vmin.item(),
        "max": None if vmax is None else vmax.item(),
        "dtypes": sorted(dtypes),
        "files": files,
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


def _pieces(ctx: BContext, unit: dict, dtype: np.dtype) -> Iterator:
    """The rows [a, b) of one bucket, in the bucket's order."""
    lo, hi, a, b = unit["lo"], unit["hi"], unit["a"], unit["b"]
    spill = os.path.join(ctx.work, "spill")
    pos = 0
    if not ctx.hash_buckets:
        for name, frames, count in unit["files"]:
            if pos + count <= a:
                pos += count
                continue
            if pos >= b:
                break
            with open(os.path.join(spill, name), "rb") as f:
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
        count = sum(cnt for _n, _f, cnt in group)
        if pos + count <= a or count == 0:
            pos += count
            continue
        if pos >= b:
            break
        pieces = []
        for name, frames, _cnt in group:
            with open(os.path.join(spill, name), "rb") as f:
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


def write_unit(ctx: BContext, unit: dict) -> dict[str, Any]:
    """Phase 2: shard ``j`` of bucket ``k``, committed as finished files."""
    o = ctx.o
    dtype = np.dtype(unit["dtype"])
    width = unit["hi"] if o.layout == "padded" else None
    column = unit["column"]
    if width is not None:
        schema = Schema((Field(column, FIXED, dtype.str, (width,)), Field(LENGTH, FIXED, "<i4")))
    else:
        schema = Schema((Field(column, SEQUENCE, dtype.str), Field(LENGTH, FIXED, "<i4")))
    pad = np.array(o.pad_id).astype(dtype)
    step = max(1 << 20, ctx.budget() // 16)
    source = _emit(_pieces(ctx, unit, dtype), width, pad, dtype, column, step)
    files, stats, extra = commit_files(
        ctx.work, unit["id"], unit["name"], schema, source, o, ctx.budget(), unit["b"] - unit["a"]
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
        "stats_raw": _raw_stats(stats),
        "extra": extra,
    }


# --------------------------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------------------------


def bucket(inputs: list[str] | str, output: str, *, argv: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Write ``inputs`` as a length-bucketed dataset directory ``output``; returns the manifest.

    Keyword arguments are the fields of :class:`BucketOptions` (the CLI's flags).
    """
    o = BucketOptions(**kwargs)
    if o.boundaries is not None:
        o.boundaries = [int(x) for x in o.boundaries]
    _check(o)
    if isinstance(inputs, str):
        inputs = [inputs]
    inputs = list(inputs)
    if "-" in inputs and o.resume:
        raise SchemaError("--resume needs file inputs, not stdin")
    budget = parse_size(o.max_memory)
    if budget < 16 << 20:
        raise SchemaError(f"--max-memory {o.max_memory} is too small", hint="give at least 16MiB")
    workers = o.workers or os.cpu_count() or 1
    started = time.time()
    probe = Sequences(inputs, o, budget // 4, threads=True)  # checks inputs and flags first
    protect = [s.path for s in probe.specs if not s.is_stdin]
    if probe.dataset is not None:
        protect.append(os.path.abspath(probe.dataset))
    with _SigTerm(), OutputDir(output, overwrite=o.overwrite, protect=protect, resume=o.resume) as out:
        work = out.tmp
        os.makedirs(os.path.join(work, "spill"), exist_ok=True)
        if "-" in inputs:
            inputs = _spool_stdin(inputs, work, probe.reader)
        fingerprint = {
            "options": o.fingerprint(),
            "sources": probe.describe_sources(),
            "version": MANIFEST_VERSION,
            "command": "bucket",
        }
        plan = _load_plan(work, fingerprint, out.path)
        journal = _Journal(work)
        runner = _Runner(workers)
        try:
            manifest = _run(o, inputs, work, plan, journal, runner, probe)
        except KeyboardInterrupt:
            runner.close(kill=True)
            journal.close()
            out.keep = True
            done = len(journal.phase(2))
            raise Interrupted(
                f"interrupted; {done} bucket shard{'' if done == 1 else 's'} committed in {work}",
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
        if o.to == "hdf5":
            manifest["hdf5_index"] = _hdf5_index(work, manifest)
        for leftover in ("spill", "journal.jsonl", "plan.json"):
            p = os.path.join(work, leftover)
            shutil.rmtree(p) if os.path.isdir(p) else os.path.exists(p) and os.unlink(p)
        out.commit(manifest)
    return manifest


def _hdf5_index(work: str, manifest: dict) -> dict:
    """Write ``buckets.h5`` (one group per bucket, linking the bucket files); its manifest entry."""
    from .formats.hdf5 import INDEX_NAME, index_groups, write_bucket_index

    groups = index_groups(manifest["buckets"])
    rec = write_bucket_index(
        os.path.join(work, INDEX_NAME),
        groups,
        {
            "lovecraft_boundaries": json.dumps(manifest["bucketing"]["boundaries"]),
            "lovecraft_manifest": "_manifest.json",
        },
    )
    return {"path": rec.path, "bytes": rec.bytes, "sha256": rec.sha256, "groups": list(groups)}


def _intact(work: str, entry: dict) -> bool:
    for name, info in entry.get("files", {}).items():
        p = os.path.join(work, "spill", name)
        if not os.path.exists(p) or os.path.getsize(p) != info["size"]:
            return False
    return True


def _run(o: BucketOptions, inputs, work, plan, journal: _Journal, runner: _Runner, probe: Sequences) -> dict:
    part_bytes = o.part_bytes
    if probe.tokenizer is not None and probe.tokenizer.spill_dtype.itemsize == 4 and part_bytes == PART_BYTES:
        part_bytes = TOKENIZER_PART_BYTES  # slow tokenizers: smaller parts keep every worker busy to the end
    ctx = BContext(list(inputs), o.to_dict(), work, 0)
    parts = probe.partitions(part_bytes, mapper=runner.map_ordered)
    if o.shuffle:
        est = sum((s.size or (256 << 20)) * (6 if s.compression else 1) for s in probe.specs) if probe.specs else 0
        if probe.dataset is not None:
            est = sum(f["bytes"] for f in probe.ds.manifest["files"])
        est *= 4 if probe.tokenizer is not None and probe.tokenizer.spill_dtype.itemsize == 4 else 1
        plan.setdefault("hash_buckets", max(1, math.ceil(est / max(1, ctx.budget() // 4))))
        _save_plan(work, plan)
        ctx.hash_buckets = plan["hash_buckets"]
    _trace(f"{len(parts)} parts")
    done = {e["part"]: e for e in journal.phase(1) if _intact(work, e)}
    calls = [(ctx, p) for p in parts if p.index not in done]
    bar = _bar(o, len(calls), "reading")
    try:
        for res in runner.map(split_unit, calls):
            journal.add(res)
            done[res["part"]] = res
            bar.update()
    finally:
        bar.close()
    split = [done[p.index] for p in parts]
    _trace("phase 1 done")
    layout = _plan_buckets(o, probe, split, ctx)
    units = layout["units"]
    finished = {e["unit"]: e for e in journal.phase(2)}
    calls = [(ctx, u) for u in units if u["id"] not in finished]
    bar = _bar(o, len(calls), "writing")
    try:
        for res in runner.map(write_unit, calls):
            journal.add(res)
            finished[res["unit"]] = res
            bar.update()
    finally:
        bar.close()
    _trace("phase 2 done")
    return _manifest(o, probe, layout, [finished[u["id"]] for u in units], split)


def _choose_dtype(o: BucketOptions, probe: Sequences, split: list[dict]) -> np.dtype:
    mins = [p["min"] for p in split if p["min"] is not None]
    maxs = [p["max"] for p in split if p["max"] is not None]
    lo = min(mins) if mins else 0
    hi = max(maxs) if maxs else 0
    pad = o.pad_id
    if probe.tokenizer is not None:  # token ids: the smallest of uint8/uint16/int32 for the vocabulary
        vocab_hi = (probe.tokenizer.vocab_size or (hi + 1)) - 1
        need_lo, need_hi = min(lo, pad, 0), max(hi, vocab_hi, pad)
        if float(pad) != int(pad):
            raise SchemaError(f"--pad-id {pad}: token ids are integers")
        for dt in TOKEN_DTYPES:
            info = np.iinfo(dt)
            if info.min <= need_lo and need_hi <= info.max:
                return dt
        raise SchemaError(f"token ids from {need_lo} to {need_hi} do not fit int32")
    dts = sorted({d for p in split for d in p["dtypes"]})
    dt = np.result_type(*[np.dtype(d) for d in dts]) if dts else np.dtype(np.int64)
    as_dt = np.array(pad).astype(dt)
    if as_dt.item() != pad:
        raise SchemaError(f"--pad-id {pad} does not fit the values' dtype {dt}", hint="choose a pad value that does")
    return dt


def _plan_buckets(o: BucketOptions, probe: Sequences, split: list[dict], ctx: BContext) -> dict:
    from .transforms.bucketing import optimal_boundaries

    hist = _merge_hist(
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


def _unit_files(ctx: BContext, split: list[dict], lo: int, hi: int) -> dict:
    if not ctx.hash_buckets:
        files = []
        for p in split:
            for name, f in p["files"].items():
                cnt = _count(f["hist"], lo, hi)
                if cnt:
                    files.append((name, f["frames"], cnt))
        return {"files": files}
    groups: list[list] = [[] for _ in range(ctx.hash_buckets)]
    for p in split:
        for name, f in p["files"].items():
            cnt = _count(f["hist"], lo, hi)
            if cnt:
                groups[f["b"]].append((name, f["frames"], cnt))
    return {"groups": groups}


def _manifest(o: BucketOptions, probe: Sequences, layout: dict, frags: list[dict], split: list[dict]) -> dict:
    from .formats.tfexample import feature_spec

    dtype = layout["dtype"]
    column = probe.column
    schema = Schema((Field(column, SEQUENCE, dtype.str), Field(LENGTH, FIXED, "<i4")))
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
        if o.to == "tfrecord":
            entry["feature_spec"] = shards[0]["extra"]["tfrecord"]["feature_spec"]
        buckets.append(entry)
    single = total_rows * longest
    c = {k: sum(p[k] for p in split) for k in ("rows_in", "short", "long", "truncated", "tokens_cut")}
    bucketing = {
        "boundaries": layout["bounds"],
        "layout": o.layout,
        "pad_id": o.pad_id,
        "dtype": dtype.name,
        "tokenizer": probe.tokenizer.describe() if probe.tokenizer is not None else None,
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
    extra = {}
    if o.to == "tfrecord":
        extra = {"tfrecord": {**frags[0]["extra"]["tfrecord"], "feature_spec": feature_spec(schema)}}
    return {
        "format": "lovecraft-dataset",
        "version": MANIFEST_VERSION,
        "complete": True,
        "created_by": f"lovecraft_convert {__version__}",
        "command": "bucket",
        "output_format": o.to,
        "options": o.to_dict(),
        "rows": total_rows,
        "schema": schema.to_list(),
        "shuffle": {"seed": o.seed, "buckets": layout["hash_buckets"]} if o.shuffle else None,
        "buckets": buckets,
        "bucketing": bucketing,
        "files": [{**f, "bucket": fr["bucket"], "shard": fr["shard"]} for fr in frags for f in fr["files"]],
        "stats": merged_stats(schema, frags),
        "float16": {},
        "sources": probe.describe_sources(),
        **extra,
    }
