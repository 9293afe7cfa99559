"""A library call leaves the process as it found it: signal handlers (Python's and pyarrow's), pyarrow's
thread counts, threads, PyTorch's collate table and the background work registered for an exit hook
(a loader's, while its threads run: runtime/background.py), recorded before each call and compared after it, after calls
that succeed and calls that fail.

pyarrow offers no way to read back whether its own signal handling is on
(``pa.enable_signal_handlers``) or to tell a count set by the application from its default, so
those two setters are watched for the duration of each call: a library call must not use them.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

import lovecraft_convert as lc
from lovecraft_convert.errors import LovecraftError
from lovecraft_convert.runtime import background

WATCHED = ("enable_signal_handlers", "set_cpu_count", "set_io_thread_count")


def process_state() -> dict:
    """What a library call must leave as it found it."""
    state = {
        "signals": {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)},
        "pyarrow cpu_count": pa.cpu_count(),
        "pyarrow io_thread_count": pa.io_thread_count(),
        "threads": set(threading.enumerate()),
        "background work": background.live(),
        # shard swapped the caller's pyarrow pool for the system one and left it; its worker pool
        # fixed the default start method (a later set_start_method("spawn") raised)
        "pyarrow memory pool": pa.default_memory_pool().backend_name,
        "multiprocessing start method": multiprocessing.get_start_method(allow_none=True),
    }
    if "torch" in sys.modules:
        from torch.utils.data._utils.collate import default_collate_fn_map

        state["collate map"] = dict(default_collate_fn_map)
    return state


@pytest.fixture
def watched(monkeypatch) -> list[tuple]:
    """Calls of pyarrow's process-wide setters made while the test runs (passed on to pyarrow)."""
    calls: list[tuple] = []
    for name in WATCHED:
        real = getattr(pa, name)

        def spy(*args, real=real, name=name):
            calls.append((name, *args))
            return real(*args)

        monkeypatch.setattr(pa, name, spy)
    return calls


