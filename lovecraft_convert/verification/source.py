"""``verify --against``: does the dataset hold the same records as its source?

The source is re-read with the reader and the options the manifest records (``options``), forced to
the column types of the manifest's schema (so a CSV is parsed as it was, whatever its first block
suggests), with the same column selection and the same downcast. Values are then compared in the
form the format stores (its descriptor's ``storage_dtype``):

* unshuffled datasets row by row, in step with the dataset's own decoding pass: every differing row
  is counted, the first few are reported with the row, column and both values;
* shuffled or bucketed datasets as multisets: each row gets a 128-bit hash (two 64-bit lanes of
  splitmix64 over every value and its position), and the sums of the hashes (mod 2**64 per lane)
  and the row counts must agree. The digest does not depend on the order of the rows.

A filtered or deduplicated dataset (the manifest's ``removed``) is compared with the subset of the
source its options leave: the recorded ``--filter`` is applied to the source, ``--dedup`` decides
again (in a temporary directory, in bounded memory) which source rows repeat an earlier one, and the
rows removed per reason must be those the manifest records.

Since the same downcast runs on the source, float16 columns are compared exactly (bit for bit
after NumPy's rounding); the float16 report is recomputed from the source and compared with the
manifest's. Memory stays bounded: the source is read in batches of the memory budget.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import manifest as mf
from ..errors import InputError, LovecraftError
from ..formats.checking import file_of
from ..inputs import open_reader
from ..inputs.base import SchemaChanged
from ..inputs.csv import CsvReader
from ..inputs.csvtypes import BOOL_NAN
from ..jobs.convert import dedup_pass, output_plan
from ..jobs.options import ConvertOptions
from ..runtime.readahead import prefetch
from ..schema import FIXED, SEQUENCE, STRING_LIST, Batch, Field, Schema, VarColumn

MANIFEST = mf.MANIFEST_NAME
MAX_REPORTED_ROWS = 5
_MASK = (1 << 64) - 1
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xC2B2AE3D27D4EB4F)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised (uint64 arithmetic wraps)."""
    x = x ^ (x >> np.uint64(30))
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def _words(a: np.ndarray) -> np.ndarray:
    """Values as uint64 words that are equal exactly when the values are (NaNs made one NaN)."""
    if a.dtype.kind == "f":
        a = np.where(np.isnan(a), np.array(np.nan, a.dtype), a)
        a = a + a.dtype.type(0)  # -0.0 + 0.0 == +0.0: equal values, equal words
        return a.view(f"u{a.dtype.itemsize}").astype(np.uint64)
    if a.dtype.kind == "b":
        return a.astype(np.uint64)
    if a.dtype.kind == "u":
        return a.astype(np.uint64)
    if a.dtype.kind == "i":
        return a.astype(np.int64).view(np.uint64)
    return np.ascontiguousarray(a).view(np.uint8).astype(np.uint64)


