"""Training straight from object storage: datasets 8x the cache limit read through the bounded cache
(storage/cache.py, storage/prefetch.py, loaders/fetch.py) against the S3 test server, compared with
the same dataset read from local disk: the same epoch (exactly for the NumPy iterator, as a
multiset through PyTorch and tf.data), a cache never over its limit plus one file, each byte range
fetched once per node by two ranks of two DataLoader workers (GETs counted on the server), a resume
at 90% fetching only what the rest reads, and damaged objects, a full disk and a limit smaller than
a file each named in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import lovecraft_convert as lc
from lovecraft_convert.errors import DatasetError
from lovecraft_convert.storage.cache import CacheError

from .conftest import get

FORMATS = ("memmap", "hdf5", "parquet", "tfrecord", "mds", "litdata", "webdataset")
RANDOM_ACCESS = ("memmap", "hdf5", "mds", "litdata", "webdataset")  # shuffle=True reads rows at random
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMIT = 512 << 10
N = 80_000  # rows: 5-9 MB in every format, 8x the limit or more


def columns(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"id": np.arange(n, dtype=np.int64), "x": rng.standard_normal((n, 15)).astype(np.float32)}


def build(tmp, fmt: str, n: int, shards: int, **opts) -> str:
    src = tmp / f"src-{n}"
    if not src.exists():
        os.makedirs(src)
        for k, v in columns(n).items():
            np.save(src / f"{k}.npy", v)
    out = str(tmp / f"{fmt}-{n}-{shards}")
    if not os.path.exists(out):
        inputs = [str(src / "id.npy"), str(src / "x.npy")]
        lc.shard(inputs, out, to=fmt, num_shards=shards, workers=1, progress=False, **opts)
    return out


def upload(s3, bucket: str, prefix: str, local: str) -> str:
    """The local dataset directory as a dataset on the store (the manifest names its files by
    relative path, so the layout carries over)."""
    for name in sorted(os.listdir(local)):
        with open(os.path.join(local, name), "rb") as f:
            s3.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=f.read())
    return f"s3://{bucket}/{prefix}"


def dataset_bytes(local: str) -> int:
    return sum(os.path.getsize(os.path.join(local, n)) for n in os.listdir(local) if n != "_manifest.json")


def largest_file(local: str) -> int:
    return max(os.path.getsize(os.path.join(local, n)) for n in os.listdir(local) if n != "_manifest.json")


def fetched(gets: list[tuple[str, str | None]], sizes: dict[str, int]) -> int:
    total = 0
    for key, rng in gets:
        if rng is None:
            total += sizes.get(key, 0)
        else:
            a, b = rng.split("=")[1].split("-")
            total += int(b) - int(a) + 1
    return total


class Sampler:
    """The cache directory's bytes (complete and partial pieces), sampled while a test reads."""

    def __init__(self, root: str) -> None:
        self.root, self.peak, self.stop = root, 0, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def size(self) -> int:
        total = 0
        for sub in ("objects", "partial"):
            d = os.path.join(self.root, sub)
            for name in os.listdir(d) if os.path.isdir(d) else []:
                try:
                    total += os.path.getsize(os.path.join(d, name))
                except FileNotFoundError:
                    pass
        return total

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.size())
            time.sleep(0.001)

    def close(self) -> int:
        self.stop.set()
        self.t.join()
        return self.peak


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> dict[str, str]:
    """Per format a dataset of 4.6-9 MB in 8 shards (8x the 512 KiB cache limit or more), and a small one
    of 8 shards for the exact shuffles (whose rows are read by ranged GETs; read with a limit an
    eighth of it)."""
    tmp = tmp_path_factory.mktemp("streaming")
    out = {}
    for fmt in FORMATS:
        out[fmt] = build(tmp, fmt, N, 8)
        out[fmt, "small"] = build(tmp, fmt, 6_000, 8)
    return out


