"""float64 in TFRecord is kept exact: ``tf.train.Example`` has no float64 list, so each row's float64
values are one bytes value (little-endian), declared in the manifest's feature spec as
``encoding: float64le``. Read back bit for bit with tf.data (a spec and a decode written out here),
by our loaders, by ``to_tf_dataset``; narrowed only with ``--dtype float32``, which counts
overflows like float16 and refuses them unless ``--on-overflow clip``."""

from __future__ import annotations

import os

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.readback import manifest

tf = pytest.importorskip("tensorflow")

EXTREMES = [0.0, -0.0, 1.0, 0.1, 1 / 3, 5e-324, 2.2250738585072014e-308, 1e300, -1.7976931348623157e308, 3.5e38]


def _bits(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).view(np.uint64)


@pytest.fixture
def csv_floats(tmp_path):
    rng = np.random.default_rng(5)
    values = EXTREMES + [float("nan")] + rng.normal(scale=1e10, size=500).tolist()
    lines = ["x,k"] + [f"{v!r},{i}" for i, v in enumerate(values)]
    p = tmp_path / "f.csv"
    p.write_text("\n".join(lines) + "\n")
    return str(p), np.array(values, dtype=np.float64)


def _tf_read(out: str, name: str, shape: list[int]) -> np.ndarray:
    files = sorted(os.path.join(out, f["path"]) for f in manifest(out)["files"])
    spec = {name: tf.io.FixedLenFeature([], tf.string)}
    ds = tf.data.TFRecordDataset(files).batch(1000).map(lambda r: tf.io.parse_example(r, spec))
    parts = [tf.reshape(tf.io.decode_raw(b[name], tf.float64), [-1, *shape]).numpy() for b in ds]
    return np.concatenate(parts)


def test_a_csv_float_column_reads_back_bit_exact_with_tf_data(csv_floats, tmp_path):
    src, want = csv_floats
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "tfrecord", "-q")
    assert r.exit_code == 0, r.stderr
    spec = manifest(out)["tfrecord"]["feature_spec"]["x"]
    assert spec == {
        "type": "FixedLenFeature",
        "shape": [],
        "dtype": "string",
        "encoding": "float64le",
        "value_shape": [],
    }
    got = _tf_read(out, "x", [])
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # our loaders, and our tf.data loader, give the same bits
    ds = lc.open_dataset(out)
    ours = np.concatenate([b["x"] for b in ds.batches(128)])
    assert ours.dtype == np.float64
    np.testing.assert_array_equal(_bits(ours), _bits(want))
    tfd = np.concatenate([b["x"].numpy() for b in ds.to_tf_dataset(batch_size=128, y=None)])
    np.testing.assert_array_equal(_bits(tfd), _bits(want))
    assert lc.verify(out).ok
    assert lc.verify(out, against=src).ok


def test_nd_float64_rows_and_shards(tmp_path):
    a = np.random.default_rng(2).normal(size=(300, 2, 3))
    a[0, 0, 0] = -0.0
    a[1, 1, 2] = 1e-320
    np.save(tmp_path / "a.npy", a)
    out = str(tmp_path / "out")
    r = lovecraft("shard", str(tmp_path / "a.npy"), "-o", out, "--to", "tfrecord", "--num-shards", "3", "-q")
    assert r.exit_code == 0, r.stderr
    np.testing.assert_array_equal(_bits(_tf_read(out, "a", [2, 3])), _bits(a))
    ours = np.concatenate([b["a"] for b in lc.open_dataset(out).batches(64)])
    np.testing.assert_array_equal(_bits(ours), _bits(a))
    assert lc.verify(out).ok


def test_float64_sequences_in_buckets(tmp_path):
    rows = [[0.1, 1e300, -0.0], [5e-324], [2.5] * 7, [1 / 3, 2 / 3]]
    src = tmp_path / "s.csv"
    src.write_text("\n".join(",".join(repr(x) for x in r) for r in rows) + "\n")
    out = str(tmp_path / "b")
    r = lovecraft("bucket", str(src), "-o", out, "--to", "tfrecord", "--ragged", "--layout", "ragged",
                  "--num-buckets", "2", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    m = manifest(out)
    assert m["schema"][0]["dtype"] == "<f8"
    files = [os.path.join(out, f["path"]) for f in m["files"]]
    spec = {"values": tf.io.FixedLenFeature([], tf.string)}
    got = [np.frombuffer(x, "<f8").tolist() for f in files for b in tf.data.TFRecordDataset(f).batch(10)
           for x in tf.io.parse_example(b, spec)["values"].numpy()]  # fmt: skip
    assert sorted(map(tuple, got)) == sorted(map(tuple, rows))
    assert lc.verify(out).ok


def test_dtype_float32_narrows_and_counts_overflow(csv_floats, tmp_path):
    src, want = csv_floats
    out = str(tmp_path / "n")
    r = lovecraft("convert", src, "-o", out, "--to", "tfrecord", "--dtype", "float32", "-q")
    row = int(np.flatnonzero(np.abs(want) > 3.4028234663852886e38)[0]) + 1
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, row {row}, column 'x': value {float(want[row - 1])!r} overflows float32 (max 3.4028234663852886e+38); "
        "scale the data, keep a wider type, or pass --on-overflow clip\n",
    )
    assert not os.path.exists(out)
    r = lovecraft("convert", src, "-o", out, "--to", "tfrecord", "--dtype", "float32", "--on-overflow", "clip", "-q")
    assert r.exit_code == 0, r.stderr
    report = manifest(out)["float16"]["x"]
    big = int((np.abs(want[np.isfinite(want)]) > 3.4028234663852886e38).sum())
    assert report["target"] == "float32" and report["overflow"] == big == report["clipped"] == 3
    spec = {"x": tf.io.FixedLenFeature([], tf.float32)}
    files = [os.path.join(out, f["path"]) for f in manifest(out)["files"]]
    got = np.concatenate([tf.io.parse_example(b, spec)["x"].numpy() for b in tf.data.TFRecordDataset(files).batch(99)])
    with np.errstate(over="ignore"):
        exp = np.clip(want, -3.4028234663852886e38, 3.4028234663852886e38).astype(np.float32)
    np.testing.assert_array_equal(got, exp)
