"""PyTorch: map-style datasets for memmap/HDF5 (lazy files, no HDF5 handle across a fork), iterable
datasets for Parquet/TFRecord split over DataLoader workers and ranks, each record once per epoch."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

from lovecraft_convert.errors import DatasetError  # noqa: E402
from lovecraft_convert.loaders import open_dataset  # noqa: E402

from .helpers import RANGES, assert_each_once, bucket_of, build_all, build_bucketed, row_ids  # noqa: E402

N = 640


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    return build_all(tmp_path_factory.mktemp("torch"), N)


def _ids(loader) -> np.ndarray:
    return np.concatenate([b["id"].numpy().reshape(-1) for b in loader])


def _train(loader) -> float:
    """A tiny logistic regression on x -> label; returns the last loss."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loss = torch.tensor(float("nan"))
    for epoch in range(2):
        if hasattr(loader.dataset, "set_epoch"):
            loader.dataset.set_epoch(epoch)
        for b in loader:
            opt.zero_grad()
            logits = model(b["x"]).squeeze(-1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, b["label"].float())
            loss.backward()
            opt.step()
    return float(loss.detach())


def test_hdf5_map_style_trains_with_two_workers(datasets):
    ds = open_dataset(datasets["hdf5"]).to_torch()
    assert isinstance(ds, torch.utils.data.Dataset) and not isinstance(ds, torch.utils.data.IterableDataset)
    assert len(ds) == N
    row = ds[5]
    assert row["x"].shape == (4,) and row["h"].dtype == torch.float16 and int(row["id"]) == 5
    loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=2)
    assert _train(loader) < 0.6
    assert_each_once(_ids(loader), N)


def test_parquet_iterable_trains_with_two_workers(datasets):
    ds = open_dataset(datasets["parquet", 4]).to_torch(shuffle=True, seed=0)
    assert isinstance(ds, torch.utils.data.IterableDataset)
    assert len(ds) == N
    loader = DataLoader(ds, batch_size=32, num_workers=2)
    assert _train(loader) < 0.6
    assert_each_once(_ids(loader), N)


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord", "memmap", "hdf5"])
@pytest.mark.parametrize("batched", [False, True])
def test_every_record_once_across_workers_and_ranks(datasets, fmt, batched):
    """Two simulated ranks, each with a DataLoader of two workers: each record exactly once."""
    for shards in (1, 4):
        path = datasets[fmt] if shards == 1 else datasets[fmt, shards]
        seen = []
        for rank in range(2):
            ds = open_dataset(path).to_torch(
                batch_size=16 if batched else None,
                kind="iterable",
                shuffle=True,
                seed=3,
                rank=rank,
                world_size=2,
            )
            loader = DataLoader(ds, batch_size=None if batched else 16, num_workers=2)
            seen.append(_ids(loader))
        assert_each_once(np.concatenate(seen), N)
        assert abs(len(seen[0]) - len(seen[1])) <= 16


def test_map_style_with_distributed_sampler(datasets):
    seen = []
    for rank in range(2):
        ds = open_dataset(datasets["memmap", 4]).to_torch()
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=1)
        seen.append(_ids(DataLoader(ds, batch_size=32, sampler=sampler, num_workers=2)))
    assert_each_once(np.concatenate(seen), N)


def test_same_seed_same_order_and_set_epoch(datasets):
    def order(epoch, seed=5):
        ds = open_dataset(datasets["tfrecord", 4]).to_torch(batch_size=20, shuffle=True, seed=seed)
        ds.set_epoch(epoch)
        return _ids(DataLoader(ds, batch_size=None))

    a = order(0)
    assert_each_once(a, N)
    np.testing.assert_array_equal(a, order(0))
    assert not np.array_equal(a, order(1))
    assert not np.array_equal(a, order(0, seed=6))


