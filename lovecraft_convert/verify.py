"""``verify``: prove a dataset directory holds what its manifest says (and, with ``against``, what
its source holds).

Checks, each problem one line naming the file:

* the manifest: ours, a known version, complete, file names inside the directory (no absolute
  paths, no ``..``), every shard's files listed, row counts that add up;
* the directory: every listed file exists as a regular file; nothing else is there (stray and
  temporary files are reported; symbolic links are reported and never followed);
* each file: its size and sha256 (hashed in a background thread while the file is decoded);
* each file decodes completely with its format's reader: ``.npy`` a valid header declaring exactly
  the data the file holds (checked before anything is mapped); HDF5 every dataset read (fletcher32
  checked where written), no external links, external storage or virtual datasets (reported, never
  followed); Parquet every page with its checksum; TFRecord every record's length and data CRC and
  every ``tf.train.Example`` parsed against the schema;
* the decoded rows, schema and statistics (count, min, max, NaN, lengths) match the manifest per
  shard and overall, and in bucketed datasets every length lies within its bucket.

``against``: the source is re-read with the reader and options recorded in the manifest, the same
column selection and downcast applied, and compared: row by row (exact, float16 columns included,
since the same rounding is applied) when the dataset keeps the source's order, or as a multiset of
per-row 128-bit hashes (order-independent sums) when it was shuffled or bucketed. The float16
report is recomputed from the source and compared too.

Memory is bounded: files are read in batches sized from ``max_memory``; hostile files (headers
claiming terabytes, truncated files, decompression bombs) are refused before anything is allocated.
"""

from __future__ import annotations

import math
import os
import posixpath
import stat
import sys
import threading
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .errors import DatasetError, LovecraftError
from .util import format_size, parse_size

MANIFEST = "_manifest.json"
VERSIONS = (1,)
FORMATS = ("memmap", "hdf5", "parquet", "tfrecord")
EXTENSIONS = {"hdf5": (".h5", ".hdf5"), "parquet": (".parquet",), "tfrecord": (".tfrecord", ".tfrecord.gz")}
MAX_CHUNK_BYTES = 64 << 20  # an HDF5 chunk larger than this is refused (we write ~1 MiB chunks)
MAX_ROW_BYTES = 1 << 30  # a schema claiming larger rows is refused (nothing that size is allocated)


# --------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------


@dataclass
class Problem:
    """One thing wrong: ``file`` (relative to the dataset, or a source input as given), a ``kind``
    (manifest, missing, stray, size, sha256, decode, rows, schema, stats, bucket, float16, source)
    and what is wrong. ``path`` is the file as printed (joined to the dataset path)."""

    file: str
    kind: str
    message: str
    path: str = ""

    def line(self) -> str:
        return f"{self.path or self.file}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"file": self.file, "path": self.path or self.file, "kind": self.kind, "message": self.message}


@dataclass
class Report:
    path: str
    problems: list[Problem] = field(default_factory=list)
    format: str | None = None
    rows: int | None = None
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    against: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        return [p.line() for p in self.problems]

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.path,
            "ok": self.ok,
            "format": self.format,
            "rows": self.rows,
            "files": self.files,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "problems": [p.to_dict() for p in self.problems],
            "against": self.against,
        }

    def summary(self) -> str:
        what = "sha256, decoding, statistics" + (", source" if self.against else "")
        if self.ok:
            return (
                f"ok: {self.path}: {self.format}, {self.rows:,} rows, {self.files} files, "
                f"{format_size(self.bytes)} verified ({what}) in {self.seconds:.1f}s"
            )
        n = len(self.problems)
        return f"{self.path}: {n} problem{'s' if n != 1 else ''} found"


class _Bad(Exception):
    """A file cannot be decoded; the message says where and what (without the file name)."""

    def __init__(self, file: str, message: str, kind: str = "decode") -> None:
        super().__init__(message)
        self.file = file
        self.message = message
        self.kind = kind


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------


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
    if not os.path.isdir(path):
        raise DatasetError(f"{path}: no such dataset directory", hint="give the output directory of lovecraft")
    budget = parse_size(max_memory)
    v = _Verifier(path, budget, progress)
    started = time.time()
    try:
        v.run(list(against) if against else None)
    finally:
        v.close()
    v.report.seconds = time.time() - started
    return v.report


def load_manifest(path: str) -> tuple[dict | None, Problem | None]:
    """The parsed manifest of ``path``, or the problem that prevents reading it."""
    import json

    mpath = os.path.join(path, MANIFEST)
    shown = os.path.join(path, MANIFEST)
    try:
        st = os.lstat(mpath)
    except FileNotFoundError:
        return None, Problem(
            MANIFEST, "missing", "missing: not a lovecraft dataset, or the run that wrote it did not finish", shown
        )
    if not stat.S_ISREG(st.st_mode):
        return None, Problem(MANIFEST, "manifest", "not a regular file", shown)
    if st.st_size > 1 << 30:
        return None, Problem(MANIFEST, "manifest", f"implausibly large ({st.st_size} bytes)", shown)
    try:
        with open(mpath, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        return None, Problem(MANIFEST, "manifest", f"unreadable ({_short(e)})", shown)
    return m, None


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:297] + "..."


def safe_relpath(p: Any) -> str | None:
    """``p`` as a normalised relative path inside the dataset, or None when it points outside
    (absolute, ``..``, empty, backslashes, NUL)."""
    if not isinstance(p, str) or not p or "\x00" in p or "\\" in p:
        return None
    if p.startswith("/") or posixpath.isabs(p):
        return None
    parts = p.split("/")
    if any(x in ("", ".", "..") for x in parts):
        return None
    return posixpath.normpath(p)


@dataclass
class _Unit:
    """A shard (or a bucket): rows stored in one file (one per column and role for memmap)."""

    label: str
    rows: int
    files: list[str]
    stats: dict | None
    bucket: dict | None = None


