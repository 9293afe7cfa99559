"""Mid-epoch resume of ``Dataset.batches()`` for every format: the order of an epoch is a pure
function of (seed, epoch), a saved state (through JSON, in a new process) continues exactly where
the iterator stood, reading nothing before it; a state saved by 4 ranks resumes on 2; a state of
another dataset, seed or batch size is refused with one line saying which."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lovecraft_convert as lc
from lovecraft_convert.errors import DatasetError
from lovecraft_convert.loaders import open_dataset

from .helpers import assert_each_once, ids_of, write_npy

N = 12_000  # rows of 1 KiB: several Parquet row groups and TFRecord blocks per shard
KINDS = ("memmap", "hdf5", "parquet", "tfrecord", "tfrecord-gzip")
WINDOW = 1500  # shuffle_buffer (rows of a window of the block order) for Parquet/TFRecord
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """3-shard datasets of ``id`` and ``x`` float32 [256], one per format (and gzip TFRecord)."""
    tmp = tmp_path_factory.mktemp("resume")
    rng = np.random.default_rng(1)
    cols = {"id": np.arange(N, dtype=np.int64), "x": rng.standard_normal((N, 256)).astype(np.float32)}
    inputs = write_npy(tmp / "src", cols)
    out = {}
    for kind in KINDS:
        fmt, _, comp = kind.partition("-")
        path = str(tmp / kind)
        opts = {"compression": comp} if comp else {}
        lc.shard(inputs, path, to=fmt, num_shards=3, workers=1, progress=False, max_memory="16MiB", **opts)
        out[kind] = path
    return out


def _blocks(ds) -> int:
    g = ds.groups[0]
    return sum(len(ds.reader(g, p).block_starts()) - 1 for p in g.parts)


def test_streaming_datasets_have_several_blocks(wide):
    for kind in ("parquet", "tfrecord", "tfrecord-gzip"):
        assert _blocks(open_dataset(wide[kind])) >= 6, kind


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_resume_gives_the_rest_of_the_epoch_in_order(wide, kind, shuffle):
    opts = dict(shuffle=shuffle, seed=7, shuffle_buffer=WINDOW)
    full = ids_of(open_dataset(wide[kind]).batches(100, **opts))
    assert_each_once(full, N)
    if shuffle:  # shuffled, and the same for the same seed
        assert not np.array_equal(full, np.arange(N))
        assert np.array_equal(full, ids_of(open_dataset(wide[kind]).batches(100, **opts)))
    it = open_dataset(wide[kind]).batches(100, **opts)
    head = [next(it) for _ in range(37)]
    state = json.loads(json.dumps(it.state_dict()))
    assert state["position"] == 3700 and state["epoch"] == 0 and state["seed"] == (7 if shuffle else None)
    assert len(json.dumps(state)) < 400  # small: identity, seed, epoch, position
    rest = ids_of(open_dataset(wide[kind]).batches(100, **opts, state=state))
    assert np.array_equal(np.concatenate([ids_of(head), rest]), full)


RESUME_SCRIPT = f"""
import json, sys
import numpy as np
from lovecraft_convert.loaders import open_dataset
path, state, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
ds = open_dataset(path)
ids = [b["id"] for b in ds.batches(100, shuffle=True, shuffle_buffer={WINDOW}, state=state)]
np.save(out, np.concatenate(ids))
"""


@pytest.mark.parametrize("kind", KINDS)
def test_resume_in_a_new_process(wide, kind, tmp_path):
    """The state goes through JSON to another process, which resumes without being told the seed."""
    ds = open_dataset(wide[kind])
    full = ids_of(ds.batches(100, shuffle=True, seed=11, shuffle_buffer=WINDOW, epochs=2))
    it = ds.batches(100, shuffle=True, seed=11, shuffle_buffer=WINDOW)
    head = [next(it) for _ in range(81)]
    out = str(tmp_path / "rest.npy")
    subprocess.run(
        [sys.executable, "-c", RESUME_SCRIPT, wide[kind], json.dumps(it.state_dict()), out],
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    got = np.concatenate([ids_of(head), np.load(out)])
    assert np.array_equal(got, full[:N])


def _rows_read(monkeypatch, ds) -> list[int]:
    """Counts the rows the dataset's part readers decode (every read path, every reader of their
    classes: the window builder's thread has readers of its own)."""
    count = [0]
    g = ds.groups[0]
    for cls in {type(ds.reader(g, p)) for p in g.parts}:
        for name in ("read", "read_block", "read_blocks", "take"):
            orig = getattr(cls, name, None)
            if orig is None:
                continue

            def counted(self, *a, _orig=orig, **k):
                b = _orig(self, *a, **k)
                count[0] += b.num_rows
                return b

            monkeypatch.setattr(cls, name, counted)

        def chunks(self, *a, _orig=cls.chunks, **k):
            for b in _orig(self, *a, **k):
                count[0] += b.num_rows
                yield b

        monkeypatch.setattr(cls, "chunks", chunks)
    return count


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_resume_at_90_percent_reads_nothing_before_it(wide, kind, shuffle, monkeypatch):
    """No replay: the first batch after a resume at 90% of the epoch decodes at most the window it
    is in and the next one (blocks order), or a chunk (in order), never the rows before it."""
    ds = open_dataset(wide[kind])
    state = ds.state_at(100, shuffle=shuffle, seed=3, step=108, shuffle_buffer=WINDOW)
    assert state["position"] == 10_800
    count = _rows_read(monkeypatch, ds)
    it = ds.batches(100, shuffle=shuffle, seed=3, shuffle_buffer=WINDOW, state=state)
    first = next(it)
    it.close()
    assert len(first["id"]) == 100
    block = max(np.diff(ds.reader(ds.groups[0], p).block_starts()).max() for p in ds.groups[0].parts)
    assert 0 < count[0] <= 2 * (WINDOW + block) < 10_800


