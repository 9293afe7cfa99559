"""``verify``: prove a dataset directory holds what its manifest says (and, with ``against``, what
its source holds).

Checks, each problem one line naming the file:

* the manifest (:mod:`.structure`): ours, a known version, complete, file names inside the
  directory, every shard's files listed, row counts that add up;
* the directory (:mod:`.files`): every listed file exists as a regular file; nothing else is there;
* each file: its size and digest (hashed in a background thread while the file is decoded);
* each unit decodes completely with its format's own checker (the format package's ``check``
  module: checksums, headers against file sizes, links never followed);
* the decoded rows, schema and statistics (count, min, max, NaN, lengths) match the manifest per
  shard and overall, and in bucketed datasets every length lies within its bucket;
* the format's own sections (a TFRecord feature spec and compression, a Megatron dtype code)
  and the token sections (``tokenizer``, ``bucketing``, ``packing``: :mod:`.sections`) agree with
  the schema and with the rows.

``against`` (:mod:`.source`): the source is re-read with the reader and options recorded in the
manifest and compared, row by row or as a multiset of row hashes when shuffled; a bucketed dataset
(:mod:`.bucketsource`) against the sequences ``bucket`` makes of its source (packed ones are refused).

Memory is bounded: files are read in batches sized from ``max_memory``; hostile files (headers
claiming terabytes, truncated files, decompression bombs) are refused before anything is allocated.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import manifest as mf
from ..errors import DatasetError, LovecraftError
from ..formats.checking import CheckContext, FileProblem, Unit
from ..schema import FIXED, SEQUENCE, Batch, Field, Schema, row_nbytes
from ..stats import ColumnStats
from ..util import parse_size
from .files import Files
from .report import Problem, Report
from .sections import Sections
from .structure import Structure, is_count, read_structure

MANIFEST = mf.MANIFEST_NAME


def verify(
    path: str | os.PathLike,
    against: list[str] | str | None = None,
    *,
    max_memory: int | str = "256MiB",
    progress: bool | None = False,
) -> Report:
    """Verify the dataset directory ``path``; with ``against`` (inputs), also that it holds the
    same records as those inputs. Returns a :class:`Report` (``report.ok``, ``report.problems``).

    Raises :class:`~lovecraft_convert.errors.DatasetError` only when ``path`` is not a directory,
    and the input errors of ``convert`` when ``against`` cannot be opened; everything wrong with the
    dataset is a problem in the report.
    """
    path = os.fspath(path)
    if isinstance(against, (str, os.PathLike)):
        against = [os.fspath(against)]
    from ..storage import is_remote, local_path

    if is_remote(path):
        return _verify_remote(path.rstrip("/"), against, parse_size(max_memory), progress)
    path = local_path(path)
    if not os.path.isdir(path):
        raise mf.not_a_dataset(path)
    v = Verifier(path, parse_size(max_memory), progress)
    started = time.time()
    try:
        v.run(list(against) if against else None)
    finally:
        v.close()
    v.report.seconds = time.time() - started
    return v.report


def _verify_remote(uri: str, against: list[str] | None, budget: int, progress: bool | None) -> Report:
    """Verify a dataset on an object store: its objects are copied as they are to local scratch and
    judged there like a directory (sizes, digests, decoding), problems naming the objects' URIs;
    objects under the prefix that the manifest does not name are reported as strays."""
    import shutil

    from ..storage import dataset as remote
    from ..storage import scratch

    tmp, lock = scratch.new_dir("verify-")  # locked: a sweep (see storage/scratch.py) leaves it alone
    started = time.time()
    try:
        remote.copy_for_verify(uri, tmp)
        v = Verifier(tmp, budget, progress, shown=uri)
        try:
            v.run(list(against) if against else None)
        finally:
            v.close()
        m, problem = remote.load(uri)
        if problem is None and isinstance(m, dict):
            try:
                listed = set(remote.listed_files(m))
            except DatasetError:
                listed = set()
            for rel, why in remote.strays(uri, listed):
                v.add(rel, "stray", why)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        scratch.release(tmp, lock)
    v.report.seconds = time.time() - started
    return v.report


class Verifier:
    def __init__(self, path: str, budget: int, progress: bool | None, shown: str | None = None) -> None:
        self.root = path
        self.shown = shown or path  # the dataset as printed (a URI for a remote dataset's local copy)
        self.budget = budget
        self.report = Report(self.shown)
        self.progress = progress
        self.files: Files | None = None

    def add(self, file: str, kind: str, message: str, *, source: bool = False) -> None:
        from ..storage import child_path

        shown = file if source else child_path(self.shown, file)
        self.report.problems.append(Problem(file, kind, message, shown))

    def warn(self, file: str, kind: str, message: str) -> None:
        """Something worth saying that is not wrong (the dataset verifies)."""
        from ..storage import child_path

        self.report.warnings.append(Problem(file, kind, message, child_path(self.shown, file)))

    def close(self) -> None:
        if self.files is not None:
            self.files.close()

    # -- the run ------------------------------------------------------------------------------

    def run(self, against: list[str] | None) -> None:
        m, problem = mf.load(self.root)
        if problem is not None:  # without a manifest, nothing else can be judged
            kind, message = problem
            kind = "manifest" if kind == "unreadable" else kind
            self.add(MANIFEST, kind, message)
            return
        self.m = m
        st = read_structure(m, self.add)
        if st is None:
            return
        self.st: Structure = st
        self.fmt = st.fmt
        self.schema = st.schema
        self.rows = st.rows
        self.report.format = st.fmt.name
        self.report.rows = st.rows
        data_files = [p for p in st.info if p not in st.extra]
        self.report.files = len(data_files)
        self.report.bytes = sum(int(st.info[p]["bytes"]) for p in data_files if is_count(st.info[p].get("bytes")))
        self.files = Files(self.root, st.info, self.add, self.warn, st.fmt.stray_reason)
        self.files.strays(set(st.info))
        self.ctx = CheckContext(self.root, m, st.info, self.budget, self.step_rows)
        comparer = None
        if against and m.get("command") == "bucket" and m.get("packing"):  # the source's tokens, packed
            from .packedsource import PackedComparer

            comparer = PackedComparer(self, against, m, self.schema)
        elif against and m.get("command") == "bucket":  # the source's sequences, not its rows
            from .bucketsource import BucketComparer

            comparer = BucketComparer(self, against, m, self.schema)
        elif against:
            from .source import SourceComparer

            comparer = SourceComparer(self, against, m, self.schema)
            if not comparer.usable:
                self.report.against = {"inputs": against, "complete": False, "note": "the source cannot be compared"}
                comparer = None
        self._stats_problems = 0
        self.sections = Sections(m, self.schema, lambda _field, message: self.add(MANIFEST, "manifest", message))
        observed = self.check_units(comparer)
        self.sections.finish(observed is not None)
        if observed is not None:
            if not self._stats_problems:  # a shard's mismatch is reported once, at the shard
                self.compare_stats(MANIFEST, None, self.m.get("stats"), observed, overall=True)
            self.check_float16(observed)
        for p in st.extra:
            if self.files.present(p):
                self.files.check_hash(p)
                for fp in self.fmt.check_extra(self.ctx, p):
                    self.add(fp.file, fp.kind, fp.message)
        if comparer is not None:
            comparer.finish()
            self.report.against = comparer.summary()

    # -- units --------------------------------------------------------------------------------

    def check_units(self, comparer) -> dict | None:
        """Decode every unit; the merged statistics, or None when some unit could not be read."""
        overall = {f.name: ColumnStats(f.kind, self.storage(f)) for f in self.schema}
        complete = True
        bar = self._bar()
        for u in self.st.units:
            present = [p for p in u.files if self.files.present(p)]
            stats = None
            if len(present) == len(u.files):
                try:
                    stats = self.decode_unit(u, comparer)
                except FileProblem as e:
                    self.add(e.file, e.kind, e.message)
                except LovecraftError as e:  # the schema is one this format cannot hold
                    self.add(u.first, "schema", e.one_line())
            for p in u.files:
                self.files.check_hash(p)
            if bar is not None:
                bar.update(sum(int(self.st.info[p].get("bytes") or 0) for p in u.files))
            if stats is None:
                complete = False
                if comparer is not None:
                    comparer.broken(u)
                continue
            for name, st in stats.items():
                overall[name].merge(st)
        if bar is not None:
            bar.close()
        return overall if complete else None

    def _bar(self):
        enabled = sys.stderr.isatty() if self.progress is None else self.progress
        if not enabled:
            return None
        from tqdm import tqdm

        return tqdm(total=self.report.bytes, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False)

    def storage(self, f: Field) -> np.dtype:
        """The dtype a column's values have as read back from this format."""
        return self.fmt.storage_dtype(f, self.m)

    def unit_schema(self, u: Unit) -> Schema:
        """The columns as a unit's files hold them (padded buckets hold dense sequences)."""
        if u.bucket is None or u.bucket.get("layout", "padded") != "padded":
            return self.schema
        width = int(u.bucket["max_length"])
        return Schema(tuple(Field(f.name, FIXED, f.dtype, (width,)) if f.kind == SEQUENCE else f for f in self.schema))

    def decode_unit(self, u: Unit, comparer) -> dict:
        schema = self.unit_schema(u)
        stats = {f.name: ColumnStats(f.kind, self.storage(f)) for f in schema}
        lengths = LengthCheck(u, schema) if u.bucket is not None else None
        rows = 0
        batches: Iterator[tuple[Batch, str]] = self.fmt.check_unit(self.ctx, u, schema)
        for batch, file in batches:
            for name, st in stats.items():
                st.update(batch.columns[name])
            if lengths is not None:
                lengths.update(batch, file)
            self.sections.feed(batch, u)
            if comparer is not None:
                comparer.feed(batch, u, file, rows)
            rows += batch.num_rows
            if rows > u.rows:
                raise FileProblem(file, f"holds more than the {u.rows} rows the manifest says", "rows")
        if rows != u.rows:
            raise FileProblem(u.first, f"holds {rows} rows, the manifest says {u.rows}", "rows")
        if lengths is not None:
            for file, msg in lengths.problems():
                self.add(file, "bucket", msg)
        self.check_ranges(u, schema, stats)
        if u.stats is not None:
            self.compare_stats(None, u, u.stats, stats)
        return stats

    def check_ranges(self, u: Unit, schema: Schema, stats: dict) -> None:
        """Integers a format stores wider than the schema's dtype (TFRecord's int64_list) must fit
        that dtype, which the loaders cast them to: an int64 of 5000000000 under a schema edited to
        int32 was read back as 705032704 by every loader, and verified ok."""
        for f in schema:
            dt, st = f.np_dtype, stats.get(f.name)
            if st is None or dt.kind not in "biu" or self.storage(f) == dt or st.min is None:
                continue
            lo, hi = (0, 1) if dt.kind == "b" else (int(np.iinfo(dt).min), int(np.iinfo(dt).max))
            bad = st.min if st.min < lo else st.max if st.max > hi else None
            if bad is not None:
                self.add(
                    u.first,
                    "schema",
                    f"column '{f.name}' holds {bad}, beyond {dt.name}, the dtype the manifest's schema gives it "
                    "(the loaders would read it changed)",
                )

    def step_rows(self, schema: Schema) -> int:
        """Rows per batch: 1/16 of the memory budget, from the manifest's mean lengths; at most
        65536 rows when variable-length rows become Python objects (HDF5, TFRecord)."""
        stats = self.m.get("stats") if isinstance(self.m.get("stats"), dict) else {}
        per = 0.0
        for f in schema:
            mean = (stats.get(f.name) or {}).get("length_mean") if isinstance(stats.get(f.name), dict) else None
            per += row_nbytes(f, float(mean) if isinstance(mean, (int, float)) and mean > 0 else 64.0)
        step = max(1, int(max(1 << 20, self.budget // 16) // max(1.0, per)))
        if self.fmt.variable_as_objects and any(f.variable for f in schema):
            step = min(step, 1 << 16)
        return step

    # -- statistics ---------------------------------------------------------------------------

    def stat_file(self, u: Unit | None, column: str, key: str) -> str:
        """The file a statistic of ``column`` in unit ``u`` is read from (the manifest for overall)."""
        if u is None:
            return MANIFEST
        return self.fmt.stat_file(self.ctx, u, column, key)

    def compare_stats(self, where: str | None, u, expected: Any, observed: dict, overall: bool = False) -> None:
        if not isinstance(expected, dict):
            if expected is not None:
                self.add(MANIFEST, "manifest", "stats is not a mapping")
            return
        for f in self.schema:
            exp = expected.get(f.name)
            st = observed.get(f.name)
            if st is None:
                continue
            unit = None if overall else u
            if not isinstance(exp, dict):
                self.add(
                    self.stat_file(unit, f.name, ""), "stats", f"the manifest has no statistics for column '{f.name}'"
                )
                continue
            got = st.to_dict()
            storage = self.storage(f)
            for key in ("count", "min", "max", "nan", "length_min", "length_max", "length_mean"):
                if key not in exp and key not in got:
                    continue
                e, g = exp.get(key), got.get(key)
                if _stat_equal(key, e, g, storage):
                    continue
                self._stats_problems += 1
                scope = "" if unit is None else f" ({u.label})"
                who = "the data" if unit is None else "the file"
                self.add(
                    self.stat_file(unit, f.name, key),
                    "stats",
                    f"column '{f.name}' {key}: the manifest says {_fmt(e)}, {who} holds {_fmt(g)}{scope}",
                )

    def check_float16(self, observed: dict) -> None:
        report = self.m.get("float16") or {}
        if not isinstance(report, dict):
            self.add(MANIFEST, "float16", "the float16 report is not a mapping")
            return
        for name, r in report.items():
            if name not in self.schema.names or not isinstance(r, dict):
                self.add(MANIFEST, "float16", f"the float16 report names '{name}', which is not a column")
                continue
            f = self.schema[name]
            if str(r.get("target")) != f.np_dtype.name:
                self.add(
                    MANIFEST,
                    "float16",
                    f"the float16 report says '{name}' became {r.get('target')}, the schema says {f.np_dtype.name}",
                )
            st = observed[name]
            if f.kind == "fixed" and is_count(r.get("values")) and r["values"] != st.count * f.row_size:
                self.add(
                    MANIFEST,
                    "float16",
                    f"the float16 report counts {r['values']} values of '{name}', the data holds {st.count * f.row_size}",
                )
            if is_count(r.get("nan")) and r["nan"] != st.nan:
                self.add(
                    MANIFEST,
                    "float16",
                    f"the float16 report counts {r['nan']} NaN in '{name}', the data holds {st.nan}",
                )


class LengthCheck:
    """Every row's length within its bucket: from a ``length`` column, or each variable column's rows."""

    def __init__(self, u: Unit, schema: Schema) -> None:
        self.u = u
        self.lo = int(u.bucket["min_length"])
        self.hi = int(u.bucket["max_length"])
        self.column = "length" if "length" in schema.names and schema["length"].kind == "fixed" else None
        self.var = [f.name for f in schema if f.variable]
        self.seen: dict[str, tuple[int, int, str]] = {}

    def update(self, batch, file: str) -> None:
        cols = [self.column] if self.column else self.var
        for name in cols:
            c = batch.columns[name]
            lens = np.asarray(c).reshape(-1) if name == self.column else np.diff(c.offsets)
            if not len(lens):
                continue
            lo, hi = int(lens.min()), int(lens.max())
            old = self.seen.get(name)
            self.seen[name] = (lo, hi, file) if old is None else (min(lo, old[0]), max(hi, old[1]), file)

    def problems(self) -> list[tuple[str, str]]:
        out = []
        for name, (lo, hi, file) in self.seen.items():
            if lo < self.lo or hi > self.hi:
                out.append(
                    (file, f"column '{name}' has lengths {lo}..{hi}, outside {self.u.label}'s {self.lo}..{self.hi}")
                )
        return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _as_float(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _stat_equal(key: str, e: Any, g: Any, storage) -> bool:
    import numpy as np

    if e is None or g is None:
        return e is None and g is None
    if key in ("count", "nan", "length_min", "length_max"):
        return e == g and not isinstance(e, bool)
    fe, fg = _as_float(e), _as_float(g)
    if fe is None or fg is None:
        return False
    if key == "length_mean":
        return math.isclose(fe, fg, rel_tol=1e-9, abs_tol=1e-9)
    if storage.kind == "f":
        with np.errstate(over="ignore"):
            ce = float(np.asarray(fe).astype(storage))
            cg = float(np.asarray(fg).astype(storage))
        return ce == cg or (math.isnan(ce) and math.isnan(cg))
    if isinstance(e, int) and isinstance(g, int):
        return e == g
    return fe == fg
