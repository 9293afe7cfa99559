"""HDF5 input (``.h5``/``.hdf5``): every dataset a column (groups dotted), read in row ranges;
compared with h5py's own reads of the file; a file lovecraft wrote round-trips (its schema
attribute is JSON); datasets that cannot be columns are refused in one line naming them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft

N = 3000


def open_text(*parts: str) -> str:
    return Path(*parts).read_text()


def _source(path: str) -> dict[str, object]:
    """A file of the shapes people have: a 2-d float dataset chunked and gzipped, labels in a group,
    fixed-width bytes, variable-length text and variable-length int arrays."""
    rng = np.random.default_rng(3)
    cols = {
        "features": rng.standard_normal((N, 8)).astype(np.float32),
        "meta.label": rng.integers(0, 5, N).astype(np.int16),
        "meta.code": np.array([f"c{i % 97}".encode() for i in range(N)], dtype="S4"),
        "text": [f"document {i} é" * (i % 4) for i in range(N)],
        "ids": [rng.integers(0, 1000, i % 6).astype(np.int32) for i in range(N)],
    }
    with h5py.File(path, "w", track_order=True) as f:
        f.create_dataset("features", data=cols["features"], chunks=(256, 8), compression="gzip")
        g = f.create_group("meta", track_order=True)
        g.create_dataset("label", data=cols["meta.label"])
        g.create_dataset("code", data=cols["meta.code"])
        f.create_dataset("text", data=cols["text"], dtype=h5py.string_dtype())
        f.create_dataset("ids", data=np.array(cols["ids"], dtype=object), dtype=h5py.vlen_dtype(np.int32))
    return cols


@pytest.mark.parametrize("command", ["convert", "shard"])
def test_every_dataset_a_column(tmp_path, command):
    src = str(tmp_path / "d.h5")
    cols = _source(src)
    out = str(tmp_path / "out")
    if command == "shard":  # row ranges of ~64 KiB read by two workers, each opening the file
        lc.shard(src, out, to="parquet", num_shards=3, workers=2, part_bytes=65536, progress=False)
    else:
        r = lovecraft("convert", src, "-o", out, "--to", "parquet", "--max-memory", "16MiB", "-q")
        assert r.exit_code == 0, r.stderr
    t = pq.read_table(out)
    assert t.column_names == list(cols)  # creation order, groups dotted
    np.testing.assert_array_equal(np.array(t.column("features").to_pylist(), np.float32), cols["features"])
    assert t.column("meta.label").to_pylist() == cols["meta.label"].tolist()
    assert t.column("meta.code").to_pylist() == cols["meta.code"].tolist()
    assert t.column("text").to_pylist() == cols["text"]
    assert t.column("ids").to_pylist() == [a.tolist() for a in cols["ids"]]
    assert lovecraft("verify", out, "--against", src).exit_code == 0
    r = lovecraft("inspect", src)
    assert r.stdout.splitlines()[0].startswith(f"{src}: hdf5, gzip-compressed inside, ")
    assert r.stdout.splitlines()[0].endswith(", 5 datasets")


def test_a_lovecraft_hdf5_file_round_trips(tmp_path):
    rows = [{"id": i, "text": "t" * i + "é", "vec": [i, i + 0.5], "tags": [i] * (i % 3)} for i in range(50)]
    src = tmp_path / "r.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = str(tmp_path / "first")
    assert lovecraft("convert", str(src), "-o", first, "--to", "hdf5", "-q").exit_code == 0
    h5 = os.path.join(first, "data.h5")
    with h5py.File(h5, "r") as f:
        saved = json.loads(f.attrs["lovecraft_schema"])  # JSON, not a Python repr
    assert saved == json.loads(open_text(first, "_manifest.json"))["schema"]
    again = str(tmp_path / "again")
    assert lovecraft("convert", h5, "-o", again, "--to", "hdf5", "-q").exit_code == 0
    assert json.loads(open_text(again, "_manifest.json"))["schema"] == saved
    a, b = lc.open_dataset(first), lc.open_dataset(again)
    for x, y in zip(a.batches(50), b.batches(50), strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert [np.asarray(v).tolist() for v in x[k]] == [np.asarray(v).tolist() for v in y[k]]


def test_columns_leave_out_what_cannot_be_a_column(tmp_path):
    src = str(tmp_path / "mixed.h5")
    with h5py.File(src, "w") as f:
        f["x"] = np.arange(10)
        f["y"] = np.arange(10.0)
        f["short"] = np.arange(3)
        f["version"] = 2  # a scalar
        f["pairs"] = np.zeros(10, dtype=[("a", "<i4"), ("b", "<f8")])
    messages = {
        "": f"{src}, dataset pairs: a compound type (fields a, b); save each field as a dataset of its own, "
        "or leave it out with --columns",
        "x,short": f"{src}: datasets have different numbers of rows (x: 10, short: 3); "
        "convert datasets of one length together (--columns a,b)",
        "x,version": f"{src}, dataset version: a scalar has no record axis; leave it out with --columns",
    }
    for cols, message in messages.items():
        more = ["--columns", cols] if cols else []
        r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet", *more)
        assert (r.exit_code, r.stderr) == (1, f"Error: {message}\n"), cols
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "--columns", "y,x", "-q")
    assert r.exit_code == 0, r.stderr
    assert pq.read_table(out).to_pydict() == {"y": list(np.arange(10.0)), "x": list(range(10))}
    r = lovecraft("convert", src, "-o", str(tmp_path / "o2"), "--to", "parquet", "--columns", "nope")
    assert r.exit_code == 2
    assert r.stderr == f"Error: --columns: no dataset 'nope' in {src}; datasets are pairs, short, version, x, y\n"


def test_data_outside_the_file_is_refused(tmp_path):
    raw = tmp_path / "raw.bin"
    np.arange(10, dtype=np.int32).tofile(raw)
    src = str(tmp_path / "ext.h5")
    with h5py.File(src, "w") as f:
        f.create_dataset("x", shape=(10,), dtype=np.int32, external=[(str(raw), 0, 40)])
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, dataset x: its data is stored outside the file; leave it out with --columns\n",
    )


def test_not_hdf5(tmp_path):
    src = str(tmp_path / "fake.h5")
    Path(src).write_bytes(b"not an hdf5 file at all")
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet")
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {src}: not a readable HDF5 file (") and r.stderr.endswith("; check the file\n")


def test_bucket_takes_a_variable_length_dataset(tmp_path):
    src = str(tmp_path / "seqs.h5")
    seqs = [np.arange(i % 25 + 1, dtype=np.int32) for i in range(400)]
    with h5py.File(src, "w") as f:
        f.create_dataset("ids", data=np.array(seqs, dtype=object), dtype=h5py.vlen_dtype(np.int32))
        f["label"] = np.arange(400)
    out = str(tmp_path / "b")
    r = lovecraft("bucket", src, "-o", out, "--to", "parquet", "--num-buckets", "3", "--column", "ids", "-q")
    assert r.exit_code == 0, r.stderr
    t = pq.read_table(out)
    got = sorted(tuple(x[:n]) for x, n in zip(t.column("ids").to_pylist(), t.column("length").to_pylist(), strict=True))
    assert got == sorted(tuple(s.tolist()) for s in seqs)