@pytest.fixture(scope="module")
def remote(local, s3_server) -> dict:
    import boto3

    s3 = boto3.client("s3")
    bucket = "lc-streaming"
    s3.create_bucket(Bucket=bucket)
    return {k: upload(s3, bucket, f"{k[0]}-small" if isinstance(k, tuple) else k, v) for k, v in local.items()}


def same_epochs(a, b) -> None:
    a, b = list(a), list(b)
    assert len(a) == len(b) and len(a) > 0
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])


CASES = [(f, s) for f in FORMATS for s in (False, True)] + [("memmap", "blocks"), ("hdf5", "blocks")]


@pytest.mark.parametrize("fmt,shuffle", CASES)
def test_an_epoch_8x_the_cache_equals_the_local_epoch(local, remote, s3_log, tmp_path, fmt, shuffle):
    exact = shuffle is True and fmt in RANDOM_ACCESS
    # an exact shuffle reads rows of every file in every batch, by ranged GETs: the small dataset,
    # with a limit an eighth of it
    key = (fmt, "small") if exact else fmt
    limit = dataset_bytes(local[key]) // 8 if exact else LIMIT
    assert dataset_bytes(local[key]) >= 8 * limit
    cache = str(tmp_path / "cache")
    ds = lc.open_dataset(remote[key], cache_dir=cache, cache_limit=limit)
    s3_log.clear()
    sampler = Sampler(cache)
    got = list(ds.batches(256, shuffle=shuffle, seed=3))
    peak = sampler.close()
    same_epochs(got, lc.open_dataset(local[key]).batches(256, shuffle=shuffle, seed=3))
    assert peak <= limit + largest_file(local[key]), (peak, limit)
    if not exact:  # each byte about once: the dataset, plus headers and footers read as asked
        bucket, prefix = remote[key][5:].split("/", 1)
        sizes = {f"{prefix}/{n}": os.path.getsize(os.path.join(local[key], n)) for n in os.listdir(local[key])}
        # a WebDataset tar has no index: opening one walks its headers, which lie between its
        # members, so a tar larger than the cache is fetched once for that and once for its rows
        once = 2.35 if fmt == "webdataset" else 1.35
        assert fetched(s3_log.gets(bucket), sizes) <= once * dataset_bytes(local[key])


