"""PyTorch datasets. PyTorch is imported here, inside functions, and nowhere else.

``to_torch(ds)`` gives

* for memmap and HDF5 datasets (random access), a **map-style** ``torch.utils.data.Dataset``:
  ``len()`` rows, ``ds[i]`` one row, and ``__getitems__`` (which ``DataLoader`` uses to fetch a whole
  batch of indices with one read, as rows of that batch, :mod:`.rows`). Pass ``collate_fn=collate``
  (:func:`collate`) to the ``DataLoader`` to have them put back together with one slice per
  column; PyTorch's ``default_collate`` stacks them one by one (the same batch, much slower).
  Shuffle with ``DataLoader(shuffle=True)``, split ranks with ``DistributedSampler``, resume with torchdata's ``StatefulDataLoader`` (its stateful samplers).
  Files are opened lazily in the process that reads (each DataLoader worker opens its own), and an
  open HDF5 file is closed before any fork, so no HDF5 handle crosses one.
* for Parquet and TFRecord datasets, for bucketed datasets and mixtures, or whenever ``batch_size``
  is given, an **iterable** ``torch.utils.data.IterableDataset``. It reads the epoch in global
  steps split between distributed ranks (``rank``/``world_size``, by default from
  ``torch.distributed`` when it is initialised) and DataLoader workers: worker ``w`` of rank ``r``
  is reader ``w * world_size + r`` of ``num_workers * world_size``, and every record goes to exactly
  one of them. With ``batch_size`` it yields whole batches (use ``DataLoader(..., batch_size=None)``);
  without, rows (let the DataLoader batch them). Call ``set_epoch(e)`` before each epoch for a new
  shuffle order (as with ``DistributedSampler``); the same ``seed`` and epoch give the same order.
  ``state_dict()``/``load_state_dict()`` are what torchdata's ``StatefulDataLoader`` calls in each
  worker: a resumed loader goes on from each worker's position, reading nothing before it (with as
  many workers and ranks). :func:`global_state` turns a loader's state saved after a multiple of
  ``num_workers`` batches into one that any number of ranks and workers resume from.

Batches are dicts of tensors (text columns: lists of ``str``); rows are mappings of the same.
Nothing is registered with PyTorch (:func:`collate` is passed, not installed).
"""

from __future__ import annotations

import copy
import operator
from itertools import chain

import numpy as np

from ..errors import DatasetError, need
from .common import int64_columns, widen
from .rows import collate as collate  # the collate_fn to give a DataLoader: public here
from .state import STATE_TAG, check_position, check_reader, check_state, make_state, plan_options

ROW_READ_BATCH = 1024  # rows read at a time by an iterable dataset that yields rows


def _tensor(torch, v, int64: bool = False):
    if isinstance(v, np.ndarray):
        if v.dtype == object or v.dtype.kind in "USV":
            return v.tolist()
        if int64 and v.dtype != np.int64:
            v = v.astype(np.int64)  # a copy, writeable
        elif not v.flags.writeable:  # zero-copy Arrow buffers, memmap views
            v = v.copy()
        return torch.from_numpy(v)
    return v


def _tensors(torch, batch: dict, int64: frozenset[str] = frozenset()) -> dict:
    """A batch as tensors, the columns ``int64`` widened (see :func:`.common.int64_columns`)."""
    return {k: _tensor(torch, v, k in int64) for k, v in batch.items()}


_CLASSES: dict[str, type] = {}