def row_hashes(batch: Batch, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Two independent 64-bit hashes of every row (all columns, every value and its position)."""
    n = batch.num_rows
    h1 = np.zeros(n, dtype=np.uint64)
    h2 = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for ci, f in enumerate(schema):
            col = batch.columns[f.name]
            salt = np.uint64((ci + 1) * 0x100000001B3)
            if isinstance(col, VarColumn):
                lens = np.diff(col.offsets)
                w = _words(np.asarray(col.values).reshape(-1))
                starts = np.repeat(col.offsets[:-1] - col.offsets[0], lens)
                pos = (np.arange(len(w), dtype=np.int64) - starts).astype(np.uint64)
                e1 = _mix(w ^ _mix(pos * _K1 + salt))
                e2 = _mix(w * _K2 + _mix(pos + salt * _K2))
                s1 = np.zeros(n, dtype=np.uint64)
                s2 = np.zeros(n, dtype=np.uint64)
                nz = lens > 0
                if len(w):
                    idx = (col.offsets[:-1] - col.offsets[0])[nz]
                    s1[nz] = np.add.reduceat(e1, idx)
                    s2[nz] = np.add.reduceat(e2, idx)
                L = lens.astype(np.uint64)
                c1 = _mix(s1 + _mix(L + salt))
                c2 = _mix(s2 ^ _mix(L * _K1 + salt))
            else:
                w = _words(np.asarray(col).reshape(n, -1))
                k = w.shape[1]
                pos = np.arange(k, dtype=np.uint64)
                p1 = _mix(pos * _K1 + salt)
                p2 = _mix(pos + salt * _K2)
                c1 = _mix(_mix(w ^ p1).sum(axis=1, dtype=np.uint64) + salt)
                c2 = _mix(_mix(w * _K2 + p2).sum(axis=1, dtype=np.uint64) ^ salt)
            h1 += _mix(c1 + np.uint64(ci))
            h2 ^= _mix(c2 * _K1 + np.uint64(ci))
            h2 = _mix(h2)
    return h1, h2


def canonical(batch: Batch, schema: Schema, storage: Callable[[Field], np.dtype]) -> Batch:
    """Columns as the format stores them (``storage``: the dtype it reads back), native byte
    order, C-contiguous."""
    cols: dict[str, Any] = {}
    with np.errstate(over="ignore", invalid="ignore"):
        for f in schema:
            c = batch.columns[f.name]
            if f.kind == STRING_LIST:
                cols[f.name] = string_lists_as_bytes(c)
                continue
            if f.kind in (FIXED, SEQUENCE):
                dt = storage(f)
                dt = dt.newbyteorder("=") if not dt.isnative else dt
            else:
                dt = np.dtype(np.uint8)
            if isinstance(c, VarColumn):
                cols[f.name] = VarColumn(np.asarray(c.values).astype(dt, copy=False), np.asarray(c.offsets))
            else:
                cols[f.name] = np.asarray(c).astype(dt, copy=False)
    return Batch(cols, batch.num_rows)


def string_lists_as_bytes(c: VarColumn) -> VarColumn:
    """Lists of strings as one byte string per row (each string: its length as 8 bytes, then its
    bytes), so that they compare and hash as text columns do."""
    inner = c.values
    offs = np.asarray(inner.offsets, dtype=np.int64)
    slen = np.diff(offs)
    sizes = 8 + slen
    out = np.empty(int(sizes.sum()), np.uint8)
    starts = np.zeros(len(slen) + 1, np.int64)
    np.cumsum(sizes, out=starts[1:])
    if len(slen):
        heads = (starts[:-1, None] + np.arange(8)).reshape(-1)
        out[heads] = slen.astype("<u8").view(np.uint8)
        total = int(offs[-1] - offs[0])
        pos = np.repeat(starts[:-1] + 8 - (offs[:-1] - offs[0]), slen) + np.arange(total, dtype=np.int64)
        out[pos] = np.asarray(inner.values)[offs[0] : offs[-1]]
    rows = starts[np.asarray(c.offsets, dtype=np.int64) - int(c.offsets[0])]
    return VarColumn(out, rows)


def _string_list_text(raw: bytes) -> list[str]:
    """The strings of one row of :func:`string_lists_as_bytes`."""
    out, pos = [], 0
    while pos + 8 <= len(raw):
        n = int.from_bytes(raw[pos : pos + 8], "little")
        out.append(raw[pos + 8 : pos + 8 + n].decode("utf-8", "replace"))
        pos += 8 + n
    return out


def _differing_rows(a, b, n: int) -> np.ndarray:
    """Per row: does column ``a`` differ from ``b``."""
    if isinstance(a, VarColumn):
        la, lb = np.diff(a.offsets), np.diff(b.offsets)
        diff = la != lb
        same = np.flatnonzero(~diff)
        if len(same):
            ta, tb = a.take(same), b.take(same)
            va, vb = np.asarray(ta.values), np.asarray(tb.values)
            neq = va != vb
            if va.dtype.kind == "f":
                neq &= ~(np.isnan(va) & np.isnan(vb))
            bad = np.flatnonzero(neq)
            if len(bad):
                rows = np.searchsorted(ta.offsets, bad, side="right") - 1
                diff[same[np.unique(rows)]] = True
        return diff
    a = np.asarray(a).reshape(n, -1)
    b = np.asarray(b).reshape(n, -1)
    neq = a != b
    if a.dtype.kind == "f":
        neq &= ~(np.isnan(a) & np.isnan(b))
    return neq.any(axis=1)


def _show(col, i: int, kind: str) -> str:
    if isinstance(col, VarColumn) and kind == STRING_LIST:
        text = repr(_string_list_text(bytes(np.asarray(col.row(i), dtype=np.uint8))))
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(col, VarColumn):
        v = col.row(i)
        if kind in ("string", "binary"):
            raw = bytes(np.asarray(v, dtype=np.uint8))
            text = repr(raw.decode("utf-8", "replace")) if kind == "string" else repr(raw)
            return text if len(text) <= 60 else text[:57] + "..."
        return _short_list(np.asarray(v).tolist())
    v = np.asarray(col[i])
    return repr(v.item()) if v.ndim == 0 else _short_list(v.reshape(-1).tolist())


def _short_list(vals: list) -> str:
    text = "[" + ", ".join(repr(x) for x in vals[:6]) + (", ...]" if len(vals) > 6 else "]")
    return text


class SourceComparer:
    def __init__(self, verifier, inputs: list[str], manifest: dict, schema: Schema) -> None:
        self.v = verifier
        self.schema = schema
        self.storage = verifier.storage
        self.manifest = manifest
        self.inputs = inputs
        self.usable = True
        self.shuffled = bool(manifest.get("shuffle")) or bool(manifest.get("buckets"))
        self.mode = "multiset" if self.shuffled else "rows"
        try:
            self.o = ConvertOptions(**_tokenizer_path(_options(manifest.get("options"), ConvertOptions), manifest))
            self.o.validate()
        except (TypeError, ValueError, LovecraftError) as e:
            self._source_problem(f"the manifest's options cannot be used to read the source ({e})", who="manifest")
            self.usable = False
            return
        try:
            reader = open_reader(inputs, budget=verifier.budget, **self.o.read_kwargs())
        except InputError:
            raise  # a source that cannot be found or opened is the caller's mistake
        except (LovecraftError, TypeError, ValueError, AttributeError, KeyError, UnicodeError) as e:
            self._source_problem(f"cannot be read with the manifest's options ({_one_line(e)})")
            self.usable = False
            return
        self.reader = reader
        self.name = ", ".join(s.name for s in reader.specs)
        try:
            self._force_types(reader)
            self.plan = output_plan(reader, self.o)  # the columns, stacking and downcast convert applies
            if reader.late_columns and not self.o.columns and len(self.plan.source) < len(reader.schema):
                # JSON Lines made into fewer columns (tokenized): parse only the keys they come
                # from, so that keys the dataset does not hold, met late, change nothing
                kw = {**self.o.read_kwargs(), "columns": list(self.plan.source.names)}
                reader = self.reader = open_reader(inputs, budget=verifier.budget, **kw)
                self._force_types(reader)
                self.plan = output_plan(reader, self.o)
            src = self.plan.schema
        except (LovecraftError, TypeError, ValueError, AttributeError, KeyError, UnicodeError) as e:
            self._source_problem(f"cannot be read with the manifest's options ({_one_line(e)})")
            self.usable = False
            return
        self.src_schema = src
        self.drops = None
        self.scratch: str | None = None
        if self.o.dedup:  # the rows --dedup dropped, decided again from the source (bounded memory)
            import tempfile

            self.o.dedup_report = None
            self.scratch = tempfile.mkdtemp(prefix="lovecraft-verify-dedup-")
            try:
                self.drops, _ = dedup_pass(self.reader, self.plan, self.o, self.scratch, verifier.budget)
            except (LovecraftError, SchemaChanged) as e:
                self._source_problem(f"cannot be deduplicated with the manifest's options ({_one_line(e)})")
                self.usable = False
                return
        mismatch = _schema_difference(src, schema)
        if mismatch:
            self._source_problem(f"its columns differ from the dataset's: {mismatch}")
            self.usable = False
            return
        self.rows_seen = 0  # dataset rows compared
        self.src_rows = 0
        self.differ = 0
        self.reported = 0
        self.stopped: str | None = None
        self.pending: Batch | None = None
        self.d1 = 0
        self.d2 = 0
        self.d_rows = 0
        self._it = self._source_batches() if self.mode == "rows" else None
        self.result: dict[str, Any] = {}

    # -- the source -----------------------------------------------------------------------------

    def _force_types(self, reader) -> None:
        """CSV: parse every column as the dataset's type (the type inferred over the whole file
        when it was converted), not as the first block suggests."""
        forced = {}
        for f in reader.schema:
            if f.name not in self.schema.names:
                continue
            want = self.schema[f.name]
            if want.kind in ("string", "binary") and f.kind == FIXED:
                forced[f.name] = "string"
            elif (
                want.kind == f.kind
                and want.kind in (FIXED, SEQUENCE)
                and want.np_dtype.kind == "f"
                and f.np_dtype.kind in "iub"
            ):
                # ints or bools with a null (for a sequence: an element), read as float64; CSV's
                # booleans as booleans held as float64 (parsed as numbers, 'true' is no number)
                csv_bool = f.np_dtype.kind == "b" and f.kind == FIXED and isinstance(reader, CsvReader)
                forced[f.name] = BOOL_NAN if csv_bool else "float64"
        if reader.late_columns:  # JSON Lines: keys met late in the input, sequences widened
            forced = self._dataset_types(reader)
        reader.widen(forced)

    def _dataset_types(self, reader) -> dict[str, str]:
        """The dataset's type of each input column it holds: its own columns, but not the token
        column (``--tokenizer``), and the members of a stacked column (``--stack-columns``) as
        the stacked column's type."""
        made = set()
        if self.o.tokenizer is not None:
            from ..transforms.tokenize import TOKENS

            made.add(TOKENS)
        types = {}
        for spec in self.o.stack_columns or []:
            from ..selection import select
            from ..transforms.stack import parse

            name, sel = parse(spec)
            made.add(name)
            if name in self.schema.names:
                for member in select(list(reader.schema.names), sel):
                    types[member] = str(self.schema[name].np_dtype)
        return {**{f.name: f.describe() for f in self.schema if f.name not in made}, **types}

    def _column_source(self, column: str | None) -> str:
        return self.reader.source_of(column) if column is not None else self.name

    def _source_problem(self, message: str, column: str | None = None, who: str = "source") -> None:
        name = self._column_source(column) if hasattr(self, "reader") else ", ".join(self.inputs)
        if who == "manifest":
            self.v.add(MANIFEST, "source", message)
        else:
            self.v.add(name, "source", message, source=True)

    def _source_batches(self):
        try:
            # a filtered or deduplicated dataset is the subset of the source its keep step leaves
            kept = self.plan.keep_rows(self.reader.batches(), self.drops)
            for b in prefetch(map(self.plan.prepare, kept), depth=2):
                yield canonical(self.plan.finish(b), self.schema, self.storage)
        except SchemaChanged as e:
            cols = ", ".join(f"'{k}'" for k in (e.widened or {})) or "a column"
            raise _SourceStop(f"{cols} holds values of a wider type than the dataset's (the source changed)") from None
        except LovecraftError as e:
            raise _SourceStop(e.one_line()) from None

    def _take(self, n: int) -> Batch | None:
        """The next ``n`` source rows (fewer at the end of the source)."""
        parts = []
        have = 0
        while have < n:
            if self.pending is None:
                try:
                    self.pending = next(self._it)
                except StopIteration:
                    break
            take = min(n - have, self.pending.num_rows)
            parts.append(self.pending.slice(0, take))
            have += take
            if take == self.pending.num_rows:
                self.pending = None
            else:
                self.pending = self.pending.slice(take, self.pending.num_rows)
        if not parts:
            return None
        return Batch.concat(parts) if len(parts) > 1 else parts[0]

    # -- fed by the verifier, in dataset order ------------------------------------------------

    def feed(self, batch: Batch, unit, file: str, row0: int) -> None:
        if self.stopped:
            return
        data = canonical(batch, self.schema, self.storage)
        if self.mode == "multiset":
            h1, h2 = row_hashes(data, self.schema)
            self.d1 = (self.d1 + int(h1.sum(dtype=np.uint64))) & _MASK
            self.d2 = (self.d2 + int(h2.sum(dtype=np.uint64))) & _MASK
            self.d_rows += data.num_rows
            return
        try:
            src = self._take(data.num_rows)
        except _SourceStop as e:
            self._stop(str(e))
            return
        n = src.num_rows if src is not None else 0
        if n:
            self._compare(src, data.slice(0, n) if n < data.num_rows else data, file, row0)
        self.src_rows += n
        self.rows_seen += data.num_rows
        if n < data.num_rows:
            self._stop(f"holds {self.src_rows} rows, the dataset more ({self.v.rows})", problem=True)

    def _compare(self, src: Batch, data: Batch, file: str, row0: int) -> None:
        n = src.num_rows
        first_col: np.ndarray | None = None
        any_diff = np.zeros(n, dtype=bool)
        for f in self.schema:
            d = _differing_rows(src.columns[f.name], data.columns[f.name], n)
            if d.any():
                if first_col is None:
                    first_col = np.full(n, -1, dtype=np.int64)
                sel = d & (first_col < 0)
                first_col[sel] = self.schema.names.index(f.name)
                any_diff |= d
        bad = np.flatnonzero(any_diff)
        if not len(bad):
            return
        self.differ += len(bad)
        for i in bad[: max(0, MAX_REPORTED_ROWS - self.reported)].tolist():
            f = self.schema.fields[int(first_col[i])]
            g = self.src_rows + i
            if self.plan.filter is not None or self.drops is not None:  # the row read, not its place among those kept
                read = self.plan.keep.read_row(g)
                g = read if read is not None else g
            self._source_problem(
                f"row {g + 1}, column '{f.name}': {_show(src.columns[f.name], i, f.kind)} in the source, "
                f"{_show(data.columns[f.name], i, f.kind)} in the dataset ({file_of(file, f.name)}, row {row0 + i + 1})",
                column=f.name,
            )
            self.reported += 1

    def broken(self, unit) -> None:
        """A dataset file could not be read: the comparison cannot go on."""
        if not self.stopped:
            self.stopped = f"not compared past {unit.label}: its files cannot be read"

    def _stop(self, why: str, problem: bool = True) -> None:
        self.stopped = why
        if problem:
            self._source_problem(why)

    # -- at the end -----------------------------------------------------------------------------

    def finish(self) -> None:
        if self.mode == "multiset":
            self._finish_multiset()
        else:
            self._finish_rows()
        if not self.stopped and (self.plan.filter is not None or self.drops is not None):
            self._check_removed()
        self._close()

    def _finish_rows(self) -> None:
        if self.stopped:
            return
        extra = 0
        try:
            while True:
                b = self._take(1 << 20)
                if b is None:
                    break
                extra += b.num_rows
        except _SourceStop as e:
            self._stop(str(e))
            return
        if extra:
            self._stop(f"holds {self.src_rows + extra} rows, the dataset {self.rows_seen}")
            return
        if self.differ > self.reported:
            self._source_problem(f"{self.differ} rows in all differ from the dataset")
        if not self.differ:
            self._check_float16()

    def _finish_multiset(self) -> None:
        if self.stopped:
            return
        self._it = self._source_batches()
        s1, s2, rows = 0, 0, 0
        try:
            for b in self._it:
                h1, h2 = row_hashes(b, self.schema)
                s1 = (s1 + int(h1.sum(dtype=np.uint64))) & _MASK
                s2 = (s2 + int(h2.sum(dtype=np.uint64))) & _MASK
                rows += b.num_rows
        except _SourceStop as e:
            self._stop(str(e))
            return
        self.src_rows = rows
        self.rows_seen = self.d_rows
        self.result = {
            "source_digest": f"{s1:016x}{s2:016x}",
            "dataset_digest": f"{self.d1:016x}{self.d2:016x}",
        }
        if rows != self.d_rows:
            self._source_problem(f"holds {rows} rows, the dataset {self.d_rows}")
        elif (s1, s2) != (self.d1, self.d2):
            self._source_problem(
                "the dataset does not hold the same records (their order-independent digests differ: "
                f"source {self.result['source_digest']}, dataset {self.result['dataset_digest']})"
            )
            self.differ = -1
        else:
            self._check_float16()

    def _check_float16(self) -> None:
        if self.plan.down is None:
            return
        want = self.manifest.get("float16")
        want = want if isinstance(want, dict) else {}
        got = self.plan.report()
        for name, r in got.items():
            m = want.get(name)
            if not isinstance(m, dict):
                self.v.add(MANIFEST, "float16", f"has no float16 report for '{name}', the source gives one")
                continue
            for key, value in r.items():
                mv = m.get(key)
                if key in ("max_abs_error", "max_rel_error"):
                    ok = isinstance(mv, (int, float)) and math.isclose(
                        float(mv), float(value), rel_tol=1e-9, abs_tol=0.0
                    )
                else:
                    ok = mv == value
                if not ok:
                    self.v.add(
                        MANIFEST,
                        "float16",
                        f"float16 report of '{name}': {key} is {mv!r}, the source gives {value!r}",
                    )

    def _close(self) -> None:
        it = self._it
        self._it = None
        if it is not None:
            it.close()
        if getattr(self, "scratch", None):
            import shutil

            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def _check_removed(self) -> None:
        problem = removed_problem(self.manifest, self.plan.removed)
        if problem:
            self.v.add(MANIFEST, "source", problem)

    def summary(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "mode": self.mode,
            "rows_compared": self.rows_seen,
            "source_rows": self.src_rows,
            "differing_rows": self.differ if self.differ >= 0 else None,
            "complete": self.stopped is None,
            "note": self.stopped,
            **self.result,
        }