def test_an_exact_shuffle_larger_than_the_cache_warns_once_naming_the_way_out(local, remote, tmp_path):
    """An exact shuffle of a remote memmap dataset whose files do not fit half the cache reads
    their rows by ranged GETs (about 100x slower than streaming in an outside trial, which it did
    without a word): one SlowReadWarning naming the dataset, the files, the limit and
    shuffle='blocks', shown once for two epochs; none when the cache holds it or for blocks."""
    import re
    import warnings

    uri = remote["memmap", "small"]
    size = dataset_bytes(local["memmap", "small"])
    ds = lc.open_dataset(uri, cache_dir=str(tmp_path / "c"), cache_limit=size // 8)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("default")
        for _ in range(2):
            sum(len(b["id"]) for b in ds.batches(512, shuffle=True, seed=0))
    slow = [w for w in got if issubclass(w.category, lc.SlowReadWarning)]
    assert len(slow) == 1, [str(w.message) for w in got]
    assert slow[0].filename == __file__  # the line of the loop that asked, not one of the package's
    assert re.fullmatch(
        rf"{re.escape(uri)}: an exact shuffle reads the rows of \d+ files \(\d+ bytes\) that do not fit half the "
        rf"cache limit \({size // 8} bytes\) by ranged GETs, one per run of nearby rows: far slower than "
        r"streaming; shuffle='blocks' streams them, or raise cache_limit to twice the dataset's size",
        str(slow[0].message),
    ), str(slow[0].message)
    quiet = [
        lc.open_dataset(uri, cache_dir=str(tmp_path / "c2"), cache_limit=size * 2).batches(512, shuffle=True),
        ds.batches(512, shuffle="blocks", seed=0),
    ]
    for it in quiet:
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            sum(len(b["id"]) for b in it)
        assert [w for w in got if issubclass(w.category, lc.SlowReadWarning)] == []


def test_a_shuffled_parquet_epoch_fetches_its_row_groups_once_and_nothing_else(local, remote, s3_log, tmp_path):
    """Row groups by their own byte ranges (column chunks from the footer; in pieces for a small
    limit), each byte once; footers by the files' last 64 KiB. A file read through a buffer would read past a row group's end (a
    buffer's worth of the next one, fetched twice)."""
    import pyarrow.parquet as pq

    ds = lc.open_dataset(remote["parquet"], cache_dir=str(tmp_path / "c"), cache_limit=LIMIT)
    s3_log.clear()
    assert sum(len(b["id"]) for b in ds.batches(256, shuffle=True, seed=1)) == N
    bucket, prefix = remote["parquet"][5:].split("/", 1)
    got: dict[str, list[tuple[int, int]]] = {}
    for key, rng in s3_log.gets(bucket):
        if key.endswith("_manifest.json"):
            continue
        a, b = (int(x) for x in rng.split("=")[1].split("-"))
        got.setdefault(key.rsplit("/", 1)[1], []).append((a, b + 1))
    for name in sorted(n for n in os.listdir(local["parquet"]) if n.endswith(".parquet")):
        path = os.path.join(local["parquet"], name)
        size, md = os.path.getsize(path), pq.ParquetFile(path).metadata
        groups = []
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            cols = [rg.column(c) for c in range(rg.num_columns)]
            starts = [c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in cols]
            groups.append((min(starts), max(s + c.total_compressed_size for s, c in zip(starts, cols, strict=True))))
        footers = [(a, b) for a, b in got.get(name, []) if b == size and b - a <= 64 << 10]
        assert len(footers) == 1, (name, footers)  # parsed once per process
        data = sorted(x for x in got[name] if x not in footers)
        assert all(b0 <= a1 for (_, b0), (a1, _) in zip(data, data[1:], strict=False)), (name, data)  # no byte twice
        assert merged(data) == merged(groups), name  # the row groups, nothing else


def merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _gets_of(s3_log, local_dir: str) -> list[tuple[str, bool, float, float]]:
    """(file, is a footer, began, answered) of every GET of a dataset file: a footer is a GET of
    its last 64 KiB or less."""
    sizes = {n: os.path.getsize(os.path.join(local_dir, n)) for n in os.listdir(local_dir)}
    out = []
    for path, rng, began, answered in s3_log.spans:
        a, b = (int(x) for x in rng.split("=")[1].split("-")) if rng else (0, -1)
        name = path.rsplit("/", 1)[1]
        if name in sizes and name != "_manifest.json":
            out.append((name, b + 1 == sizes[name] and b + 1 - a <= 64 << 10, began, answered))
    return out


def test_the_first_window_opens_its_own_files_at_once_not_every_file(local, remote, s3_log, tmp_path):
    """The block order of a shuffled Parquet epoch comes from the manifest (parquet.blocks: each
    file's row groups), so no file is opened to make it: the epoch opens the first window's files
    first, their footers fetched together, and the others a window at a time, later (time to first
    batch does not grow with the files). Its first row group's bytes are asked for while the next
    window's files open, not after every file is. The server holds each GET 0.2 s, so GETs made one
    after another never overlap. (Which of a data GET and the next window's footers reaches the
    server first is a race between threads: not asserted.)"""
    with open(os.path.join(local["parquet"], "_manifest.json"), encoding="utf-8") as f:
        m = json.load(f)
    assert len(m["parquet"]["blocks"]) == 8
    ds = lc.open_dataset(remote["parquet"], cache_dir=str(tmp_path / "c"), cache_limit=LIMIT)
    s3_log.clear()
    s3_log.delay = 0.2
    try:
        rows = sum(len(b["id"]) for b in ds.batches(256, shuffle=True, seed=0, shuffle_buffer=25_000))
    finally:
        s3_log.delay = 0.0
    assert rows == N
    gets = _gets_of(s3_log, local["parquet"])
    footers = [(began, answered) for _, footer, began, answered in gets if footer]
    first_answer = min(answered for _, answered in footers)
    first = [(b, e) for b, e in footers if b < first_answer]  # the footer GETs made before any came back
    assert 2 <= len(first) <= 3, footers  # the first window's files (windows of 3 row groups), not all 8
    later = [(b, e) for b, e in footers if b >= first_answer]
    first_data = min(began for _, footer, began, _ in gets if not footer)
    assert first_data < min(e for _, e in later), (first_data, footers)  # not waiting for a second window's
    assert sorted(n for n, footer, _, _ in gets if footer) == sorted(m["parquet"]["blocks"])  # each opened once


@pytest.mark.parametrize("fmt", ["parquet", "memmap"])
def test_the_first_batch_waits_for_its_own_bytes_not_the_dataset(local, remote, s3_log, tmp_path, fmt):
    ds = lc.open_dataset(remote[fmt], cache_dir=str(tmp_path / "c"), cache_limit=LIMIT)
    s3_log.clear()
    it = ds.batches(256)
    next(it)
    first = fetched(s3_log.gets("lc-streaming"), {})
    it.close()
    # what the first read takes (a row group, or a chunk of rows), the read-ahead, a footer: not the dataset
    assert 0 < first <= 2 * largest_file(local[fmt]) + LIMIT // 2 < dataset_bytes(local[fmt]) // 2


@pytest.mark.parametrize("fmt,shuffle", [("parquet", True), ("tfrecord", True), ("memmap", False)])
def test_resume_at_90_percent_fetches_only_the_rest(local, remote, s3_log, tmp_path, fmt, shuffle):
    ds = lc.open_dataset(remote[fmt], cache_dir=str(tmp_path / "c"), cache_limit=LIMIT)
    steps = ds.num_batches(256)
    window = {"shuffle_buffer": 8192} if shuffle else {}  # windows of one block (the default holds all 80,000 rows)
    state = ds.state_at(256, shuffle=shuffle, seed=5, step=int(steps * 0.9), **window)
    s3_log.clear()
    rest = list(ds.batches(256, shuffle=shuffle, seed=5, state=state, **window))
    whole = list(lc.open_dataset(local[fmt]).batches(256, shuffle=shuffle, seed=5, **window))
    same_epochs(rest, whole[int(steps * 0.9) :])
    bucket, prefix = remote[fmt][5:].split("/", 1)
    sizes = {f"{prefix}/{n}": os.path.getsize(os.path.join(local[fmt], n)) for n in os.listdir(local[fmt])}
    gets = s3_log.gets(bucket)
    # the footers every Parquet file's block count is read from, and the blocks of the last 10%
    footers = [(k, r) for k, r in gets if r and int(r.split("-")[1]) + 1 == sizes.get(k) and r.startswith("bytes=")
               and int(r.split("-")[1]) - int(r.split("=")[1].split("-")[0]) < 64 << 10]  # fmt: skip
    data = [x for x in gets if x not in footers]
    assert fetched(data, sizes) <= 0.2 * dataset_bytes(local[fmt])


def test_torch_map_and_iterable_and_a_mixture_give_every_record_once(local, remote, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    opts = {"cache_dir": str(tmp_path / "c"), "cache_limit": LIMIT}
    small = lc.open_dataset(remote["memmap", "small"], **opts)
    ids = [b["id"] for b in DataLoader(small.to_torch(), batch_size=500, shuffle=True, num_workers=2)]
    assert sorted(torch.cat(ids).tolist()) == list(range(6_000))
    ds = lc.open_dataset(remote["parquet"], **opts)
    loader = DataLoader(ds.to_torch(batch_size=256, shuffle=True, seed=1), batch_size=None, num_workers=2)
    assert sorted(torch.cat([b["id"] for b in loader]).tolist()) == list(range(N))
    mix = lc.open_dataset([remote["tfrecord"], local["memmap"]], weights=[0.5, 0.5], exhausted="cycle", **opts)
    got = np.concatenate([b["id"] for b in mix.batches(512, shuffle=True, seed=2)])
    want = np.concatenate(
        [b["id"] for b in lc.open_dataset([local["tfrecord"], local["memmap"]], weights=[0.5, 0.5], exhausted="cycle")
         .batches(512, shuffle=True, seed=2)]
    )  # fmt: skip
    np.testing.assert_array_equal(got, want)


def test_stateful_dataloader_resumes_a_remote_epoch(local, remote, tmp_path):
    pytest.importorskip("torchdata", reason="torchdata (StatefulDataLoader) is not installed")
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    opts = {"cache_dir": str(tmp_path / "c"), "cache_limit": LIMIT}
    ds = lc.open_dataset(remote["tfrecord"], **opts)
    loader = StatefulDataLoader(ds.to_torch(batch_size=256, shuffle=True, seed=4), batch_size=None, num_workers=2)
    seen = []
    for i, b in enumerate(loader):
        seen.append(b["id"])
        if i == 150:
            state = loader.state_dict()
            break
    again = StatefulDataLoader(ds.to_torch(batch_size=256, shuffle=True, seed=4), batch_size=None, num_workers=2)
    again.load_state_dict(state)
    seen += [b["id"] for b in again]
    assert sorted(torch.cat(seen).tolist()) == list(range(N))


def test_tf_dataset_of_a_remote_dataset(local, remote, tmp_path):
    pytest.importorskip("tensorflow")
    ds = lc.open_dataset(remote["tfrecord"], cache_dir=str(tmp_path / "c"), cache_limit=LIMIT)
    got = np.concatenate([b["id"].numpy() for b in ds.to_tf_dataset(1000, shuffle=True, seed=0, y=None)])
    assert sorted(got.tolist()) == list(range(N))


RANK = """
import json, os, sys, time
import lovecraft_convert as lc
from torch.utils.data import DataLoader
uri, cache, limit, rank, sync, shuffle, ranged = sys.argv[1:8]
rank = int(rank)
ds = lc.open_dataset(uri, cache_dir=cache, cache_limit=int(limit), ranged=None if ranged == "auto" else False)
# windows of one block: the readers keep in step (a window larger than the cache is read by each
# reader at its own pace before its first batch)
torch_ds = ds.to_torch(batch_size=128, shuffle=shuffle == "1", seed=7, rank=rank, world_size=2, shuffle_buffer=8192)
loader = DataLoader(torch_ds, batch_size=None, num_workers=2)
ids = []
for step, b in enumerate(loader):
    ids += b["id"].tolist()
    with open(os.path.join(sync, f"{rank}.tmp"), "w") as f:  # ranks keep in step, as training does
        f.write(str(step))
    os.replace(os.path.join(sync, f"{rank}.tmp"), os.path.join(sync, str(rank)))
    other = os.path.join(sync, str(1 - rank))
    deadline = time.time() + 600  # (a rank's workers may take long to start on a loaded machine)
    while time.time() < deadline:
        try:
            with open(other) as f:
                if int(f.read()) >= step - 1 or os.path.exists(other + ".done"):
                    break
        except (OSError, ValueError):
            pass
        time.sleep(0.002)
open(os.path.join(sync, f"{rank}.done"), "w").close()
print(json.dumps(ids))
"""


@pytest.mark.parametrize(
    "fmt,shuffle,ranged", [("parquet", False, "auto"), ("parquet", True, "auto"), ("tfrecord", True, "auto"),
                           ("parquet", False, "whole")]
)  # fmt: skip
def test_two_ranks_of_two_workers_fetch_each_range_once(local, remote, s3_log, tmp_path, fmt, shuffle, ranged):
    pytest.importorskip("torch")
    cache, sync = str(tmp_path / "shared-cache"), str(tmp_path / "sync")
    os.makedirs(sync)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    s3_log.clear()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RANK,
                remote[fmt],
                cache,
                str(4 * LIMIT),
                str(r),
                sync,
                "1" if shuffle else "0",
                ranged,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outs]
    ids = sorted(json.loads(outs[0][0]) + json.loads(outs[1][0]))
    assert ids == list(range(N))
    bucket, prefix = remote[fmt][5:].split("/", 1)
    data = [(k, r) for k, r in s3_log.gets(bucket) if not k.endswith("_manifest.json")]
    twice = sorted({x for x in data if data.count(x) > 1})
    assert twice == [], (twice, sorted(data))  # no range of no object fetched twice on the node
    if ranged == "whole":  # whole files only: each file the manifest names fetched once, whole
        sizes = {n: os.path.getsize(os.path.join(local[fmt], n)) for n in os.listdir(local[fmt])}
        files = sorted(k.rsplit("/", 1)[1] for k, _ in data)
        assert files == sorted(n for n in sizes if n != "_manifest.json")
        assert all(r is None or r == f"bytes=0-{sizes[k.rsplit('/', 1)[1]] - 1}" for k, r in data), data


def test_opening_a_remote_dataset_fetches_its_manifest_once_and_nothing_else(remote, s3_log, tmp_path):
    """Opening asks the manifest's size (a manifest too large to be one is refused unread), reads it
    once, lists the prefix (every file there, of its size); it reads no data file. (It read the
    manifest twice: two more round trips before the first batch.)"""
    s3_log.clear()
    lc.open_dataset(remote["parquet"], cache_dir=str(tmp_path / "c"), cache_limit=LIMIT)
    bucket, prefix = remote["parquet"][5:].split("/", 1)
    with s3_log.lock:
        items = list(s3_log.items)
    manifest = f"/{bucket}/{prefix}/_manifest.json"
    assert [m for m, path, _ in items if path == manifest] == ["HEAD", "GET"]
    assert [(m, path) for m, path, _ in items if path != manifest] == [("GET", f"/{bucket}")]  # the listing


EXIT_EARLY = """
import sys
try:
    import torch  # (a training script's import: it changes when the interpreter collects what is left)
except ImportError:
    pass
import warnings
import lovecraft_convert as lc

warnings.simplefilter("ignore", lc.SlowReadWarning)  # (an exact shuffle larger than the cache says so)
ds = lc.open_dataset(sys.argv[1], cache_dir=sys.argv[2], cache_limit=int(sys.argv[3]))
it = ds.batches(256, shuffle=sys.argv[4] == "1", seed=0)
next(it)
print("first batch", flush=True)
"""  # it ends there, the epoch still open: its loader's threads are reading ahead


@pytest.mark.parametrize(
    "fmt,shuffle", [("parquet", True), ("parquet", False), ("tfrecord", True), ("hdf5", True), ("memmap", False)]
)
def test_a_script_that_leaves_an_epoch_open_exits_at_once_without_a_word(remote, s3_log, tmp_path, fmt, shuffle):
    """A script that takes a batch and ends without closing the iterator exits at once, quietly.
    The server holds each GET 0.2 s, so the loader's threads are in the middle of a read when the
    script ends. Before, such a read (pyarrow reading a row group through our file object) could
    hang the process at exit for ever: from the interpreter's finalization on, the Python side of
    the read never ran again, and pyarrow's exit handler waited for it. And what the threads held
    was released by finalizers after the modules they needed were gone, a traceback each."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    s3_log.delay = 0.2
    try:
        p = subprocess.run(
            [sys.executable, "-c", EXIT_EARLY, remote[fmt], str(tmp_path / "c"), str(4 * LIMIT), str(int(shuffle))],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        s3_log.delay = 0.0
    assert (p.returncode, p.stdout, p.stderr) == (0, "first batch\n", "")


CTRL_C = """
import sys, time
import lovecraft_convert as lc

ds = lc.open_dataset(sys.argv[1], cache_dir=sys.argv[2], cache_limit=int(sys.argv[3]))
it = ds.batches(256, shuffle=True, seed=0)  # an exact shuffle: rows read by ranged GETs
next(it)
print("first batch", flush=True)
try:
    for _ in it:
        pass
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_ctrl_c_while_the_store_holds_the_gets_interrupts_at_once(remote, s3_log, tmp_path):
    """Ctrl-C during an exact shuffle of a remote memmap dataset with a text column (its rows'
    bytes fetched by many ranged GETs at once) while the store takes 30 s to answer each:
    KeyboardInterrupt within seconds, not when the GETs return. (The wait on the GETs was a bare
    one, which no signal cuts: a store that stalled made Ctrl-C wait with it, found by an outside
    trial.)"""
    import signal

    import boto3
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 200_000  # 4 files of ~2 MB, more than half the cache each: read by ranged GETs, not whole
    src = str(tmp_path / "text.parquet")
    pq.write_table(pa.table({"id": np.arange(n), "s": [f"row {i} " + "x" * (i % 50) for i in range(n)]}), src)
    local = str(tmp_path / "text-memmap")
    lc.shard([src], local, to="memmap", num_shards=4, progress=False)
    uri = upload(boto3.client("s3"), "lc-streaming", "text-memmap", local)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    p = subprocess.Popen(
        [sys.executable, "-c", CTRL_C, uri, str(tmp_path / "c"), str(4 * LIMIT)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline() == "first batch\n"
        s3_log.delay = 30.0
        time.sleep(1.0)  # its next rows' GETs are under way, held
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        waited = time.monotonic() - t0
    finally:
        s3_log.delay = 0.0
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert (out, p.returncode) == ("interrupted\n", 0), err[-2000:]
    assert waited < 10, waited


def flipped(s3, bucket: str, prefix: str, local: str, pick) -> str:
    m = json.loads(get(s3, bucket, f"{prefix}/_manifest.json"))
    victim = pick([f["path"] for f in m["files"]])
    data = bytearray(get(s3, bucket, f"{prefix}/{victim}"))
    data[len(data) // 2] ^= 0x01
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{victim}", Body=bytes(data))
    return f"s3://{bucket}/{prefix}/{victim}"


def test_a_flipped_byte_is_caught_and_named(local, s3, bucket, tmp_path):
    # whole files (a reader reads them through; each checked against the manifest's digest)
    uri = upload(s3, bucket, "m", local["memmap", "small"])
    victim = flipped(s3, bucket, "m", local["memmap", "small"], lambda ps: sorted(ps)[-1])
    ds = lc.open_dataset(uri, cache_dir=str(tmp_path / "c1"), cache_limit=LIMIT)
    with pytest.raises(DatasetError) as e:
        list(ds.batches(100))
    assert e.value.one_line().startswith(f"{victim}: fetched twice, and both times its blake3 is ")
    # a file the prefetch fetches whole but the reader would read by ranges (larger than a demand
    # block): its refusal is the reader's too, not a fetch of a range no digest covers (an epoch
    # came back with the flipped byte, without a word)
    m = local["memmap"]
    uri = upload(s3, bucket, "m2", m)
    victim = flipped(s3, bucket, "m2", m, lambda ps: max(ps, key=lambda q: os.path.getsize(os.path.join(m, q))))
    assert os.path.getsize(os.path.join(m, victim.rsplit("/", 1)[1])) > 256 << 10
    for shuffle in (False, True):
        ds = lc.open_dataset(uri, cache_dir=str(tmp_path / f"c4{shuffle}"), cache_limit=64 << 20)
        with pytest.raises(DatasetError) as e:
            list(ds.batches(100, shuffle=shuffle, seed=0))
        assert e.value.one_line().startswith(f"{victim}: fetched twice, and both times its blake3 is "), shuffle
    # byte ranges of Parquet row groups (a block shuffle): the pages' checksums catch it
    uri = upload(s3, bucket, "p", local["parquet"])
    victim = flipped(s3, bucket, "p", local["parquet"], lambda ps: sorted(ps)[3])
    ds = lc.open_dataset(uri, cache_dir=str(tmp_path / "c2"), cache_limit=LIMIT)
    with pytest.raises(DatasetError) as e:
        list(ds.batches(256, shuffle=True, seed=0))
    assert e.value.one_line().startswith(f"{victim}: row group ")
    # byte ranges of TFRecord blocks: the records' CRCs
    uri = upload(s3, bucket, "t", local["tfrecord"])
    victim = flipped(s3, bucket, "t", local["tfrecord"], lambda ps: sorted(ps)[5])
    ds = lc.open_dataset(uri, cache_dir=str(tmp_path / "c3"), cache_limit=LIMIT)
    with pytest.raises(DatasetError) as e:
        list(ds.batches(256, shuffle=True, seed=0))
    assert e.value.one_line().startswith(f"{victim}: ") and "CRC" in e.value.one_line()


def test_whole_files_only_refuses_a_file_larger_than_the_limit(local, remote, tmp_path):
    ds = lc.open_dataset(remote["parquet"], cache_dir=str(tmp_path / "c"), cache_limit=64 << 10, ranged=False)
    with pytest.raises(CacheError) as e:
        list(ds.batches(256))
    line = e.value.one_line()
    assert line.startswith(f"{remote['parquet']}/") and "do not fit the cache limit of 65536 bytes" in line


def test_whole_files_only_reads_the_epoch(local, remote, s3_log, tmp_path):
    ds = lc.open_dataset(remote["tfrecord"], cache_dir=str(tmp_path / "c"), cache_limit=4 << 20, ranged=False)
    s3_log.clear()
    same_epochs(ds.batches(256), lc.open_dataset(local["tfrecord"]).batches(256))
    assert all(rng is None or rng.startswith("bytes=0-") for _, rng in s3_log.gets("lc-streaming"))


@pytest.fixture
def small_fs(tmp_path):
    mnt = str(tmp_path / "small")
    os.mkdir(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", mnt], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", mnt], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mnt], capture_output=True)


def test_a_full_cache_disk_is_one_line_naming_the_object(local, remote, small_fs):
    ds = lc.open_dataset(remote["tfrecord"], cache_dir=os.path.join(small_fs, "c"), cache_limit=64 << 20)
    with pytest.raises(CacheError) as e:
        list(ds.batches(256))
    line = e.value.one_line()
    assert line.startswith(f"{remote['tfrecord']}/") and ": no space left on device in the cache directory " in line
    assert "\n" not in line


def test_an_unreachable_store_mid_epoch_is_named(local, remote, tmp_path, monkeypatch):
    from lovecraft_convert.storage.base import StorageError
    from lovecraft_convert.storage.stores import drop_stores

    ds = lc.open_dataset(remote["parquet"], cache_dir=str(tmp_path / "c"), cache_limit=LIMIT)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("LOVECRAFT_S3_ATTEMPTS", "2")
    monkeypatch.setenv("LOVECRAFT_S3_CONNECT_TIMEOUT", "1")
    drop_stores()
    try:
        with pytest.raises(StorageError) as e:
            list(ds.batches(256))
    finally:
        drop_stores()
    assert e.value.one_line().startswith(f"{remote['parquet']}/")
    assert ": cannot connect to http://127.0.0.1:9; " in e.value.one_line()


ABANDON = """
import sys
import warnings
import lovecraft_convert as lc
warnings.simplefilter("ignore", lc.SlowReadWarning)  # (an exact shuffle larger than the cache says so)
it = iter(lc.open_dataset(sys.argv[1], cache_limit=sys.argv[2]).batches(batch_size=256, shuffle=sys.argv[3] == "1"))
next(it)
print("one batch")
"""


@pytest.mark.parametrize("fmt", ["hdf5", "parquet", "memmap"])
def test_a_script_that_leaves_an_epoch_unfinished_exits_cleanly(remote, tmp_path, fmt):
    """A training script that stops after a few batches and exits, its iterator still open: the
    process ends with its own exit code. An HDF5 file read through h5py's file-object driver was
    closed by the C library's exit handler after the interpreter was gone, and the process died of
    SIGSEGV (exit -11) every time."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
        "LOVECRAFT_CACHE": str(tmp_path / "cache"),
    }
    for shuffle in ("0", "1"):
        p = subprocess.run(
            [sys.executable, "-c", ABANDON, remote[fmt], str(4 * LIMIT), shuffle],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert (p.returncode, p.stdout, p.stderr) == (0, "one batch\n", ""), (fmt, shuffle)
