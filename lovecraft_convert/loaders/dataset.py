"""``open_dataset(path)``: a dataset directory written by ``lovecraft`` as batches of NumPy arrays.

Everything goes through ``_manifest.json``: the files of each shard (``shards[].files`` and the
``column``/``role`` of ``files[]``), the schema, the row counts. Nothing is found by guessing file
names, and a manifest that is incomplete, of another version or that lists files of another size
than on disk is refused with a :class:`~lovecraft_convert.errors.DatasetError`.

Each part (shard, or a bucket's shard) is read by its format's reader
(:meth:`~lovecraft_convert.formats.base.OutputFormat.open_part`), made lazily in each process; how
batches are made is :mod:`.plan`'s job.

Variable-length columns come back as object arrays (``str`` for text, ``bytes`` for binary) and
sequences as a padded ``[batch, longest]`` array plus ``<name>_length`` (int64).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from .. import manifest as mf
from ..errors import DatasetError
from ..formats import for_dataset
from ..formats.base import PartFiles, PartReader
from ..schema import Batch, Field, Schema
from ..storage import child_path
from .buckets import bucket_groups
from .checked import CheckedReader
from .common import Group, Part
from .mixture import Mixture
from .plan import Plan
from .source import Batches
from .state import make_state


def _names(columns: list[str] | str) -> list[str]:
    return [columns] if isinstance(columns, str) else list(columns)


def open_dataset(
    path: str | os.PathLike | list | tuple,
    columns: list[str] | str | None = None,
    *,
    weights: list[float] | None = None,
    seed: int | None = None,
    exhausted: str = "stop",
    cache_dir: str | os.PathLike | None = None,
    cache_limit: int | str | None = None,
    ranged: bool | None = None,
    **options: Any,
) -> Dataset | Mixture:
    """Open the dataset directory ``path`` (or its ``_manifest.json``), or a dataset on an object
    store (``s3://``/``gs://``), whose files the loaders stream through a bounded local cache.

    ``columns`` selects columns (in that order). ``options``: ``hdf5_cache_bytes`` (the chunk cache
    for exact shuffling of HDF5 datasets, default 512 MiB per process).

    A remote dataset is read through the node's cache in ``cache_dir`` (default ``LOVECRAFT_CACHE``,
    else ``~/.cache/lovecraft``), which holds at most ``cache_limit`` bytes (an int or e.g.
    ``"8GiB"``; default ``LOVECRAFT_CACHE_LIMIT``, else 4 GiB), shared by every process of the
    machine: the loaders fetch the bytes each reader will read next, in its order, a little ahead,
    and drop them once read. ``ranged=False`` fetches whole files only, each checked against the
    manifest's digest before it is used (a file larger than the limit is then refused); by default
    files a reader reads through are fetched whole when they fit an eighth of the limit, and the
    byte ranges of the blocks it reads otherwise (see docs/guide/object-storage.md).

    A list of paths (or of opened datasets) with ``weights`` opens a :class:`~.mixture.Mixture`: a
    deterministic weighted interleave of their rows (same columns), seeded by ``seed`` (0 when not
    given: the same interleave in every process); when one of them runs out the epoch ends
    (``exhausted="stop"``) or it starts over in a new order (``"cycle"``).
    """
    remote_opts = {"cache_dir": cache_dir, "cache_limit": cache_limit, "ranged": ranged}
    if isinstance(path, list | tuple):
        members = [
            open_dataset(p, columns, **remote_opts, **options) if not isinstance(p, Dataset) else p for p in path
        ]
        if columns is not None:
            members = [m if m.columns == _names(columns) else m.select(columns) for m in members]
        return Mixture(members, weights, seed=seed, exhausted=exhausted)
    if weights is not None or seed is not None:
        raise DatasetError("weights= and seed= are for a mixture of datasets", hint="give a list of datasets")
    from ..storage import is_remote, local_path

    path = os.fspath(path)
    if is_remote(path):
        from ..storage.dataset import open_remote

        uri = path[: -len(mf.MANIFEST_NAME) - 1] if path.endswith("/" + mf.MANIFEST_NAME) else path
        manifest, remote = open_remote(uri, None if cache_dir is None else os.fspath(cache_dir), cache_limit, ranged)
        return Dataset(remote.uri, manifest, columns, remote=remote, **options)
    path = local_path(path)
    if os.path.basename(path) == mf.MANIFEST_NAME and os.path.isfile(path):
        path = os.path.dirname(path) or "."
    if not os.path.isdir(path):
        raise mf.not_a_dataset(path)
    manifest = mf.read(path)
    where = mf.path_of(path)
    mf.check(manifest, where)
    mf.check_shape(manifest, where)  # every field of the type it is read as
    descriptor = for_dataset(manifest["output_format"], where)
    mf.check_shape(manifest, where, descriptor.manifest_spec, common=False)
    descriptor.check_manifest(manifest, where)
    mf.check_paths(path, manifest)
    return Dataset(path, manifest, columns, **options)


class Dataset(Batches):
    """A dataset directory opened for reading. See :func:`open_dataset`."""

    def __init__(
        self,
        path: str,
        manifest: dict,
        columns: list[str] | str | None = None,
        *,
        hdf5_cache_bytes: int = 512 << 20,
        remote=None,
    ) -> None:
        self.path = path
        self.manifest = manifest
        self.remote = remote  # a RemoteDataset (storage/dataset.py): files read through the node's cache
        self.descriptor = for_dataset(manifest["output_format"], mf.path_of(path))
        self.format: str = self.descriptor.name
        self.hdf5_cache_bytes = int(hdf5_cache_bytes)
        full = mf.schema_of(manifest, mf.path_of(path))
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
        bucketed = "buckets" in manifest  # even an empty list: its rows then add up to 0, not to a KeyError
        if bucketed:
            self.groups = bucket_groups(self)
        else:
            parts, start = [], 0
            for k, s in enumerate(manifest["shards"]):  # keyed by position: an index is only a label
                parts.append(Part((0, k), int(s["rows"]), start, list(s["files"])))
                start += int(s["rows"])
            self.groups = [Group(0, parts, self.schema)]
        total = sum(g.rows for g in self.groups)
        if total != int(manifest["rows"]):
            raise DatasetError(
                f"{path}: the {'buckets' if bucketed else 'shards'} hold {total} rows, "
                f"the manifest says {manifest['rows']}",
                hint="the manifest is damaged; re-create the dataset",
            )
        self._check_files()
        self._readers: dict[tuple, PartReader] = {}
        self._take_plans: dict[tuple, Plan] = {}
        self._lock = threading.Lock()
        self._shared: dict | None = None  # per process: what the format's readers share (caches)
        self._pid = os.getpid()
        self._fingerprint: str | None = None

    # -- what it is ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return sum(g.rows for g in self.groups)

    @property
    def columns(self) -> list[str]:
        return self.schema.names

    @property
    def random_access(self) -> bool:
        return self.descriptor.random_access

    def storage_dtype(self, f: Field) -> np.dtype:
        """The dtype a column's values have as the format's reader gives them."""
        return self.descriptor.storage_dtype(f, self.manifest)

    @property
    def bucketed(self) -> bool:
        return self.groups[0].bucket is not None

    @property
    def fingerprint(self) -> str:
        """What identifies the dataset's contents (from its manifest: rows, and every file's path,
        size and digest): a saved loader state records it."""
        if self._fingerprint is None:
            import hashlib
            import json

            items = sorted([f["path"], f.get("bytes"), mf.file_digest(f)[1]] for f in self.manifest["files"])
            text = json.dumps([self.manifest["rows"], items], sort_keys=True)
            self._fingerprint = hashlib.sha256(text.encode()).hexdigest()[:16]
        return self._fingerprint

    @property
    def num_shards(self) -> int:
        return sum(len(g.parts) for g in self.groups)

    def __repr__(self) -> str:
        cols = ", ".join(f"{f.name}: {f.describe()}" for f in self.schema)
        kind = f", {len(self.groups)} buckets" if self.bucketed else ""
        return f"<lovecraft Dataset {self.path!r}: {self.format}, {len(self)} rows, {self.num_shards} shards{kind}; {cols}>"

    def select(self, columns: list[str] | str) -> Dataset:
        """The same dataset with only ``columns``."""
        return Dataset(self.path, self.manifest, columns, hdf5_cache_bytes=self.hdf5_cache_bytes, remote=self.remote)

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d.update(_readers={}, _take_plans={}, _lock=None, _shared=None)
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()
        self._pid = os.getpid()

    # -- files --------------------------------------------------------------------------------

    def _check_files(self) -> None:
        """Every file of every part there at its manifest size, and no part declaring counts its
        files cannot hold (:meth:`~.formats.base.OutputFormat.count_problem`): what the loaders
        size from the rows (block lists, windows, permutations) is bounded by the bytes on disk
        (a remote dataset's files were checked against a listing of the store: ``open_remote``)."""
        for g in self.groups:
            for p in g.parts:
                sizes, entries = [], []
                for rel in p.files:
                    info = self._file_info.get(rel)
                    full = child_path(self.path, rel)
                    if self.remote is not None:
                        rf = self.remote.files.get(rel)
                        if rf is None:
                            raise DatasetError(f"{full}: a part's file the manifest does not list", hint=mf.EDITED)
                        sizes.append(rf.size)
                        entries.append(info or {})
                        continue
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
                    sizes.append(size)
                    entries.append(info or {})
                why = self.descriptor.count_problem(sizes, entries, p.rows, g.schema, self.manifest)
                if why is not None:
                    what = f"shard {p.key[1]}" if g.bucket is None else f"bucket {g.index} shard {p.key[1]}"
                    raise DatasetError(f"{mf.path_of(self.path)}: {what} {why}", hint=mf.EDITED, kind="manifest")

    def reader(self, group: Group, part: Part, own: bool = False) -> PartReader:
        """The part's reader, made (and its files opened) lazily in each process; ``own``: one for
        the calling thread alone (readers hold open files and are not thread-safe: two iterators
        building windows in their background threads must not share one)."""
        if self._pid != os.getpid():
            self._readers = {}
            self._shared = None
            self._lock = threading.Lock()
            self._pid = os.getpid()
        key = (part.key, threading.get_ident()) if own else part.key
        r = self._readers.get(key)
        if r is None:
            with self._lock:
                r = self._readers.get(key)
                if r is None:
                    r = self._readers[key] = self._make_reader(group, part)
        return r

    def _make_reader(self, group: Group, part: Part) -> PartReader:
        if self._shared is None:
            self._shared = {"hdf5_cache_bytes": self.hdf5_cache_bytes}
        files = PartFiles(
            paths=[child_path(self.path, f) for f in part.files],
            entries=[self._file_info.get(f, {}) for f in part.files],
            rows=part.rows,
            schema=group.schema,
            key=part.key,
        )
        where = files.paths[0] if len(files.paths) == 1 else f"{self.path} ({', '.join(part.files)})"
        reader = self.descriptor.open_part(files, self.manifest, self._shared)
        return CheckedReader(reader, group.schema, lambda f: self.descriptor.storage_dtype(f, self.manifest), where)

    def close(self) -> None:
        """Close open files (they are reopened on next use)."""
        for r in self._readers.values():
            r.close()
        self._readers = {}

    # -- batches ------------------------------------------------------------------------------

    def state_at(
        self,
        batch_size: int,
        *,
        shuffle: bool | str = False,
        seed: int | None = None,
        epoch: int = 0,
        step: int = 0,
        world_size: int = 1,
        drop_remainder: bool = False,
        shuffle_buffer: int | None = None,
    ) -> dict:
        """The state of a loader of these options after ``step`` global steps of epoch ``epoch``
        (each of ``world_size`` batches), e.g. for ``to_tf_dataset(state=...)`` from Keras's count."""
        plan = self.plan(batch_size, shuffle, seed, drop_remainder, shuffle_buffer=shuffle_buffer)
        per = batch_size * world_size if plan.unit == "rows" else world_size
        steps = -(-plan.end(epoch) // per)
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= steps:
            raise DatasetError(
                f"step={step!r}: epoch {epoch} has {steps} global steps of {world_size} batch"
                f"{'es' if world_size != 1 else ''} of {batch_size}",
                hint=f"give a step from 0 to {steps}",
            )
        pos = min(plan.end(epoch), int(step) * per)
        if pos >= plan.end(epoch):
            epoch, pos = epoch + 1, 0
        return make_state(plan.identity(), epoch, pos, world_size=world_size)

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
        g = self.groups[0]
        n = g.rows
        if idx.size:
            lo, hi = int(idx.min()), int(idx.max())
            if lo < -n or hi >= n:
                raise IndexError(f"index out of range for a dataset of {n} rows")
            if lo < 0:
                idx = np.where(idx < 0, idx + n, idx)
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

    def to_keras_pydataset(self, batch_size: int = 256, **kwargs: Any):
        """A ``keras.utils.PyDataset`` (memmap, HDF5); see :func:`lovecraft_convert.loaders.tf.to_keras_pydataset`."""
        from .tf import to_keras_pydataset

        return to_keras_pydataset(self, batch_size, **kwargs)