@pytest.mark.parametrize("kind", KINDS)
def test_four_ranks_then_two_see_every_sample_once(wide, kind):
    ds = open_dataset(wide[kind])
    opts = dict(shuffle=True, seed=5, shuffle_buffer=WINDOW)
    ranks = [ds.batches(64, **opts, rank=r, world_size=4) for r in range(4)]
    seen = []
    for _ in range(13):  # 13 global steps of 4 batches
        seen += [next(it) for it in ranks]
    states = [json.loads(json.dumps(it.state_dict())) for it in ranks]
    assert {(s["epoch"], s["position"]) for s in states} == {(0, 13 * 4 * 64)}
    for r in range(2):  # any rank's state resumes every rank
        seen += list(open_dataset(wide[kind]).batches(64, **opts, rank=r, world_size=2, state=states[3 - r]))
    assert_each_once(ids_of(seen), N)


def test_ranks_of_one_step_take_its_batches_in_rank_order(wide):
    """Rank r takes batch r of each global step of the single-reader order."""
    ds = open_dataset(wide["parquet"])
    opts = dict(shuffle=True, seed=2, shuffle_buffer=WINDOW)
    single = list(ds.batches(50, **opts))
    ranks = [list(ds.batches(50, **opts, rank=r, world_size=3)) for r in range(3)]
    for k, b in enumerate(single):
        assert np.array_equal(ranks[k % 3][k // 3]["id"], b["id"])


def test_epochs_have_their_own_order_and_state_crosses_them(wide):
    ds = open_dataset(wide["tfrecord"])
    opts = dict(shuffle=True, seed=4, shuffle_buffer=WINDOW)
    two = ids_of(ds.batches(1000, **opts, epochs=2))
    e0, e1 = two[:N], two[N:]
    assert_each_once(e0, N)
    assert_each_once(e1, N)
    assert not np.array_equal(e0, e1)
    assert np.array_equal(e1, ids_of(ds.batches(1000, **opts, epoch=1)))
    it = ds.batches(1000, **opts, epochs=2)
    for _ in range(12):  # the whole first epoch: the state is the start of the next
        next(it)
    st = it.state_dict()
    assert (st["epoch"], st["position"]) == (1, 0)
    assert np.array_equal(ids_of(ds.batches(1000, **opts, state=st)), e1)


def test_the_same_call_with_its_state_reads_the_rest_of_its_epochs(wide):
    """``batches(..., epochs=3)`` stopped in epoch 1 and called again with the same arguments and
    its state reads epochs 1 and 2 from where it stood (it read epochs 1, 2 and 3: an epoch
    more, counted from the state's); a state saved after the last batch gives nothing more. Other
    arguments read ``epochs`` from the state's epoch. Found by an outside trial."""
    ds = open_dataset(wide["parquet"])
    kw = dict(shuffle=True, seed=5, shuffle_buffer=WINDOW, epochs=3)
    full = ids_of(ds.batches(1000, **kw))
    it = ds.batches(1000, **kw)
    head = [next(it)["id"] for _ in range(17)]  # mid epoch 1
    st = json.loads(json.dumps(it.state_dict()))
    assert (st["epoch"], st["until"]) == (1, 3)
    rest = ids_of(ds.batches(1000, **kw, state=st))
    assert np.array_equal(np.concatenate([*head, rest]), full)
    one = ds.batches(1000, shuffle=True, seed=5, shuffle_buffer=WINDOW)
    for _ in one:
        pass
    end = one.state_dict()
    assert (end["epoch"], end["position"], end["until"]) == (1, 0, 1)
    assert len(ids_of(ds.batches(1000, shuffle=True, seed=5, shuffle_buffer=WINDOW, state=end))) == 0
    # another call: one epoch (the default) from the state's epoch, as before
    assert np.array_equal(ids_of(ds.batches(1000, shuffle=True, seed=5, shuffle_buffer=WINDOW, state=st)),
                          full[len(np.concatenate(head)) : 2 * N])  # fmt: skip


# --------------------------------------------------------------------------------------------
# refusals: one line saying which
# --------------------------------------------------------------------------------------------


def _message(excinfo) -> str:
    return str(excinfo.value)


def test_a_state_of_another_dataset_is_refused(wide):
    a, b = open_dataset(wide["memmap"]), open_dataset(wide["parquet"])
    st = a.batches(100, shuffle=True, seed=1).state_dict()
    with pytest.raises(DatasetError) as e:
        b.batches(100, shuffle=True, seed=1, state=st)
    assert _message(e) == (
        f"the saved state is of another dataset (fingerprint {a.fingerprint}; this loader has fingerprint "
        f"{b.fingerprint}); resume with the dataset and options the state was saved with"
    )


def test_a_state_of_another_seed_is_refused(wide):
    ds = open_dataset(wide["hdf5"])
    st = ds.batches(100, shuffle=True, seed=1).state_dict()
    with pytest.raises(DatasetError) as e:
        ds.batches(100, shuffle=True, seed=2, state=st)
    assert _message(e) == (
        "the saved state is of another seed (seed 1; this loader has seed 2); "
        "resume with the dataset and options the state was saved with"
    )


def test_a_state_of_another_batch_size_is_refused(wide):
    ds = open_dataset(wide["tfrecord"])
    st = ds.batches(100, shuffle=True, seed=1).state_dict()
    with pytest.raises(DatasetError) as e:
        ds.batches(64, shuffle=True, state=st)
    assert _message(e) == (
        "the saved state is of another batch size (batch size 100; this loader has batch size 64); "
        "resume with the dataset and options the state was saved with"
    )


def test_something_else_than_a_state_is_refused(wide):
    ds = open_dataset(wide["memmap"])
    with pytest.raises(DatasetError) as e:
        ds.batches(100, state={"epoch": 0, "position": 5})
    assert _message(e) == (
        "the state is not a lovecraft loader state (lovecraft_state is None, expected 1); "
        "give what state_dict() returned (JSON round trips are fine)"
    )
    st = ds.batches(100).state_dict()
    st["position"] = -3
    with pytest.raises(DatasetError) as e:
        ds.batches(100, state=st)
    assert _message(e) == "the state's epoch and position are 0 and -3, not counts"


def test_the_buffer_shuffle_keeps_no_state(wide):
    it = open_dataset(wide["parquet"]).batches(100, shuffle="buffer", seed=1)
    next(it)
    with pytest.raises(DatasetError) as e:
        it.state_dict()
    assert _message(e) == "shuffle='buffer' keeps no state; use shuffle=True to resume mid-epoch"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(KINDS),
    batch=st.integers(1, 700),
    window=st.integers(1, 5000),
    world=st.integers(1, 5),
    world_after=st.integers(1, 5),
    stop=st.floats(0, 1, exclude_max=True),
    seed=st.integers(0, 2**40),
)
def test_any_stop_and_any_new_world_size_see_every_sample_once(
    wide, kind, batch, window, world, world_after, stop, seed
):
    """Property: stop every rank of ``world`` after any number of global steps, resume on
    ``world_after`` ranks from any rank's state: each row exactly once; on one rank, the order of
    the uninterrupted epoch exactly."""
    ds = open_dataset(wide[kind])
    opts = dict(shuffle=True, seed=seed, shuffle_buffer=window)
    ranks = [ds.batches(batch, **opts, rank=r, world_size=world) for r in range(world)]
    seen = []
    for _ in range(int(stop * -(-N // (batch * world)))):
        for it in ranks:
            b = next(it, None)
            if b is not None:
                seen.append(b["id"])
    state = json.loads(json.dumps(ranks[-1].state_dict()))
    for it in ranks:
        it.close()
    rest = [list(ds.batches(batch, **opts, rank=r, world_size=world_after, state=state)) for r in range(world_after)]
    assert state["epoch"] == 0
    assert_each_once(np.concatenate(seen + [b["id"] for r in rest for b in r]), N)
    if world == world_after == 1:
        assert np.array_equal(np.concatenate(seen + [b["id"] for b in rest[0]]), ids_of(ds.batches(batch, **opts)))


@pytest.mark.parametrize("kind", KINDS)
def test_iterators_at_once_each_read_what_it_reads_alone(wide, kind):
    """Several iterators over one dataset at a time (ranks in one process, train and eval): each
    builds its windows in its own thread with readers of its own (a shared ParquetFile read from
    two threads crashed the interpreter), and each gives exactly what it gives alone."""
    ds = open_dataset(wide[kind])
    opts = dict(shuffle=True, seed=5, shuffle_buffer=WINDOW, world_size=3)
    alone = [[b["id"].copy() for b in ds.batches(64, rank=r, **opts)] for r in range(3)]
    its = [ds.batches(64, rank=r, **opts) for r in range(3)]
    together: list[list] = [[], [], []]
    live = set(range(3))
    while live:
        for r in sorted(live):
            b = next(its[r], None)
            if b is None:
                live.discard(r)
            else:
                together[r].append(b["id"].copy())
    for r in range(3):
        assert len(together[r]) == len(alone[r]) > 0
        assert all(np.array_equal(x, y) for x, y in zip(together[r], alone[r], strict=True))


def test_a_position_or_step_past_the_epoch_is_refused(wide):
    """A state whose position lies past its epoch gave nothing (an empty epoch, no word), and
    ``state_at`` took any step (found by an outside trial)."""
    ds = open_dataset(wide["parquet"])
    st = ds.state_at(100, shuffle=True, seed=1, step=3)
    bad = dict(st, position=10**7)
    want = (
        f"the state's position 10000000 is past the end of epoch 0, which has {N} positions; give a state a "
        "loader of this dataset saved (or ds.state_at(...))"
    )
    with pytest.raises(DatasetError) as e:
        ds.batches(100, shuffle=True, seed=1, state=bad)
    assert _message(e) == want
    pytest.importorskip("torch")
    with pytest.raises(DatasetError) as e:
        ds.to_torch(batch_size=100, shuffle=True, seed=1).load_state_dict(bad)
    assert _message(e) == want
    with pytest.raises(DatasetError) as e:
        ds.state_at(100, shuffle=True, seed=1, step=10**6)
    assert _message(e) == "step=1000000: epoch 0 has 120 global steps of 1 batch of 100; give a step from 0 to 120"
    end = ds.state_at(100, shuffle=True, seed=1, step=120)  # the end of the epoch: the next one's start
    assert (end["epoch"], end["position"]) == (1, 0)