class _SourceStop(Exception):
    pass


def _one_line(e: BaseException) -> str:
    return e.one_line() if isinstance(e, LovecraftError) else " ".join(str(e).split())[:300]


_OPTION_TYPES = {
    "input_format": (str, type(None)),
    "dtype": (str, type(None)),
    "on_overflow": (str,),
    "column_types": (dict,),
    "columns": (list, type(None)),
    "stack_columns": (list, type(None)),
    "delimiter": (str, type(None)),
    "skip_rows": (int,),
    "comment": (str, type(None)),
    "na_values": (list, type(None)),
    "column_names": (list, type(None)),
    "header": (bool,),
    "errors": (str,),
    "max_expansion": (int, float),
    "tokenizer": (str, type(None)),
    "column": (str, type(None)),
    "eos": (str, int, type(None)),
    "bos": (str, int, type(None)),
    # the files inputs': decoded columns and joined sidecars are read again as they were written
    "decode": (str, type(None)),
    "image_size": (str, list, type(None)),
    "resize": (str,),
    "image_mode": (str, type(None)),
    "sample_rate": (int, type(None)),
    "metadata": (str, type(None)),
    "on_bad_file": (str,),
    # the rows kept: the filter applied and the duplicates decided again
    "filter": (str, type(None)),
    "dedup": (str, type(None)),
    "dedup_columns": (list, type(None)),
    "threshold": (int, float, type(None)),
    "ngram": (int, type(None)),
    "ngram_unit": (str, type(None)),
    "bands": (int, type(None)),
    "band_rows": (int, type(None)),
    "dedup_seed": (int, type(None)),
}
TOKEN_OPTIONS = ("tokenizer", "column", "eos", "bos")


