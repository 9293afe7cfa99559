"""``open_dataset(path)``: a dataset directory written by ``lovecraft`` as batches of NumPy arrays.

Everything goes through ``_manifest.json``: the files of each shard (``shards[].files`` and the
``column``/``role`` of ``files[]``), the schema, the row counts. Nothing is found by guessing file
names, and a manifest that is incomplete, of another version or that lists files of another size
than on disk is refused with a :class:`~lovecraft_convert.errors.DatasetError`.

How batches are made
--------------------
* The rows of a dataset form one *group* (all its shards, in manifest order), or, for bucketed
  datasets, one group per bucket (see :mod:`.buckets`).
* Random-access formats (memmap, HDF5) shuffle exactly: each epoch draws a permutation of the
  group's rows (seeded by ``(seed, epoch)``) and a batch is one gather of its indices. Without
  shuffling, rows are read in large contiguous chunks and sliced into batches.
* Streaming formats (Parquet, TFRecord) shuffle the order of the shards (and of Parquet row
  groups) and pass rows through a bounded shuffle buffer (``shuffle_buffer`` rows).
  ``shuffle="buffer"`` asks for the same on memmap/HDF5 (cheaper than exact on HDF5).
* Splitting for workers and ranks (PyTorch, tf.distribute): worker ``g`` of ``W`` gets, with exact
  shuffling, every ``W``-th batch of the epoch; without, a contiguous ``1/W`` of the batches; for
  streaming formats a contiguous ``1/W`` of the rows of the epoch's shard order. Every record is
  seen exactly once per epoch across the ``W`` workers.

Variable-length columns come back as object arrays (``str`` for text, ``bytes`` for binary) and
sequences as a padded ``[batch, longest]`` array plus ``<name>_length`` (int64).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import DatasetError
from ..schema import BINARY, FIXED, STRING, Batch, Field, Schema, VarColumn, row_nbytes
from .readers import PartReader, pad_rows, to_object_rows

MANIFEST = "_manifest.json"
SUPPORTED_VERSIONS = (1,)
FORMATS = ("memmap", "hdf5", "parquet", "tfrecord")
RANDOM_ACCESS = ("memmap", "hdf5")
CHUNK_BYTES = 8 << 20  # rows read per call: large contiguous reads
SHUFFLE_BUFFER_BYTES = 64 << 20
DENSE_PERMUTATION_MAX = 1 << 25  # rows; above, a keyed bijection replaces the stored permutation


def open_dataset(path: str | os.PathLike, columns: list[str] | str | None = None, **options: Any) -> Dataset:
    """Open the dataset directory ``path`` (or its ``_manifest.json``).

    ``columns`` selects columns (in that order). ``options``: ``hdf5_cache_bytes`` (the chunk cache
    for exact shuffling of HDF5 datasets, default 512 MiB per process).
    """
    path = os.fspath(path)
    if os.path.basename(path) == MANIFEST and os.path.isfile(path):
        path = os.path.dirname(path) or "."
    if not os.path.isdir(path):
        raise DatasetError(f"{path}: no such dataset directory", hint="give the output directory of lovecraft")
    from ..manifest import read_manifest

    manifest = read_manifest(path)
    check_manifest(manifest, os.path.join(path, MANIFEST))
    return Dataset(path, manifest, columns, **options)


def check_manifest(m: Any, where: str) -> None:
    """Refuse what this version cannot read: not ours, unknown version, incomplete, unknown format."""
    from .. import __version__

    if not isinstance(m, dict) or m.get("format") != "lovecraft-dataset":
        raise DatasetError(f"{where}: not a lovecraft dataset manifest", hint="give a directory lovecraft wrote")
    version = m.get("version")
    if version not in SUPPORTED_VERSIONS:
        raise DatasetError(
            f"{where}: manifest version {version!r} is unknown to lovecraft_convert {__version__} "
            f"(it reads version {', '.join(map(str, SUPPORTED_VERSIONS))})",
            hint="upgrade lovecraft_convert, or re-create the dataset with this version",
        )
    if m.get("complete") is not True:
        raise DatasetError(
            f"{where}: the dataset is incomplete (the manifest does not say complete: true)",
            hint="the run that wrote it did not finish; run it again (`lovecraft shard ... --resume` resumes)",
        )
    if m.get("output_format") not in FORMATS:
        raise DatasetError(
            f"{where}: unknown output format {m.get('output_format')!r}",
            hint=f"this version reads {', '.join(FORMATS)}",
        )
    for key in ("rows", "schema", "files"):
        if key not in m:
            raise DatasetError(f"{where}: the manifest has no '{key}'", hint="re-create the dataset")
    if "shards" not in m and "buckets" not in m:
        raise DatasetError(f"{where}: the manifest lists no shards", hint="re-create the dataset")


class _Part:
    """One shard or bucket file set: ``rows`` rows at ``start`` within its group."""

    __slots__ = ("key", "rows", "start", "files")

    def __init__(self, key: tuple, rows: int, start: int, files: list[str]) -> None:
        self.key, self.rows, self.start, self.files = key, rows, start, files


class Group:
    """Rows read and batched together: the whole dataset, or one bucket of a bucketed dataset."""

    def __init__(self, index: int, parts: list[_Part], schema: Schema, bucket: dict | None = None) -> None:
        self.index = index
        self.parts = parts
        self.schema = schema  # the columns as the files hold them
        self.bucket = bucket  # the manifest's bucket entry (None when not bucketed)
        self.starts = np.array([p.start for p in parts] + [sum(p.rows for p in parts)], dtype=np.int64)
        self.rows = int(self.starts[-1])


class Dataset:
    """A dataset directory opened for reading. See :func:`open_dataset`."""

    def __init__(
        self, path: str, manifest: dict, columns: list[str] | str | None = None, *, hdf5_cache_bytes: int = 512 << 20
    ) -> None:
        from .buckets import bucket_groups

        self.path = path
        self.manifest = manifest
        self.format: str = manifest["output_format"]
        self.hdf5_cache_bytes = int(hdf5_cache_bytes)
        full = Schema.from_list(manifest["schema"])
        self.full_schema = full
        if isinstance(columns, str):
            columns = [columns]
        if columns:
            missing = [c for c in columns if c not in full.names]
            if missing:
                raise DatasetError(f"{path}: no column '{missing[0]}'", hint=f"columns are {', '.join(full.names)}")
            if len(set(columns)) != len(columns):
                raise DatasetError(f"{path}: a column is selected twice ({', '.join(columns)})")
            self.schema = Schema(tuple(full[c] for c in columns))
        else:
            self.schema = full
        self._file_info = {f["path"]: f for f in manifest["files"]}
        if manifest.get("buckets"):
            self.groups = bucket_groups(self)
        else:
            parts, start = [], 0
            for s in manifest["shards"]:
                parts.append(_Part((0, int(s["index"])), int(s["rows"]), start, list(s["files"])))
                start += int(s["rows"])
            self.groups = [Group(0, parts, self.schema)]
        total = sum(g.rows for g in self.groups)
        if total != int(manifest["rows"]):
            raise DatasetError(
                f"{path}: the shards hold {total} rows, the manifest says {manifest['rows']}",
                hint="the manifest is damaged; re-create the dataset",
            )
        self._check_files()
        self._readers: dict[tuple, PartReader] = {}
        self._take_plans: dict[tuple, Plan] = {}
        self._lock = threading.Lock()
        self._chunk_cache = None
        self._pid = os.getpid()

    # -- what it is ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return sum(g.rows for g in self.groups)

    @property
    def columns(self) -> list[str]:
        return self.schema.names

    @property
    def random_access(self) -> bool:
        return self.format in RANDOM_ACCESS

    @property
    def bucketed(self) -> bool:
        return self.groups[0].bucket is not None

    @property
    def num_shards(self) -> int:
        return sum(len(g.parts) for g in self.groups)

    def __repr__(self) -> str:
        cols = ", ".join(f"{f.name}: {f.describe()}" for f in self.schema)
        kind = f", {len(self.groups)} buckets" if self.bucketed else ""
        return f"<lovecraft Dataset {self.path!r}: {self.format}, {len(self)} rows, {self.num_shards} shards{kind}; {cols}>"

    def select(self, columns: list[str] | str) -> Dataset:
        """The same dataset with only ``columns``."""
        return Dataset(self.path, self.manifest, columns, hdf5_cache_bytes=self.hdf5_cache_bytes)

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d.update(_readers={}, _take_plans={}, _lock=None, _chunk_cache=None)
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()
        self._pid = os.getpid()

    # -- files --------------------------------------------------------------------------------

    def _check_files(self) -> None:
        for g in self.groups:
            for p in g.parts:
                for rel in p.files:
                    info = self._file_info.get(rel)
                    full = os.path.join(self.path, rel)
                    try:
                        size = os.stat(full).st_size
                    except OSError:
                        raise DatasetError(
                            f"{full}: listed in the manifest but missing",
                            hint="the dataset is incomplete; re-create it",
                        ) from None
                    if info is not None and "bytes" in info and int(info["bytes"]) != size:
                        raise DatasetError(
                            f"{full}: {size} bytes on disk, the manifest says {info['bytes']}",
                            hint="the file was changed or truncated; run `lovecraft verify` or re-create the dataset",
                        )

    def reader(self, group: Group, part: _Part) -> PartReader:
        """The part's reader, made (and its files opened) lazily in each process."""
        if self._pid != os.getpid():
            self._readers = {}
            self._chunk_cache = None
            self._lock = threading.Lock()
            self._pid = os.getpid()
        r = self._readers.get(part.key)
        if r is None:
            with self._lock:
                r = self._readers.get(part.key)
                if r is None:
                    r = self._readers[part.key] = self._make_reader(group, part)
        return r

    def _make_reader(self, group: Group, part: _Part) -> PartReader:
        paths = [os.path.join(self.path, f) for f in part.files]
        if self.format == "memmap":
            from .readers import MemmapReader

            files: dict[str, dict[str, str]] = {}
            for rel, full in zip(part.files, paths, strict=True):
                info = self._file_info.get(rel, {})
                if "column" not in info:
                    raise DatasetError(f"{full}: the manifest does not say which column it holds", hint="re-create it")
                files.setdefault(info["column"], {})[info.get("role") or "data"] = full
            return MemmapReader(part.rows, group.schema, files)
        ext = {"hdf5": (".h5", ".hdf5"), "parquet": (".parquet",), "tfrecord": (".tfrecord", ".tfrecord.gz")}
        mine = [p for p in paths if p.endswith(ext[self.format])] or paths
        if len(mine) != 1:
            raise DatasetError(
                f"{self.path}: shard {part.key[1]} lists {len(mine)} {self.format} files, expected one",
                hint="re-create the dataset",
            )
        path = mine[0]
        if self.format == "hdf5":
            from .readers import ChunkCache, Hdf5Reader

            if self._chunk_cache is None:  # one budget for all the shards' chunks
                self._chunk_cache = ChunkCache(self.hdf5_cache_bytes)
            return Hdf5Reader(part.rows, group.schema, path, self._chunk_cache, key=part.key)
        if self.format == "parquet":
            from .readers import ParquetReader

            return ParquetReader(part.rows, group.schema, path)
        from .tfrecord_reader import TfrecordReader

        comp = (self.manifest.get("tfrecord") or {}).get("compression")
        return TfrecordReader(part.rows, group.schema, path, comp)

    def close(self) -> None:
        """Close open files (they are reopened on next use)."""
        for r in self._readers.values():
            r.close()
        self._readers = {}

    # -- batches ------------------------------------------------------------------------------

    def batches(
        self,
        batch_size: int = 256,
        shuffle: bool | str = False,
        seed: int | None = None,
        epochs: int | None = 1,
        drop_remainder: bool = False,
        dtype_float16: str = "float16",
        *,
        shuffle_buffer: int | None = None,
        pad_to: str = "bucket",
        pad_value: int | float = 0,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Batches as ``{column: ndarray}``, ``batch_size`` rows each (the last of an epoch may be
        smaller unless ``drop_remainder``).

        ``shuffle``: False; True (exact for memmap/HDF5, shards + buffer for Parquet/TFRecord);
        "exact"; or "buffer". The same ``seed`` gives the same order; each epoch has its own order.
        ``epochs=None`` repeats forever. ``dtype_float16="float32"`` returns float16 columns as
        float32. Bucketed datasets: each batch comes from one bucket, padded to the bucket's length
        (``pad_to="bucket"``) or to the batch's longest (``pad_to="batch"``), with ``length``.
        """
        plan = self.plan(batch_size, shuffle, seed, drop_remainder, dtype_float16, shuffle_buffer, pad_to, pad_value)
        epoch = 0
        while epochs is None or epoch < epochs:
            yield from plan.epoch(epoch)
            epoch += 1

    def num_batches(self, batch_size: int, drop_remainder: bool = False) -> int:
        """Batches per epoch of ``batches(batch_size, drop_remainder=...)``."""
        return self.plan(batch_size, False, None, drop_remainder).count(0, 1)

    def plan(
        self,
        batch_size: int,
        shuffle: bool | str = False,
        seed: int | None = None,
        drop_remainder: bool = False,
        dtype_float16: str = "float16",
        shuffle_buffer: int | None = None,
        pad_to: str = "bucket",
        pad_value: int | float = 0,
        split: str = "batches",
    ) -> Plan:
        """The batching options, checked; the loaders iterate ``plan.epoch(e, worker)``."""
        return Plan(
            self, batch_size, shuffle, seed, drop_remainder, dtype_float16, shuffle_buffer, pad_to, pad_value, split
        )

    # -- random access ------------------------------------------------------------------------

    def take(self, indices, dtype_float16: str = "float16", pad_value: int | float = 0) -> dict[str, np.ndarray]:
        """Rows ``indices`` (any order, of ``range(len(self))``) as one batch; memmap and HDF5 only."""
        if not self.random_access:
            raise DatasetError(
                f"{self.path}: {self.format} is read as a stream, rows cannot be fetched by index",
                hint="use batches()/to_torch() (iterable), or write the dataset as memmap or hdf5",
            )
        if self.bucketed:
            raise DatasetError(f"{self.path}: a bucketed dataset is read in batches", hint="use batches()")
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"index out of range for a dataset of {n} rows")
        idx = np.where(idx < 0, idx + n, idx)
        g = self.groups[0]
        key = (dtype_float16, pad_value)
        plan = self._take_plans.get(key)
        if plan is None:
            plan = self._take_plans[key] = Plan(self, 1, False, None, False, dtype_float16, None, "bucket", pad_value)
        return plan.emit(g, self.take_rows(g, idx))

    def take_rows(self, g: Group, idx: np.ndarray) -> Batch:
        """Rows ``idx`` of group ``g`` (random-access formats), in that order."""
        if len(g.parts) == 1:
            r = self.reader(g, g.parts[0])
            n = len(idx)
            if n and int(idx[-1]) - int(idx[0]) == n - 1 and (n == 1 or bool((np.diff(idx) == 1).all())):
                return r.read(int(idx[0]), int(idx[-1]) + 1)
            return r.take(idx)
        which = np.searchsorted(g.starts, idx, side="right") - 1
        order = np.argsort(which, kind="stable")
        sw = which[order]
        pieces, sel = [], []
        for k in np.unique(sw).tolist():
            a, b = np.searchsorted(sw, [k, k + 1])
            rows = order[a:b]
            p = g.parts[k]
            pieces.append(self.reader(g, p).take(idx[rows] - p.start))
            sel.append(rows)
        batch = Batch.concat(pieces)
        pos = np.concatenate(sel)
        if np.array_equal(pos, np.arange(len(idx))):
            return batch
        inv = np.empty_like(pos)
        inv[pos] = np.arange(len(pos))
        return batch.take(inv)

    # -- the frameworks -----------------------------------------------------------------------

    def to_tf_dataset(self, batch_size: int = 256, **kwargs: Any):
        """A ``tf.data.Dataset`` of batches; see :func:`lovecraft_convert.loaders.tf.to_tf_dataset`."""
        from .tf import to_tf_dataset

        return to_tf_dataset(self, batch_size, **kwargs)

    def to_keras_pydataset(self, batch_size: int = 256, **kwargs: Any):
        """A ``keras.utils.PyDataset`` (memmap, HDF5); see :func:`lovecraft_convert.loaders.tf.to_keras_pydataset`."""
        from .tf import to_keras_pydataset

        return to_keras_pydataset(self, batch_size, **kwargs)

    def to_torch(self, batch_size: int | None = None, **kwargs: Any):
        """A PyTorch dataset; see :func:`lovecraft_convert.loaders.torch.to_torch`."""
        from .torch import to_torch

        return to_torch(self, batch_size, **kwargs)


class Plan:
    """Checked batching options; ``epoch(e, worker)`` gives the batches of epoch ``e`` for worker
    ``worker = (g, W)``. Deterministic in (seed, epoch, worker)."""

    def __init__(
        self,
        ds: Dataset,
        batch_size: int,
        shuffle: bool | str,
        seed: int | None,
        drop_remainder: bool,
        dtype_float16: str = "float16",
        shuffle_buffer: int | None = None,
        pad_to: str = "bucket",
        pad_value: int | float = 0,
        split: str = "batches",
    ) -> None:
        if not isinstance(batch_size, int | np.integer) or batch_size < 1:
            raise DatasetError(f"batch_size must be a positive integer, not {batch_size!r}")
        if dtype_float16 not in ("float16", "float32"):
            raise DatasetError(f"dtype_float16={dtype_float16!r}: use 'float16' or 'float32'")
        if pad_to not in ("bucket", "batch"):
            raise DatasetError(f"pad_to={pad_to!r}: use 'bucket' or 'batch'")
        if shuffle is True:
            mode = "exact" if ds.random_access else "buffer"
        elif shuffle is False or shuffle is None:
            mode = None
        elif shuffle in ("exact", "buffer"):
            mode = shuffle
        else:
            raise DatasetError(f"shuffle={shuffle!r}: use True, False, 'exact' or 'buffer'")
        if mode == "exact" and not ds.random_access:
            raise DatasetError(
                f"{ds.path}: an exact shuffle needs random access, which {ds.format} does not offer",
                hint="use shuffle=True (shard order and a shuffle buffer), or write memmap/hdf5",
            )
        if mode and seed is None:
            seed = int(np.random.SeedSequence().entropy % (1 << 63))
        self.ds = ds
        self.batch_size = int(batch_size)
        self.mode = mode
        self.seed = seed
        self.drop_remainder = bool(drop_remainder)
        self.float32 = dtype_float16 == "float32"
        self.pad_to = pad_to
        self.pad_value = pad_value
        self.split = split  # "batches" (whole batches per worker) or "rows" (row ranges per worker)
        if shuffle_buffer is None:  # one buffer per bucket read at the same time: they share the bytes
            row = sum(row_nbytes(f) for f in ds.schema) or 1
            shuffle_buffer = max(16 * self.batch_size, int(SHUFFLE_BUFFER_BYTES // len(ds.groups) // row))
        if shuffle_buffer < 1:
            raise DatasetError(f"shuffle_buffer must be positive, not {shuffle_buffer}")
        self.shuffle_buffer = int(shuffle_buffer)
        self._emitters = {g.index: self._emitter(g) for g in ds.groups}

    # -- sizes --------------------------------------------------------------------------------

    def _nbatches(self, rows: int) -> int:
        bs = self.batch_size
        return rows // bs if self.drop_remainder else -(-rows // bs)

    def _split(self, g: Group, worker: tuple[int, int]) -> tuple[str, int, int]:
        """How worker ``(w, n)`` gets its share of group ``g``: ("stride", w, n) every n-th batch of
        the epoch, ("batches", first, stop) a contiguous run of its batches, or ("rows", a, b)."""
        w, n = worker
        if self.ds.random_access and self.mode != "buffer" and self.split == "batches":
            if self.mode == "exact":
                return ("stride", w, n)
            nb = self._nbatches(g.rows)
            return ("batches", w * nb // n, (w + 1) * nb // n)
        return ("rows", w * g.rows // n, (w + 1) * g.rows // n)

    def group_count(self, g: Group, worker: tuple[int, int]) -> int:
        how, a, b = self._split(g, worker)
        if how == "stride":
            return len(range(a, self._nbatches(g.rows), b))
        if how == "batches":
            return b - a
        return self._nbatches(b - a)

    def count(self, epoch: int = 0, workers: int = 1, worker: int | None = None) -> int:
        """Batches of one epoch for ``worker`` of ``workers`` (all workers when None)."""
        ws = range(workers) if worker is None else [worker]
        return sum(self.group_count(g, (w, workers)) for g in self.ds.groups for w in ws)

    # -- iteration ----------------------------------------------------------------------------

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self.seed or 0, *key])

    def epoch(self, epoch: int, worker: tuple[int, int] = (0, 1)) -> Iterator[dict[str, np.ndarray]]:
        """The batches (output dicts) of ``epoch`` that belong to ``worker = (index, count)``."""
        for g, batch in self.raw_epoch(epoch, worker):
            yield self.emit(g, batch)

    def raw_epoch(self, epoch: int, worker: tuple[int, int] = (0, 1)) -> Iterator[tuple[Group, Batch]]:
        w, n = worker
        if not 0 <= w < n:
            raise DatasetError(f"worker {w} of {n} does not exist")
        groups = self.ds.groups
        if len(groups) == 1:
            for b in self._group_batches(groups[0], epoch, worker):
                yield groups[0], b
            return
        # Buckets: every batch from one bucket; buckets interleaved in a seeded random order (so
        # training does not go from short to long), each bucket's batches spread over the epoch.
        streams = [self._group_batches(g, epoch, worker) for g in groups]
        counts = [self.group_count(g, worker) for g in groups]
        seq = np.repeat(np.arange(len(groups)), counts)
        if self.mode:
            self._rng(epoch, 2, w, n).shuffle(seq)
        for k in seq.tolist():
            b = next(streams[k], None)
            if b is not None:
                yield groups[k], b

    def _group_batches(self, g: Group, epoch: int, worker: tuple[int, int]) -> Iterator[Batch]:
        bs = self.batch_size
        how, a, b = self._split(g, worker)
        ds = self.ds
        if how == "stride":
            order = Permutation(g.rows, self._rng(epoch, 0, g.index))
            nb = self._nbatches(g.rows)
            take = ds.reader(g, g.parts[0]).take if len(g.parts) == 1 else (lambda i: ds.take_rows(g, i))
            for k in range(a, nb, b):
                yield take(order[k * bs : min(g.rows, (k + 1) * bs)])
            return
        if how == "batches":
            lo, hi = a * bs, min(g.rows, b * bs)
            chunk = max(bs, (CHUNK_BYTES // self._row_bytes(g)) // bs * bs)
            yield from _rebatch(self._chunks(g, [(p, lo, hi) for p in g.parts], chunk, None), bs, self.drop_remainder)
            return
        if ds.random_access and self.mode == "exact":  # rows [a, b) of the epoch's permutation
            order = Permutation(g.rows, self._rng(epoch, 0, g.index))
            for i in range(a, b, bs):
                j = min(b, i + bs)
                if j - i < bs and self.drop_remainder:
                    break
                yield ds.take_rows(g, order[i:j])
            return
        # rows [a, b) of the epoch's part order (shuffled: parts and blocks permuted, then a buffer)
        parts = list(g.parts)
        if self.mode:
            perm = self._rng(epoch, 0, g.index).permutation(len(parts))
            parts = [parts[i] for i in perm.tolist()]
        pieces, pos = [], 0
        for p in parts:
            lo, hi = max(a, pos), min(b, pos + p.rows)
            if lo < hi:
                pieces.append((p, p.start + lo - pos, p.start + hi - pos))
            pos += p.rows
        chunk = max(bs, CHUNK_BYTES // self._row_bytes(g))
        if ds.random_access:
            chunk = max(bs, chunk // bs * bs)
        rng = self._rng(epoch, 1, g.index, *worker) if self.mode else None
        chunks = self._chunks(g, pieces, chunk, rng)
        if not ds.random_access and len(ds.groups) == 1:
            from ..pipeline import prefetch

            chunks = prefetch(chunks, depth=2)  # decoding overlaps with the consumer
        if self.mode:
            chunks = _shuffle_buffer(chunks, self.shuffle_buffer, rng, g.schema)
        yield from _rebatch(chunks, bs, self.drop_remainder)

    def _chunks(self, g: Group, pieces, chunk: int, rng) -> Iterator[Batch]:
        """Rows ``[lo, hi)`` (group coordinates) of each part in ``pieces``, in large chunks."""
        for p, lo, hi in pieces:
            lo, hi = max(lo, p.start), min(hi, p.start + p.rows)
            if lo < hi:
                yield from self.ds.reader(g, p).chunks(lo - p.start, hi - p.start, chunk, rng)

    @staticmethod
    def _row_bytes(g: Group) -> int:
        return max(1, int(sum(row_nbytes(f) for f in g.schema)))

    # -- output -------------------------------------------------------------------------------

    def _emitter(self, g: Group):
        from .buckets import BucketEmitter

        if g.bucket is not None:
            return BucketEmitter(self, g)
        steps = []
        simple = True
        for f in self.ds.schema:
            target = _target_dtype(f, self.float32)
            if f.kind == FIXED:
                steps.append((f.name, "fixed", target))
                if target != np.dtype(g.schema[f.name].dtype) or self.ds.format == "tfrecord":
                    simple = False
            else:
                steps.append((f.name, f.kind, target))
                simple = False
        if simple:
            return None
        return steps

    def emit(self, g: Group, batch: Batch) -> dict[str, np.ndarray]:
        """An internal batch as the output dict."""
        steps = self._emitters[g.index]
        if steps is None:
            return batch.columns
        if callable(steps):
            return steps(batch)
        out: dict[str, np.ndarray] = {}
        for name, kind, target in steps:
            out.update(convert_column(name, kind, target, batch.columns[name], self.pad_value))
        return out


def convert_column(name: str, kind: str, target: np.dtype, col, pad_value, length: int | None = None) -> dict:
    """One column of an internal batch as output entries (sequences add ``<name>_length``)."""
    if kind == "fixed":
        if target.kind == "U" and col.dtype == object:
            return {name: np.asarray(col.tolist(), dtype=target)}
        return {name: col if col.dtype == target else col.astype(target)}
    if kind in (STRING, BINARY):
        return {name: to_object_rows(col, kind)}
    padded, lens = pad_rows(col, target, length, pad_value)
    return {name: padded, f"{name}_length": lens}


def _target_dtype(f: Field, float32: bool) -> np.dtype:
    dt = f.np_dtype
    if float32 and dt == np.float16:
        return np.dtype(np.float32)
    return dt


def _rebatch(chunks: Iterator[Batch], bs: int, drop: bool) -> Iterator[Batch]:
    """Chunks of any size as batches of exactly ``bs`` rows (the last may be short unless ``drop``)."""
    carry: Batch | None = None
    for c in chunks:
        n = c.num_rows
        start = 0
        if carry is not None:
            need = bs - carry.num_rows
            if n < need:
                carry = Batch.concat([carry, c])
                continue
            yield Batch.concat([carry, c.slice(0, need)])
            carry = None
            start = need
        full = start + (n - start) // bs * bs
        if start == 0 and full == n == bs:
            yield c
            continue
        cols = c.columns
        if all(isinstance(v, np.ndarray) for v in cols.values()):
            names = list(cols)
            arrays = list(cols.values())
            for i in range(start, full, bs):
                yield Batch(dict(zip(names, [a[i : i + bs] for a in arrays], strict=True)), bs)
        else:
            for i in range(start, full, bs):
                yield c.slice(i, i + bs)
        if full < n:
            carry = c.slice(full, n)
    if carry is not None and carry.num_rows and not drop:
        yield carry


def _objectify(b: Batch, schema: Schema) -> Batch:
    """Variable-length columns as object arrays, so that rows can be scattered into a buffer."""
    if not any(isinstance(c, VarColumn) for c in b.columns.values()):
        return b
    cols = {}
    for name, c in b.columns.items():
        cols[name] = to_object_rows(c, schema[name].kind) if isinstance(c, VarColumn) else c
    return Batch(cols, b.num_rows)


def _shuffle_buffer(
    chunks: Iterator[Batch], capacity: int, rng: np.random.Generator, schema: Schema
) -> Iterator[Batch]:
    """A bounded shuffle buffer of ``capacity`` rows: each incoming row replaces a random row of the
    buffer, which goes out (the rows that go out are a uniform draw from the buffer); at the end the
    buffer goes out in random order. Every row goes out exactly once."""
    pool: Batch | None = None
    for c in chunks:
        c = _objectify(c, schema)
        if pool is None or pool.num_rows < capacity:
            pool = c if pool is None else Batch.concat([pool, c])
            if pool.num_rows < capacity:
                continue
            extra = pool.num_rows - capacity
            perm = rng.permutation(pool.num_rows)
            if extra:
                yield pool.take(perm[:extra])
            pool = pool.take(perm[extra:])  # a private, writable copy
            continue
        for s in range(0, c.num_rows, capacity):
            piece = c.slice(s, s + capacity)
            pos = rng.choice(capacity, size=piece.num_rows, replace=False)
            out = pool.take(pos)
            for name, col in pool.columns.items():
                col[pos] = piece.columns[name]
            yield out
    if pool is not None and pool.num_rows:
        yield pool.take(rng.permutation(pool.num_rows))


class Permutation:
    """A seeded exact permutation of ``range(n)``, sliced as ``perm[a:b]`` (int64).

    Up to :data:`DENSE_PERMUTATION_MAX` rows it is ``rng.permutation(n)``; above, it is computed on
    the fly (a keyed 6-round Feistel bijection on the next even power of two, cycle-walked into
    ``range(n)``), so memory does not grow with the dataset.
    """

    ROUNDS = 6

    def __init__(self, n: int, rng: np.random.Generator, dense_max: int = DENSE_PERMUTATION_MAX) -> None:
        self.n = n
        if n <= dense_max:
            self.dense = rng.permutation(n)
            return
        self.dense = None
        bits = max(2, (n - 1).bit_length())
        bits += bits % 2
        self.half = np.uint64(bits // 2)
        self.mask = np.uint64((1 << (bits // 2)) - 1)
        self.keys = rng.integers(0, 1 << 63, size=self.ROUNDS, dtype=np.uint64)

    def __getitem__(self, sl: slice) -> np.ndarray:
        if self.dense is not None:
            return self.dense[sl]
        i = np.arange(*sl.indices(self.n), dtype=np.uint64)
        y = self._f(i)
        bad = np.flatnonzero(y >= np.uint64(self.n))
        while bad.size:
            y[bad] = self._f(y[bad])
            bad = bad[y[bad] >= np.uint64(self.n)]
        return y.astype(np.int64)

    def _f(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self.half, x & self.mask
        for k in self.keys:
            z = (right ^ k) * np.uint64(0xBF58476D1CE4E5B9)
            z ^= z >> np.uint64(31)
            z *= np.uint64(0x94D049BB133111EB)
            z ^= z >> np.uint64(29)
            left, right = right, left ^ (z & self.mask)
        return (left << self.half) | right
