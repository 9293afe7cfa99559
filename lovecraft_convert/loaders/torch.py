"""PyTorch datasets. PyTorch is imported here, inside functions, and nowhere else.

``to_torch(ds)`` gives

* for memmap and HDF5 datasets (random access), a **map-style** ``torch.utils.data.Dataset``:
  ``len()`` rows, ``ds[i]`` one row, and ``__getitems__`` (which ``DataLoader`` uses to fetch a whole
  batch of indices with one read). Shuffle with ``DataLoader(shuffle=True)``, split ranks with
  ``DistributedSampler``. Files are opened lazily in the process that reads (each DataLoader worker
  opens its own), and an open HDF5 file is closed before any fork, so no HDF5 handle crosses one.
* for Parquet and TFRecord datasets, for bucketed datasets, or whenever ``batch_size`` is given,
  an **iterable** ``torch.utils.data.IterableDataset``. It splits the epoch between DataLoader
  workers and distributed ranks (``rank``/``world_size``, by default from ``torch.distributed``
  when it is initialised): worker ``w`` of rank ``r`` is reader ``r * num_workers + w`` of
  ``world_size * num_workers``, and every record goes to exactly one of them. With ``batch_size``
  it yields whole batches (use ``DataLoader(..., batch_size=None)``); without, rows (let the
  DataLoader batch them). Call ``set_epoch(e)`` before each epoch for a new shuffle order (as with
  ``DistributedSampler``); the same ``seed`` and epoch give the same order.

Batches and rows are dicts of tensors (text columns: lists of ``str``).
"""

from __future__ import annotations

import numpy as np

from ..errors import DatasetError

ROW_READ_BATCH = 1024  # rows read at a time by an iterable dataset that yields rows


def _tensor(torch, v):
    if isinstance(v, np.ndarray):
        if v.dtype == object or v.dtype.kind in "USV":
            return v.tolist()
        if not v.flags.writeable:  # zero-copy Arrow buffers, memmap views
            v = v.copy()
        return torch.from_numpy(v)
    return v


def _tensors(torch, batch: dict) -> dict:
    return {k: _tensor(torch, v) for k, v in batch.items()}


_CLASSES: dict[str, type] = {}


def _classes() -> dict[str, type]:
    if _CLASSES:
        return _CLASSES
    import torch
    from torch.utils.data import Dataset as TorchDataset
    from torch.utils.data import IterableDataset, get_worker_info

    class TorchMapDataset(TorchDataset):
        """Rows of a memmap/HDF5 dataset by index."""

        def __init__(self, ds, dtype_float16: str = "float16", as_tensors: bool = True) -> None:
            self.ds = ds
            self.dtype_float16 = dtype_float16
            self.as_tensors = as_tensors

        def __len__(self) -> int:
            return len(self.ds)

        def __getitem__(self, i: int) -> dict:
            b = self.ds.take([int(i)], self.dtype_float16)
            row = {k: v[0] for k, v in b.items()}
            if not self.as_tensors:
                return row
            return {k: (torch.as_tensor(v) if isinstance(v, np.generic | np.ndarray) else v) for k, v in row.items()}

        def __getitems__(self, indices: list[int]) -> list[dict]:
            """One read for a whole batch of indices (DataLoader calls this with the sampler's batch)."""
            b = self.ds.take(np.asarray(indices, dtype=np.int64), self.dtype_float16)
            if self.as_tensors:
                b = _tensors(torch, b)
            n = len(indices)
            return [{k: v[i] for k, v in b.items()} for i in range(n)]

    class TorchIterableDataset(IterableDataset):
        """Batches (or rows) of any dataset, split between DataLoader workers and ranks."""

        def __init__(self, ds, plan, rows: bool, rank: int, world_size: int, as_tensors: bool = True) -> None:
            self.ds = ds
            self.plan = plan
            self.rows = rows
            self.rank = rank
            self.world_size = world_size
            self.as_tensors = as_tensors
            self.epoch = 0

        def set_epoch(self, epoch: int) -> None:
            """The epoch the next iteration reads (its shuffle order is drawn from (seed, epoch))."""
            self.epoch = int(epoch)

        def _reader(self) -> tuple[int, int]:
            info = get_worker_info()
            wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
            return self.rank * nw + wid, self.world_size * nw

        def __iter__(self):
            for b in self.plan.epoch(self.epoch, self._reader()):
                if self.as_tensors:
                    b = _tensors(torch, b)
                if not self.rows:
                    yield b
                    continue
                n = len(next(iter(b.values())))
                for i in range(n):
                    yield {k: v[i] for k, v in b.items()}

        def __len__(self) -> int:
            """Rows of this rank's share (row mode); batches depend on the number of workers."""
            if not self.rows:
                raise TypeError("the number of batches depends on the DataLoader's workers; rows: len(ds) ")
            return sum(
                g.rows * (self.rank + 1) // self.world_size - g.rows * self.rank // self.world_size
                for g in self.ds.groups
            )

    for cls in (TorchMapDataset, TorchIterableDataset):
        cls.__module__ = __name__
        cls.__qualname__ = cls.__name__
    _CLASSES.update(TorchMapDataset=TorchMapDataset, TorchIterableDataset=TorchIterableDataset)
    return _CLASSES


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
):
    """A PyTorch dataset over ``ds`` (see the module docstring).

    ``kind``: "auto" (map-style for memmap/HDF5 without ``batch_size``, else iterable), "map" or
    "iterable". The map-style dataset leaves shuffling and rank splitting to the DataLoader's
    sampler, so ``shuffle``/``seed``/``rank``/``world_size``/``drop_remainder`` are for the
    iterable one.
    """
    if kind not in ("auto", "map", "iterable"):
        raise DatasetError(f"kind={kind!r}: use 'auto', 'map' or 'iterable'")
    if kind == "auto":
        kind = "map" if (ds.random_access and not ds.bucketed and batch_size is None) else "iterable"
    if kind == "map":
        if not ds.random_access or ds.bucketed:
            raise DatasetError(
                f"{ds.path}: a map-style dataset needs random access (memmap or hdf5, not bucketed); this is {ds.format}",
                hint="use kind='iterable' (the default for this format)",
            )
        if batch_size is not None or shuffle or rank is not None or world_size is not None or drop_remainder:
            raise DatasetError(
                "a map-style dataset yields rows: batch, shuffle and split with the DataLoader",
                hint="DataLoader(ds, batch_size=..., shuffle=True) or a DistributedSampler; or kind='iterable'",
            )
        return _classes()["TorchMapDataset"](ds, dtype_float16, as_tensors)
    if ds.bucketed and batch_size is None:
        raise DatasetError(
            "a bucketed dataset yields whole batches", hint="give batch_size= (and DataLoader batch_size=None)"
        )
    if rank is None or world_size is None:
        r, w = _distributed()
        rank = r if rank is None else rank
        world_size = w if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise DatasetError(f"rank {rank} is not in range for world_size {world_size}")
    if shuffle and seed is None:
        # Every worker and every rank must draw the same order: fix the seed here, once.
        seed = 0 if world_size > 1 else int(np.random.SeedSequence().entropy % (1 << 63))
    rows = batch_size is None
    plan = ds.plan(
        ROW_READ_BATCH if rows else batch_size,
        shuffle,
        seed,
        drop_remainder and not rows,
        dtype_float16,
        shuffle_buffer,
        pad_to,
        pad_value,
        split="rows" if rows else "batches",
    )
    return _classes()["TorchIterableDataset"](ds, plan, rows, rank, world_size, as_tensors)
