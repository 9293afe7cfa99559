"""``inspect``: what an input holds before converting it, or what a dataset directory holds.

For inputs (text, CSV, NPY; plain or compressed) one streaming pass with bounded memory, through the
same readers ``convert`` uses, gives: rows (exact, or estimated from ``sample`` rows and said to
be), and per column the dtype and row shape, NaN count, min, max and mean; for floating columns
what float16 would cost (values that would overflow or flush to zero, the largest rounding error,
measured by the same code ``convert --dtype float16`` runs); for text and sequences the length
distribution (exact, from a histogram of the lengths: min, mean, p50/p90/p99, max), a histogram
drawn in the terminal and the length-bucket boundaries that minimise padding for ``num_buckets``
buckets; and the output size per format, from writing a sample of the rows with each writer.

Percentiles are the ``inverted_cdf`` kind (the smallest length with at least q% of the rows at or
below it: ``numpy.percentile(..., method="inverted_cdf")``). Lengths are in bytes for text (UTF-8)
and in elements for sequences.

For a dataset directory everything comes from ``_manifest.json``: format, schema, rows, shards,
buckets, sizes, the float16 report, the command that made it, and the lines of code that load it.
"""

from __future__ import annotations

import json
import os
import sys
import types
from typing import Any

from .errors import LovecraftError
from .manifest import read_manifest
from .util import format_size, parse_size

MANIFEST = "_manifest.json"
SAMPLE_BYTES = 4 << 20  # in-memory bytes of the rows written by each writer to estimate output sizes
DEFAULT_BUCKETS = 8
BUCKET_TABLE = (1, 2, 4, 8, 16, 32)
HIST_BINS = 24
BAR = 40


def inspect(
    inputs_or_dataset: str | os.PathLike | list[str],
    sample: int | None = None,
    num_buckets: int | None = None,
    *,
    input_format: str | None = None,
    header: bool = True,
    delimiter: str | None = None,
    column_types: dict[str, str] | None = None,
    columns: list[str] | None = None,
    errors: str = "strict",
    max_expansion: float = 1000.0,
    max_memory: int | str = "256MiB",
    estimate: bool = True,
    plot: str | None = None,
    progress: bool | None = False,
) -> dict[str, Any]:
    """Inspect inputs (paths, globs, ``-``) or one dataset directory; returns a JSON-able dict.

    ``sample``: read only the first ``sample`` rows (figures are then estimates, and say so).
    ``num_buckets``: the K of the suggested length buckets (default 8, with a table for other K).
    ``plot``: write a PNG of the length histograms with the suggested boundaries (needs matplotlib).
    The input keywords are ``convert``'s (``input_format``, ``header``, ``delimiter``, ...).
    """
    if isinstance(inputs_or_dataset, (str, os.PathLike)):
        inputs = [os.fspath(inputs_or_dataset)]
    else:
        inputs = [os.fspath(p) for p in inputs_or_dataset]
    if sample is not None and sample < 1:
        raise LovecraftError(f"--sample {sample}: give a positive number of rows")
    if num_buckets is not None and num_buckets < 1:
        raise LovecraftError(f"--num-buckets {num_buckets}: give at least 1")
    if len(inputs) == 1 and inputs[0] != "-" and os.path.isdir(inputs[0]):
        if plot:
            raise LovecraftError("--plot draws the length histogram of inputs", hint="give input files, not a dataset")
        return inspect_dataset(inputs[0])
    if any(_is_tfrecord(p) for p in inputs):
        if plot:
            raise LovecraftError("--plot draws the length histograms of text, CSV or NPY inputs, not TFRecord files")
        return inspect_tfrecord(inputs, sample=sample, max_expansion=max_expansion)
    from .pipeline import ConvertOptions

    o = ConvertOptions(
        input_format=input_format,
        header=header,
        delimiter=delimiter,
        column_types=dict(column_types or {}),
        columns=list(columns) if columns else None,
        errors=errors,
        max_expansion=max_expansion,
        max_memory=max_memory,
    )
    report = _inspect_inputs(inputs, o, sample, num_buckets, estimate, progress)
    if plot:
        draw_plot(report, plot)
        report["plot"] = plot
    return report


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------