def _classes() -> dict[str, type]:
    if _CLASSES:
        return _CLASSES
    import torch
    from torch.utils.data import Dataset as TorchDataset
    from torch.utils.data import IterableDataset, get_worker_info

    from .rows import RowList, rows_of

    class TorchMapDataset(TorchDataset):
        """Rows of a memmap/HDF5 dataset by index."""

        def __init__(
            self, ds, dtype_float16: str = "float16", as_tensors: bool = True, keep_dtype: bool = False
        ) -> None:
            self.ds = ds
            self.dtype_float16 = dtype_float16
            self.as_tensors = as_tensors
            self.int64 = frozenset() if keep_dtype else int64_columns(ds)

        def __len__(self) -> int:
            return len(self.ds)

        def __getitem__(self, i: int) -> dict:
            b = widen(self.ds.take([int(i)], self.dtype_float16), self.int64)
            row = {k: v[0] for k, v in b.items()}
            if not self.as_tensors:
                return row
            return {k: (torch.as_tensor(v) if isinstance(v, np.generic | np.ndarray) else v) for k, v in row.items()}

        def __getitems__(self, indices: list[int]) -> list:
            """One read for a whole batch of indices (DataLoader calls this with the sampler's
            batch): its rows, which :func:`collate` (``DataLoader(collate_fn=collate)``) turns back
            into the batch without stacking them one by one (:mod:`.rows`)."""
            b = self.ds.take(np.asarray(indices, dtype=np.int64), self.dtype_float16)
            b = _tensors(torch, b, self.int64) if self.as_tensors else widen(b, self.int64)
            return RowList(b, len(indices))

    class TorchIterableDataset(IterableDataset):
        """Batches (or rows) of a dataset or mixture, split between DataLoader workers and ranks,
        with ``state_dict()``/``load_state_dict()`` as torchdata's ``StatefulDataLoader`` expects."""

        def __init__(
            self,
            source,
            rows: bool,
            rank: int,
            world_size: int,
            as_tensors: bool = True,
            seed_given: bool = True,
            int64: frozenset[str] = frozenset(),
        ) -> None:
            self.source = source
            self.int64 = int64  # the columns handed over as int64
            self.seed_given = seed_given  # False: the seed was drawn here, a saved state's is adopted
            self.rows = rows
            self.rank = rank
            self.world_size = world_size
            self.as_tensors = as_tensors
            self.epoch = 0
            self._resume: tuple | None = None  # (epoch, position, offset, reader or None)
            self._live: dict | None = None

        @property
        def plan(self):
            return self.source

        @property
        def ds(self):
            return getattr(self.source, "ds", None) or getattr(self.source, "mix", None)

        def set_epoch(self, epoch: int) -> None:
            """The epoch the next iteration reads (its shuffle order is drawn from (seed, epoch))."""
            epoch = int(epoch)
            if self._resume is not None and self._resume[0] != epoch:
                self._resume = None
            self.epoch = epoch

        def _reader(self) -> tuple[int, int]:
            """Worker ``w`` of ``n`` in rank ``r`` of ``W`` is reader ``w * W + r`` of ``n * W``:
            when every rank has yielded ``k`` batches (the DataLoader takes its workers in turn),
            the epoch's first ``k * W`` batches are done."""
            info = get_worker_info()
            wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
            return wid * self.world_size + self.rank, nw * self.world_size

        def identity(self) -> dict:
            ident = self.source.identity()
            if self.rows:  # rows come in the epoch's order whatever the reading unit
                ident["batch_size"] = "rows"
                ident["drop_remainder"] = False
            return ident

        def _plan(self, readers: int):
            """The plan a reader of ``readers`` reads: yielding rows, it reads units of at most
            ROW_READ_BATCH rows, fewer when the epoch is small (so that every reader gets some)."""
            if not self.rows:
                return self.source
            unit = max(1, min(ROW_READ_BATCH, -(-self.source.end(self.epoch) // (4 * readers))))
            if unit == self.source.batch_size:
                return self.source
            plan = copy.copy(self.source)
            plan.batch_size = unit
            return plan

        def state_dict(self) -> dict:
            """Where this reader stands (in a DataLoader worker: that worker's share)."""
            if self._live is not None:
                live = self._live
                if "rows" in live:  # within a batch: the rows handed out so far
                    rest, n, pos = live["rows"]
                    left = operator.length_hint(rest)
                    live = dict(live)
                    if left:
                        live["offset"] = n - left
                    else:
                        live["position"], live["offset"] = pos, 0
            elif self._resume is not None:
                e, p, off, reader, _ = self._resume
                live = {"epoch": e, "position": p, "offset": off, "reader": reader}
            else:
                live = {"epoch": self.epoch, "position": 0, "offset": 0, "reader": None}
            # (a share read to its end stays at the end of its epoch: a resumed iteration then reads
            # nothing of it, where "the next epoch from its start" read a whole epoch again)
            e, p = live["epoch"], live["position"]
            extra = {"offset": live["offset"], "world_size": self.world_size, "rank": self.rank}
            if live["reader"] is not None:
                extra["reader"] = list(live["reader"])
            return make_state(self.identity(), e, p, **extra)

        def load_state_dict(self, state: dict) -> None:
            """Start the next iteration where ``state`` stood (with its seed, when none was given)."""
            seed = state.get("seed") if isinstance(state, dict) else None
            adopt = isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0
            if adopt and not self.seed_given and self.source.seed is not None and seed != self.source.seed:
                self.source = self.source.with_seed(seed)
            e, p = check_state(state, self.identity())
            check_position(p, self.source.end(e), e)
            off = state.get("offset", 0)
            reader = state.get("reader")
            if not (isinstance(off, int) and off >= 0) or (reader is not None and not _reader_ok(reader)):
                raise DatasetError(f"the state's offset {off!r} or reader {reader!r} is not valid")
            saved_world = state.get("world_size")
            self._resume = (e, p, off, None if reader is None else tuple(reader), saved_world)
            self._live = None
            self.epoch = e

        def __iter__(self):
            steps = self._steps()
            # rows: the iterators of each batch's rows chained in C, so that a row costs no
            # resumption of the generator (it resumes once per batch, for the bookkeeping)
            return chain.from_iterable(steps) if self.rows else steps

        def _steps(self):
            """Batches, or (yielding rows) an iterator of each batch's rows."""
            reader = self._reader()
            epoch, start, skip = self.epoch, 0, 0
            if self._resume is not None:
                epoch, start, skip, saved, saved_world = self._resume
                self._resume = None
                # a worker's share (not a rank's global position) resumes only in that worker
                if saved is not None and saved != reader and (skip or saved[1] != saved_world):
                    raise DatasetError(
                        f"the state was saved by reader {saved[0]} of {saved[1]} (ranks x DataLoader workers), "
                        f"this is reader {reader[0]} of {reader[1]}",
                        hint="resume with as many ranks and workers, or from a state of every rank at one step",
                    )
                self.epoch = epoch
            live = self._live = {"epoch": epoch, "position": start, "offset": skip, "reader": reader}
            for out, pos in self._plan(reader[1]).steps(epoch, reader, start):
                out = _tensors(torch, out, self.int64) if self.as_tensors else widen(out, self.int64)
                if not self.rows:
                    live["position"] = pos
                    yield out
                    continue
                # Rows made and handed out in C (rows_of: a map over a range): where the reader
                # stands is read from what the range has left when a state is asked for (see
                # state_dict), not written down per row
                n = len(next(iter(out.values())))
                rest = iter(range(skip, n))
                live["rows"] = (rest, n, pos)
                yield rows_of(RowList(out, n), rest)
                live["position"], live["offset"] = pos, 0
                del live["rows"]
                skip = 0
            self._live = {"epoch": epoch, "position": self.source.end(epoch), "offset": 0, "reader": reader}

        def __len__(self) -> int:
            """Rows of this rank's share (row mode); batches depend on the number of workers."""
            if not self.rows:
                raise TypeError("the number of batches depends on the DataLoader's workers; rows: len(ds) ")
            unit, total = self._plan(self.world_size).batch_size, self.source.end(self.epoch)
            steps = -(-total // unit)
            mine = range(self.rank, steps, self.world_size)
            short = unit * steps - total if steps and (steps - 1) in mine else 0
            return len(mine) * unit - short

    for cls in (TorchMapDataset, TorchIterableDataset):
        cls.__module__ = __name__
        cls.__qualname__ = cls.__name__
    _CLASSES.update(TorchMapDataset=TorchMapDataset, TorchIterableDataset=TorchIterableDataset)
    return _CLASSES


def global_state(loader_state: dict) -> dict:
    """The rank-level state of an iterable dataset read by a ``StatefulDataLoader`` with workers
    (its ``state_dict()``), when every worker stands at the same global step (after a multiple of
    ``num_workers`` batches): a state any number of ranks and workers resumes from
    (``to_torch(state=...)``, ``batches(state=...)``). DatasetError saying where they stand otherwise."""
    snap = loader_state.get("_snapshot") if isinstance(loader_state, dict) else None
    workers = (snap or {}).get("_worker_snapshots") if isinstance(snap, dict) else None
    states = [w.get("dataset_state") for w in workers.values()] if isinstance(workers, dict) else []
    if not states or not all(isinstance(st, dict) and STATE_TAG in st for st in states):
        raise DatasetError(
            "not the state_dict() of a StatefulDataLoader over a lovecraft iterable dataset with workers",
            hint="give loader.state_dict() of torchdata's StatefulDataLoader(num_workers > 0)",
        )
    where = sorted({(st["epoch"], st["position"], st.get("offset", 0)) for st in states})
    if len(where) > 1 or where[0][2]:
        said = ", ".join(f"epoch {e} position {p}" + (f" + {o} rows" if o else "") for e, p, o in where)
        raise DatasetError(
            f"the DataLoader's workers stand at different places ({said})",
            hint="save after a multiple of num_workers batches (of whole batches: to_torch(batch_size=...))",
        )
    out = {k: v for k, v in states[0].items() if k not in ("reader", "offset", "rank")}
    out["world_size"] = states[0]["reader"][1] if "reader" in states[0] else out.get("world_size", 1)
    return out


def state_to_json(state):
    """A loader's state (``StatefulDataLoader.state_dict()``, whose samplers keep their generators
    as tensors) as plain JSON values: tensors become ``{"__tensor__": [...], "dtype": "..."}``."""
    import torch

    if isinstance(state, torch.Tensor):
        return {"__tensor__": state.tolist(), "dtype": str(state.dtype).removeprefix("torch.")}
    if isinstance(state, dict):
        return {str(k): state_to_json(v) for k, v in state.items()}
    if isinstance(state, list | tuple):
        return [state_to_json(v) for v in state]
    return state


def state_from_json(obj):
    """The state :func:`state_to_json` wrote, tensors and all (what ``load_state_dict`` takes)."""
    import torch

    if isinstance(obj, dict):
        if set(obj) == {"__tensor__", "dtype"}:
            return torch.tensor(obj["__tensor__"], dtype=getattr(torch, obj["dtype"]))
        return {k: state_from_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [state_from_json(v) for v in obj]
    return obj


def _reader_ok(reader) -> bool:
    return (
        isinstance(reader, list | tuple)
        and len(reader) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in reader)
        and 0 <= reader[0] < reader[1]
    )


def __getattr__(name: str):
    if name in ("TorchMapDataset", "TorchIterableDataset"):  # made on first use: no torch import before
        return _classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _distributed() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def to_torch(
    ds,
    batch_size: int | None = None,
    *,
    shuffle: bool | str = False,
    seed: int | None = None,
    drop_remainder: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
    kind: str = "auto",
    dtype_float16: str = "float16",
    shuffle_buffer: int | None = None,
    pad_to: str = "bucket",
    pad_value: int | float = 0,
    as_tensors: bool = True,
    state: dict | None = None,
    keep_dtype: bool = False,
):
    """A PyTorch dataset over ``ds`` (a dataset or a mixture; see the module docstring).

    ``kind``: "auto" (map-style for memmap/HDF5 without ``batch_size``, else iterable), "map" or
    "iterable". The map-style dataset leaves shuffling and rank splitting to the DataLoader's
    sampler, so ``shuffle``/``seed``/``rank``/``world_size``/``drop_remainder``/``state`` are for
    the iterable one, which starts where ``state`` stood (a state of ``batches()``, of the iterable
    dataset itself, or ``state_at()``).

    Integer columns come as the layers take them: token ids (integer sequences, a packed dataset's
    token rows) as int64 whatever their stored dtype (``nn.Embedding`` refuses uint8/uint16 indices,
    ``F.cross_entropy`` every target but int64 and uint8), other integer columns as int64 unless
    they are int64 or uint8 (pixels, bytes) already. The files keep their compact dtypes; the
    widening is per batch. ``keep_dtype=True`` hands every column over in its stored dtype (say, to
    move uint16 tokens to the GPU at half the bytes and widen them there).

    Rows (no ``batch_size``) are batched fastest by ``DataLoader(..., collate_fn=collate)``
    (:func:`collate`).
    """

    need("torch", "to_torch()", "pip install torch (https://pytorch.org/get-started/locally/)")
    if kind not in ("auto", "map", "iterable"):
        raise DatasetError(f"kind={kind!r}: use 'auto', 'map' or 'iterable'")
    mixture = getattr(ds, "members", None) is not None  # a Mixture
    if kind == "auto":
        kind = "map" if (not mixture and ds.random_access and not ds.bucketed and batch_size is None) else "iterable"
    if kind == "map":
        if mixture or not ds.random_access or ds.bucketed:
            what = "a mixture" if mixture else ds.format
            raise DatasetError(
                f"a map-style dataset needs random access (memmap or hdf5, not bucketed); this is {what}",
                hint="use kind='iterable' (the default for this format)",
            )
        if batch_size is not None or shuffle or rank is not None or world_size is not None or drop_remainder or state:
            raise DatasetError(
                "a map-style dataset yields rows: batch, shuffle, split and resume with the DataLoader",
                hint="DataLoader(ds, batch_size=..., shuffle=True) or a DistributedSampler; or kind='iterable'",
            )
        return _classes()["TorchMapDataset"](ds, dtype_float16, as_tensors, keep_dtype)
    if not mixture and ds.bucketed and batch_size is None:
        raise DatasetError(
            "a bucketed dataset yields whole batches", hint="give batch_size= (and DataLoader batch_size=None)"
        )
    if rank is None or world_size is None:
        r, w = _distributed()
        rank = r if rank is None else rank
        world_size = w if world_size is None else world_size
    check_reader(rank, world_size)
    seed_given = seed is not None
    if shuffle and seed is None:
        if isinstance(state, dict) and state.get("seed") is not None:
            seed = state["seed"]
        else:  # every worker and every rank must draw the same order: fix the seed here, once
            seed = 0 if world_size > 1 else int(np.random.SeedSequence().entropy % (1 << 63))
    rows = batch_size is None
    unit = ROW_READ_BATCH if rows else batch_size
    plan = ds.plan(
        unit,
        shuffle,
        seed,
        drop_remainder and not rows,
        **plan_options(dtype_float16, shuffle_buffer, pad_to, pad_value),
    )
    int64 = frozenset() if keep_dtype else int64_columns(ds)
    out = _classes()["TorchIterableDataset"](plan, rows, rank, world_size, as_tensors, seed_given, int64)
    if state is not None:
        out.load_state_dict(state)
    return out


class BatchSampler:
    """Whole batches of indices for a map-style dataset, drawn as :meth:`Dataset.batches` draws
    them: ``DataLoader(ds.to_torch(), batch_sampler=BatchSampler(len(ds), 256, seed=0))`` hands
    ``__getitems__`` one NumPy array per batch, without PyTorch's per-index sampler (which costs more
    than reading a memmap epoch). The order of an epoch is a pure function of (seed, epoch), the
    order ``batches(shuffle=True, seed=seed)`` reads a memmap/HDF5 dataset in; rank
    ``r`` of ``world_size`` takes batch ``r`` of every global step; ``state_dict()`` /
    ``load_state_dict()`` (JSON-able) resume mid-epoch, with any world size. PyTorch is not needed
    to make one. Its state counts the batches it has handed out (DataLoader workers prefetch a few
    ahead: use torchdata's StatefulDataLoader, which keeps track of them, to save mid-epoch)."""

    def __init__(
        self,
        n: int,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        for name, v in (("n", n), ("batch_size", batch_size), ("seed", seed)):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < (1 if name == "batch_size" else 0):
                raise DatasetError(
                    f"{name} must be a {'positive' if name == 'batch_size' else 'non-negative'} integer, not {v!r}"
                )
        self.n, self.batch_size, self.shuffle, self.seed = int(n), int(batch_size), bool(shuffle), int(seed)
        self.drop_last = bool(drop_last)
        self.rank, self.world_size = check_reader(rank, world_size)
        self.epoch = 0
        self.position = 0  # batches of the epoch whose global steps are done

    def _steps(self) -> int:
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __len__(self) -> int:
        return len(range(self.position + self.rank, self._steps(), self.world_size))

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.position = int(epoch), 0

    def identity(self) -> dict:
        return {"sampler": self.n, "batch_size": self.batch_size, "shuffle": self.shuffle, "seed": self.seed}

    def state_dict(self) -> dict:
        return make_state(self.identity(), self.epoch, self.position)

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = check_state(state, self.identity())

    def __iter__(self):
        from .common import Permutation

        epoch, bs, w = self.epoch, self.batch_size, self.world_size
        key = [self.seed, epoch, 0, 0]  # the key of batches()' permutation
        perm = Permutation(self.n, np.random.default_rng(key)) if self.shuffle else None
        steps = self._steps()
        start = self.position
        for k in range(start + self.rank, steps, w):
            lo, hi = k * bs, min(self.n, (k + 1) * bs)
            self.position = min(steps, k - self.rank + w)
            yield perm[lo:hi] if perm is not None else np.arange(lo, hi, dtype=np.int64)
        if self.epoch == epoch:  # an epoch done: the next one next time
            self.epoch, self.position = epoch + 1, 0