class _Verifier:
    def __init__(self, path: str, budget: int, progress: bool | None) -> None:
        self.root = path
        self.budget = budget
        self.report = Report(path)
        self.progress = progress
        self._pool = None
        self._stop = threading.Event()

    # -- problems -----------------------------------------------------------------------------

    def add(self, file: str, kind: str, message: str, *, source: bool = False) -> None:
        shown = file if source else os.path.join(self.root, file)
        self.report.problems.append(Problem(file, kind, message, shown))

    def close(self) -> None:
        self._stop.set()  # an interrupted run does not wait for a whole file to be hashed
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    # -- the run ------------------------------------------------------------------------------

    def run(self, against: list[str] | None) -> None:
        m, problem = load_manifest(self.root)
        if problem is not None:
            self.report.problems.append(problem)  # without a manifest, nothing else can be judged
            return
        self.m = m
        if not self._manifest_ok(m):
            return
        index = self._index_entry(m.get("hdf5_index"))
        listed = set(self.info)
        self._strays(listed)
        comparer = None
        if against:
            from .verify_source import SourceComparer

            comparer = SourceComparer(self, against, m, self.schema, self.fmt)
            if not comparer.usable:
                self.report.against = {"inputs": against, "complete": False, "note": "the source cannot be compared"}
                comparer = None
        self._stats_problems = 0
        observed = self._check_units(comparer)
        if observed is not None:
            if not self._stats_problems:  # a shard's mismatch is reported once, at the shard
                self._compare_stats(MANIFEST, "", self.m.get("stats"), observed, overall=True)
            self._check_float16(observed)
        if index is not None:
            self._check_index(index)
        if comparer is not None:
            comparer.finish()
            self.report.against = comparer.summary()

    # -- manifest -----------------------------------------------------------------------------

    def _manifest_ok(self, m: Any) -> bool:
        import numpy as np

        from .schema import KINDS, Field, Schema

        if not isinstance(m, dict) or m.get("format") != "lovecraft-dataset":
            self.add(MANIFEST, "manifest", "not a lovecraft dataset manifest (format is not 'lovecraft-dataset')")
            return False
        if m.get("version") not in VERSIONS:
            self.add(MANIFEST, "manifest", f"unknown manifest version {m.get('version')!r} (this version reads 1)")
            return False
        if m.get("complete") is not True:
            self.add(MANIFEST, "manifest", "does not say complete: true (the run that wrote it did not finish)")
        fmt = m.get("output_format")
        if fmt not in FORMATS:
            self.add(MANIFEST, "manifest", f"unknown output_format {fmt!r}")
            return False
        self.fmt = fmt
        self.report.format = fmt
        try:
            fields = []
            for d in m.get("schema"):
                f = Field.from_dict(d)
                if f.kind not in KINDS or not isinstance(f.name, str):
                    raise ValueError(f"column {f.name!r}: unknown kind {f.kind!r}")
                _ = f.np_dtype
                if not all(isinstance(s, int) and s >= 0 for s in f.shape):
                    raise ValueError(f"column {f.name!r}: bad shape")
                dt = f.np_dtype
                if dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.itemsize == 0:
                    raise ValueError(f"column {f.name!r}: dtype {f.dtype!r} is not one lovecraft writes")
                if f.kind in ("string", "binary") and dt != np.dtype(np.uint8):
                    raise ValueError(f"column {f.name!r}: a {f.kind} column holds uint8 values, not {dt}")
                if f.np_dtype.itemsize * f.row_size > MAX_ROW_BYTES:
                    raise ValueError(
                        f"column {f.name!r}: one row of {f.np_dtype.itemsize * f.row_size} bytes (refused)"
                    )
                fields.append(f)
            if not fields or len({f.name for f in fields}) != len(fields):
                raise ValueError("no columns, or a column named twice")
            self.schema = Schema(tuple(fields))
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            self.add(MANIFEST, "manifest", f"unreadable schema ({_short(e)})")
            return False
        rows = m.get("rows")
        if not _is_count(rows):
            self.add(MANIFEST, "manifest", f"rows is {rows!r}, not a count")
            return False
        self.rows = rows
        self.report.rows = rows
        # files
        self.info: dict[str, dict] = {}
        files = m.get("files")
        if not isinstance(files, list):
            self.add(MANIFEST, "manifest", "lists no files")
            return False
        for i, f in enumerate(files):
            p = safe_relpath(f.get("path") if isinstance(f, dict) else None)
            raw = f.get("path") if isinstance(f, dict) else f
            if p is None:
                self.add(MANIFEST, "manifest", f"files[{i}]: path {raw!r} points outside the dataset directory")
                continue
            if p == MANIFEST:
                self.add(MANIFEST, "manifest", f"files[{i}]: lists the manifest itself")
                continue
            if p in self.info:
                self.add(MANIFEST, "manifest", f"files[{i}]: {p} is listed twice")
                continue
            bad = [k for k in ("bytes", "rows") if not _is_count(f.get(k))]
            sha = f.get("sha256")
            if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
                bad.append("sha256")
            if f.get("column") is not None and not isinstance(f.get("column"), str):
                bad.append("column")
            if f.get("role") not in (None, "data", "values", "offsets"):
                bad.append("role")
            if bad:
                self.add(p, "manifest", f"the manifest's entry has no valid {', '.join(bad)}")
            self.info[p] = f
        self.report.files = len(self.info)
        self.report.bytes = sum(int(f["bytes"]) for f in self.info.values() if _is_count(f.get("bytes")))
        # shards / buckets
        self.units: list[_Unit] = []
        buckets = m.get("buckets")
        groups = buckets if buckets else m.get("shards")
        what = "buckets" if buckets else "shards"
        if not isinstance(groups, list) or not groups:
            self.add(MANIFEST, "manifest", "lists no shards")
            return False
        claimed: set[str] = set()
        for i, s in enumerate(groups):
            if not isinstance(s, dict) or not _is_count(s.get("rows")) or not isinstance(s.get("files"), list):
                self.add(MANIFEST, "manifest", f"{what}[{i}]: no rows or files")
                continue
            label = f"{'bucket' if buckets else 'shard'} {s.get('index', i)}"
            bucket = s if buckets else None
            if bucket is not None and not (_is_count(s.get("min_length")) and _is_count(s.get("max_length"))):
                self.add(MANIFEST, "manifest", f"buckets[{i}]: no min_length/max_length")
                bucket = None
            subs = s.get("shards") if buckets else None
            if subs is not None:  # a bucket written as several shards: each is a unit
                if not isinstance(subs, list) or not all(
                    isinstance(x, dict) and _is_count(x.get("rows")) and isinstance(x.get("files"), list) for x in subs
                ):
                    self.add(MANIFEST, "manifest", f"{what}[{i}]: shards without rows or files")
                    continue
                if sum(x["rows"] for x in subs) != s["rows"]:
                    self.add(MANIFEST, "rows", f"{label} has {s['rows']} rows, its shards add up to "
                             f"{sum(x['rows'] for x in subs)}")  # fmt: skip
                listed = sorted(str(f) for x in subs for f in x["files"])
                if listed != sorted(str(f) for f in s["files"]):
                    self.add(MANIFEST, "manifest", f"{what}[{i}]: its files are not those of its shards")
            else:
                subs = [s]
            for j, sub in enumerate(subs):
                names = self._unit_files(what, i, sub["files"])
                claimed.update(names)
                sub_label = label if len(subs) == 1 else f"{label} shard {sub.get('index', j)}"
                self.units.append(_Unit(sub_label, sub["rows"], names, sub.get("stats"), bucket))
        for p in self.info:
            if p not in claimed:
                self.add(p, "manifest", f"listed in the manifest's files but in none of its {what}")
        total = sum(u.rows for u in self.units)
        if total != rows:
            self.add(MANIFEST, "rows", f"rows is {rows}, its {what} add up to {total}")
        for u in self.units:
            for p in u.files:
                r = self.info[p].get("rows")
                if _is_count(r) and r != u.rows:
                    self.add(p, "manifest", f"the manifest says {r} rows for this file, {u.rows} for its {u.label}")
        return True

    def _unit_files(self, what: str, i: int, files: list) -> list[str]:
        names = []
        for raw in files:
            p = safe_relpath(raw)
            if p is None:
                self.add(MANIFEST, "manifest", f"{what}[{i}]: path {raw!r} points outside the dataset directory")
                continue
            if p not in self.info:
                self.add(MANIFEST, "manifest", f"{what}[{i}]: {p} is not in the manifest's files")
                continue
            names.append(p)
        return names

    def _index_entry(self, idx: Any) -> str | None:
        """The path of a bucketed HDF5 dataset's index (``buckets.h5``), entered among the files."""
        if idx is None:
            return None
        p = safe_relpath(idx.get("path")) if isinstance(idx, dict) else None
        if p is None or not _is_count(idx.get("bytes")) or not isinstance(idx.get("sha256"), str):
            self.add(MANIFEST, "manifest", "hdf5_index: no valid path, bytes or sha256")
            return None
        if p in self.info or not self.m.get("buckets"):
            self.add(MANIFEST, "manifest", f"hdf5_index: {p} is not an index of buckets")
            return None
        self.info[p] = {"path": p, "bytes": idx["bytes"], "sha256": idx["sha256"]}
        return p

    def _check_index(self, p: str) -> None:
        """The index holds one group per bucket and nothing but external links to the bucket's own
        files (never followed here: their targets are checked as the buckets' files)."""
        from .formats.hdf5 import index_groups, read_bucket_index

        if not self._present(p):
            return
        self._check_hash(p)
        try:
            want = {g: [(n, f, "/") for n, f in links] for g, links in index_groups(self.m["buckets"]).items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            return  # the buckets' own problems are reported already
        try:
            got = read_bucket_index(os.path.join(self.root, p))
        except (OSError, ValueError) as e:
            self.add(p, "decode", f"not an index of the buckets ({_short(e)})")
            return
        for g in sorted(set(want) | set(got)):
            if g not in got:
                self.add(p, "bucket", f"has no group '{g}'")
            elif g not in want:
                self.add(p, "bucket", f"group '{g}' is not a bucket of the manifest")
            elif got[g] != want[g]:
                extra = [x for x in got[g] if x not in want[g]]
                if extra:
                    n, f, path = extra[0]
                    self.add(p, "bucket", f"'{g}' links to {f}:{path} (as '{n}'), not to the bucket's files")
                else:
                    missing = [x[1] for x in want[g] if x not in got[g]]
                    self.add(p, "bucket", f"'{g}' does not link to {missing[0] if missing else 'its files in order'}")

    # -- the directory ------------------------------------------------------------------------

    def _strays(self, listed: set[str]) -> None:
        expected = set(listed) | {MANIFEST}
        dirs_needed = set()
        for p in expected:
            parts = p.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs_needed.add("/".join(parts[:i]))
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            rel_dir = os.path.relpath(dirpath, self.root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
            keep = []
            for d in sorted(dirnames):
                rel = f"{rel_dir}/{d}" if rel_dir else d
                if os.path.islink(os.path.join(dirpath, d)):
                    self.add(rel, "stray", "a symbolic link, not listed in the manifest (not followed)")
                elif rel in dirs_needed:
                    keep.append(d)
                else:
                    self.add(rel, "stray", "a directory not listed in the manifest (stray or temporary)")
            dirnames[:] = keep
            for n in sorted(filenames):
                rel = f"{rel_dir}/{n}" if rel_dir else n
                if rel in expected:
                    continue
                full = os.path.join(dirpath, n)
                if os.path.islink(full):
                    self.add(rel, "stray", "a symbolic link, not listed in the manifest (not followed)")
                elif _temporary(n):
                    self.add(rel, "stray", "a temporary file (of an interrupted run?), not listed in the manifest")
                else:
                    self.add(rel, "stray", "not listed in the manifest (a stray file)")

    # -- files --------------------------------------------------------------------------------

    def _hash_pool(self):
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="lovecraft-verify-hash")
        return self._pool

    def _present(self, p: str) -> bool:
        """Exists as a regular file of the listed size; a problem otherwise. Starts its hashing."""
        full = os.path.join(self.root, p)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            self.add(p, "missing", "listed in the manifest but missing")
            return False
        except OSError as e:
            self.add(p, "missing", f"cannot be read ({e.strerror})")
            return False
        if stat.S_ISLNK(st.st_mode):
            self.add(p, "decode", "a symbolic link (not followed: a dataset holds plain files)")
            return False
        if not stat.S_ISREG(st.st_mode):
            self.add(p, "decode", "not a regular file")
            return False
        want = self.info[p].get("bytes")
        if _is_count(want) and st.st_size != want:
            what = " (truncated?)" if st.st_size < want else ""
            self.add(p, "size", f"{st.st_size} bytes on disk, the manifest says {want}{what}")
            self._hashes[p] = None
        else:
            self._hashes[p] = self._hash_pool().submit(_sha256, full, self._stop)
        return True

    def _check_hash(self, p: str) -> None:
        fut = self._hashes.pop(p, None)
        if fut is None:
            return
        try:
            digest = fut.result()
        except OSError as e:
            self.add(p, "sha256", f"cannot be read ({e.strerror})")
            return
        want = self.info[p].get("sha256")
        if digest != want:
            self.add(p, "sha256", f"sha256 {digest} differs from the manifest's {want}")

    def _check_units(self, comparer) -> dict | None:
        """Decode every unit; the merged statistics, or None when some unit could not be read."""
        from .stats import ColumnStats

        self._hashes: dict[str, Any] = {}
        overall = {f.name: ColumnStats(f.kind, self._storage(f)) for f in self.schema}
        complete = True
        bar = self._bar()
        for u in self.units:
            present = [p for p in u.files if self._present(p)]
            ok = len(present) == len(u.files)
            stats = None
            if ok:
                try:
                    stats = self._decode_unit(u, comparer)
                except _Bad as e:
                    self.add(e.file, e.kind, e.message)
                    stats = None
                except LovecraftError as e:  # the schema is one this format cannot hold
                    self.add(_first(u), "schema", e.one_line())
                    stats = None
            for p in u.files:
                self._check_hash(p)
            if bar is not None:
                bar.update(sum(int(self.info[p].get("bytes") or 0) for p in u.files))
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
        enabled = self.progress
        if enabled is None:
            enabled = sys.stderr.isatty()
        if not enabled:
            return None
        from tqdm import tqdm

        return tqdm(total=self.report.bytes, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False)

    def _storage(self, f):
        """The dtype a column's values have as read back from this format."""
        import numpy as np

        dt = f.np_dtype
        if self.fmt == "tfrecord" and f.kind in ("fixed", "sequence"):
            return np.dtype(np.float32) if dt.kind == "f" else np.dtype(np.int64)
        return dt

    def _unit_schema(self, u: _Unit):
        """The columns as a unit's files hold them (padded buckets hold dense sequences)."""
        from .schema import FIXED, SEQUENCE, Field, Schema

        if u.bucket is None or u.bucket.get("layout", "padded") != "padded":
            return self.schema
        width = int(u.bucket["max_length"])
        return Schema(tuple(Field(f.name, FIXED, f.dtype, (width,)) if f.kind == SEQUENCE else f for f in self.schema))

    def _decode_unit(self, u: _Unit, comparer) -> dict:
        from .stats import ColumnStats

        schema = self._unit_schema(u)
        stats = {f.name: ColumnStats(f.kind, self._storage(f)) for f in schema}
        lengths = _LengthCheck(u, schema) if u.bucket is not None else None
        rows = 0
        for batch, file in self._batches(u, schema):
            for name, st in stats.items():
                st.update(batch.columns[name])
            if lengths is not None:
                lengths.update(batch, file)
            if comparer is not None:
                comparer.feed(batch, u, file, rows)
            rows += batch.num_rows
            if rows > u.rows:
                raise _Bad(file, f"holds more than the {u.rows} rows the manifest says", "rows")
        if rows != u.rows:
            raise _Bad(_first(u), f"holds {rows} rows, the manifest says {u.rows}", "rows")
        if lengths is not None:
            for file, msg in lengths.problems():
                self.add(file, "bucket", msg)
        if u.stats is not None:
            self._compare_stats(None, u, u.stats, stats)
        return stats

    def _batches(self, u: _Unit, schema) -> Iterator[tuple[Any, str]]:
        if self.fmt == "memmap":
            yield from self._memmap(u, schema)
            return
        mine = [p for p in u.files if p.endswith(EXTENSIONS[self.fmt])]
        if len(mine) != 1:
            others = ", ".join(u.files) or "none"
            raise _Bad(_first(u), f"{u.label} lists {others}; expected one {self.fmt} file")
        p = mine[0]
        full = os.path.join(self.root, p)
        reader = {"hdf5": self._hdf5, "parquet": self._parquet, "tfrecord": self._tfrecord}[self.fmt]
        for b in reader(p, full, u, schema):
            yield b, p

    def _step_rows(self, schema) -> int:
        """Rows per batch: 1/16 of the memory budget, from the manifest's mean lengths; at most
        65536 rows when variable-length rows become Python objects (HDF5, TFRecord)."""
        from .schema import row_nbytes

        stats = self.m.get("stats") if isinstance(self.m.get("stats"), dict) else {}
        per = 0.0
        for f in schema:
            mean = (stats.get(f.name) or {}).get("length_mean") if isinstance(stats.get(f.name), dict) else None
            per += row_nbytes(f, float(mean) if isinstance(mean, (int, float)) and mean > 0 else 64.0)
        step = max(1, int(max(1 << 20, self.budget // 16) // max(1.0, per)))
        if self.fmt in ("hdf5", "tfrecord") and any(f.variable for f in schema):
            step = min(step, 1 << 16)
        return step

    # -- memmap -------------------------------------------------------------------------------

    def _npy(self, p: str, want_dtype, want_shape: tuple[int, ...]):
        """Map one .npy file after checking its header against the file size and the schema."""
        import numpy as np

        from .errors import InputError
        from .formats.npy import read_header

        full = os.path.join(self.root, p)
        size = os.path.getsize(full)
        try:
            with open(full, "rb") as f:
                h = read_header(f, p)
        except InputError as e:
            raise _Bad(p, _strip(e.one_line(), p)) from None
        expect = h.offset + h.data_bytes
        if size < expect:
            raise _Bad(
                p,
                f"truncated: the header declares shape {h.shape} {h.dtype} ({h.data_bytes} data bytes) "
                f"but the file holds {size - h.offset}",
            )
        if size > expect:
            raise _Bad(p, f"{size - expect} bytes of trailing garbage after the data the header declares")
        if h.fortran_order and len(h.shape) > 1:
            raise _Bad(p, "stored in Fortran order; lovecraft writes C order", "schema")
        if h.dtype != want_dtype:
            raise _Bad(p, f"holds {h.dtype}, the schema says {want_dtype}", "schema")
        if tuple(h.shape) != tuple(want_shape) and not (want_shape and want_shape[0] == -1):
            what = "rows" if h.shape[1:] == tuple(want_shape[1:]) else "shape"
            if what == "rows":
                raise _Bad(p, f"holds {h.shape[0]} rows, the manifest says {want_shape[0]}", "rows")
            raise _Bad(p, f"has shape {h.shape}, the schema says {tuple(want_shape)}", "schema")
        if want_shape and want_shape[0] == -1 and tuple(h.shape[1:]) != tuple(want_shape[1:]):
            raise _Bad(p, f"has shape {h.shape}, expected {tuple(want_shape)}", "schema")
        if h.data_bytes == 0:
            return np.empty(h.shape, dtype=h.dtype)
        return np.memmap(full, dtype=h.dtype, mode="r", offset=h.offset, shape=h.shape)

    def _memmap(self, u: _Unit, schema) -> Iterator[tuple[Any, str]]:
        import numpy as np

        from .schema import FIXED, STRING, Batch, VarColumn

        roles: dict[str, dict[str, str]] = {}
        for p in u.files:
            info = self.info[p]
            col = info.get("column")
            if col not in schema.names:
                raise _Bad(p, f"the manifest gives no column of the schema for it (column {col!r})", "manifest")
            role = info.get("role") or "data"
            if role not in ("data", "values", "offsets"):
                raise _Bad(p, f"the manifest gives it no valid role ({role!r})", "manifest")
            roles.setdefault(col, {})[role] = p
        cols: dict[str, Any] = {}
        first: dict[str, str] = {}
        for f in schema:
            r = roles.get(f.name, {})
            if f.kind == FIXED:
                if "data" not in r:
                    raise _Bad(_first(u), f"{u.label} has no file for column '{f.name}'", "manifest")
                cols[f.name] = self._npy(r["data"], f.np_dtype, (u.rows, *f.shape))
                first[f.name] = r["data"]
            else:
                if "values" not in r or "offsets" not in r:
                    raise _Bad(_first(u), f"{u.label} has no values/offsets files for column '{f.name}'", "manifest")
                vdt = f.np_dtype if f.kind == "sequence" else np.dtype(np.uint8)
                values = self._npy(r["values"], vdt, (-1,))
                offsets = self._npy(r["offsets"], np.dtype("<i8"), (u.rows + 1,))
                if offsets[0] != 0:
                    raise _Bad(r["offsets"], f"starts at {int(offsets[0])}, not 0")
                if int(offsets[-1]) != len(values):
                    raise _Bad(
                        r["offsets"], f"ends at {int(offsets[-1])}, but {r['values']} holds {len(values)} values"
                    )
                cols[f.name] = (values, offsets, r)
                first[f.name] = r["values"]
        step = self._step_rows(schema)
        for a in range(0, u.rows, step):
            b = min(u.rows, a + step)
            out: dict[str, Any] = {}
            for name, c in cols.items():
                if isinstance(c, tuple):
                    values, offsets, r = c
                    offs = np.asarray(offsets[a : b + 1])
                    d = np.diff(offs)
                    if (d < 0).any():
                        i = a + int(np.flatnonzero(d < 0)[0])
                        raise _Bad(r["offsets"], f"offsets decrease at row {i + 1} (corrupt)")
                    out[name] = VarColumn(values[offs[0] : offs[-1]], offs - offs[0])
                    if schema[name].kind == STRING:
                        _check_utf8(out[name], a, name, r["values"])
                else:
                    out[name] = c[a:b]
            yield Batch(out, b - a), first[next(iter(cols))]

    # -- HDF5 ---------------------------------------------------------------------------------

    def _hdf5(self, p: str, full: str, u: _Unit, schema) -> Iterator[Any]:
        import h5py
        import numpy as np

        from .schema import FIXED, Batch, VarColumn

        try:
            f = h5py.File(full, "r", rdcc_nbytes=4 << 20)
        except (OSError, ValueError) as e:
            raise _Bad(p, f"cannot be opened as HDF5 ({_short(e)})") from None
        with f:
            try:
                dsets = self._hdf5_datasets(p, f, u, schema)
            except (KeyError, OSError, RuntimeError, ValueError, TypeError, AttributeError) as e:
                raise _Bad(p, f"damaged HDF5 structure ({_short(e)})") from None
            step = self._step_rows(schema)
            chunk0 = min((ds.chunks[0] for ds in dsets.values() if ds.chunks), default=1)
            if step > chunk0:
                step -= step % chunk0
            for a in range(0, u.rows, step):
                b = min(u.rows, a + step)
                cols: dict[str, Any] = {}
                for fd in schema:
                    ds = dsets[fd.name]
                    try:
                        if fd.kind == FIXED and fd.np_dtype.kind == "U":
                            cols[fd.name] = np.array(ds.asstr()[a:b].tolist(), dtype=fd.np_dtype).reshape(
                                (b - a, *fd.shape)
                            )
                        elif fd.kind == FIXED:
                            out = np.empty((b - a, *fd.shape), dtype=fd.np_dtype)
                            if b > a:
                                ds.read_direct(out, np.s_[a:b])
                            cols[fd.name] = out
                        else:
                            raw = ds[a:b]
                            cols[fd.name] = _var_from_objects(raw, fd, VarColumn, np)
                    except (OSError, KeyError, ValueError, RuntimeError, TypeError, UnicodeError) as e:
                        raise _Bad(p, f"dataset '{fd.name}', rows {a + 1}-{b}: cannot be read ({_short(e)})") from None
                yield Batch(cols, b - a)

    def _hdf5_datasets(self, p: str, f, u: _Unit, schema) -> dict:
        """The schema's datasets, after checking the file's structure, shapes, types and chunks."""
        import h5py
        import numpy as np

        from .schema import BINARY, FIXED, STRING

        self._hdf5_links(p, f, schema)
        dsets = {}
        for fd in schema:
            ds = f[fd.name]
            if not isinstance(ds, h5py.Dataset):
                raise _Bad(p, f"'{fd.name}' is not a dataset", "schema")
            want = (u.rows, *fd.shape) if fd.kind == FIXED else (u.rows,)
            if ds.shape != want:
                if ds.shape[:1] != want[:1] and ds.shape[1:] == want[1:]:
                    raise _Bad(p, f"dataset '{fd.name}' holds {ds.shape[0]} rows, the manifest says {u.rows}", "rows")
                raise _Bad(p, f"dataset '{fd.name}' has shape {ds.shape}, the schema says {want}", "schema")
            if fd.kind == FIXED and fd.np_dtype.kind == "U":
                if h5py.check_string_dtype(ds.dtype) is None:
                    raise _Bad(p, f"dataset '{fd.name}' holds {ds.dtype}, not text", "schema")
            elif fd.kind == FIXED:
                if ds.dtype != fd.np_dtype:
                    raise _Bad(p, f"dataset '{fd.name}' holds {ds.dtype}, the schema says {fd.np_dtype}", "schema")
            elif fd.kind == STRING:
                if h5py.check_string_dtype(ds.dtype) is None:
                    raise _Bad(p, f"dataset '{fd.name}' holds {ds.dtype}, not text", "schema")
            else:
                base = h5py.check_vlen_dtype(ds.dtype)
                want_dt = np.dtype(np.uint8) if fd.kind == BINARY else fd.np_dtype
                if base is None or np.dtype(base) != want_dt:
                    raise _Bad(p, f"dataset '{fd.name}' holds {ds.dtype}, the schema says {fd.describe()}", "schema")
            if ds.chunks is not None:
                chunk_bytes = ds.dtype.itemsize * int(np.prod(ds.chunks, dtype=np.int64))
                if chunk_bytes > MAX_CHUNK_BYTES:
                    raise _Bad(p, f"dataset '{fd.name}' has chunks of {chunk_bytes} bytes (refused: over 64 MiB)")
            dsets[fd.name] = ds
        return dsets

    def _hdf5_links(self, p: str, f, schema) -> None:
        """External and soft links, external storage, virtual datasets and objects other than the
        schema's datasets are problems; none of them is followed. The worst is reported."""
        import h5py

        names = set(schema.names)
        found: list[tuple[int, str]] = []
        todo = [("", f)]
        seen = 0
        while todo:
            prefix, g = todo.pop()
            for name in g:
                seen += 1
                if seen > 100_000:
                    raise _Bad(p, "holds over 100000 objects (refused)")
                full = f"{prefix}/{name}" if prefix else name
                link = g.get(name, getlink=True)
                if isinstance(link, h5py.ExternalLink):
                    found.append((0, f"'{full}' is an external link to {link.filename}:{link.path} (not followed)"))
                    continue
                if isinstance(link, h5py.SoftLink):
                    found.append((2, f"'{full}' is a soft link to {link.path} (lovecraft writes none)"))
                    continue
                obj = g.get(name)
                if isinstance(obj, h5py.Group):
                    todo.append((full, obj))
                elif isinstance(obj, h5py.Dataset):
                    why = _hdf5_external(obj)
                    if why:
                        found.append((1, f"dataset '{full}' {why} (not followed)"))
                        continue
                if prefix or name not in names:
                    found.append((3, f"holds '{full}', which is not a column of the schema"))
        if found:
            raise _Bad(p, min(found)[1], "decode" if min(found)[0] < 3 else "schema")
        missing = [n for n in schema.names if n not in f]
        if missing:
            raise _Bad(p, f"has no dataset '{missing[0]}'", "schema")

    # -- Parquet ------------------------------------------------------------------------------

    def _parquet(self, p: str, full: str, u: _Unit, schema) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from .arrowconv import arrow_schema, batch_from_arrow

        try:
            pf = pq.ParquetFile(full, page_checksum_verification=True, memory_map=True)
            md = pf.metadata
            got = pf.schema_arrow
        except (OSError, pa.ArrowException, ValueError) as e:
            raise _Bad(p, f"cannot be opened as Parquet ({_short(e)})") from None
        with pf:
            want = arrow_schema(schema)
            if got.names != want.names:
                raise _Bad(p, f"holds columns {got.names}, the schema says {want.names}", "schema")
            for a, b in zip(got, want, strict=True):
                if a.type != b.type:
                    raise _Bad(p, f"column '{a.name}' is {a.type}, the schema says {b.type}", "schema")
            if md.num_rows != u.rows:
                raise _Bad(p, f"holds {md.num_rows} rows, the manifest says {u.rows}", "rows")
            limit = max(1 << 30, 4 * self.budget)
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                for c in range(rg.num_columns):
                    n = rg.column(c).total_uncompressed_size
                    if n > limit:
                        raise _Bad(p, f"row group {g} claims {n} uncompressed bytes in one column (refused)")
            step = self._step_rows(schema)
            done = 0
            try:
                for rb in pf.iter_batches(batch_size=step, use_threads=False):
                    for name in rb.schema.names:
                        if rb.column(name).null_count:
                            raise _Bad(p, f"column '{name}' holds nulls near row {done + 1}", "schema")
                    batch = batch_from_arrow(rb, schema)
                    done += rb.num_rows
                    yield batch
            except (OSError, pa.ArrowException, ValueError) as e:
                raise _Bad(p, f"cannot be decoded after row {done} ({_short(e)})") from None

    # -- TFRecord -----------------------------------------------------------------------------

    def _tfrecord(self, p: str, full: str, u: _Unit, schema) -> Iterator[Any]:
        info = self.m.get("tfrecord")
        comp = info.get("compression") if isinstance(info, dict) else None
        gz = (comp.upper() == "GZIP" if isinstance(comp, str) else False) or p.endswith(".gz")
        if all(f.kind == "fixed" for f in schema):
            yield from self._tfrecord_fixed(p, full, u, schema, gz)
        else:
            yield from self._tfrecord_rows(p, full, u, schema, gz)

    def _tfrecord_fixed(self, p: str, full: str, u: _Unit, schema, gz: bool) -> Iterator[Any]:
        """Fixed-shape numeric rows: the dataset reader's vectorised path (both CRCs of every record)."""
        import zlib

        import numpy as np

        from .loaders.tfrecord_reader import TfrecordReader
        from .schema import Batch

        reader = TfrecordReader(u.rows, schema, full, "GZIP" if gz else None)
        step = self._step_rows(schema)
        done = 0
        try:
            for b in reader.chunks(0, u.rows + 1, step):
                cols = {}
                for f in schema:
                    c = b.columns[f.name]
                    if c.dtype == object:  # the reader's slow path keeps Python objects
                        c = np.asarray(c.tolist(), dtype=self._storage(f)).reshape((b.num_rows, *f.shape))
                    cols[f.name] = c
                done += b.num_rows
                yield Batch(cols, b.num_rows)
        except LovecraftError as e:
            raise _Bad(
                p, _strip(e.one_line(), full, p), "rows" if "the manifest says" in e.message else "decode"
            ) from None
        except (zlib.error, EOFError, OSError, ValueError) as e:
            raise _Bad(p, f"cannot be decoded after record {done} ({_short(e)})") from None

    def _tfrecord_rows(self, p: str, full: str, u: _Unit, schema, gz: bool) -> Iterator[Any]:
        """Any schema: every record framed with both CRCs checked, then decoded a batch at a time:
        columnar (vectorised) when the records have our writer's layout, else one by one."""
        codec = _codec()
        step = self._step_rows(schema)
        stream = _open_tfrecord(full, p, gz)
        size = None if gz else os.path.getsize(full)
        records: list[bytes] = []
        index = 0
        try:
            with stream:
                for data in codec.iter_records(stream, p, size):
                    index += 1
                    if index > u.rows:
                        raise _Bad(p, f"holds more than the {u.rows} records the manifest says", "rows")
                    records.append(data)
                    if len(records) == step:
                        yield self._examples(p, records, index - len(records), schema, codec)
                        records = []
        except LovecraftError as e:
            raise _Bad(p, _strip(e.one_line(), p)) from None
        except (EOFError, OSError, ValueError) as e:
            raise _Bad(p, f"cannot be decoded after record {index} ({_short(e)})") from None
        if records:
            yield self._examples(p, records, index - len(records), schema, codec)
        if index < u.rows:
            raise _Bad(p, f"holds {index} records, the manifest says {u.rows}", "rows")

    def _examples(self, p: str, records: list[bytes], before: int, schema, codec):
        """A batch of ``tf.train.Example`` records as columns (``before``: records before them)."""
        import numpy as np

        from .formats.tfexample import feature_kind
        from .schema import FIXED, Batch, VarColumn

        kinds = {f.name: feature_kind(f) for f in schema}
        batch = columnar_examples(records, schema, kinds, self._storage)
        if batch is not None:
            return batch
        per: dict[str, list] = {f.name: [] for f in schema}
        for i, data in enumerate(records):
            index = before + i + 1
            try:
                ex = codec.parse_example(bytes(data))
            except LovecraftError as e:
                raise _Bad(p, f"record {index}: {_strip(e.one_line(), p)}") from None
            for f in schema:
                got = ex.get(f.name)
                if got is None:
                    raise _Bad(p, f"record {index} has no feature '{f.name}'", "schema")
                kind, vals = got
                if kind != kinds[f.name] and vals:
                    raise _Bad(
                        p, f"record {index}: feature '{f.name}' is a {kind} list, expected {kinds[f.name]}", "schema"
                    )
                if f.kind == FIXED and len(vals) != f.row_size:
                    raise _Bad(
                        p, f"record {index}: feature '{f.name}' has {len(vals)} values, expected {f.row_size}", "schema"
                    )
                if f.kind in ("string", "binary") and len(vals) != 1:
                    raise _Bad(p, f"record {index}: feature '{f.name}' has {len(vals)} values, expected 1", "schema")
                per[f.name].append(vals)
            if len(ex) != len(schema):
                extra = sorted(set(ex) - set(schema.names))
                raise _Bad(p, f"record {index} has features {extra} that are not in the schema", "schema")
        return _rows_batch(per, schema, len(records), self._storage, np, VarColumn, Batch, FIXED)

    # -- statistics ---------------------------------------------------------------------------

    def _stat_file(self, u: _Unit | None, column: str, key: str) -> str:
        """The file a statistic of ``column`` in unit ``u`` is read from (the manifest for overall)."""
        if u is None:
            return MANIFEST
        if self.fmt != "memmap":
            return _first(u)
        roles = {}
        for p in u.files:
            info = self.info[p]
            if info.get("column") == column and isinstance(info.get("role") or "data", str):
                roles[info.get("role") or "data"] = p
        if key.startswith("length"):
            return roles.get("offsets") or roles.get("data") or _first(u)
        return roles.get("data") or roles.get("values") or _first(u)

    def _compare_stats(self, where: str | None, u, expected: Any, observed: dict, overall: bool = False) -> None:
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
                    self._stat_file(unit, f.name, ""), "stats", f"the manifest has no statistics for column '{f.name}'"
                )
                continue
            got = st.to_dict()
            storage = self._storage(f)
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
                    self._stat_file(unit, f.name, key),
                    "stats",
                    f"column '{f.name}' {key}: the manifest says {_fmt(e)}, {who} holds {_fmt(g)}{scope}",
                )

    def _check_float16(self, observed: dict) -> None:
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
            if f.kind == "fixed" and _is_count(r.get("values")) and r["values"] != st.count * f.row_size:
                self.add(
                    MANIFEST,
                    "float16",
                    f"the float16 report counts {r['values']} values of '{name}', the data holds {st.count * f.row_size}",
                )
            if _is_count(r.get("nan")) and r["nan"] != st.nan:
                self.add(
                    MANIFEST,
                    "float16",
                    f"the float16 report counts {r['nan']} NaN in '{name}', the data holds {st.nan}",
                )


class _LengthCheck:
    """Every row's length within its bucket: from a ``length`` column, or each variable column's rows."""

    def __init__(self, u: _Unit, schema) -> None:
        self.u = u
        self.lo = int(u.bucket["min_length"])
        self.hi = int(u.bucket["max_length"])
        self.column = "length" if "length" in schema.names and schema["length"].kind == "fixed" else None
        self.var = [f.name for f in schema if f.variable]
        self.seen: dict[str, tuple[int, int, str]] = {}

    def update(self, batch, file: str) -> None:
        import numpy as np

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


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _check_utf8(col, row0: int, name: str, path: str) -> None:
    """Every row of a memmap text column is valid UTF-8: the rows' concatenation decodes, and no
    row starts inside a character (so no row can borrow the end of a character from the last)."""
    import numpy as np

    values, offs = np.asarray(col.values), np.asarray(col.offsets)
    starts = offs[:-1][np.diff(offs) > 0]
    bad = np.flatnonzero((values[starts] & 0xC0) == 0x80) if len(starts) else []
    at = int(starts[bad[0]]) if len(bad) else None
    try:
        values.tobytes().decode("utf-8")
    except UnicodeDecodeError as e:
        at = e.start if at is None else min(at, e.start)
    if at is not None:
        row = row0 + int(np.searchsorted(offs, at, side="right")) - 1
        raise _Bad(path, f"row {row + 1}: column '{name}' is not valid UTF-8 (corrupt)")


def _sha256(path: str, stop: threading.Event, block: int = 8 << 20) -> str | None:
    """The file's sha256 in large blocks (hashlib releases the GIL); None when stopped."""
    import hashlib

    h = hashlib.sha256()
    buf = bytearray(block)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            if stop.is_set():
                return None
            h.update(view[:n])
    return h.hexdigest()


def _first(u: _Unit) -> str:
    """The file a problem of unit ``u`` is reported on (the manifest when it lists none)."""
    return u.files[0] if u.files else MANIFEST


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _temporary(name: str) -> bool:
    n = name.lower()
    return n.endswith((".tmp", ".partial", ".part", "~", ".swp")) or ".tmp-" in n or n.startswith(".")


def _strip(text: str, *prefixes: str) -> str:
    for pre in prefixes:
        if text.startswith(pre + ": "):
            return text[len(pre) + 2 :]
        if text.startswith(pre + ", "):
            return text[len(pre) + 2 :]
    return text


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


def _hdf5_external(ds) -> str | None:
    """Why reading ``ds`` would open other files (virtual dataset, external storage), or None."""
    try:
        if ds.is_virtual:
            return "is a virtual dataset mapping other files"
    except (AttributeError, RuntimeError, ValueError):
        pass
    try:
        if ds.id.get_create_plist().get_external_count():
            return "keeps its data in external raw files"
    except (AttributeError, RuntimeError, ValueError):
        pass
    return None


def _var_from_objects(raw, fd, VarColumn, np):
    """An HDF5 object array of bytes (text) or arrays (sequences, binary) as a VarColumn."""
    n = len(raw)
    if fd.kind in ("string", "binary") and (n == 0 or isinstance(raw[0], (bytes, str))):
        try:  # h5py gives bytes objects: joined as they are
            values = np.frombuffer(b"".join(raw), dtype=np.uint8)
            items = raw
        except TypeError:
            items = [x.encode("utf-8") if isinstance(x, str) else bytes(x) for x in raw]
            values = np.frombuffer(b"".join(items), dtype=np.uint8)
        lens = np.fromiter(map(len, items), dtype=np.int64, count=n)
    else:
        dt = np.dtype(np.uint8) if fd.kind in ("string", "binary") else fd.np_dtype
        arrays = [np.asarray(x, dtype=dt).reshape(-1) for x in raw]
        lens = np.fromiter(map(len, arrays), dtype=np.int64, count=n)
        values = np.concatenate(arrays) if arrays else np.zeros(0, dt)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    return VarColumn(values, offs)


def _rows_batch(per, schema, n, storage, np, VarColumn, Batch, FIXED):
    cols = {}
    for f in schema:
        vals = per[f.name]
        dt = storage(f)
        if f.kind == FIXED:
            cols[f.name] = np.asarray(vals, dtype=dt).reshape((n, *f.shape))
        elif f.kind in ("string", "binary"):
            items = [v[0] for v in vals]
            lens = np.fromiter(map(len, items), dtype=np.int64, count=n)
            offs = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(lens, out=offs[1:])
            cols[f.name] = VarColumn(np.frombuffer(b"".join(items), dtype=np.uint8), offs)
        else:
            lens = np.fromiter(map(len, vals), dtype=np.int64, count=n)
            offs = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(lens, out=offs[1:])
            flat = np.fromiter((x for v in vals for x in v), dtype=dt, count=int(offs[-1]))
            cols[f.name] = VarColumn(flat, offs)
    return Batch(cols, n)


def _codec():
    """The TFRecord framing and ``tf.train.Example`` decoder."""
    try:
        from .formats import tfrecord_codec as codec
    except ImportError:
        from .formats import tfexample as codec
    return codec


# --------------------------------------------------------------------------------------------
# columnar decoding of tf.train.Example records
# --------------------------------------------------------------------------------------------

_TAGS = {"bytes": 0x0A, "float": 0x12, "int64": 0x1A}


class _Layout(Exception):
    """The records do not follow the expected layout (the caller decodes them one by one)."""


def _ranges(starts, lens):
    """Indices of the concatenated ranges ``[starts[i], starts[i] + lens[i])``."""
    import numpy as np

    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts - (np.cumsum(lens) - lens), lens)
    return np.arange(total, dtype=np.int64) + shift


def _spans(length: int, starts, lens):
    """A mask of the bytes in the (disjoint) spans ``[starts[i], starts[i] + lens[i])``: one byte
    per byte of the buffer, not eight as an index array would take."""
    import numpy as np

    edge = np.zeros(length + 1, dtype=np.int8)
    np.add.at(edge, starts, 1)
    np.add.at(edge, starts + lens, -1)
    return np.cumsum(edge[:-1], dtype=np.int8) > 0


class _Cursor:
    """One read position per record in the concatenated payloads, advanced in step."""

    def __init__(self, buf, starts, ends) -> None:
        self.buf = buf
        self.pos = starts.copy()
        self.ends = ends

    def byte(self, want: int) -> None:
        import numpy as np

        if (self.pos >= self.ends).any() or not np.array_equal(
            self.buf[self.pos], np.full(len(self.pos), want, np.uint8)
        ):
            raise _Layout
        self.pos += 1

    def varint(self):
        import numpy as np

        out = np.zeros(len(self.pos), dtype=np.uint64)
        live = np.arange(len(self.pos))
        for j in range(10):
            at = self.pos[live] + j
            if (at >= self.ends[live]).any():
                raise _Layout
            b = self.buf[at]
            out[live] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * j)
            more = b >= 0x80
            done = live[~more]
            self.pos[done] += j + 1
            live = live[more]
            if not len(live):
                return out.astype(np.int64)
        raise _Layout

    def length(self, end=None):
        """A length-delimited field's size, checked to end at ``end`` (or within the record)."""
        n = self.varint()
        stop = self.pos + n
        if (n < 0).any() or (stop > self.ends).any() or (end is not None and (stop != end).any()):
            raise _Layout
        return n


