"""torchdata's ``StatefulDataLoader`` with 2 workers, over an iterable dataset (Parquet, TFRecord,
a mixture; rows or whole batches) and a map-style one (memmap, HDF5; the loader's own stateful
sampler): stop after k batches, save the state through JSON, resume in a new process; every
sample of the epoch is seen exactly once across the two runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata", reason="torchdata (StatefulDataLoader) is not installed: pip install torchdata")

from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

import lovecraft_convert as lc  # noqa: E402
from lovecraft_convert.loaders import open_dataset  # noqa: E402
from lovecraft_convert.loaders.torch import state_from_json, state_to_json  # noqa: E402

from .helpers import assert_each_once, write_npy  # noqa: E402

N = 6000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# builds the loader of a case; run here and in the new process
LOADER = """
def make_loader(paths, case):
    from torchdata.stateful_dataloader import StatefulDataLoader
    from lovecraft_convert.loaders import open_dataset
    if case == "map":
        ds = open_dataset(paths["memmap"]).to_torch()
        return StatefulDataLoader(ds, batch_size=100, shuffle=True, num_workers=2)
    if case == "map-hdf5":
        ds = open_dataset(paths["hdf5"]).to_torch()
        return StatefulDataLoader(ds, batch_size=100, shuffle=True, num_workers=2)
    if case == "rows":
        ds = open_dataset(paths["parquet"]).to_torch(shuffle=True, shuffle_buffer=1000)
        return StatefulDataLoader(ds, batch_size=100, num_workers=2)
    if case == "batches":
        ds = open_dataset(paths["tfrecord"]).to_torch(batch_size=100, shuffle=True, seed=5)
        return StatefulDataLoader(ds, batch_size=None, num_workers=2)
    if case == "mixture":
        mix = open_dataset([paths["parquet"], paths["memmap"]], weights=[0.5, 0.5], exhausted="cycle")
        return StatefulDataLoader(mix.to_torch(batch_size=100, shuffle=True, seed=2), batch_size=None, num_workers=2)
    raise ValueError(case)
"""
exec(LOADER)  # defines make_loader

CASES = ("map", "map-hdf5", "rows", "batches", "mixture")
HEAD = 17  # batches before the stop

RESUME = (
    LOADER
    + """
import json, sys
import numpy as np
from lovecraft_convert.loaders.torch import state_from_json
paths, tmp = json.loads(sys.argv[1]), sys.argv[2]
if __name__ == "__main__":
    for case in sys.argv[3:]:
        with open(f"{tmp}/{case}.json") as f:
            state = state_from_json(json.load(f))
        loader = make_loader(paths, case)
        loader.load_state_dict(state)
        np.save(f"{tmp}/{case}.npy", np.concatenate([b["id"].numpy().reshape(-1) for b in loader]))
