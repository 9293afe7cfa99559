"""``inspect`` of inputs: one streaming pass with bounded memory, through the same readers
``convert`` uses: rows (exact, or estimated from a sample and said to be), and per column the dtype
and row shape, NaN count, min, max and mean; for floating columns what float16 would cost (measured
by the same code ``convert --dtype float16`` runs); for text and sequences the length distribution
(:mod:`.lengths`); with ``--plot``, value histograms of numeric columns (:mod:`.values`); and the
output size per format, from writing a sample of the rows with each
format's writer."""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
from typing import Any

import numpy as np

from ..errors import InputError, LovecraftError
from ..formats import get as get_format
from ..formats import names as format_names
from ..formats.writing import WriteOptions
from ..inputs import open_reader
from ..inputs.base import SchemaChanged
from ..runtime.readahead import prefetch
from ..schema import SEQUENCE, Batch, VarColumn
from ..transforms.downcast import DowncastStats, downcast_array
from ..transforms.plan import OutputPlan
from ..util import parse_size
from .lengths import length_report
from .values import ValueHistogram

SAMPLE_BYTES = 4 << 20  # in-memory bytes of the rows written by each writer to estimate output sizes


class Profile:
    """Figures of one column, gathered batch by batch in bounded memory."""

    BLOCK = 1 << 20  # elements per step

    def __init__(self, f, plot: bool = False) -> None:
        self.f = f
        self.plot = plot
        self.rows = 0
        self.values = 0
        self.nan = 0
        self.min = None
        self.max = None
        self.sum = 0.0
        dt = f.np_dtype
        self.numeric = dt.kind in "biuf"
        self.f16 = DowncastStats("float16") if dt.kind == "f" and dt.itemsize > 2 else None
        self.hist: dict[int, int] = {} if f.variable else None  # type: ignore[assignment]
        self.values_hist = ValueHistogram(dt.kind in "biu") if plot and self.numeric and f.kind == "fixed" else None

    def update(self, col) -> None:
        if isinstance(col, VarColumn):
            lens = col.lengths()
            self.rows += len(lens)
            if len(lens):
                u, c = np.unique(lens, return_counts=True)
                h = self.hist
                for k, v in zip(u.tolist(), c.tolist(), strict=True):
                    h[k] = h.get(k, 0) + v
            if self.f.kind == SEQUENCE:
                self._numeric(col.values)
        else:
            self.rows += len(col)
            self._numeric(col)

    def _numeric(self, a) -> None:
        if not self.numeric or a.size == 0:
            return
        flat = a.reshape(-1)
        if flat.dtype.kind == "b":
            flat = flat.view(np.uint8)
        for i in range(0, flat.size, self.BLOCK):
            self._block(flat[i : i + self.BLOCK])

    def _block(self, x) -> None:
        self.values += x.size
        if self.values_hist is not None:
            self.values_hist.update(x)
        src = x
        if x.dtype.kind == "f":
            if x.dtype == np.float16:
                x = x.astype(np.float32)
            with np.errstate(all="ignore"):
                lo, hi = x.min(), x.max()
                if np.isnan(lo) or np.isnan(hi):
                    nan = np.isnan(x)
                    n_nan = int(np.count_nonzero(nan))
                    self.nan += n_nan
                    if n_nan == x.size:
                        self._f16(src)
                        return
                    x = x[~nan]
                    lo, hi = x.min(), x.max()
                self.sum += float(x.sum(dtype=np.float64))
            self._f16(src)
        else:
            lo, hi = x.min(), x.max()
            self.sum += float(x.sum(dtype=np.float64))
        lo, hi = lo.item(), hi.item()
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)

    def _f16(self, x) -> None:
        if self.f16 is None:
            return
        downcast_array(x, np.dtype(np.float16), self.f16, "clip", lambda i: ("", self.f.name, None, i))

    def to_dict(self, num_buckets: int | None) -> dict[str, Any]:
        f = self.f
        d: dict[str, Any] = {
            "name": f.name,
            "kind": f.kind,
            "dtype": f.np_dtype.name if f.kind != "string" else "string",
            "shape": list(f.shape),
            "type": f.describe(),
            "count": self.rows,
        }
        if self.numeric and (f.kind in ("fixed", "sequence")):
            finite = self.values - self.nan
            d["values"] = self.values
            d["nan"] = self.nan if f.np_dtype.kind == "f" else 0
            d["min"] = _num(self.min)
            d["max"] = _num(self.max)
            d["mean"] = _num(self.sum / finite) if finite else None
            if self.f16 is not None:
                r = self.f16.to_dict()
                r.pop("clipped", None)
                r.pop("target", None)
                d["float16"] = r
            if self.values_hist is not None:
                d["value_histogram"] = self.values_hist.to_dict()
        if self.hist is not None:
            d["lengths"] = length_report(self.hist, num_buckets, plot=self.plot)
            d["empty"] = self.hist.get(0, 0)
        return d


