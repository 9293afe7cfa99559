"""Mixtures: ``open_dataset([a, b, c], weights=..., seed=...)``, a deterministic weighted interleave
of datasets of the same columns (here of three formats), that resumes like a dataset."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lovecraft_convert as lc
from lovecraft_convert.errors import DatasetError
from lovecraft_convert.loaders import open_dataset

from .helpers import assert_each_once, ids_of, write_npy

SIZES = (6000, 4000, 2000)
FORMATS = ("memmap", "parquet", "tfrecord")
WEIGHTS = [0.5, 0.3, 0.2]
OFFSETS = np.cumsum((0, *SIZES))  # member k's ids are OFFSETS[k] .. OFFSETS[k + 1] - 1


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mix")
    paths = []
    for k, (n, fmt) in enumerate(zip(SIZES, FORMATS, strict=True)):
        ids = np.arange(OFFSETS[k], OFFSETS[k] + n, dtype=np.int64)
        cols = {"id": ids, "x": np.stack([ids.astype(np.float32)] * 3, axis=1)}
        inputs = write_npy(tmp / f"src{k}", cols)
        out = str(tmp / f"m{k}-{fmt}")
        lc.shard(inputs, out, to=fmt, num_shards=2, workers=1, progress=False)
        paths.append(out)
    return paths


def _member(ids: np.ndarray) -> np.ndarray:
    return np.searchsorted(OFFSETS, ids, side="right") - 1


def test_proportions_within_one_percent_over_100k_samples(members):
    mix = open_dataset(members, weights=WEIGHTS, seed=3, exhausted="cycle")
    it = mix.batches(1000, shuffle=True, seed=1, epochs=None)
    got = []
    while sum(map(len, got)) < 100_000:  # epochs (each where every member gave all its rows) end short
        got.append(next(it)["id"])
    ids = np.concatenate(got)[:100_000]
    share = np.bincount(_member(ids), minlength=3) / len(ids)
    assert np.abs(share - WEIGHTS).max() < 0.01, share
    # and over any 10k positions as well (the interleave is even, not only on average)
    for a in range(0, 100_000, 10_000):
        part = np.bincount(_member(ids[a : a + 10_000]), minlength=3) / 10_000
        assert np.abs(part - WEIGHTS).max() < 0.01, (a, part)


def test_cycle_starts_a_member_again_in_a_new_order(members):
    mix = open_dataset(members, weights=WEIGHTS, seed=3, exhausted="cycle")
    it = mix.batches(500, shuffle=True, seed=1, epochs=None)
    ids = np.concatenate([next(it)["id"] for _ in range(60)])  # 30k positions: member 2 cycles 3 times
    small = ids[_member(ids) == 2]
    n = SIZES[2]
    assert len(small) >= 2 * n
    assert_each_once(small[:n] - OFFSETS[2], n)
    assert_each_once(small[n : 2 * n] - OFFSETS[2], n)
    assert not np.array_equal(small[:n], small[n : 2 * n])


def test_stop_ends_the_epoch_when_a_member_runs_out(members):
    mix = open_dataset(members, weights=WEIGHTS, seed=3)  # exhausted="stop"
    ids = ids_of(mix.batches(256, shuffle=True, seed=1))
    assert len(ids) == len(mix)
    assert len(np.unique(ids)) == len(ids)  # no row twice
    counts = np.bincount(_member(ids), minlength=3)
    assert counts[2] == SIZES[2]  # the member that ran out gave every row
    assert (counts[:2] < SIZES[:2]).all()
    assert abs(len(ids) - SIZES[2] / WEIGHTS[2]) < 100
    # the same seeds, the same stream; unshuffled, every member gives its rows in order
    assert np.array_equal(
        ids, ids_of(open_dataset(members, weights=WEIGHTS, seed=3).batches(100, shuffle=True, seed=1))
    )
    plain = ids_of(mix.batches(256))
    for k in range(3):
        mine = plain[_member(plain) == k]
        assert np.array_equal(mine, np.arange(OFFSETS[k], OFFSETS[k] + len(mine)))


@pytest.mark.parametrize("exhausted", ["stop", "cycle"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_resume_is_exact(members, exhausted, shuffle):
    opts = dict(shuffle=shuffle, seed=9)
    mix = open_dataset(members, weights=WEIGHTS, seed=4, exhausted=exhausted)
    full = ids_of(mix.batches(300, **opts, epochs=2))
    it = mix.batches(300, **opts, epochs=2)
    head = [next(it) for _ in range(29)]
    state = json.loads(json.dumps(it.state_dict()))
    assert state["epoch"] == 0  # so both runs read epochs 0 and 1
    again = open_dataset(members, weights=WEIGHTS, seed=4, exhausted=exhausted)
    rest = ids_of(again.batches(300, **opts, epochs=2, state=state))
    assert np.array_equal(np.concatenate([ids_of(head), rest]), full)


def test_four_ranks_then_two(members):
    mix = open_dataset(members, weights=WEIGHTS, seed=4)
    opts = dict(shuffle=True, seed=2)
    ranks = [mix.batches(100, **opts, rank=r, world_size=4) for r in range(4)]
    seen = []
    for _ in range(9):
        seen += [next(it) for it in ranks]
    st = json.loads(json.dumps(ranks[1].state_dict()))
    for r in range(2):
        seen += list(mix.batches(100, **opts, rank=r, world_size=2, state=st))
    ids = ids_of(seen)
    assert np.array_equal(np.sort(ids), np.sort(ids_of(mix.batches(100, **opts))))
    assert len(np.unique(ids)) == len(ids) == len(mix)


def test_a_state_of_other_weights_or_datasets_is_refused(members):
    a = open_dataset(members, weights=WEIGHTS, seed=4)
    st = a.batches(100).state_dict()
    with pytest.raises(DatasetError) as e:
        open_dataset(members, weights=[0.4, 0.4, 0.2], seed=4).batches(100, state=st)
    assert str(e.value) == (
        "the saved state is of other weights (weights [0.5, 0.3, 0.2]; this loader has weights [0.4, 0.4, 0.2]); "
        "resume with the dataset and options the state was saved with"
    )
    with pytest.raises(DatasetError) as e:
        open_dataset(members, weights=WEIGHTS, seed=5).batches(100, state=st)
    assert str(e.value) == (
        "the saved state is of another mixture seed (mixture seed 4; this loader has mixture seed 5); "
        "resume with the dataset and options the state was saved with"
    )
    with pytest.raises(DatasetError) as e:
        open_dataset(members[0]).batches(100, state=st)
    assert str(e.value).startswith("the saved state is of another dataset (fingerprint None; this loader has")


def test_bad_mixtures_are_refused_in_one_line(members, tmp_path):
    with pytest.raises(DatasetError) as e:
        open_dataset(members, weights=[1, 2])
    assert str(e.value) == "2 weights for 3 datasets; give one weight per dataset"
    with pytest.raises(DatasetError) as e:
        open_dataset(members, weights=[1, 0, 2])
    assert str(e.value) == "weight 0 is not a positive number; weights are positive numbers"
    with pytest.raises(DatasetError) as e:
        open_dataset(members, weights=WEIGHTS, exhausted="wrap")
    assert str(e.value) == "exhausted='wrap': use 'stop' or 'cycle'"
    with pytest.raises(DatasetError) as e:
        open_dataset(members, columns=["x"], weights=WEIGHTS).batches(10, shuffle="buffer")
    assert str(e.value) == "shuffle='buffer' cannot be mixed; use shuffle=True"
    other = write_npy(tmp_path / "o", {"id": np.arange(10), "y": np.zeros(10, np.float32)})
    lc.convert(other, str(tmp_path / "other"), to="memmap", progress=False)
    with pytest.raises(DatasetError) as e:
        open_dataset([members[0], str(tmp_path / "other")], weights=[1, 1])
    assert str(e.value) == (
        f"{tmp_path / 'other'}: columns id, y; {members[0]} has id, x; "
        "a mixture needs the same columns (select them with columns=)"
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    weights=st.lists(st.floats(0.05, 1.0), min_size=3, max_size=3),
    exhausted=st.sampled_from(["stop", "cycle"]),
    batch=st.integers(1, 500),
    world=st.integers(1, 4),
    world_after=st.integers(1, 4),
    stop=st.floats(0, 1, exclude_max=True),
    seed=st.integers(0, 2**40),
)
def test_any_mixture_resumes_on_any_world_size(members, weights, exhausted, batch, world, world_after, stop, seed):
    mix = open_dataset(members, weights=weights, seed=seed, exhausted=exhausted)
    opts = dict(shuffle=True, seed=seed + 1)
    want = np.sort(ids_of(mix.batches(batch, **opts)))
    ranks = [mix.batches(batch, **opts, rank=r, world_size=world) for r in range(world)]
    seen = []
    for _ in range(int(stop * -(-len(mix) // (batch * world)))):
        for it in ranks:
            b = next(it, None)
            if b is not None:
                seen.append(b["id"])
    state = json.loads(json.dumps(ranks[0].state_dict()))
    again = open_dataset(members, weights=weights, seed=seed, exhausted=exhausted)
    for r in range(world_after):
        seen += [b["id"] for b in again.batches(batch, **opts, rank=r, world_size=world_after, state=state)]
    assert np.array_equal(np.sort(np.concatenate(seen)), want)
