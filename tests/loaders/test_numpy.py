"""``open_dataset`` and ``batches()``: NumPy batches from every format, shuffling, epochs, worker
splits, bucketed datasets, and the refusal of manifests it cannot trust."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import lovecraft_convert as lc
from lovecraft_convert.errors import DatasetError
from lovecraft_convert.loaders import open_dataset
from lovecraft_convert.loaders.common import Permutation
from tests.conftest import lovecraft

from .helpers import (
    FORMATS,
    RANGES,
    assert_each_once,
    bucket_of,
    build,
    build_all,
    build_bucketed,
    build_sequences,
    build_text,
    ids_of,
    row_ids,
)

N = 1000


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """One single-shard and one 4-shard dataset per format, of the same arrays."""
    return build_all(tmp_path_factory.mktemp("loaders"), N)


def test_open_dataset_is_public_api(datasets):
    ds = lc.open_dataset(datasets["memmap"])
    assert len(ds) == N
    assert ds.columns == ["id", "x", "h", "label"]
    assert [f.describe() for f in ds.schema] == ["int64", "float32[4]", "float16[3]", "int64"]
    assert "memmap" in repr(ds)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shards", [1, 4])
def test_batches_in_order_with_dtypes(datasets, fmt, shards):
    cols = datasets["cols"]
    ds = open_dataset(datasets[fmt] if shards == 1 else datasets[fmt, shards])
    assert ds.num_shards == shards
    got = list(ds.batches(batch_size=96))
    assert [len(b["id"]) for b in got] == [96] * (N // 96) + [N % 96]
    assert ds.num_batches(96) == len(got)
    for name, a in cols.items():
        joined = np.concatenate([b[name] for b in got])
        assert joined.dtype == a.dtype, name  # float16 stays float16, even through TFRecord's float32
        np.testing.assert_array_equal(joined, a)
    assert set(got[0]) == {"id", "x", "h", "label"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_float16_as_float32_on_request(datasets, fmt):
    ds = open_dataset(datasets[fmt])
    b = next(ds.batches(batch_size=10, dtype_float16="float32"))
    assert b["h"].dtype == np.float32 and b["x"].dtype == np.float32
    np.testing.assert_array_equal(b["h"], datasets["cols"]["h"][:10].astype(np.float32))


@pytest.mark.parametrize("fmt", FORMATS)
def test_columns_selection(datasets, fmt):
    ds = open_dataset(datasets[fmt], columns=["label", "id"])
    assert ds.columns == ["label", "id"]
    b = next(ds.batches(batch_size=N))
    assert list(b) == ["label", "id"]
    np.testing.assert_array_equal(b["label"], datasets["cols"]["label"])
    assert open_dataset(datasets[fmt]).select("x").columns == ["x"]
    with pytest.raises(DatasetError, match="no column 'nope'; columns are id, x, h, label"):
        open_dataset(datasets[fmt], columns=["nope"])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shards", [1, 4])
def test_shuffle_sees_every_record_once_and_is_seeded(datasets, fmt, shards):
    ds = open_dataset(datasets[fmt] if shards == 1 else datasets[fmt, shards])
    a = ids_of(ds.batches(batch_size=64, shuffle=True, seed=3, shuffle_buffer=200))
    assert_each_once(a, N)
    assert not np.array_equal(a, np.arange(N))
    b = ids_of(ds.batches(batch_size=64, shuffle=True, seed=3, shuffle_buffer=200))
    np.testing.assert_array_equal(a, b)  # same seed, same order
    c = ids_of(ds.batches(batch_size=64, shuffle=True, seed=4, shuffle_buffer=200))
    assert not np.array_equal(a, c)
    # rows stay whole: each row's values still belong to its id
    cols = datasets["cols"]
    for batch in ds.batches(batch_size=64, shuffle=True, seed=3, shuffle_buffer=200):
        np.testing.assert_array_equal(batch["x"], cols["x"][batch["id"]])
        np.testing.assert_array_equal(batch["h"], cols["h"][batch["id"]])


@pytest.mark.parametrize("fmt", ["memmap", "hdf5"])
def test_exact_shuffle_is_a_uniform_permutation_not_blocks(datasets, fmt):
    """Random access: an exact permutation, so neighbours in the file are far apart in the output."""
    ds = open_dataset(datasets[fmt])
    ids = ids_of(ds.batches(batch_size=100, shuffle=True, seed=0))
    expected = np.random.default_rng([0, 0, 0, 0]).permutation(N)
    np.testing.assert_array_equal(ids, expected)


def test_streaming_formats_refuse_exact_shuffle(datasets):
    ds = open_dataset(datasets["parquet"])
    with pytest.raises(DatasetError, match="exact shuffle needs random access"):
        next(ds.batches(batch_size=10, shuffle="exact"))


@pytest.mark.parametrize("fmt", ["memmap", "hdf5"])
def test_buffer_shuffle_on_random_access_formats(datasets, fmt):
    ds = open_dataset(datasets[fmt])
    ids = ids_of(ds.batches(batch_size=50, shuffle="buffer", seed=1, shuffle_buffer=100))
    assert_each_once(ids, N)
    assert not np.array_equal(ids, np.arange(N))


@pytest.mark.parametrize("fmt", FORMATS)
def test_epochs_and_drop_remainder(datasets, fmt):
    ds = open_dataset(datasets[fmt, 4])
    got = list(ds.batches(batch_size=64, shuffle=True, seed=5, epochs=3, drop_remainder=True))
    per_epoch = N // 64
    assert len(got) == 3 * per_epoch
    assert all(len(b["id"]) == 64 for b in got)
    epochs = [ids_of(got[i * per_epoch : (i + 1) * per_epoch]) for i in range(3)]
    for e in epochs:
        assert len(np.unique(e)) == len(e) == per_epoch * 64
    assert not np.array_equal(epochs[0], epochs[1])  # every epoch has its own order
    again = list(ds.batches(batch_size=64, shuffle=True, seed=5, epochs=3, drop_remainder=True))
    np.testing.assert_array_equal(ids_of(again), ids_of(got))
    forever = ds.batches(batch_size=400, epochs=None)
    assert sum(1 for _, _ in zip(range(10), forever, strict=False)) == 10


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_worker_splits_cover_every_record_once(datasets, fmt, shuffle):
    """The split PyTorch workers and tf.distribute pipelines use: W readers, no record twice."""
    ds = open_dataset(datasets[fmt, 4])
    for workers in (1, 3, 8):
        for split in ("batches", "rows"):
            plan = ds.plan(32, shuffle, 11, split=split)
            seen = [ids_of(plan.epoch(0, (w, workers))) for w in range(workers)]
            assert_each_once(np.concatenate(seen), N)
            assert sum(plan.count(0, workers, w) for w in range(workers)) == sum(
                len(list(plan.epoch(0, (w, workers)))) for w in range(workers)
            )


def test_exact_shuffle_split_gives_the_same_batches_as_one_reader(datasets):
    ds = open_dataset(datasets["memmap", 4])
    plan = ds.plan(32, True, 2)
    whole = [tuple(b["id"]) for b in plan.epoch(0)]
    parts = {tuple(b["id"]) for w in range(3) for b in plan.epoch(0, (w, 3))}
    assert set(whole) == parts


def test_take_random_access(datasets):
    ds = open_dataset(datasets["hdf5", 4])
    idx = [999, 0, 500, 250, 251, 3]
    b = ds.take(idx)
    np.testing.assert_array_equal(b["id"], idx)
    np.testing.assert_array_equal(b["h"], datasets["cols"]["h"][idx])
    with pytest.raises(IndexError):
        ds.take([N])
    with pytest.raises(DatasetError, match="read as a stream"):
        open_dataset(datasets["parquet"]).take([0])


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_hdf5_exact_shuffle_paths(tmp_path, compression):
    """Uncompressed chunks: rows from the file's chunk offsets; compressed: a chunk cache (here one
    of 1 byte, so every chunk is evicted at once). Both give the same rows as h5py."""
    path, cols = build(tmp_path, "hdf5", N, shards=2, compression=compression)
    ds = open_dataset(path, hdf5_cache_bytes=1)
    got = list(ds.batches(batch_size=7, shuffle=True, seed=9))
    ids = ids_of(got)
    assert_each_once(ids, N)
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), cols["x"][ids])
    np.testing.assert_array_equal(np.concatenate([b["h"] for b in got]), cols["h"][ids])
    raw = [r._raws.get("x") is not None for r in ds._readers.values()]
    assert raw == [compression is None] * 2


def test_hdf5_exact_shuffle_of_large_rows(tmp_path):
    """Rows of 27 KB (images) are copied one slice each from the chunk offsets."""
    from .helpers import write_npy

    img = np.random.default_rng(0).integers(0, 255, (40, 96, 96, 3), dtype=np.uint8)
    inputs = write_npy(tmp_path / "src", {"img": img, "id": np.arange(40)})
    lc.convert(inputs, str(tmp_path / "ds"), to="hdf5", progress=False)
    got = list(open_dataset(tmp_path / "ds").batches(batch_size=6, shuffle=True, seed=0))
    ids = ids_of(got)
    assert_each_once(ids, 40)
    np.testing.assert_array_equal(np.concatenate([b["img"] for b in got]), img[ids])


def test_hdf5_corrupt_chunk_is_caught_when_shuffling(tmp_path):
    """Rows read from the chunk offsets are still checked: each chunk once through HDF5's fletcher32."""
    import h5py

    path, _ = build(tmp_path, "hdf5", N)
    f = os.path.join(path, "data.h5")
    with h5py.File(f, "r") as h:
        info = h["x"].id.get_chunk_info(0)
    with open(f, "r+b") as fh:
        fh.seek(info.byte_offset + 100)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    ds = open_dataset(path)
    with pytest.raises(DatasetError, match=r"data.h5: column 'x', rows 0\.\.\d+: cannot read"):
        list(ds.batches(batch_size=50, shuffle=True, seed=0))
    with pytest.raises(DatasetError, match="cannot read"):
        list(open_dataset(path).batches(batch_size=50))