def test_batches_are_tensors_of_the_right_dtypes(datasets):
    ds = open_dataset(datasets["parquet"]).to_torch(batch_size=64, drop_remainder=True)
    batches = list(DataLoader(ds, batch_size=None))
    assert len(batches) == N // 64
    b = batches[0]
    assert b["x"].dtype == torch.float32 and b["x"].shape == (64, 4)
    assert b["h"].dtype == torch.float16
    np.testing.assert_array_equal(b["h"].numpy(), datasets["cols"]["h"][:64])
    f32 = open_dataset(datasets["hdf5"]).to_torch(dtype_float16="float32")
    assert f32[0]["h"].dtype == torch.float32
    with pytest.raises(TypeError):
        len(ds)  # batches per rank depend on the DataLoader's workers


def test_map_style_dataset_pickles_without_open_files(datasets):
    """What a spawn-started worker receives: the dataset, without file handles."""
    ds = open_dataset(datasets["hdf5"]).to_torch()
    ds[0]  # opens the file in this process
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.ds._readers == {}
    assert int(clone[7]["id"]) == 7


def test_iterable_datasets_pickle(datasets, tmp_path):
    bucketed, _ = build_bucketed(tmp_path / "b", "parquet", "ragged", shuffle=True)
    for path, key in ((datasets["parquet", 4], "id"), (bucketed, "tokens")):
        ds = open_dataset(path).to_torch(batch_size=16, shuffle=True, seed=1)
        clone = pickle.loads(pickle.dumps(ds))
        a = [b[key].tolist() for b in ds]
        assert a == [b[key].tolist() for b in clone]


def test_spawned_workers(datasets):
    """Workers started with spawn (macOS, Windows) receive the dataset pickled, and open files themselves."""
    ds = open_dataset(datasets["hdf5", 4]).to_torch()
    ds[0]
    loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=2, multiprocessing_context="spawn")
    assert_each_once(_ids(loader), N)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_no_hdf5_handle_crosses_a_fork(datasets):
    ods = open_dataset(datasets["hdf5"])
    ods.take([0])
    reader = next(iter(ods._readers.values()))
    assert reader._f is not None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the handle was closed before the fork; reading reopens it here
        try:
            ok = reader._f is None and int(ods.take([3])["id"][0]) == 3
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    assert int(ods.take([4])["id"][0]) == 4  # and the parent reopens it too


@pytest.mark.parametrize("layout", ["padded", "ragged"])
@pytest.mark.parametrize("shuffled", [False, True], ids=["ordered", "shuffled"])
@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord"])
def test_bucketed_batches_through_torch(tmp_path, fmt, shuffled, layout):
    """Real ``bucket`` output through to_torch and a DataLoader with two workers: batches of one
    bucket, as wide as the bucket, each line of the corpus once."""
    path, truth = build_bucketed(tmp_path / "b", fmt, layout, shuffled)
    ds = open_dataset(path).to_torch(batch_size=8, shuffle=True, seed=0)
    ids = []
    for b in DataLoader(ds, batch_size=None, num_workers=2):
        (k,) = {bucket_of(int(n)) for n in b["length"]}
        assert b["tokens"].shape == (len(b["length"]), RANGES[k][1])
        assert b["tokens"].dtype == torch.int64  # token ids as nn.Embedding takes them (stored uint8)
        ids.append(row_ids({"tokens": b["tokens"].numpy(), "length": b["length"].numpy()}, truth))
    assert_each_once(np.concatenate(ids), len(truth))
    with pytest.raises(DatasetError, match="whole batches"):
        open_dataset(path).to_torch()


def test_bad_combinations(datasets):
    with pytest.raises(DatasetError, match="random access"):
        open_dataset(datasets["parquet"]).to_torch(kind="map")
    with pytest.raises(DatasetError, match="batch, shuffle, split and resume with the DataLoader"):
        open_dataset(datasets["memmap"]).to_torch(kind="map", shuffle=True)
    with pytest.raises(DatasetError, match="rank 2 is not in range"):
        open_dataset(datasets["parquet"]).to_torch(rank=2, world_size=2)


