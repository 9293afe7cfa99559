"""Where ``bucket``'s sequences come from: text lines through a tokenizer, CSV rows of numbers of any
length (``--ragged``), a CSV text column, a JSON Lines text key, a text or sequence column of a
Parquet, Arrow or Hugging Face input (only that column or key is read), or a variable-length column
of a lovecraft dataset."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import manifest as mf
from ..errors import InputError, OptionsError, SchemaError
from ..inputs import Part, open_reader
from ..inputs.base import SchemaChanged
from ..schema import SEQUENCE, VarColumn
from ..transforms.keep import Keep
from ..util import parse_size
from .options import PART_BYTES, BucketOptions


def _dataset_dir(inputs: list[str]) -> str | None:
    if len(inputs) == 1 and mf.is_dataset(inputs[0]):
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


def pick_column(where: str, schema, column: str | None):
    """The field holding the text or sequences: ``column``, else the one variable-length column."""
    var = [f for f in schema if f.kind in (SEQUENCE, "string")]
    if column is None:
        if len(var) != 1:
            names = ", ".join(f.name for f in var) or "none"
            raise SchemaError(
                f"{where}: say which column holds the text or sequences (variable-length columns: {names})",
                hint="pass --column NAME",
            )
        return var[0]
    if column not in schema.names:
        raise SchemaError(f"{where}: no column '{column}'", hint=f"columns are {', '.join(schema.names)}")
    fld = schema[column]
    if fld not in var:
        raise SchemaError(
            f"{where}: column '{fld.name}' is {fld.describe()}, not text or sequences",
            hint="choose a text or sequence column",
        )
    return fld


class Sequences:
    """The input as sequences: ``partitions`` like a reader's, ``sequences(part)`` yields
    (VarColumn of tokens or values, first line or row of the batch, 'line' | 'row')."""

    def __init__(self, inputs: list[str], o: BucketOptions, budget: int, threads: bool = False) -> None:
        from ..transforms.tokenize import Tokens

        self.o = o
        self.tokenizer = None
        self.keep = Keep()
        self.dataset = _dataset_dir(inputs)
        kept = "--filter" if o.filter else "--dedup" if o.dedup else None
        if kept and (self.dataset is not None or o.ragged):
            raise OptionsError(
                f"{kept} is not offered by bucket for {'--ragged rows' if o.ragged else 'a dataset input'} yet",
                hint=f"run `lovecraft shard` with {kept} on it first, then bucket that output without {kept}",
            )
        if self.dataset is not None:
            from ..loaders import open_dataset

            ds = open_dataset(self.dataset)
            fld = pick_column(self.dataset, ds.schema, o.column)
            if ds.bucketed:
                raise SchemaError(f"{self.dataset}: is already bucketed", hint="bucket its source instead")
            self.ds = ds.select(fld.name)
            self.field = fld
            self.kind = "dataset"
            if fld.kind == "string":
                self.tokenizer = Tokens(o.tokenizer, o.eos, o.bos)
                self.column = "tokens"
            else:
                if o.eos is not None or o.bos is not None:
                    raise SchemaError(
                        f"{self.dataset}: column '{fld.name}' holds token ids already; --eos and --bos mark text "
                        "as it is tokenized",
                        hint="drop them",
                    )
                self.column = fld.name
            self.specs = []
            self.name = self.dataset
            self._done = 0
            self._sizes: dict[str, int] | None = None
            return
        kw = o.read_kwargs()
        kw["column_types"] = {}
        if o.ragged:  # rows of any length: read as lines, parsed here (--skip-rows, --comment too)
            kw["input_format"] = "text"
            kw["skip_rows"], kw["comment"] = 0, None
        probe = open_reader(inputs, budget=budget, threads=threads, **kw)
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
        if fmt in ("npy", "npz"):
            raise SchemaError(
                f"{self.name}: an NPY array has rows of one length, there is nothing to bucket",
                hint="bucket text lines, ragged CSV rows (--ragged) or a dataset's variable-length column",
            )
        self.reader = probe
        if probe.columnar:  # Parquet, Arrow, HDF5: the column read alone
            self._columnar(inputs, probe, o, budget, threads, kw)
            return
        if fmt == "csv":
            names = probe.schema.names
            column = o.column
            if column is None and "text" in names and probe.schema["text"].kind == "string":
                column = "text"  # the default, as convert --tokenizer takes it
            if column is None:
                raise SchemaError(
                    f"{self.name}: say which CSV column holds the text (columns: {', '.join(names)}), "
                    "or pass --ragged to read each row as a sequence of numbers",
                    hint="pass --column NAME or --ragged",
                )
            if column not in names:
                raise SchemaError(f"{self.name}: no column '{column}'", hint=f"columns are {', '.join(names)}")
            if probe.schema[column].kind != "string":
                raise SchemaError(
                    f"{self.name}: column '{column}' is {probe.schema[column].describe()}, not text",
                    hint="give a text column, or --ragged for rows of numbers",
                )
            self.kind = "csv"
            self.source_column = column
        elif fmt in ("jsonl", "json"):
            self._jsonl(inputs, probe, kw, budget, threads)
        else:
            if o.column is not None:
                raise SchemaError(
                    "--column applies to CSV, JSON Lines, Parquet, Arrow, Hugging Face and dataset inputs; "
                    f"{self.name} is {fmt}"
                )
            self.kind = "text"
            self.source_column = "text"
        self.tokenizer = Tokens(o.tokenizer, o.eos, o.bos)
        self.column = "tokens"
        self._keep_step()

    def _asked_by(self) -> dict[str, str]:
        """The flag naming each column the keep step reads, for a reader's line about a column
        it does not find (JSON Lines: a key not in the first records is looked for in the rest)."""
        from ..transforms.filter import Filter

        asked = {c: "--dedup-columns" for c in self.o.dedup_columns or []}
        if self.o.filter:
            asked.update(dict.fromkeys(Filter(self.o.filter).columns, f"--filter {self.o.filter!r}"))
        return asked

    def _keep_step(self) -> None:
        """--filter, checked against the columns read (the text column and those it names), once
        the reader has looked for those not in its first records (named by their flag if absent)."""
        from ..transforms.filter import Filter

        check = getattr(self.reader, "check_columns", None)
        if check is not None:
            check()
        if not self.o.filter:
            self.keep = Keep(None)
            return
        f = Filter(self.o.filter)
        while True:
            try:
                self.keep = Keep(f.check(self.reader.schema))
                return
            except (OptionsError, SchemaError):
                # a key first met late (typed from nothing so far) or a type that widens later: as
                # convert does, the input is read once to settle the types (only this error path)
                if not getattr(self.reader, "widens", False):
                    raise
                try:
                    for _ in self.reader.batches():
                        pass
                except SchemaChanged:
                    continue  # the reader holds the wider types now: check again
                raise

    def dedup(self):
        """The :class:`~lovecraft_convert.transforms.dedup.Dedup` of ``--dedup`` (None without it):
        ``--dedup-columns``, else the text column."""
        if not self.o.dedup:
            return None
        from ..transforms.dedup import Dedup

        near = self.o.near_params() if self.o.dedup == "near" else None
        return Dedup.resolve(
            self.o.dedup, self.o.dedup_columns, self.reader.schema, [self.source_column], near, self.source_column
        )

    def _jsonl(self, inputs: list[str], probe, kw: dict, budget: int, threads: bool) -> None:
        """A JSON Lines key holding text: read alone (the other keys are not built), as text
        whatever it holds (numbers as their JSON text), so no later value widens it."""
        names = probe.schema.names
        column = self.o.column
        if column is None and "text" in names and probe.schema["text"].kind == "string":
            column = "text"  # the default, as convert --tokenizer takes it
        if column is None:
            raise SchemaError(
                f"{self.name}: say which key holds the text (columns: {', '.join(names)})", hint="pass --column NAME"
            )
        if column not in names:
            raise SchemaError(f"{self.name}: no column '{column}'", hint=f"columns are {', '.join(names)}")
        if probe.schema[column].kind != "string":
            raise SchemaError(
                f"{self.name}: column '{column}' is {probe.schema[column].describe()}, not text",
                hint="give a key that holds text",
            )
        kw = {
            **kw,
            "columns": list(dict.fromkeys([column, *self.o.keep_columns()])),
            "column_types": {column: "string"},
        }
        self.reader = open_reader(inputs, budget=budget, threads=threads, **kw)
        self.reader.options.asked_by = self._asked_by()
        self.kind = "jsonl"
        self.source_column = column

    def _columnar(self, inputs: list[str], probe, o: BucketOptions, budget: int, threads: bool, kw: dict) -> None:
        """A Parquet, Arrow or Hugging Face input: its one variable-length column (or ``--column``),
        text through the tokenizer, a sequence column (token ids) as it is; only it is read."""
        from ..transforms.tokenize import Tokens

        fld = pick_column(self.name, probe.schema, o.column)
        columns = list(dict.fromkeys([fld.name, *o.keep_columns()]))
        self.reader = open_reader(inputs, budget=budget, threads=threads, **{**kw, "columns": columns})
        self.kind = "columnar"
        self.source_column = fld.name
        self._keep_step()
        if fld.kind == "string":  # the markers too (a bare tokenizer here dropped --eos and --bos)
            self.tokenizer = Tokens(o.tokenizer, o.eos, o.bos)
            self.column = "tokens"
        else:
            self.column = fld.name

    # -- parts --------------------------------------------------------------------------------

    def partitions(self, target: int, mapper=None) -> list[Part]:
        if self.kind == "dataset":
            parts = []
            for gi, g in enumerate(self.ds.groups):
                for pi, _ in enumerate(g.parts):
                    parts.append(Part(len(parts), 0, rows=(gi, pi)))
            return parts
        return self.reader.partitions(target, mapper=mapper)

    def progress_total(self) -> int | None:
        """Input bytes, for the progress of reading it (a dataset input: its shards' files)."""
        if self.kind == "dataset":
            return sum(self._part_bytes(p) for g in self.ds.groups for p in g.parts)
        return self.reader.progress_total()

    def progress_done(self) -> int:
        """Input bytes read so far by :meth:`sequences` (a dataset's shards by the rows read)."""
        return self._done if self.kind == "dataset" else self.reader.progress_done()

    def _part_bytes(self, p) -> int:
        if self._sizes is None:
            self._sizes = {f["path"]: int(f.get("bytes", 0)) for f in self.ds.manifest["files"]}
        return sum(self._sizes.get(f, 0) for f in p.files)

    def memory_bytes(self) -> int | None:
        """Estimated in-memory bytes of the input (None: only its size is known)."""
        return self.reader.memory_bytes() if self.kind == "columnar" else None

    def describe_sources(self) -> list[dict]:
        if self.kind == "dataset":
            from ..runtime.hashing import hash_file

            return [
                {
                    "path": os.path.abspath(self.dataset),
                    "format": "dataset",
                    "column": self.field.name,
                    "rows": len(self.ds),
                    "manifest_sha256": hash_file(mf.path_of(self.dataset), "sha256"),
                }
            ]
        return [s.describe() for s in self.specs]

    def sequences(self, part: Part, drops=None) -> Iterator[tuple[VarColumn, int, str]]:
        """The sequences of ``part``: without the rows ``--filter`` removes and those ``drops`` (a
        :class:`~lovecraft_convert.transforms.dedup.DropSet`) holds. Lines and rows in messages
        count the rows kept."""
        if self.kind == "dataset":
            gi, pi = part.rows
            g = self.ds.groups[gi]
            p = g.parts[pi]
            reader = self.ds.reader(g, p)
            chunk = max(1024, (self.o_budget() // 16) // 256)
            row = 0
            size, done = self._part_bytes(p), self._done
            for batch in reader.chunks(0, p.rows, chunk):
                col = _as_var(batch.columns[self.field.name], self.field.kind)
                row += batch.num_rows
                self._done = done + size * row // max(1, p.rows)
                yield (self.tokenizer.encode(col) if self.tokenizer else col), row - batch.num_rows, "row"
            self._done = done + size
            return
        first_part = part.start in (None, 0) and part.spec == 0
        self._header_pending = first_part  # the first row kept may be a header (ragged)
        line = part.line0
        try:
            for batch in self.keep(self.reader.part_batches(part), drops, part.index):
                col = batch.columns[self.source_column]
                if self.kind == "ragged":
                    yield from self._ragged(col, line, part)
                    line += batch.num_rows
                    continue
                where = "line" if self.kind == "text" else "row"  # JSON Lines: records (blank lines are skipped)
                yield (self.tokenizer.encode(col) if self.tokenizer else col), line, where
                line += batch.num_rows
        except SchemaChanged as e:  # an int sequence column holding nulls: not token ids
            other = [c for c in (e.widened or {}) if c != self.source_column]
            if other:  # a column --filter or --dedup-columns reads
                raise InputError(
                    f"{self.name}, column '{other[0]}': its type changes past the first records",
                    hint="give it one type throughout, or filter and deduplicate with `lovecraft shard` first",
                ) from None
            raise InputError(
                f"{self.name}, column '{self.source_column}': its sequences hold nulls",
                hint="fill them (or drop those rows) before bucketing",
            ) from None

    def each(self, part_bytes: int) -> Iterator[tuple[VarColumn, int, str]]:
        """Every part's sequences in input order, as ``bucket`` keeps them (``verify --against``):
        with ``--dedup``, the duplicates are decided first, in a temporary directory, in bounded
        memory (:mod:`lovecraft_convert.engine.dedup`)."""
        parts = self.partitions(part_bytes)
        if not self.o.dedup:
            for p in parts:
                yield from self.sequences(p)
            return
        import shutil
        import tempfile

        from ..engine.near import decide_for, scan_for
        from ..transforms.dedup import DropSet

        scratch = tempfile.mkdtemp(prefix="lovecraft-dedup-")
        try:
            budget = self.o_budget()
            mask = self.keep.filter.mask if self.keep.filter is not None else None
            dedup = self.dedup()
            scans = [
                scan_for(dedup, self.reader.part_batches(p), mask, self.reader.schema, p.index, scratch, budget)
                for p in parts
            ]
            n = decide_for(dedup, scratch, scans, budget)
            for p in parts:
                yield from self.sequences(p, DropSet(scratch, p.index, n))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def o_budget(self) -> int:
        return parse_size(self.o.max_memory) // 4

    def _ragged(self, lines: VarColumn, line0: int, part: Part) -> Iterator[tuple[VarColumn, int, str]]:
        """Rows of a CSV file as numeric sequences: every field a number; blank lines, the first
        --skip-rows lines and --comment lines skipped; a first line that is not numbers is a
        header (unless --no-header)."""
        raw = lines.values.view(np.uint8)
        offs = lines.offsets
        lens = np.diff(offs)
        spec = self.reader.specs[part.spec]
        delim = (self.o.delimiter or ("\t" if spec.name.endswith((".tsv", ".tsv.gz")) else ",")).encode()
        data = raw.tobytes()
        o = offs.tolist()
        keep = np.flatnonzero(lens > 0)
        if self.o.comment is not None and len(keep):
            keep = keep[raw[offs[keep]] != ord(self.o.comment)]
        if self.o.skip_rows and part.start in (None, 0):
            keep = keep[line0 + keep >= self.o.skip_rows]
        first = self._header_pending and len(keep) > 0
        if first:
            self._header_pending = False
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


@dataclass
class SeqContext:
    """What a unit of ``bucket`` work (length buckets or packed rows) is given: picklable, the
    options rebuilt in the worker, the source reopened there."""

    inputs: list[str]
    options: dict[str, Any]
    work: str
    hash_buckets: int  # 0: not shuffled
    place: dict | None = None  # where the run's objects go (engine/units.py), None for a local output
    dedup: dict | None = None  # --dedup: mode, columns, partitions (jobs/dedup.py), once decided

    @property
    def o(self) -> BucketOptions:
        return BucketOptions(**self.options)

    def budget(self) -> int:
        return parse_size(self.o.max_memory) // 4

    def source(self) -> Sequences:
        return Sequences(self.inputs, self.o, self.budget())


TOKENIZER_PART_BYTES = 16 << 20  # parts for tokenizers slow per byte: every worker busy to the end


def split_phase(o: BucketOptions, run, probe: Sequences, unit, estimate) -> tuple[SeqContext, list[dict]]:
    """Phase 1 of ``bucket`` (either layout): the input's parts read by ``unit`` into spill files,
    hashed into buckets when shuffled (as many as ``estimate(probe)`` spilled bytes need), each
    part journalled; returns the units' context and the parts' fragments in input order."""
    import math

    from ..engine.journal import save_plan
    from ..engine.units import usable
    from ..util import trace

    part_bytes = o.part_bytes
    if probe.tokenizer is not None and probe.tokenizer.spill_dtype.itemsize == 4 and part_bytes == PART_BYTES:
        part_bytes = TOKENIZER_PART_BYTES
    ctx = SeqContext(run.inputs, o.to_dict(), run.work, 0, place=run.place)
    parts = probe.partitions(part_bytes, mapper=run.executor.map_ordered)
    if o.shuffle:
        run.plan.setdefault("hash_buckets", max(1, math.ceil(estimate(probe) / max(1, ctx.budget() // 4))))
        save_plan(run.work, run.plan)
        ctx.hash_buckets = run.plan["hash_buckets"]
    trace(f"{len(parts)} parts")
    if o.dedup:
        from .dedup import run_dedup

        run_dedup(ctx, parts, run, o, probe.reader, probe.dedup(), lambda p: (p,))
    done = {e["part"]: e for e in usable(run, run.journal.phase(1))}
    calls = [(ctx, p) for p in parts if p.index not in done]
    run.run_units(unit, calls, "reading", o.progress, done, "part", input_bytes=probe.progress_total())
    trace("phase 1 done")
    return ctx, [done[p.index] for p in parts]


def drops_of(ctx: SeqContext, part: Part):
    """The rows ``--dedup`` dropped in ``part`` (None without it)."""
    if ctx.dedup is None:
        return None
    from ..transforms.dedup import DropSet

    return DropSet(os.path.join(ctx.work, "spill"), part.index, ctx.dedup["partitions"])


def kept_counts(src: Sequences, ctx: SeqContext) -> dict[str, Any]:
    """What a split unit's fragment says of its keep step: rows removed per reason and rows read."""
    if src.keep.filter is None and ctx.dedup is None:
        return {}
    return {"removed": dict(src.keep.removed), "read": src.keep.rows_read}