def _same_after(call, watched, fails: type[BaseException] | None = None) -> None:
    before = process_state()
    if fails is None:
        call()
    else:
        with pytest.raises(fails):
            call()
    after = process_state()
    left = {t.name for t in after.pop("threads") - before.pop("threads")}
    assert left == set(), "threads left running"
    assert after == before
    assert watched == []


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("state")
    rng = np.random.default_rng(0)
    big = rng.normal(scale=10, size=(1 << 20, 4)).astype(np.float32)  # 4M values: the downcast's two halves
    np.save(d / "big.npy", big)
    over = big.copy()
    over[-1, 3] = 1e6  # overflows float16, in the second half
    np.save(d / "over.npy", over)
    (d / "t.csv").write_text("a,b,text\n" + "".join(f"{i},{i * 0.5},w{'x' * (i % 7)}\n" for i in range(20000)))
    (d / "lines.txt").write_text("".join(f"{'tok ' * (i % 29)}end\n" for i in range(5000)))
    made = {"dir": str(d)}
    for fmt in ("memmap", "tfrecord"):
        made[fmt] = str(d / f"csv_{fmt}")
        lc.convert([str(d / "t.csv")], made[fmt], to=fmt, progress=False)
    made["damaged"] = str(d / "damaged")  # a record's data changed: its CRC no longer matches
    shutil.copytree(made["tfrecord"], made["damaged"])
    f = os.path.join(made["damaged"], lc.open_dataset(made["damaged"]).manifest["files"][0]["path"])
    with open(f, "r+b") as fh:
        fh.seek(os.path.getsize(f) // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0x01]))
    return made


def _paths(inputs, name):
    return f"{inputs['dir']}/{name}"


CALLS = {
    "convert csv (pyarrow's read_csv)": lambda i, o: lc.convert([_paths(i, "t.csv")], o, to="parquet", progress=False),
    "convert float16 (the downcast's threads)": lambda i, o: lc.convert(
        [_paths(i, "big.npy")], o, to="memmap", dtype="float16", progress=False
    ),
    "shard, one worker, shuffled": lambda i, o: lc.shard(
        [_paths(i, "t.csv")], o, to="parquet", num_shards=3, shuffle=True, seed=1, workers=1, progress=False
    ),
    "bucket, one worker": lambda i, o: lc.bucket(
        [_paths(i, "lines.txt")], o, to="memmap", num_buckets=3, workers=1, progress=False
    ),
    "bucket packed, one worker": lambda i, o: lc.bucket(
        [_paths(i, "lines.txt")], o, to="tfrecord", layout="packed", seq_len=64, workers=1, progress=False
    ),
    "shard, two workers (a pool of processes)": lambda i, o: lc.shard(
        [_paths(i, "t.csv")], o, to="parquet", num_shards=2, workers=2, progress=False
    ),
    "verify": lambda i, o: lc.verify(i["memmap"]),
    "verify --against": lambda i, o: lc.verify(i["tfrecord"], [_paths(i, "t.csv")]),
    "inspect": lambda i, o: lc.inspect(i["tfrecord"]),
    "open_dataset, a shuffled epoch (window threads)": lambda i, o: sum(
        len(b["a"]) for b in lc.open_dataset(i["tfrecord"]).batches(100, shuffle=True, seed=3)
    ),
    "open_dataset, a shuffled epoch left after its first batch": lambda i, o: _first_then_close(i["tfrecord"]),
}


def _first_then_close(path: str) -> None:
    it = lc.open_dataset(path).batches(100, shuffle=True, seed=3)
    next(it)
    it.close()


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_library_call_leaves_the_process_as_it_found_it(inputs, tmp_path, watched, name):
    _same_after(lambda: CALLS[name](inputs, str(tmp_path / "out")), watched)


FAILING = {
    "convert float16 overflowing": lambda i, o: lc.convert(
        [_paths(i, "over.npy")], o, to="memmap", dtype="float16", progress=False
    ),
    "shard of a missing input": lambda i, o: lc.shard([_paths(i, "nothing.csv")], o, to="parquet", progress=False),
    "bucket dropping every sequence (after its first phase)": lambda i, o: lc.bucket(
        [_paths(i, "lines.txt")], o, to="memmap", num_buckets=2, min_length=10**6, workers=1, progress=False
    ),
    "open_dataset of a missing directory": lambda i, o: lc.open_dataset(o),
    "open_dataset, a shuffled epoch of a damaged TFRecord file (framing's thread)": lambda i, o: sum(
        len(b["a"]) for b in lc.open_dataset(i["damaged"]).batches(100, shuffle=True, seed=3)
    ),
}


@pytest.mark.parametrize("name", sorted(FAILING))
def test_a_failed_library_call_leaves_the_process_as_it_found_it(inputs, tmp_path, watched, name):
    _same_after(lambda: FAILING[name](inputs, str(tmp_path / "out")), watched, fails=LovecraftError)


def test_a_concurrent_caller_sees_pyarrows_cpu_count_unchanged_during_a_run(inputs, tmp_path):
    """Another thread of the application uses pyarrow while a one-worker run goes on: it sees the
    thread count it had (a run that pinned pyarrow to one core for the whole process slowed it)."""
    want = pa.cpu_count()
    seen: set[int] = set()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            seen.add(pa.cpu_count())
            time.sleep(0.001)

    t = threading.Thread(target=sample)
    t.start()
    try:
        for k in range(2):
            lc.shard([_paths(inputs, "t.csv")], str(tmp_path / f"o{k}"), to="parquet", num_shards=2, workers=1,
                     progress=False)  # fmt: skip
    finally:
        stop.set()
        t.join()
    assert seen == {want}


def _numpy(batches: list) -> list[dict]:
    return [{k: v.numpy() if hasattr(v, "numpy") else v for k, v in b.items()} for b in batches]


def _torch_epochs(inputs, collate_fn=None) -> list[list[dict]]:
    """A DataLoader epoch over the map-style dataset (shuffled by its sampler) and one over the
    iterable one's rows."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    kw = {} if collate_fn is None else {"collate_fn": collate_fn}
    mapped = lc.open_dataset(inputs["memmap"]).to_torch()
    sampler = torch.utils.data.RandomSampler(mapped, generator=torch.Generator().manual_seed(1))
    rows = lc.open_dataset(inputs["tfrecord"]).to_torch(shuffle=True, seed=2)
    return [
        _numpy(list(DataLoader(mapped, batch_size=64, sampler=sampler, **kw))),
        _numpy(list(DataLoader(rows, batch_size=50, **kw))),
    ]


def test_the_torch_loaders_leave_default_collate_alone(inputs, watched):
    """``to_torch()`` and DataLoader epochs over it (map-style and iterable rows) register nothing
    with PyTorch (its ``default_collate_fn_map`` is the same table, with the same entries)."""
    pytest.importorskip("torch")
    _same_after(lambda: _torch_epochs(inputs), watched)
    assert "collate map" in process_state()  # torch was imported: its table was compared


def test_collate_gives_the_batches_default_collate_gives(inputs):
    """:func:`~lovecraft_convert.loaders.torch.collate`, passed as ``collate_fn``, puts the rows back
    together as the same batches ``default_collate`` makes of them (one slice per column)."""
    from lovecraft_convert.loaders.torch import collate

    default, ours = _torch_epochs(inputs), _torch_epochs(inputs, collate)
    assert [len(x) for x in default] == [len(x) for x in ours] == [313, 400]
    for a_epoch, b_epoch in zip(default, ours, strict=True):
        for a, b in zip(a_epoch, b_epoch, strict=True):
            assert a.keys() == b.keys() == {"a", "b", "text"}
            for k in a:
                assert type(a[k]) is type(b[k])
                np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))