def columnar_examples(records: list[bytes], schema, kinds: dict[str, str], storage):
    """Records with the layout our writer gives (features in schema order, one list each, packed
    numbers) decoded as whole columns with NumPy; None when any record differs from that layout."""
    import numpy as np

    from .schema import FIXED, Batch, VarColumn

    n = len(records)
    if n == 0:
        return None
    lens = np.fromiter(map(len, records), dtype=np.int64, count=n)
    buf = np.frombuffer(b"".join(records), dtype=np.uint8)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    ends = starts + lens
    try:
        c = _Cursor(buf, starts, ends)
        c.byte(0x0A)
        c.length(ends)
        cols = {}
        for f in schema:
            key = f.name.encode()
            c.byte(0x0A)
            entry_end = c.pos + c.length()
            c.byte(0x0A)
            if (c.length() != len(key)).any():
                raise _Layout
            got = buf[_ranges(c.pos, np.full(n, len(key), np.int64))].reshape(n, len(key))
            if not (got == np.frombuffer(key, dtype=np.uint8)).all():
                raise _Layout
            c.pos += len(key)
            c.byte(0x12)
            c.length(entry_end)
            c.byte(_TAGS[kinds[f.name]])
            lst = c.length(entry_end)
            size = np.zeros(n, dtype=np.int64)
            has = lst > 0
            if has.all():
                c.byte(0x0A)
                size = c.length(entry_end)
            elif has.any():
                raise _Layout
            where = c.pos.copy()
            c.pos = entry_end
            values = buf[_spans(len(buf), where, size)]
            kind = kinds[f.name]
            dt = storage(f)
            if kind == "bytes":
                if f.kind not in ("string", "binary") or not has.all():
                    raise _Layout
                offs = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(size, out=offs[1:])
                cols[f.name] = VarColumn(values, offs)
                continue
            if kind == "float":
                if (size % 4).any():
                    raise _Layout
                vals = values.view("<f4").astype(dt, copy=False)
                counts = size // 4
            else:
                is_end = values < 0x80
                if len(values) and not is_end[np.cumsum(size)[size > 0] - 1].all():
                    raise _Layout  # a row's varints must end inside the row
                ends_at = np.flatnonzero(is_end)
                first = np.concatenate(([0], ends_at[:-1] + 1)) if len(ends_at) else ends_at
                width = ends_at - first + 1
                if len(width) and width.max() > 10:
                    raise _Layout
                pos_in = np.arange(len(values), dtype=np.int64) - np.repeat(first, width)
                parts = (values & 0x7F).astype(np.uint64) << (7 * pos_in).astype(np.uint64)
                vals = np.add.reduceat(parts, first) if len(first) else np.zeros(0, np.uint64)
                vals = vals.view(np.int64).astype(dt, copy=False)
                row_of_end = np.searchsorted(np.cumsum(size), ends_at, side="right")
                counts = np.bincount(row_of_end, minlength=n).astype(np.int64)
            if f.kind == FIXED:
                if (counts != f.row_size).any():
                    raise _Layout
                cols[f.name] = vals.reshape((n, *f.shape))
            else:
                offs = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(counts, out=offs[1:])
                cols[f.name] = VarColumn(vals, offs)
        if (c.pos != ends).any():
            raise _Layout
    except _Layout:
        return None
    return Batch(cols, n)