class _Profile:
    """Figures of one column, gathered batch by batch in bounded memory."""

    BLOCK = 1 << 20  # elements per step

    def __init__(self, f) -> None:
        import numpy as np

        from .transforms.downcast import DowncastStats

        self.f = f
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
        self.np = np

    def update(self, col) -> None:
        from .schema import SEQUENCE, VarColumn

        np = self.np
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
        np = self.np
        if not self.numeric or a.size == 0:
            return
        flat = a.reshape(-1)
        if flat.dtype.kind == "b":
            flat = flat.view(np.uint8)
        for i in range(0, flat.size, self.BLOCK):
            self._block(flat[i : i + self.BLOCK])

    def _block(self, x) -> None:
        np = self.np
        self.values += x.size
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
        from .transforms.downcast import downcast_array

        downcast_array(x, self.np.dtype(self.np.float16), self.f16, "clip", lambda i: ("", i))

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
        if self.hist is not None:
            d["lengths"] = length_report(self.hist, num_buckets)
            d["empty"] = self.hist.get(0, 0)
        return d


def _num(v):
    import math

    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def length_report(hist: dict[int, int], num_buckets: int | None = None) -> dict[str, Any]:
    """Length figures of one column from its exact histogram ``{length: rows}``."""
    import numpy as np

    from .transforms.bucketing import as_histogram, optimal_boundaries, padding_stats

    values, counts = as_histogram(hist)
    n = int(counts.sum())
    if n == 0:
        return {"rows": 0}
    cum = np.cumsum(counts)

    def pct(q: int) -> int:
        target = max(1, -(-q * n // 100))
        return int(values[int(np.searchsorted(cum, target, side="left"))])

    k = num_buckets or DEFAULT_BUCKETS
    bounds = optimal_boundaries((values, counts), k)
    stats = padding_stats((values, counts), bounds)
    table = {}
    for kk in sorted({*BUCKET_TABLE, k}):
        b = bounds if kk == k else optimal_boundaries((values, counts), kk)
        table[str(kk)] = round(padding_stats((values, counts), b)["efficiency"], 6)
    return {
        "rows": n,
        "min": int(values[0]),
        "mean": float((values * counts).sum() / n),
        "p50": pct(50),
        "p90": pct(90),
        "p99": pct(99),
        "max": int(values[-1]),
        "distinct": len(values),
        "histogram": _bins(values, counts),
        "buckets": {
            "k": k,
            "boundaries": bounds,
            "tokens": stats["tokens"],
            "padded": stats["padded"],
            "efficiency": stats["efficiency"],
            "detail": stats["buckets"],
        },
        "efficiency_unbucketed": padding_stats((values, counts))["efficiency"],
        "efficiency_by_k": table,
    }


def _bins(values, counts) -> list[dict[str, int]]:
    """At most ``HIST_BINS`` equal-width bins of lengths ``[lo, hi]`` with their rows."""
    import numpy as np

    lo, hi = int(values[0]), int(values[-1])
    width = max(1, -(-(hi - lo + 1) // HIST_BINS))
    idx = (values - lo) // width
    sums = np.bincount(idx, weights=counts).astype(np.int64)
    return [{"lo": lo + i * width, "hi": min(hi, lo + (i + 1) * width - 1), "rows": int(c)} for i, c in enumerate(sums)]


def _inspect_inputs(inputs, o, sample, num_buckets, estimate, progress) -> dict[str, Any]:
    from .formats.csv import SchemaChanged
    from .pipeline import _columns, _select, open_reader, prefetch

    budget = parse_size(o.max_memory)
    reader = open_reader(inputs, o, budget)
    while True:
        schema = _columns(reader, o.columns)
        profiles = [_Profile(f) for f in schema]
        kept: list = []
        kept_bytes = 0
        rows = 0
        done = 0.0
        truncated = False
        bar = _bar(reader, progress)
        # A sample is read without the read-ahead thread, so the input bytes consumed so far
        # belong to the rows seen (they scale the row estimate).
        batches = _select(reader.batches(), schema)
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
                    p.update(batch.columns[p.f.name])
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
        from .errors import InputError

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
    if estimate and kept:
        report["estimated_bytes"] = estimate_sizes(kept, schema, total_rows or rows, reader.format)
        floating = [f for f in schema if f.np_dtype.kind == "f" and f.np_dtype.itemsize > 2]
        if floating:
            report["estimated_bytes_float16"] = estimate_sizes(
                kept, schema, total_rows or rows, reader.format, dtype="float16"
            )
        report["estimated_exact"] = False
    return report


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
    kept: list, schema, rows: int, input_format: str | None, dtype: str | None = None
) -> dict[str, int | None]:
    """Bytes of the dataset each format would write for ``rows`` rows, from writing the sample rows
    ``kept`` (and half of them, to separate fixed overheads such as headers and footers)."""
    import shutil
    import tempfile

    from .formats import OUTPUT_FORMATS, WRITERS, load
    from .formats.base import WriteOptions
    from .schema import Batch

    sample = Batch.concat(kept) if len(kept) > 1 else kept[0]
    limit = max(2, min(sample.num_rows, int(sample.num_rows * SAMPLE_BYTES / max(1, sample.nbytes)) + 1))
    sample = sample.slice(0, limit)
    if dtype is not None:
        from .transforms.downcast import Downcast

        down = Downcast.for_dtype(schema, dtype, {}, "clip")
        if down is not None:
            sample = down(sample)
            schema = down.schema
    out: dict[str, int | None] = {}
    tmp = tempfile.mkdtemp(prefix="lovecraft-inspect-")
    try:
        for fmt in OUTPUT_FORMATS:
            cls = load(WRITERS, fmt)
            try:
                cls.check_schema(schema, "input", input_format)
            except LovecraftError:
                out[fmt] = None
                continue

            def size_of(n: int, fmt=fmt, cls=cls) -> int:
                d = os.path.join(tmp, f"{fmt}-{n}")
                os.mkdir(d)
                w = cls(d, "" if fmt == "memmap" else "data", schema, WriteOptions(expected_rows=n))
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
                out[fmt] = None
                continue
            if rows <= n:
                out[fmt] = full
                continue
            half = size_of(max(1, n // 2))
            per_row = (full - half) / max(1, n - max(1, n // 2))
            fixed = max(0.0, full - per_row * n)
            out[fmt] = int(round(fixed + per_row * rows))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# --------------------------------------------------------------------------------------------
# TFRecord files (ours or anyone's): framing and both CRCs of every record, Examples described
# --------------------------------------------------------------------------------------------

TFRECORD_EXT = (".tfrecord", ".tfrecords", ".tfrec")
EXAMPLE_SAMPLE = 1000  # records parsed as tf.train.Example to describe the features
PREVIEW = 5  # records shown when they are not Examples


def _is_tfrecord(path: str) -> bool:
    low = path.lower()
    for ext in (".gz", ".zlib"):
        if low.endswith(ext):
            low = low[: -len(ext)]
    return low.endswith(TFRECORD_EXT)


def inspect_tfrecord(inputs: list[str], sample: int | None = None, max_expansion: float = 1000.0) -> dict[str, Any]:
    """Records of TFRecord files (``.tfrecord``, ``.tfrecord.gz``): every record's framing and both
    CRCs are checked (a corrupt or cut file is an error naming the record and its byte offset);
    the first records are parsed as ``tf.train.Example`` to describe the features, and shown as
    bytes when they are not Examples. ``sample`` stops after that many records (in all)."""
    from .errors import InputError
    from .formats.tfexample import iter_records, parse_example
    from .sources import open_stream, resolve_inputs

    others = [p for p in inputs if not _is_tfrecord(p)]
    if others:
        raise InputError(f"inputs mix TFRecord files with other formats ({others[0]})", hint="inspect them separately")
    specs = resolve_inputs(inputs, "tfrecord")
    files: list[dict[str, Any]] = []
    features: dict[str, dict[str, Any]] = {}
    parsed = 0
    examples = True
    preview: list[dict[str, Any]] = []
    total = 0
    stopped = False
    for spec in specs:
        n = nbytes = 0
        lo = hi = None
        size = spec.size if spec.compression is None else None
        with open_stream(spec, max_ratio=max_expansion) as f:
            for data in iter_records(f, spec.name, size):
                if sample is not None and total >= sample:
                    stopped = True
                    break
                n += 1
                total += 1
                nbytes += len(data)
                lo = len(data) if lo is None else min(lo, len(data))
                hi = len(data) if hi is None else max(hi, len(data))
                if len(preview) < PREVIEW:
                    preview.append({"file": spec.name, "bytes": len(data), "text": _preview(data)})
                if examples and parsed < EXAMPLE_SAMPLE:
                    try:
                        ex = parse_example(data)
                    except InputError:
                        ex = None
                    if not ex:  # not an Example, or an Example without features: raw records
                        examples = False
                        features = {}
                    else:
                        parsed += 1
                        _tally(features, ex)
        files.append(
            {
                "name": spec.name,
                "path": os.path.abspath(spec.path),
                "compression": spec.compression,
                "size": spec.size,
                "records": n,
                "record_bytes": {"min": lo, "mean": nbytes / n if n else None, "max": hi, "total": nbytes},
            }
        )
        if stopped:
            break
    if total == 0:
        raise InputError(f"{', '.join(s.name for s in specs)}: empty input (no records)", hint="check the file")
    return {
        "kind": "tfrecord",
        "files": files,
        "records": total,
        "records_exact": not stopped,
        "examples": examples,
        "examples_parsed": parsed if examples else 0,
        "features": [{"name": k, **v} for k, v in features.items()] if examples else None,
        "preview": preview,
    }


def _preview(data: bytes, limit: int = 60) -> str:
    text = data[:limit].decode("utf-8", "backslashreplace")
    return text + ("..." if len(data) > limit else "")


def _tally(features: dict[str, dict[str, Any]], ex: dict[str, tuple[str, list]]) -> None:
    for name, (kind, values) in ex.items():
        f = features.setdefault(name, {"kind": kind, "records": 0, "values_min": None, "values_max": None})
        if f["kind"] != kind:
            f["kind"] = "mixed"
        f["records"] += 1
        k = len(values)
        f["values_min"] = k if f["values_min"] is None else min(f["values_min"], k)
        f["values_max"] = k if f["values_max"] is None else max(f["values_max"], k)


def _records(n: int) -> str:
    return f"{_n(n)} record" + ("" if n == 1 else "s")


def _format_tfrecord(r: dict[str, Any]) -> str:
    out = []
    for f in r["files"]:
        comp = f["compression"] or "not compressed"
        rb = f["record_bytes"]
        sizes = (
            f"record bytes {_n(rb['min'])}..{_n(rb['max'])}, mean {rb['mean']:.1f}" if f["records"] else "no records"
        )
        out.append(f"{f['name']}: TFRecord, {comp}, {format_size(f['size'])}, {_records(f['records'])} ({sizes})")
    if r["records_exact"]:
        out.append(f"records: {_n(r['records'])} (the framing and both CRCs of every record checked)")
    else:
        out.append(f"records: at least {_n(r['records'])} (stopped at --sample)")
    if r["examples"]:
        out.append(f"tf.train.Example features (from the first {_n(r['examples_parsed'])} records):")
        for f in r["features"]:
            span = f["values_min"] if f["values_min"] == f["values_max"] else f"{f['values_min']}..{f['values_max']}"
            out.append(f"  {f['name']}: {f['kind']}, {span} values per record, in {_n(f['records'])} records")
    else:
        out.append("records are not tf.train.Example messages; the first ones:")
        for p in r["preview"]:
            out.append(f"  {p['bytes']} bytes: {p['text']!r}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# datasets
# --------------------------------------------------------------------------------------------


def inspect_dataset(path: str) -> dict[str, Any]:
    """What a dataset directory holds, from its manifest alone (``verify`` checks it against the files)."""
    m = read_manifest(path)
    files = [f for f in m.get("files") or [] if isinstance(f, dict)]
    by_path = {f.get("path"): f for f in files}
    shards = []
    units = m.get("shards") or [sub for b in m.get("buckets") or [] for sub in (b.get("shards") or [b])]
    for s in units:
        names = list(s.get("files") or [])
        shards.append(
            {
                "index": s.get("index"),
                "rows": s.get("rows"),
                "files": names,
                "bytes": sum(int(by_path.get(n, {}).get("bytes") or 0) for n in names),
            }
        )
    total = sum(int(f.get("bytes") or 0) for f in files)
    report: dict[str, Any] = {
        "kind": "dataset",
        "path": path,
        "format": m.get("output_format"),
        "version": m.get("version"),
        "complete": m.get("complete"),
        "rows": m.get("rows"),
        "schema": m.get("schema"),
        "num_shards": len(shards),
        "shards": shards,
        "buckets": m.get("buckets"),
        "shuffle": m.get("shuffle"),
        "bytes": total,
        "files": [
            {k: f.get(k) for k in ("path", "rows", "bytes", "sha256", "column", "role") if k in f} for f in files
        ],
        "stats": m.get("stats"),
        "float16": m.get("float16") or {},
        "command": m.get("command"),
        "argv": m.get("argv"),
        "options": m.get("options"),
        "sources": m.get("sources"),
        "created_by": m.get("created_by"),
        "created_at": m.get("created_at"),
    }
    if m.get("tfrecord"):
        report["tfrecord"] = m["tfrecord"]
    report["load"] = load_snippets(path, m)
    return report


def _q(s: str) -> str:
    return json.dumps(s)


def load_snippets(path: str, m: dict[str, Any]) -> dict[str, str]:
    """The few lines of code that load the dataset, per client library."""
    fmt = m.get("output_format")
    schema = [f for f in m.get("schema") or [] if isinstance(f, dict)]
    files = [f for f in m.get("files") or [] if isinstance(f, dict)]
    shards = m.get("shards") or []
    many = len(shards) > 1 or bool(m.get("buckets"))
    d = path.rstrip("/") or path
    out: dict[str, str] = {}
    if fmt == "memmap":
        lines = ["import numpy as np", ""]
        for f in schema:
            mine = [x for x in files if x.get("column") == f.get("name")]
            for role in ("data", "values", "offsets"):
                paths = [x["path"] for x in mine if (x.get("role") or "data") == role]
                if not paths:
                    continue
                var = f["name"] if role == "data" else f"{f['name']}_{role}"
                if many:
                    lines.append(
                        f'{_ident(var)} = [np.load(f, mmap_mode="r") for f in '
                        f"{[os.path.join(d, p) for p in paths]!r}]  # one array per shard"
                    )
                else:
                    lines.append(f'{_ident(var)} = np.load({_q(os.path.join(d, paths[0]))}, mmap_mode="r")')
            if f.get("kind") != "fixed":
                v = _ident(f["name"])
                lines.append(f"# row i of '{f['name']}': {v}_values[{v}_offsets[i]:{v}_offsets[i + 1]]")
        out["numpy"] = "\n".join(lines)
    elif fmt == "hdf5":
        paths = [x["path"] for x in files]
        first = os.path.join(d, paths[0]) if paths else os.path.join(d, "data.h5")
        lines = ["import h5py", ""]
        if many:
            lines.append(f"for path in {[os.path.join(d, p) for p in paths]!r}:")
            lines.append('    with h5py.File(path, "r") as f:')
            for f in schema:
                lines.append(f"        {_ident(f['name'])} = f[{_q(f['name'])}][:]")
        else:
            lines.append(f'with h5py.File({_q(first)}, "r") as f:')
            for f in schema:
                suffix = ".asstr()[:]" if f.get("kind") == "string" else "[:]"
                lines.append(f"    {_ident(f['name'])} = f[{_q(f['name'])}]{suffix}  # or slice [a:b] for part of it")
        out["h5py"] = "\n".join(lines)
    elif fmt == "parquet":
        out["polars"] = f"import polars as pl\n\ndf = pl.read_parquet({_q(os.path.join(d, '*.parquet'))})"
        out["pyarrow"] = f"import pyarrow.parquet as pq\n\ntable = pq.read_table({_q(d)})"
        out["pandas"] = f"import pandas as pd\n\ndf = pd.read_parquet({_q(d)})"
    elif fmt == "tfrecord":
        tf_info = m.get("tfrecord") or {}
        spec = tf_info.get("feature_spec") or {}
        comp = tf_info.get("compression")
        lines = ["import tensorflow as tf", "", "feature_spec = {"]
        for name, s in spec.items():
            dtype = f"tf.{s.get('dtype')}"
            if s.get("type") == "VarLenFeature":
                lines.append(f"    {_q(name)}: tf.io.VarLenFeature({dtype}),")
            else:
                lines.append(f"    {_q(name)}: tf.io.FixedLenFeature({list(s.get('shape') or [])}, {dtype}),")
        lines.append("}")
        paths = [os.path.join(d, x["path"]) for x in files]
        lines.append(f"files = {paths!r}")
        lines.append(
            f"ds = tf.data.TFRecordDataset(files, compression_type={_q(comp) if comp else 'None'})"
            ".batch(256).map(lambda r: tf.io.parse_example(r, feature_spec))"
        )
        out["tf.data"] = "\n".join(lines)
    out["lovecraft"] = (
        f"import lovecraft_convert as lc\n\nds = lc.open_dataset({_q(d)})\nfor batch in ds.batches(256):\n    ...  # dict of NumPy arrays"
    )
    return out


def _ident(name: str) -> str:
    s = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    if not s or s[0].isdigit():
        s = "_" + s
    return s


# --------------------------------------------------------------------------------------------
# presentation (used by the CLI; plain text)
# --------------------------------------------------------------------------------------------


def _n(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def draw_histogram(hist: list[dict[str, int]], width: int = BAR) -> list[str]:
    """The length histogram as text bars."""
    top = max((b["rows"] for b in hist), default=0)
    lw = max(len(_n(b["hi"])) for b in hist) if hist else 1
    cw = max(len(_n(b["rows"])) for b in hist) if hist else 1
    lines = []
    eighths = " ▏▎▍▌▋▊▉█"
    for b in hist:
        units = b["rows"] / top * width * 8 if top else 0
        full, part = divmod(int(round(units)), 8)
        bar = "█" * full + (eighths[part] if part else "")
        if b["rows"] and not bar:
            bar = "▏"
        label = _n(b["lo"]) if b["lo"] == b["hi"] else f"{_n(b['lo'])}-{_n(b['hi'])}"
        lines.append(f"    {label:>{2 * lw + 1}} {bar:<{width}} {_n(b['rows']):>{cw}}")
    return lines


def format_text(r: dict[str, Any]) -> str:
    """A report of :func:`inspect` as text for a terminal."""
    if r.get("kind") == "dataset":
        return _format_dataset(r)
    if r.get("kind") == "tfrecord":
        return _format_tfrecord(r)
    out = []
    for i in r["inputs"]:
        comp = i["compression"] or "not compressed"
        size = format_size(i["size"]) if i["size"] is not None else "size unknown"
        out.append(f"{i['name']}: {i['format']}, {comp}, {size}")
    if r["rows_exact"]:
        out.append(f"rows: {_n(r['rows'])}")
    else:
        est = f"~{_n(r['rows'])}" if r["rows"] is not None else "unknown"
        out.append(f"rows: {est} (an ESTIMATE from a sample of the first {_n(r['sample_rows'])} rows)")
    out.append("")
    for c in r["columns"]:
        shape = f" shape per row {tuple(c['shape'])}" if c["shape"] else ""
        out.append(f"column '{c['name']}': {c['type']}{shape}")
        if "min" in c:
            out.append(
                f"  min {_n(c['min'])}  max {_n(c['max'])}  mean {_n(c['mean'])}  NaN {_n(c['nan'])}"
                f"  ({_n(c['values'])} values)"
            )
        if "float16" in c:
            h = c["float16"]
            out.append(
                f"  as float16: {_n(h['overflow'])} would overflow (|x| > 65504), {_n(h['flushed_to_zero'])} would "
                f"flush to zero; largest rounding error {h['max_abs_error']:.3g} (relative {h['max_rel_error']:.3g})"
            )
        if "lengths" in c and c["lengths"].get("rows"):
            ln = c["lengths"]
            unit = "bytes" if c["kind"] in ("string", "binary") else "elements"
            out.append(
                f"  length ({unit}): min {_n(ln['min'])}  mean {ln['mean']:.1f}  p50 {_n(ln['p50'])}  "
                f"p90 {_n(ln['p90'])}  p99 {_n(ln['p99'])}  max {_n(ln['max'])}  ({_n(c.get('empty'))} empty)"
            )
            out.extend(draw_histogram(ln["histogram"]))
            b = ln["buckets"]
            out.append(
                f"  --num-buckets {b['k']}: boundaries {b['boundaries']}, padding efficiency "
                f"{b['efficiency']:.1%} (unbucketed {ln['efficiency_unbucketed']:.1%})"
            )
            table = ", ".join(f"K={k}: {v:.1%}" for k, v in ln["efficiency_by_k"].items())
            out.append(f"  efficiency by K: {table}")
        out.append("")
    if r.get("estimated_bytes"):
        approx = "estimated from a sample" if r.get("estimated_exact") is False else ""
        out.append(f"output size per format ({approx}):")
        f16 = r.get("estimated_bytes_float16") or {}
        for fmt, size in r["estimated_bytes"].items():
            text = format_size(size) if size is not None else "cannot hold these columns"
            extra = f"  (--dtype float16: {format_size(f16[fmt])})" if f16.get(fmt) is not None else ""
            out.append(f"  {fmt:<9} {text}{extra}")
    if r.get("plot"):
        out.append(f"plot: {r['plot']}")
    return "\n".join(out).rstrip() + "\n"


def _format_dataset(r: dict[str, Any]) -> str:
    out = [f"{r['path']}: lovecraft dataset, {r['format']}, {_n(r['rows'])} rows, {format_size(r['bytes'])}"]
    out.append(f"made by: lovecraft {' '.join(r['argv']) if r.get('argv') else r.get('command')}")
    if r.get("created_at") or r.get("created_by"):
        out.append(f"  {r.get('created_by') or ''} {r.get('created_at') or ''}".rstrip())
    opts = r.get("options") or {}
    shown = {k: v for k, v in opts.items() if v not in (None, False, {}, [], "") and k != "overwrite"}
    if shown:
        out.append("options: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    if r.get("shuffle"):
        out.append(f"shuffled: {r['shuffle']}")
    out.append("schema:")
    stats = r.get("stats") or {}
    for f in r.get("schema") or []:
        st = stats.get(f.get("name"), {})
        bits = []
        if "min" in st:
            bits.append(f"min {_n(st['min'])} max {_n(st['max'])}")
        if st.get("nan"):
            bits.append(f"NaN {_n(st['nan'])}")
        if st.get("length_max") is not None:
            bits.append(f"length {_n(st.get('length_min'))}..{_n(st.get('length_max'))}")
        desc = f.get("kind") if f.get("kind") != "fixed" else _dtype_name(f.get("dtype"))
        shape = f" {tuple(f.get('shape'))}" if f.get("shape") else ""
        out.append(f"  {f.get('name')}: {desc}{shape}  {'; '.join(bits)}".rstrip())
    out.append(f"shards: {r['num_shards']}")
    for s in r["shards"][:8]:
        out.append(f"  {s['index']}: {_n(s['rows'])} rows, {format_size(s['bytes'])}: {', '.join(s['files'])}")
    if len(r["shards"]) > 8:
        out.append(f"  ... {len(r['shards']) - 8} more")
    if r.get("buckets"):
        out.append(f"buckets: {len(r['buckets'])}")
        for b in r["buckets"]:
            out.append(
                f"  {b.get('index')}: lengths {b.get('min_length')}..{b.get('max_length')}, {_n(b.get('rows'))} rows"
            )
    for name, h in (r.get("float16") or {}).items():
        out.append(
            f"float16 {name}: {_n(h.get('overflow'))} overflowed ({_n(h.get('clipped'))} clipped), "
            f"{_n(h.get('flushed_to_zero'))} flushed to zero, max abs error {h.get('max_abs_error', 0):.3g}, "
            f"max rel error {h.get('max_rel_error', 0):.3g}"
        )
    out.append("")
    for lib, code in r["load"].items():
        out.append(f"load with {lib}:")
        out.extend("    " + line if line else "" for line in code.splitlines())
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _dtype_name(d) -> str:
    import numpy as np

    try:
        return np.dtype(d).name
    except (TypeError, ValueError):
        return str(d)


def draw_plot(report: dict[str, Any], path: str) -> None:
    """A PNG of each variable-length column's length histogram with the suggested boundaries."""
    try:
        import matplotlib
    except ImportError:
        raise LovecraftError(
            "--plot needs matplotlib", hint="pip install 'lovecraft-convert[plot]' (or matplotlib)"
        ) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    cols = [c for c in report.get("columns", []) if c.get("lengths", {}).get("rows")]
    if not cols:
        raise LovecraftError(
            "--plot: no text or sequence column to draw", hint="the inputs hold fixed-size columns only"
        )
    fig, axes = plt.subplots(len(cols), 1, figsize=(9, 3.2 * len(cols)), squeeze=False)
    for ax, c in zip(axes[:, 0], cols, strict=True):
        ln = c["lengths"]
        hist = ln["histogram"]
        ax.bar(
            [h["lo"] for h in hist],
            [h["rows"] for h in hist],
            width=[h["hi"] - h["lo"] + 1 for h in hist],
            align="edge",
            color="#4477aa",
        )
        for b in ln["buckets"]["boundaries"]:
            ax.axvline(b + 1, color="#cc3311", linewidth=1)
        ax.set_title(
            f"'{c['name']}': {ln['rows']:,} rows; {ln['buckets']['k']} buckets, "
            f"padding efficiency {ln['buckets']['efficiency']:.1%}"
        )
        ax.set_xlabel("length")
        ax.set_ylabel("rows")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as e:
        raise LovecraftError(f"{path}: cannot write the plot ({e.strerror})", hint="check the path") from None
    finally:
        plt.close(fig)


class _CallableModule(types.ModuleType):
    """``lovecraft_convert.inspect`` is both this module and the function: importing the submodule
    makes the package attribute the module, so calling it must still run :func:`inspect`."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return inspect(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
