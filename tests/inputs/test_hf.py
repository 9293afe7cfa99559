"""Hugging Face ``save_to_disk`` directories as input, with ``datasets.load_from_disk`` as the
reference: several data files in state.json's order, nested features, fixed-length sequences,
ArrayND, class labels, missing values; DatasetDict and damaged directories refused."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from lovecraft_convert import shard
from tests.conftest import leftovers, lovecraft
from tests.inputs.columnar import NAN, assert_columns, digest, plain
from tests.readback import manifest, read_back

datasets = pytest.importorskip("datasets")

N = 300


def _rows() -> dict:
    return {
        "text": [None if i % 11 == 0 else "w" * (i % 13) for i in range(N)],
        "label": [i % 3 for i in range(N)],
        "score": [None if i % 5 == 0 else i / 8 for i in range(N)],
        "meta": [{"lang": ["en", "fr"][i % 2], "n": i} for i in range(N)],
        "pair": [[i, i + 1] for i in range(N)],
        "toks": [list(range(i % 6)) for i in range(N)],
        "img": [np.full((2, 3), i, dtype=np.float32) for i in range(N)],
    }


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("hf") / "ds")
    features = datasets.Features(
        {
            "text": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["a", "b", "c"]),
            "score": datasets.Value("float32"),
            "meta": {"lang": datasets.Value("string"), "n": datasets.Value("int64")},
            "pair": datasets.Sequence(datasets.Value("int32"), length=2),
            "toks": datasets.Sequence(datasets.Value("int64")),
            "img": datasets.Array2D(shape=(2, 3), dtype="float32"),
        }
    )
    datasets.Dataset.from_dict(_rows(), features=features).save_to_disk(d, num_shards=3)
    return d


def _want() -> dict:
    """What each column must hold, from the rows written (nulls by lovecraft's rules)."""
    r = _rows()
    return {
        "text": ["" if v is None else v for v in r["text"]],
        "label": r["label"],
        "score": [NAN if v is None else v for v in r["score"]],
        "meta.lang": [m["lang"] for m in r["meta"]],
        "meta.n": [m["n"] for m in r["meta"]],
        "pair": r["pair"],
        "toks": r["toks"],
        "img": [a.tolist() for a in r["img"]],
    }


def test_the_directory_holds_several_files(hf_dir):
    with open(os.path.join(hf_dir, "state.json")) as f:
        files = [e["filename"] for e in json.load(f)["_data_files"]]
    assert files == [f"data-0000{k}-of-00003.arrow" for k in range(3)]


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord"])
def test_convert_matches_load_from_disk(tmp_path, hf_dir, fmt):
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    out = str(tmp_path / "out")
    r = lovecraft("convert", hf_dir, "-o", out, "--to", fmt, "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    got = read_back(out, fmt)
    assert_columns(got, _want(), f32=fmt == "tfrecord")
    ref = datasets.load_from_disk(hf_dir)  # the reference reader, row by row
    assert len(ref) == N
    text = plain(got["text"])
    for i in (0, 1, 12, 150, N - 1):
        row = ref[i]
        assert text[i] == (row["text"] or "")
        assert plain(got["img"])[i] == [list(x) for x in row["img"]]
        assert plain(got["meta.n"])[i] == row["meta"]["n"]
    schema = {f["name"]: (f["kind"], f["dtype"], f["shape"]) for f in manifest(out)["schema"]}
    assert schema["img"] == ("fixed", "<f4", [2, 3]) and schema["pair"] == ("fixed", "<i4", [2])
    assert schema["toks"] == ("sequence", "<i8", []) and schema["label"] == ("fixed", "<i8", [])


def test_shard_is_byte_identical_for_any_workers_and_verifies(tmp_path, hf_dir):
    outs = []
    for w in (1, 2):
        out = str(tmp_path / f"w{w}")
        shard(hf_dir, out, to="parquet", num_shards=2, shuffle=True, seed=1, workers=w, progress=False, part_bytes=1)
        outs.append(digest(out))
    assert outs[0] == outs[1]
    r = lovecraft("verify", str(tmp_path / "w2"), "--against", hf_dir)
    assert r.exit_code == 0, r.stdout


def test_inspect_a_directory(hf_dir):
    r = lovecraft("inspect", hf_dir, "--json", "-q")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["format"] == "hf" and rep["rows"] == N and rep["inputs"][0]["files"] == 3
    cols = {c["name"]: c for c in rep["columns"]}
    assert cols["text"]["nulls"] == len(range(0, N, 11)) and cols["score"]["nulls"] == len(range(0, N, 5))
    assert cols["img"]["extension"] == "Hugging Face Array2D"


def test_dataset_dict_and_damaged_directories(tmp_path):
    d = str(tmp_path / "dd")
    ds = datasets.Dataset.from_dict({"x": [1, 2, 3]})
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(d)
    r = lovecraft("convert", d, "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert r.stderr == (
        f"Error: {d}: a Hugging Face DatasetDict (splits: train, test); give one split's directory, e.g. {d}/train\n"
    )
    r = lovecraft("convert", os.path.join(d, "train"), "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    one = os.path.join(d, "test")
    data = os.path.join(one, "data-00000-of-00001.arrow")
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    out = str(tmp_path / "o2")
    r = lovecraft("convert", one, "-o", out, "--to", "parquet", "-q")
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {data}") and r.stderr.count("\n") == 1, r.stderr
    assert not os.path.exists(out) and leftovers(tmp_path) == []
    os.unlink(data)
    r = lovecraft("convert", one, "-o", out, "--to", "parquet", "-q")
    assert r.stderr == f"Error: {data}: listed in state.json but missing; the dataset is incomplete; re-save it\n"


def test_without_datasets_imported_the_arrays_are_read_from_field_metadata(tmp_path, hf_dir):
    """``lovecraft`` itself never imports ``datasets``: ArrayND columns are then plain nested lists
    whose field metadata names the extension and its shape."""
    import subprocess
    import sys

    out = str(tmp_path / "out")
    code = "import sys; from lovecraft_convert.cli import main; sys.argv[1:] = sys.argv[1:]; main()"
    r = subprocess.run(
        [sys.executable, "-c", code, "convert", hf_dir, "-o", out, "--to", "memmap", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (r.returncode, r.stderr) == (0, "")
    np.testing.assert_array_equal(np.load(os.path.join(out, "img.npy")), np.stack(_rows()["img"]))
    assert manifest(out)["sources"][0]["columns"]["img"]["extension"] == "Hugging Face Array2D"