def _num(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def inspect_inputs(inputs, o, sample, num_buckets, estimate, progress, plot: bool = False) -> dict[str, Any]:
    budget = parse_size(o.max_memory)
    reader = open_reader(inputs, budget=budget, lenient=True, **o.read_kwargs())
    while True:
        plan = OutputPlan.build(reader.schema, ", ".join(s.name for s in reader.specs), columns=o.columns)
        schema = plan.schema
        tokens = _tokens(reader, schema, o)  # (column, Tokens): its lengths in tokens, as bucket counts them
        profiles = [Profile(f, plot) for f in schema]
        kept: list = []
        kept_bytes = 0
        rows = 0
        done = 0.0
        truncated = False
        bar = _bar(reader, progress)
        # A sample is read without the read-ahead thread, so the input bytes consumed so far
        # belong to the rows seen (they scale the row estimate).
        batches = map(plan, reader.batches())
        if sample is None:
            batches = prefetch(batches, depth=2)
        try:
            for batch in batches:
                if sample is not None and rows >= sample:
                    if batch.num_rows:
                        truncated = True
                        break
                    continue
                before = done
                after = float(reader.progress_done())
                if sample is not None and rows + batch.num_rows > sample:
                    used = sample - rows
                    after = before + (after - before) * used / batch.num_rows
                    batch = batch.slice(0, used)
                    truncated = True
                done = after
                for p in profiles:
                    col = batch.columns[p.f.name]
                    p.update(tokens[1].encode(col) if tokens is not None and p.f.name == tokens[0] else col)
                rows += batch.num_rows
                if estimate and kept_bytes < SAMPLE_BYTES and batch.num_rows:
                    kept.append(batch)
                    kept_bytes += batch.nbytes
                if bar is not None:
                    bar.n = int(done)
                    bar.refresh()
                if truncated:
                    break
            break
        except SchemaChanged:
            continue  # a CSV column was widened: start over with the wider types
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
            if bar is not None:
                bar.close()
    if reader.rows is not None and rows < reader.rows:
        truncated = True
    if rows == 0:
        raise InputError(f"{', '.join(s.name for s in reader.specs)}: empty input (no records)", hint="check the file")
    exact = not truncated
    total_rows: int | None = rows
    if not exact:
        total_rows = _estimate_rows(reader, rows, done)
    sizes = [s.size for s in reader.specs]
    report: dict[str, Any] = {
        "kind": "inputs",
        "inputs": [
            {
                "name": s.name,
                "path": None if s.is_stdin else os.path.abspath(s.path),
                "format": s.format,
                "compression": s.compression,
                "size": s.size,
                **{k: v for k, v in (s.notes or {}).items() if k in ("delimiter", "notes")},
            }
            for s in reader.specs
        ],  # fmt: skip
        "format": reader.format,
        "size": None if any(x is None for x in sizes) else sum(sizes),
        "rows": total_rows,
        "rows_exact": exact,
        "sample_rows": rows if not exact else None,
        "columns": [p.to_dict(num_buckets) for p in profiles],
    }
    if tokens is not None:
        c = next(c for c in report["columns"] if c["name"] == tokens[0])
        c["length_unit"] = "tokens"
        c["tokenizer"] = tokens[1].describe()
    _add_input_figures(report, reader)
    report.update(getattr(reader, "report", dict)())  # files left out (--on-bad-file skip): skipped_files
    if estimate and kept and len(schema):  # (no column read: nothing to estimate)
        if tokens is not None:  # what convert --tokenizer writes: the text column's tokens
            kept, schema = [tokens[2](b) for b in kept], tokens[2].schema
            report["estimated_of"] = "tokens"
        report["estimated_bytes"] = estimate_sizes(kept, schema, total_rows or rows, budget=budget)
        floating = [f for f in schema if f.np_dtype.kind == "f" and f.np_dtype.itemsize > 2]
        if floating:
            report["estimated_bytes_float16"] = estimate_sizes(
                kept, schema, total_rows or rows, dtype="float16", budget=budget
            )
        report["estimated_exact"] = False
    return report


def _tokens(reader, schema, o):
    """The text column ``--tokenizer`` measures (``--column``, else ``text``, else the only text
    column), the tokenizer with the markers and the step that writes that column's tokens alone
    (as ``convert --tokenizer`` does), or None without ``--tokenizer``."""
    if o.tokenizer is None:
        return None
    from ..transforms.tokenize import Tokenize, Tokens

    where = ", ".join(s.name for s in reader.specs)
    t = Tokenize(schema, Tokens(o.tokenizer, o.eos, o.bos), o.column, None, where)
    return t.column, t.tokens, t


def _add_input_figures(report: dict[str, Any], reader) -> None:
    """What the reader knows beyond the values: the input's own column types, nulls (Parquet,
    Arrow, JSON Lines), type decisions (Parquet, Arrow), row groups and record batches of each input."""
    for i, entry in enumerate(report["inputs"]):
        entry.update(reader.input_details(i))
    info = reader.column_info()
    for c in report["columns"]:
        c.update(info.get(c["name"], {}))
    shown = {c["name"] for c in report["columns"]}
    left = [{"name": k, **v} for k, v in info.items() if k not in shown]
    if left:
        report["columns_not_read"] = left


def _estimate_rows(reader, rows: int, done: int) -> int | None:
    if reader.rows is not None:
        return int(reader.rows)
    total = reader.progress_total()
    if not total or not done:
        return None
    return max(rows, int(round(rows * total / done)))


def _bar(reader, enabled: bool | None):
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(
        total=reader.progress_total(), unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False
    )


def estimate_sizes(
    kept: list, schema, rows: int, dtype: str | None = None, budget: int = 256 << 20
) -> dict[str, int | None]:
    """Bytes of the dataset each format would write for ``rows`` rows, from writing the sample rows
    ``kept`` (and half of them, to separate fixed overheads such as headers and footers)."""

    sample = Batch.concat(kept) if len(kept) > 1 else kept[0]
    limit = max(2, min(sample.num_rows, int(sample.num_rows * SAMPLE_BYTES / max(1, sample.nbytes)) + 1))
    sample = sample.slice(0, limit)
    if dtype is not None:  # what convert --dtype would write
        plan = OutputPlan.build(schema, "input", dtype=dtype, on_overflow="clip")
        sample = plan(sample)
        schema = plan.schema
    out: dict[str, int | None] = {}
    tmp = tempfile.mkdtemp(prefix="lovecraft-inspect-")
    try:
        for name in format_names():
            fmt = get_format(name)
            try:
                fmt.check_schema(schema, "input")
            except LovecraftError:
                out[name] = None
                continue

            def size_of(n: int, name=name, fmt=fmt) -> int:
                d = os.path.join(tmp, f"{name}-{n}")
                os.mkdir(d)
                # written as convert writes within the budget (a 2,000-column sample written with
                # the defaults' 64 MiB row groups peaked at 682 MiB for Parquet alone)
                opts = WriteOptions(expected_rows=n, row_group_bytes=max(1 << 20, budget // 12), memory=budget // 4)
                w = fmt.writer_class()(d, fmt.stem, schema, opts)
                try:
                    w.write(sample.slice(0, n))
                    files = w.close()
                except BaseException:
                    w.abort()
                    raise
                shutil.rmtree(d, ignore_errors=True)
                return sum(f.bytes for f in files)

            n = sample.num_rows
            try:
                full = size_of(n)
            except LovecraftError:  # a value this format cannot store (convert says which)
                out[name] = None
                continue
            if rows <= n:
                out[name] = full
                continue
            half = size_of(max(1, n // 2))
            per_row = (full - half) / max(1, n - max(1, n // 2))
            fixed = max(0.0, full - per_row * n)
            out[name] = int(round(fixed + per_row * rows))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