@pytest.mark.parametrize("fmt", ["memmap", "hdf5"])
def test_the_standard_dataloader_fetches_whole_batches(datasets, fmt, monkeypatch):
    """``DataLoader(ds, batch_size=64, shuffle=True)`` (a RandomSampler) calls ``__getitems__``: one read per batch,
    the batch the sampler drew, in its order, as the row-by-row path would give it."""
    ods = open_dataset(datasets[fmt, 4])
    calls = []
    take = ods.take
    monkeypatch.setattr(ods, "take", lambda idx, *a, **k: calls.append(len(idx)) or take(idx, *a, **k))
    ds = ods.to_torch()
    sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(4))
    batches = list(DataLoader(ds, batch_size=64, sampler=sampler))
    assert calls == [64] * (N // 64)
    order = list(torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(4)))
    cols = datasets["cols"]
    for k, b in enumerate(batches):
        idx = np.asarray(order[k * 64 : (k + 1) * 64])
        np.testing.assert_array_equal(b["id"].numpy(), idx)
        np.testing.assert_array_equal(b["x"].numpy(), cols["x"][idx])
        np.testing.assert_array_equal(b["h"].numpy(), cols["h"][idx])
        assert b["x"].shape == (64, 4) and b["x"].dtype == torch.float32 and b["h"].dtype == torch.float16
    # a collate_fn of its own sees rows that are mappings, as with __getitem__
    seen = next(iter(DataLoader(ds, batch_size=4, collate_fn=lambda rows: [dict(r) for r in rows])))
    assert [int(r["id"]) for r in seen] == [0, 1, 2, 3] and seen[0]["x"].shape == (4,)


def test_iterable_rows_collate_to_the_batches_they_come_from(datasets):
    ds = open_dataset(datasets["parquet", 4]).to_torch(shuffle=True, seed=2)
    got = list(DataLoader(ds, batch_size=50, num_workers=0))
    ids = np.concatenate([b["id"].numpy() for b in got])
    assert_each_once(ids, N)
    assert all(b["x"].shape == (len(b["id"]), 4) for b in got)
    np.testing.assert_array_equal(np.concatenate([b["x"].numpy() for b in got]), datasets["cols"]["x"][ids])


def test_iterable_four_ranks_then_two(datasets):
    """A rank's state (no DataLoader workers) is the global position: 4 ranks resume as 2."""
    path = datasets["tfrecord", 4]
    sets = [open_dataset(path).to_torch(batch_size=16, shuffle=True, seed=1, rank=r, world_size=4) for r in range(4)]
    ranks = [iter(s) for s in sets]
    seen = []
    for _ in range(3):
        seen += [next(it)["id"].numpy() for it in ranks]
    states = [s.state_dict() for s in sets]
    assert len({(s["epoch"], s["position"]) for s in states}) == 1
    for r in range(2):
        ds = open_dataset(path).to_torch(batch_size=16, shuffle=True, rank=r, world_size=2, state=states[r])
        seen += [b["id"].numpy() for b in DataLoader(ds, batch_size=None)]
    assert_each_once(np.concatenate(seen), N)


def test_batch_sampler_reads_the_batches_order_through_the_dataloader(datasets):
    from lovecraft_convert.loaders.torch import BatchSampler

    ods = open_dataset(datasets["memmap", 4])
    want = [b["id"] for b in ods.batches(64, shuffle=True, seed=9, epochs=2)]
    sampler = BatchSampler(len(ods), 64, seed=9)
    loader = DataLoader(ods.to_torch(), batch_sampler=sampler, num_workers=0)
    got = [b["id"].numpy() for b in loader] + [b["id"].numpy() for b in loader]  # epochs 0 and 1
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    # stop after 4 batches, resume from the JSON state on 2 ranks: every row once
    s = BatchSampler(len(ods), 64, seed=9)
    it = iter(DataLoader(ods.to_torch(), batch_sampler=s))
    seen = [next(it)["id"].numpy() for _ in range(4)]
    state = json.loads(json.dumps(s.state_dict()))
    for r in range(2):
        s2 = BatchSampler(len(ods), 64, seed=9, rank=r, world_size=2)
        s2.load_state_dict(state)
        seen += [b["id"].numpy() for b in DataLoader(ods.to_torch(), batch_sampler=s2, num_workers=2)]
    assert_each_once(np.concatenate(seen), N)
    with pytest.raises(DatasetError) as e:
        BatchSampler(len(ods), 32, seed=9).load_state_dict(state)
    assert str(e.value) == (
        "the saved state is of another batch size (batch size 64; this loader has batch size 32); "
        "resume with the dataset and options the state was saved with"
    )