"""
)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stateful")
    ids = np.arange(N, dtype=np.int64)
    cols = {"id": ids, "x": np.stack([ids.astype(np.float32)] * 8, axis=1)}
    inputs = write_npy(tmp / "src", cols)
    out = {}
    for fmt in ("memmap", "hdf5", "parquet", "tfrecord"):
        out[fmt] = str(tmp / fmt)
        lc.shard(inputs, out[fmt], to=fmt, num_shards=3, workers=1, progress=False)
    return out


def _ids(batches) -> np.ndarray:
    return np.concatenate([b["id"].numpy().reshape(-1) for b in batches])


@pytest.fixture(scope="module")
def resumed(paths, tmp_path_factory):
    """Every case stopped after HEAD batches here, its state saved as JSON, and resumed in one new
    process (PyTorch is slow to import): case -> (ids before the stop, ids after the resume)."""
    tmp = tmp_path_factory.mktemp("states")
    heads = {}
    for case in CASES:
        loader = make_loader(paths, case)  # noqa: F821 - defined by exec(LOADER)
        it = iter(loader)
        heads[case] = _ids(next(it) for _ in range(HEAD))
        with open(tmp / f"{case}.json", "w") as f:
            json.dump(state_to_json(loader.state_dict()), f)
        del it
    subprocess.run(
        [sys.executable, "-c", RESUME, json.dumps(paths), str(tmp), *CASES],
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    return {case: (heads[case], np.load(tmp / f"{case}.npy")) for case in CASES}


@pytest.mark.parametrize("case", CASES)
def test_stop_save_through_json_resume_in_a_new_process(paths, resumed, case):
    head, rest = resumed[case]
    assert len(head) == HEAD * 100
    ids = np.concatenate([head, rest])
    if case == "mixture":  # the epoch of the mixture: the same rows as an uninterrupted one
        plain = _ids(make_loader(paths, case))  # noqa: F821
        assert np.array_equal(np.sort(ids), np.sort(plain))
    else:
        assert_each_once(ids, N)


def test_an_uninterrupted_epoch_and_a_resumed_one_agree_in_process(paths):
    """In one process too: the rows/batches after a resume are the uninterrupted epoch's rest (as
    a multiset: the DataLoader interleaves its two workers)."""
    loader = make_loader(paths, "batches")  # noqa: F821
    full = [b["id"].numpy() for b in loader]
    loader = make_loader(paths, "batches")  # noqa: F821
    it = iter(loader)
    head = [next(it)["id"].numpy() for _ in range(9)]
    state = state_from_json(json.loads(json.dumps(state_to_json(loader.state_dict()))))
    again = make_loader(paths, "batches")  # noqa: F821
    again.load_state_dict(state)
    rest = [b["id"].numpy() for b in again]
    assert {tuple(b) for b in head + rest} == {tuple(b) for b in full}
    assert len(head) + len(rest) == len(full)


def test_a_worker_state_is_refused_by_another_worker_count(paths):
    ds = open_dataset(paths["parquet"]).to_torch(shuffle=True, seed=1)
    loader = StatefulDataLoader(ds, batch_size=100, num_workers=2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    worker = loader.state_dict()["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
    fresh = open_dataset(paths["parquet"]).to_torch(shuffle=True, seed=1)
    fresh.load_state_dict(worker)
    with pytest.raises(Exception, match="the state was saved by reader 0 of 2"):
        next(iter(fresh))


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_workers_at_one_step_give_a_state_for_any_world_size(paths):
    """2 ranks x 2 workers stop after 4 batches each (a multiple of num_workers): their states
    become one rank-level state, from which 1 rank with 3 workers reads the rest: each row once."""
    from torch.utils.data import DataLoader

    from lovecraft_convert.loaders.torch import global_state

    seen, states = [], []
    for rank in range(2):
        ds = open_dataset(paths["parquet"]).to_torch(batch_size=50, shuffle=True, seed=8, rank=rank, world_size=2)
        loader = StatefulDataLoader(ds, batch_size=None, num_workers=2)
        it = iter(loader)
        seen += [next(it)["id"].numpy() for _ in range(4)]
        states.append(global_state(json.loads(json.dumps(state_to_json(loader.state_dict())))))
        del it
    assert states[0] == states[1] and states[0]["position"] == 2 * 4 * 50
    ds = open_dataset(paths["parquet"]).to_torch(batch_size=50, shuffle=True, state=states[0])
    seen += [b["id"].numpy() for b in DataLoader(ds, batch_size=None, num_workers=3)]
    assert_each_once(np.concatenate(seen), N)


def test_workers_at_different_steps_give_no_global_state(paths):
    from lovecraft_convert.errors import DatasetError
    from lovecraft_convert.loaders.torch import global_state

    ds = open_dataset(paths["tfrecord"]).to_torch(batch_size=50, shuffle=True, seed=8)
    loader = StatefulDataLoader(ds, batch_size=None, num_workers=2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    with pytest.raises(DatasetError) as e:
        global_state(loader.state_dict())
    assert str(e.value) == (
        "the DataLoader's workers stand at different places (epoch 0 position 100, epoch 0 position 200); "
        "save after a multiple of num_workers batches (of whole batches: to_torch(batch_size=...))"
    )
    del it


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord"])
@pytest.mark.parametrize("k", [0, 1, 1023, 1024, 1025, 2500, N - 1, N])
def test_an_iterable_of_rows_resumes_at_the_exact_row(paths, fmt, k):
    """Stopped after any number of rows (inside a read batch, on its edges, at the end), the state
    of an iterable of rows resumes at the next row: head + rest is the uninterrupted order (after
    the last row of the epoch, nothing: the resumed iteration is the rest of that epoch, as
    torchdata's own samplers resume; it read the next epoch whole, every row twice)."""
    full = [int(r["id"]) for r in open_dataset(paths[fmt]).to_torch(shuffle=True, seed=3)]
    ds = open_dataset(paths[fmt]).to_torch(shuffle=True, seed=3)
    it = iter(ds)
    head = [int(next(it)["id"]) for _ in range(k)]
    state = json.loads(json.dumps(ds.state_dict()))
    again = open_dataset(paths[fmt]).to_torch(shuffle=True, seed=3)
    again.load_state_dict(state)
    rest = [int(r["id"]) for r in again]
    if k == N:  # the state stands at the end of epoch 0: nothing is left of it
        assert head == full and rest == [] and (state["epoch"], state["position"]) == (0, N)
        again.set_epoch(1)  # the next epoch, as any epoch: another order of every row
        nxt = [int(r["id"]) for r in again]
        assert sorted(nxt) == sorted(full) and nxt != full
    else:
        assert head + rest == full and len(full) == N


@pytest.mark.parametrize("case", ["rows", "batches", "map"])
@pytest.mark.parametrize("left", [2, 1, 0])
def test_a_state_saved_at_the_end_of_an_epoch_resumes_with_what_is_left_of_it(paths, case, left):
    """Saved with ``left`` batches of the epoch to come (one, or none, for each of the 2 workers),
    the resumed loader gives just those: an iterable dataset's worker whose share was read to its
    end resumed with the next epoch whole (a state after the last batch read the epoch twice)."""
    loader = make_loader(paths, case)  # noqa: F821 - defined by exec(LOADER)
    head = []
    total = -(-N // 100)
    for i, b in enumerate(loader):
        head.append(b["id"].numpy().reshape(-1))
        if i == total - 1 - left:
            state = state_from_json(json.loads(json.dumps(state_to_json(loader.state_dict()))))
            break
    again = make_loader(paths, case)  # noqa: F821
    again.load_state_dict(state)
    rest = [b["id"].numpy().reshape(-1) for b in again]
    assert len(rest) == left
    assert_each_once(np.concatenate(head + rest), N)