@pytest.mark.parametrize("fmt", FORMATS)
def test_text_columns_are_str(tmp_path, fmt):
    lines = ["hello", "", "wörld ✓", "x" * 300] * 25
    ds = open_dataset(build_text(tmp_path, fmt, lines))
    got = [s for b in ds.batches(batch_size=16) for s in b["text"].tolist()]
    assert got == lines
    shuffled = [s for b in ds.batches(batch_size=16, shuffle=True, seed=1) for s in b["text"].tolist()]
    assert sorted(shuffled) == sorted(lines)


def test_gzip_tfrecord(tmp_path):
    path, cols = build(tmp_path, "tfrecord", 300, compression="gzip")
    ds = open_dataset(path)
    got = list(ds.batches(batch_size=64))
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), cols["x"])
    assert_each_once(ids_of(ds.batches(batch_size=64, shuffle=True, seed=0)), 300)


def test_sequence_columns_are_padded_with_lengths(tmp_path):
    path, seqs = build_sequences(tmp_path / "seq", 50)
    ds = open_dataset(path)
    for shuffle in (False, True):
        for b in ds.batches(batch_size=8, shuffle=shuffle, seed=2, pad_value=-1):
            assert b["tokens"].dtype == np.int32 and b["tokens_length"].dtype == np.int64
            assert b["tokens"].shape == (len(b["id"]), int(b["tokens_length"].max()))
            for row, n, i in zip(b["tokens"], b["tokens_length"], b["id"], strict=True):
                np.testing.assert_array_equal(row[:n], seqs[i])
                assert (row[n:] == -1).all()