class _GzipLimit:
    """A gzip stream that refuses to inflate beyond a ratio of its compressed size (bombs)."""

    def __init__(self, path: str, name: str, max_ratio: float = 1000.0) -> None:
        import gzip

        self.raw = open(path, "rb")  # noqa: SIM115 - closed in close()
        self.size = os.path.getsize(path)
        self.gz = gzip.GzipFile(fileobj=self.raw, mode="rb")
        self.name = name
        self.out = 0
        self.max_ratio = max_ratio

    def read(self, n: int = -1) -> bytes:
        import gzip
        import zlib

        try:
            data = self.gz.read(n)
        except EOFError:
            raise _Bad(self.name, f"truncated gzip stream after {self.out} decompressed bytes") from None
        except (OSError, zlib.error, gzip.BadGzipFile) as e:
            raise _Bad(self.name, f"corrupt gzip stream after {self.out} decompressed bytes ({_short(e)})") from None
        self.out += len(data)
        if self.out > (64 << 20) and self.out > self.max_ratio * max(1, self.size):
            raise _Bad(self.name, f"inflates more than {self.max_ratio:.0f}x its size (decompression bomb?)")
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.gz.close()
        self.raw.close()


def _open_tfrecord(full: str, name: str, gz: bool):
    if gz:
        return _GzipLimit(full, name)
    return open(full, "rb", buffering=1 << 20)  # noqa: SIM115 - used as a context manager


class _CallableModule(types.ModuleType):
    """``lovecraft_convert.verify`` is both this module and the function: importing the submodule
    makes the package attribute the module, so calling it must still run :func:`verify`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Report:
        return verify(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
