"""Datasets of text and float64 columns (issue 39: a tweets table and a flights table) through the
loaders: TFRecord's every span takes the whole-column decoder; ``batches()`` in order and shuffled
give the CSV's values; ``to_tf_dataset()`` gives tf.data's own parse of the same files and, shuffled
or resumed from a state, exactly the batches of ``batches()`` (our order, natively parsed)."""

from __future__ import annotations

import csv
import math
import os
import shutil
import struct
import threading

import numpy as np
import pytest

from lovecraft_convert.errors import DatasetError
from lovecraft_convert.formats.tfrecord.columnar import decode_columns
from lovecraft_convert.formats.tfrecord.decode import kinds_of
from lovecraft_convert.formats.tfrecord.framing import RecordRuns
from lovecraft_convert.loaders import open_dataset
from tests.conftest import lovecraft

N = 700
FORMATS = ("tfrecord", "parquet", "memmap", "hdf5")
WORDS = ["the", "of", "flight", "café", "naïve", "東京", "🙂", "señor", "a", "delay"]


def _write_csv(path: str) -> list[dict]:
    """A flights-and-tweets table: int ids, float64 with NaN (empty cells), short codes, empty and
    non-ASCII strings, long text (multi-byte varint lengths)."""
    rng = np.random.default_rng(11)
    rows = []
    for i in range(N):
        n = int(rng.integers(0, 300))
        text = " ".join(rng.choice(WORDS, n // 4 + 1))[:n]
        delay = "" if rng.random() < 0.1 else repr(float(rng.normal(0, 40)))
        rows.append(
            {
                "id": str(i),
                "carrier": str(rng.choice(["UA", "AA", "B6", ""])),
                "dep_delay": delay,
                "speed": repr(float(rng.uniform(0, 1e6))),
                "tailnum": f"N{int(rng.integers(100, 999))}{rng.choice(['AA', '', 'JB'])}",
                "text": text,
                "distance": str(int(rng.integers(-(2**40), 2**40))),
            }
        )
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    base = tmp_path_factory.mktemp("mixed")
    src = os.path.join(base, "flights.csv")
    rows = _write_csv(src)
    out = {}
    for fmt in FORMATS:
        out[fmt] = os.path.join(base, fmt)
        r = lovecraft("convert", src, "-o", out[fmt], "--to", fmt, "-q")
        assert r.exit_code == 0, r.stderr
    return out, rows


def _check_batch(b: dict, rows: list[dict]) -> None:
    for j, i in enumerate(b["id"].tolist()):
        want = rows[i]
        assert b["carrier"][j] == want["carrier"] and b["tailnum"][j] == want["tailnum"]
        assert b["text"][j] == want["text"]
        assert int(b["distance"][j]) == int(want["distance"])
        assert float(b["speed"][j]) == float(want["speed"])  # float64 exact
        d = float(b["dep_delay"][j])
        assert (math.isnan(d) and want["dep_delay"] == "") or d == float(want["dep_delay"])


def test_every_span_of_a_text_and_float64_file_is_decoded_as_whole_columns(table):
    paths, _ = table
    ds = open_dataset(paths["tfrecord"])
    assert {f.name: f.np_dtype for f in ds.schema}["speed"] == np.float64
    path = os.path.join(paths["tfrecord"], ds.manifest["files"][0]["path"])
    spans = 0
    for _, recs in RecordRuns(path, False, len(ds)).runs(0, len(ds)):
        assert decode_columns(recs.buf, recs.starts, recs.lens, ds.schema, kinds_of(ds.schema), True) is not None
        spans += 1
    assert spans >= 1


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_batches_give_the_csv_values(table, fmt, shuffle):
    paths, rows = table
    ids = []
    for b in open_dataset(paths[fmt]).batches(64, shuffle=shuffle, seed=3):
        assert b["text"].dtype == object and b["speed"].dtype == np.float64
        _check_batch(b, rows)
        ids.append(b["id"])
    ids = np.concatenate(ids)
    np.testing.assert_array_equal(np.sort(ids), np.arange(N))
    assert shuffle != bool((ids == np.arange(N)).all())


def test_to_tf_dataset_in_order_is_tf_datas_own_parse(table):
    tf = pytest.importorskip("tensorflow")
    from lovecraft_convert.formats.tfrecord.tfdata import decode_float64, to_tf_feature_spec

    paths, rows = table
    ds = open_dataset(paths["tfrecord"])
    spec_json = ds.manifest["tfrecord"]["feature_spec"]
    files = [os.path.join(paths["tfrecord"], f["path"]) for f in ds.manifest["files"]]
    peer = tf.data.TFRecordDataset(files).batch(64).map(lambda r: tf.io.parse_example(r, to_tf_feature_spec(spec_json)))
    ours = ds.to_tf_dataset(64, y=None)
    assert ours.element_spec["speed"].dtype == tf.float64 and ours.element_spec["text"].dtype == tf.string
    for a, b in zip(ours.as_numpy_iterator(), peer, strict=True):
        for k in a:
            want = b[k]
            if spec_json[k].get("encoding") == "float64le":
                want = decode_float64(tf, want, spec_json[k])
            np.testing.assert_array_equal(a[k], want.numpy())
        _check_batch({k: [x.decode() for x in v] if v.dtype == object else v for k, v in a.items()}, rows)


@pytest.mark.parametrize("shuffle", [False, True])
def test_to_tf_dataset_shuffled_or_resumed_is_our_order(table, shuffle):
    """Shuffled (and from a saved state) the TFRecord pipeline parses natively the records of the
    loader's own order: the same batches as ``batches()``, then the next epoch on the next pass."""
    pytest.importorskip("tensorflow")
    paths, _ = table
    ds = open_dataset(paths["tfrecord"])
    full = [b for b in ds.batches(64, shuffle=shuffle, seed=5, epochs=2)]
    half = len(full) // 2
    if shuffle:
        d = ds.to_tf_dataset(64, shuffle=True, seed=5, y=None)
        for a, b in zip(d.as_numpy_iterator(), full[:half], strict=True):
            np.testing.assert_array_equal(a["id"], b["id"])
            assert [x.decode() for x in a["text"]] == b["text"].tolist()
            np.testing.assert_array_equal(a["speed"], b["speed"])
    it = ds.batches(64, shuffle=shuffle, seed=5)
    for _ in range(4):
        next(it)
    d = ds.to_tf_dataset(64, shuffle=shuffle, state=it.state_dict(), y=None)
    got = [a["id"] for a in d.as_numpy_iterator()]
    np.testing.assert_array_equal(np.concatenate(got), np.concatenate([b["id"] for b in full[4:half]]))
    second = [a["id"] for a in d.as_numpy_iterator()]  # the next pass: the next epoch, whole
    np.testing.assert_array_equal(np.concatenate(second), np.concatenate([b["id"] for b in full[half:]]))


@pytest.mark.parametrize("shuffle", [False, True])
def test_text_that_is_not_utf8_is_one_line(table, tmp_path, shuffle):
    """A TFRecord text value whose bytes are not UTF-8 (framing valid: its data CRC recomputed) is
    refused in one line, in order and in a shuffled window alike."""
    import crc32c

    paths, _ = table
    ds_path = str(tmp_path / "tfrecord")
    shutil.copytree(paths["tfrecord"], ds_path)
    f = os.path.join(ds_path, open_dataset(ds_path).manifest["files"][0]["path"])
    with open(f, "rb") as fh:
        data = bytearray(fh.read())
    at = data.index("café".encode()) + 3  # the first byte of an "é": one record's text
    data[at] = 0xFF
    pos = 0  # the record holding it, found by walking the framing: its data CRC recomputed
    while True:
        n = struct.unpack_from("<Q", data, pos)[0]
        if pos + 12 <= at < pos + 12 + n:
            c = crc32c.crc32c(bytes(data[pos + 12 : pos + 12 + n]))
            struct.pack_into("<I", data, pos + 12 + n, (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF)
            break
        pos += n + 16
    with open(f, "wb") as fh:
        fh.write(bytes(data))
    with pytest.raises(DatasetError) as e:
        for _ in open_dataset(ds_path).batches(64, shuffle=shuffle, seed=3):
            pass
    assert str(e.value).splitlines() == [
        "a text column holds invalid UTF-8 (invalid start byte); "
        "the dataset is damaged; run `lovecraft verify` or re-create it"
    ]


@pytest.mark.parametrize("damaged", [0, 333, 699])
def test_in_order_every_span_before_a_damaged_record_is_delivered(table, tmp_path, damaged):
    """Read in order in spans of 50 records (framed in one thread, decoded in others, several in
    flight), a file whose record ``damaged`` fails its CRC gives every span before the damaged
    one, in order, then one line naming the record; no thread is left."""
    paths, _ = table
    ds_path = str(tmp_path / "tfrecord")
    shutil.copytree(paths["tfrecord"], ds_path)
    f = os.path.join(ds_path, open_dataset(ds_path).manifest["files"][0]["path"])
    with open(f, "rb") as fh:
        data = bytearray(fh.read())
    pos = 0
    for _ in range(damaged):
        pos += struct.unpack_from("<Q", data, pos)[0] + 16
    data[pos + 12] ^= 0x01  # the record's first data byte: its data CRC no longer matches
    with open(f, "wb") as fh:
        fh.write(bytes(data))
    ds = open_dataset(ds_path)
    reader = ds.reader(ds.groups[0], ds.groups[0].parts[0])
    ids = []
    with pytest.raises(DatasetError) as e:
        for b in reader.chunks(0, N, 50):
            assert b.num_rows <= 50
            ids.extend(b.columns["id"].tolist())
    assert ids == list(range(damaged // 50 * 50))
    assert f"record {damaged + 1} at byte {pos}: data CRC mismatch (file is corrupt)" in str(e.value)
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("lovecraft-decode", "lovecraft-reader"))]