# --------------------------------------------------------------------------------------------
# bucketed datasets
# --------------------------------------------------------------------------------------------


# real ``bucket`` output: (format, layout, written shuffled or not), each built once
BUCKETED = [(fmt, layout, shuffled) for fmt in FORMATS for layout in ("padded", "ragged") for shuffled in (False, True)]


@pytest.fixture(scope="module")
def bucketed_sets(tmp_path_factory):
    made: dict = {}

    def get(fmt: str, layout: str = "padded", shuffled: bool = False):
        key = (fmt, layout, shuffled)
        if key not in made:
            made[key] = build_bucketed(tmp_path_factory.mktemp("bucketed"), fmt, layout, shuffled)
        return made[key]

    return get


def _bucket_id(param) -> str:
    fmt, layout, shuffled = param
    return f"{fmt}-{layout}-{'shuffled' if shuffled else 'ordered'}"


@pytest.mark.parametrize("pad_to", ["bucket", "batch"])
@pytest.mark.parametrize("case", BUCKETED, ids=_bucket_id)
def test_bucketed_batches_have_the_promised_shapes(bucketed_sets, case, pad_to):
    """Every batch from one bucket, as wide as the bucket (or its longest row), padded with the
    pad id 0; each row a line of the corpus, each line once."""
    path, truth = bucketed_sets(*case)
    ds = open_dataset(path)
    assert ds.bucketed and len(ds) == len(truth)
    seen = []
    for b in ds.batches(batch_size=8, shuffle=True, seed=1, pad_to=pad_to):
        lengths = b["length"]
        buckets = {bucket_of(int(n)) for n in lengths}
        assert len(buckets) == 1, "a batch mixes buckets"
        k = buckets.pop()
        width = RANGES[k][1] if pad_to == "bucket" else int(lengths.max())
        assert b["tokens"].shape == (len(lengths), width)
        assert b["tokens"].dtype == np.uint8 and lengths.dtype == np.int64
        for row, n in zip(b["tokens"], lengths, strict=True):
            assert (row[n:] == 0).all()
        seen.append(row_ids(b, truth))
    assert_each_once(np.concatenate(seen), len(truth))