def _tokenizer_path(options: dict[str, Any], manifest: dict) -> dict[str, Any]:
    """The token options of a tokenized ``convert`` or ``shard`` dataset, with the tokenizer file at the
    absolute path the manifest records (the run may have named it relative to another directory);
    none for ``bucket``, whose sequences are not the source's rows."""
    if manifest.get("command") == "bucket":
        return {k: v for k, v in options.items() if k not in TOKEN_OPTIONS}
    info = manifest.get("tokenizer")
    if isinstance(info, dict) and isinstance(info.get("path"), str) and options.get("tokenizer"):
        options = {**options, "tokenizer": info["path"]}
    return options


def _options(raw: Any, cls) -> dict[str, Any]:
    """The manifest's options that ``convert`` takes, checked for their types (TypeError if not)."""
    if not isinstance(raw, dict):
        raise TypeError("options is not a mapping")
    names = {f.name for f in dataclasses.fields(cls)}
    out = {k: v for k, v in raw.items() if k in names and k in _OPTION_TYPES}
    for k, v in out.items():
        if not isinstance(v, _OPTION_TYPES[k]) or (k == "max_expansion" and isinstance(v, bool)):
            raise TypeError(f"options.{k} is {v!r}")
    for key in ("columns", "stack_columns", "na_values", "column_names"):
        if out.get(key) is not None and not all(isinstance(c, str) for c in out[key]):
            raise TypeError(f"options.{key} is {out[key]!r}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in out.get("column_types", {}).items()):
        raise TypeError(f"options.column_types is {out['column_types']!r}")
    if out.get("errors", "strict") not in ("strict", "replace"):
        raise ValueError(f"options.errors is {out['errors']!r}")
    out["progress"] = False
    return out


def _schema_difference(a: Schema, b: Schema) -> str | None:
    if a.names != b.names:
        return f"source columns {a.names}, dataset columns {b.names}"
    for x, y in zip(a, b, strict=True):
        if x.kind != y.kind or np.dtype(x.dtype) != np.dtype(y.dtype) or tuple(x.shape) != tuple(y.shape):
            return f"column '{x.name}' is {x.describe()}{list(x.shape) or ''} in the source, {y.describe()}{list(y.shape) or ''} in the dataset"
    return None


def removed_problem(manifest: dict, removed: dict[str, int]) -> str | None:
    """The rows the manifest says ``--filter`` and ``--dedup`` removed (its ``removed`` section),
    against those the source gives (``removed``: per reason); None when they agree."""
    recorded = manifest.get("removed") or {}
    want = {k: v.get("rows") for k, v in recorded.items() if isinstance(v, dict)}
    got = {k: int(removed.get(k, 0)) for k in ("filter", "duplicate") if k in want or removed.get(k)}
    if want == got:
        return None

    def shown(d: dict) -> str:
        return ", ".join(f"{v} by {'--filter' if k == 'filter' else '--dedup'}" for k, v in sorted(d.items()))

    return f"records {shown(want) or 'none'} removed, the source gives {shown(got) or 'none'}"
