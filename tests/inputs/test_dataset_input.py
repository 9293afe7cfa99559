"""A lovecraft dataset directory as input: re-sharded to another format it equals its source (read
with open_dataset and with the other format's own client); incomplete, damaged and bucketed
datasets are refused with one line."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from lovecraft_convert import convert, open_dataset, shard
from tests.conftest import leftovers, lovecraft
from tests.inputs.columnar import assert_columns, digest, same
from tests.readback import manifest, read_back


def _save(path: str, m: dict) -> None:
    with open(path, "w") as f:
        json.dump(m, f)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A sharded parquet dataset of a CSV with text, floats and ints (and a float16 column)."""
    d = tmp_path_factory.mktemp("dsin")
    rng = np.random.default_rng(4)
    n = 5_000
    x = rng.normal(size=n)
    rows = [f"{i},{x[i]:.6f},{'w' * (i % 9)},{x[i] / 3:.3f}" for i in range(n)]
    csv = d / "in.csv"
    csv.write_text("id,x,text,h\n" + "\n".join(rows) + "\n")
    out = str(d / "ds")
    shard(str(csv), out, to="parquet", num_shards=4, column_types={"h": "float16"}, progress=False)
    return out, {"id": list(range(n)), "text": ["w" * (i % 9) for i in range(n)]}


def _all(path: str) -> dict:
    ds = open_dataset(path)
    out: dict = {}
    for b in ds.batches(batch_size=1 << 20):
        for k, v in b.items():
            out.setdefault(k, []).extend(v.tolist())
    return out


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "tfrecord"])
def test_reshard_to_another_format_equals_its_source(tmp_path, source, fmt):
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    src, want = source
    out = str(tmp_path / "re")
    r = lovecraft("shard", src, "-o", out, "--to", fmt, "--num-shards", "3", "--workers", "2", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    a, b = _all(src), _all(out)
    assert list(a) == list(b)
    for k in a:  # TFRecord holds floats as float32: the float64 column is compared rounded
        assert same(b[k], a[k], f32=fmt == "tfrecord"), k
    assert b["id"] == want["id"] and b["text"] == want["text"]
    m = manifest(out)
    assert m["sources"][0]["format"] == "dataset"
    assert {f["name"]: f["dtype"] for f in m["schema"]}["h"] == "<f2"
    r = lovecraft("verify", out, "--against", src)
    assert r.exit_code == 0, r.stdout


def test_convert_columns_of_a_dataset_and_workers(tmp_path, source):
    src, want = source
    out = str(tmp_path / "c")
    m = convert(src, out, to="memmap", columns=["text", "id"], progress=False)
    assert [f["name"] for f in m["schema"]] == ["text", "id"]
    assert_columns(read_back(out, "memmap"), want)
    convert(src, str(tmp_path / "h"), to="hdf5", progress=False)
    assert_columns(read_back(str(tmp_path / "h"), "hdf5"), want)
    outs = []
    for w in (1, 2):
        o = str(tmp_path / f"w{w}")
        shard(src, o, to="hdf5", rows_per_shard=1_500, shuffle=True, seed=2, workers=w, progress=False)
        outs.append(digest(o))
    assert outs[0] == outs[1]


def test_incomplete_damaged_and_bucketed_datasets_are_refused(tmp_path, source):
    import shutil

    src, _ = source
    broken = str(tmp_path / "broken")
    shutil.copytree(src, broken)
    mpath = os.path.join(broken, "_manifest.json")
    m = manifest(broken)
    m["complete"] = False
    _save(mpath, m)
    out = str(tmp_path / "out")
    r = lovecraft("convert", broken, "-o", out, "--to", "hdf5", "-q")
    assert r.stderr == (
        f"Error: {mpath}: the dataset is incomplete (its manifest does not say complete: true (the run that wrote "
        "it did not finish)); run it again (`lovecraft shard ... --resume` resumes)\n"
    )
    m["complete"] = True
    _save(mpath, m)
    first = os.path.join(broken, m["shards"][0]["files"][0])
    with open(first, "r+b") as f:
        f.truncate(10)
    r = lovecraft("convert", broken, "-o", out, "--to", "hdf5", "-q")
    assert r.stderr == (
        f"Error: {first}: 10 bytes on disk, the manifest says {m['files'][0]['bytes']}; the file was changed or "
        "truncated; run `lovecraft verify` or re-create the dataset\n"
    )
    assert not os.path.exists(out) and leftovers(tmp_path) == []
    text = tmp_path / "t.txt"
    text.write_text("a b\nc\nd e f\n")
    bucketed = str(tmp_path / "bk")
    assert lovecraft("bucket", str(text), "-o", bucketed, "--to", "memmap", "--num-buckets", "2", "-q").exit_code == 0
    r = lovecraft("convert", bucketed, "-o", out, "--to", "hdf5", "-q")
    assert r.stderr == (
        f"Error: {bucketed}: a bucketed dataset (its rows are grouped and padded by length) is not re-read; "
        "convert or shard the input it was bucketed from\n"
    )
    r = lovecraft("convert", src, "-o", src, "--to", "hdf5", "-q", "--overwrite")
    assert r.stderr == f"Error: {src}: the output would replace the input {src}; choose another output directory\n"