@pytest.mark.parametrize("case", BUCKETED, ids=_bucket_id)
def test_bucketed_unshuffled_order_is_the_files_order(bucketed_sets, case):
    """Without shuffling, the loader gives the rows bucket by bucket in the order the format's own
    reader (np.load, h5py, polars, tf.data: tests/test_bucket.py) finds them in the files."""
    from tests.jobs.test_bucket import read_all

    path, truth = bucketed_sets(*case)
    _, in_files = read_all(path)
    got = [
        tuple(row[:n].tolist())
        for b in open_dataset(path).batches(batch_size=16)
        for row, n in zip(b["tokens"], b["length"], strict=True)
    ]
    assert got == in_files
    assert [bucket_of(len(r)) for r in got] == sorted(bucket_of(len(r)) for r in got)


@pytest.mark.parametrize("fmt", FORMATS)
def test_bucketed_order_is_seeded_and_interleaved(bucketed_sets, fmt):
    path, truth = bucketed_sets(fmt, "ragged", True)
    ds = open_dataset(path, columns=["tokens"])

    def order(seed):
        return [
            (bucket_of(int(b["length"][0])), tuple(row_ids(b, truth))) for b in ds.batches(4, shuffle=True, seed=seed)
        ]

    a = order(7)
    assert a == order(7)
    assert a != order(8)
    kinds = [k for k, _ in a]
    assert kinds != sorted(kinds), "buckets go short to long"
    # first half of the epoch already holds batches of every bucket
    assert set(kinds[: len(kinds) // 2]) == {0, 1, 2, 3}
    # without shuffling: bucket by bucket, in order
    plain = [bucket_of(int(b["length"][0])) for b in ds.batches(4)]
    assert plain == sorted(plain)


@pytest.mark.parametrize("fmt", FORMATS)
def test_bucketed_drop_remainder_and_worker_split(bucketed_sets, fmt):
    path, truth = bucketed_sets(fmt, "padded", True)
    ds = open_dataset(path)
    per_bucket = np.bincount([bucket_of(len(line)) for line in truth], minlength=len(RANGES))
    full = list(ds.batches(batch_size=8, drop_remainder=True, shuffle=True, seed=0))
    assert all(len(b["length"]) == 8 for b in full)
    assert len(full) == sum(int(n) // 8 for n in per_bucket)
    plan = ds.plan(8, True, 0)
    seen = np.concatenate([row_ids(b, truth) for w in range(3) for b in plan.epoch(0, (w, 3))])
    assert_each_once(seen, len(truth))


# --------------------------------------------------------------------------------------------
# refusing what cannot be trusted
# --------------------------------------------------------------------------------------------


def _edit_manifest(path, **changes):
    mpath = os.path.join(path, "_manifest.json")
    with open(mpath) as f:
        m = json.load(f)
    m.update(changes)
    with open(mpath, "w") as f:
        json.dump(m, f)


def test_refuses_incomplete_manifest(tmp_path):
    path, _ = build(tmp_path, "parquet", 10)
    _edit_manifest(path, complete=False)
    with pytest.raises(DatasetError, match=r"the dataset is incomplete .*did not finish"):
        open_dataset(path)


def test_refuses_unknown_version(tmp_path):
    path, _ = build(tmp_path, "memmap", 10)
    _edit_manifest(path, version=2)
    with pytest.raises(DatasetError, match=r"manifest version 2 is unknown to lovecraft_convert .* reads version 1"):
        open_dataset(path)


def test_refuses_missing_or_foreign_manifest(tmp_path):
    with pytest.raises(DatasetError, match="no such dataset directory"):
        open_dataset(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no _manifest.json"):
        open_dataset(tmp_path / "empty")
    (tmp_path / "empty" / "_manifest.json").write_text('{"hello": 1}')
    with pytest.raises(DatasetError, match="not a lovecraft dataset manifest"):
        open_dataset(tmp_path / "empty")
    (tmp_path / "empty" / "_manifest.json").write_text("{")
    with pytest.raises(DatasetError, match="unreadable manifest"):
        open_dataset(str(tmp_path / "empty" / "_manifest.json"))


def test_refuses_truncated_or_missing_files(tmp_path):
    path, _ = build(tmp_path, "hdf5", 100)
    with open(os.path.join(path, "data.h5"), "r+b") as f:
        f.truncate(1000)
    with pytest.raises(DatasetError, match=r"data.h5: 1000 bytes on disk, the manifest says \d+"):
        open_dataset(path)
    os.remove(os.path.join(path, "data.h5"))
    with pytest.raises(DatasetError, match="listed in the manifest but missing"):
        open_dataset(path)


def test_corrupt_tfrecord_is_an_error(tmp_path):
    path, _ = build(tmp_path, "tfrecord", 100)
    f = os.path.join(path, "data.tfrecord")
    with open(f, "r+b") as fh:
        fh.seek(os.path.getsize(f) // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(DatasetError, match="CRC mismatch"):
        list(open_dataset(path).batches(batch_size=10))


def test_bad_options(datasets):
    ds = open_dataset(datasets["memmap"])
    for kwargs, msg in [
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"dtype_float16": "float64"}, "dtype_float16"),
        ({"shuffle": "sometimes"}, "shuffle="),
        ({"pad_to": "max"}, "pad_to="),
    ]:
        with pytest.raises(DatasetError, match=msg):
            next(ds.batches(**{"batch_size": 8, **kwargs}))


def test_permutation_without_storing_it():
    """Beyond DENSE_PERMUTATION_MAX rows the permutation is computed, not stored: still exact."""
    for n in (1, 2, 3, 1000, 4097):
        p = Permutation(n, np.random.default_rng(0), dense_max=0)
        full = p[0:n]
        assert sorted(full.tolist()) == list(range(n))
        np.testing.assert_array_equal(np.concatenate([p[i : i + 37] for i in range(0, n, 37)]), full)
    a = Permutation(1000, np.random.default_rng(1), dense_max=0)[0:1000]
    assert not np.array_equal(a, np.arange(1000))


def test_numpy_batches_import_no_framework(datasets):
    """TensorFlow and PyTorch are imported only by to_tf_dataset / to_torch, even for TFRecord."""
    import subprocess
    import sys

    code = (
        "import sys, lovecraft_convert as lc\n"
        "for p in sys.argv[1:]:\n"
        "    ds = lc.open_dataset(p)\n"
        "    n = sum(len(b['id']) for b in ds.batches(100, shuffle=True, seed=0))\n"
        "    assert n == len(ds)\n"
        "print(','.join(m for m in ('tensorflow', 'torch', 'keras') if m in sys.modules))\n"
    )
    paths = [datasets[fmt] for fmt in FORMATS]
    out = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_column_named_like_the_lengths_a_batch_adds_is_refused(tmp_path):
    """A sequence column 'seq' beside a column 'seq_length': the batch's key for seq's lengths was
    taken by the column, and the true lengths lost without a word. Refused, naming both; reading
    without one of them works."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "c.parquet"
    pq.write_table(pa.table({"seq": pa.array([[1, 2], [3]]), "seq_length": pa.array([100, 200])}), src)
    out = str(tmp_path / "o")
    assert lovecraft("convert", str(src), "-o", out, "--to", "memmap", "-q").exit_code == 0
    with pytest.raises(lc.DatasetError) as e:
        next(iter(lc.open_dataset(out).batches(2)))
    assert str(e.value) == (
        f"{out}: batches hold column 'seq' padded and its lengths as 'seq_length', which is also a column of the "
        "dataset; open it with the columns to read, without one of them (open_dataset(path, columns=[...]))"
    )
    b = next(iter(lc.open_dataset(out, columns=["seq"]).batches(2)))
    assert b["seq"].tolist() == [[1, 2], [3, 0]] and b["seq_length"].tolist() == [2, 1]


def test_a_damaged_hdf5_chunk_read_at_random_is_named(tmp_path):
    """An exact shuffle of a compressed HDF5 dataset reads whole chunks: a chunk failing its
    checksum raised h5py's OSError without a file or a row (the read in order named both)."""
    src = tmp_path / "x.npy"
    np.save(src, np.random.default_rng(0).standard_normal((20_000, 8)).astype(np.float32))
    out = tmp_path / "o"
    assert lovecraft("convert", str(src), "-o", str(out), "--to", "hdf5", "--compression", "gzip", "-q").exit_code == 0
    path = out / "data.h5"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError) as e:
        list(lc.open_dataset(str(out)).batches(256, shuffle="exact", seed=0))
    line = str(e.value)
    assert line.startswith(f"{path}: column 'x', rows ") and "cannot read" in line and "the file is corrupt" in line
