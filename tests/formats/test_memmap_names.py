"""Memmap file names are distinct for every header (issue 38, point 4): ``a`` (text) and
``a.values`` used to write one file ``a.values.npy`` twice, the run exiting 0 and verify then
finding 4 problems. Checked through the writer, the manifest and ``np.load``, for the columns of
the issue and for arbitrary names (hypothesis), with the files found from the manifest only."""

from __future__ import annotations

import json
import os
import shutil
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.readback import manifest


def _fold(name: str) -> str:
    """As a case- and normalization-insensitive file system compares names."""
    return unicodedata.normalize("NFD", name).casefold()


def _read_back(out: str) -> dict[str, list]:
    """column -> its values, from the files the manifest lists for it, read with np.load."""
    m = manifest(out)
    roles: dict[str, dict[str, np.ndarray]] = {}
    for f in m["files"]:
        roles.setdefault(f["column"], {})[f["role"]] = np.load(os.path.join(out, f["path"]), allow_pickle=False)
    cols = {}
    for name, r in roles.items():
        if "data" in r:
            cols[name] = r["data"].tolist()
        else:
            v, o = r["values"].tobytes(), r["offsets"]
            cols[name] = [v[o[i] : o[i + 1]].decode() for i in range(len(o) - 1)]
    return cols


def _check_names(out: str) -> list[str]:
    """Every file the manifest lists is there, once, its name distinct from every other even
    case-folded and normalized, at most 255 bytes, inside the dataset; nothing else is there."""
    m = manifest(out)
    paths = [f["path"] for f in m["files"]]
    assert m["memmap"] == {"file_names": "plain-or-escaped-1"}  # the scheme, recorded
    assert len({_fold(p) for p in paths}) == len(paths), paths
    for p in paths:
        assert "/" not in p and "\x00" not in p and not p.startswith(".") and len(p.encode()) <= 255, p
    assert sorted(os.listdir(out)) == sorted(["_manifest.json", *paths])
    return paths


@pytest.mark.parametrize(
    "header",
    ["a,a.values", "a,a.offsets", "a,a.VALUES", "a.offsets,a,a.values", "A,a", "x,X.values"],
)
def test_columns_whose_file_names_used_to_collide(tmp_path, header):
    """The first column is text (``values``/``offsets`` files), the others numbers."""
    names = header.split(",")
    src = tmp_path / "in.csv"
    src.write_text(header + "\n" + "".join(f"w{i}," + ",".join(str(i * (k + 1)) for k in range(len(names) - 1)) + "\n" for i in range(5)))  # fmt: skip
    out = str(tmp_path / "out")
    r = lovecraft("convert", str(src), "-o", out, "--to", "memmap", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    assert lc.verify(out).lines() == []
    assert _read_back(out) == {names[0]: [f"w{i}" for i in range(5)]} | {
        n: [i * k for i in range(5)] for k, n in enumerate(names[1:], start=1)
    }
    batch = next(iter(lc.open_dataset(out).batches(5)))
    assert list(batch[names[1]]) == [i for i in range(5)]
    _check_names(out)


def test_ordinary_names_keep_their_files(tmp_path):
    """Names that were safe keep the file names they always had (and sharded units their stem)."""
    src = tmp_path / "in.csv"
    src.write_text("label,pixel_0,Price (EUR),note é\n1,2,3.5,x\n4,5,6.5,y\n")
    out = str(tmp_path / "out")
    assert lovecraft("convert", str(src), "-o", out, "--to", "memmap", "-q").exit_code == 0
    assert sorted(_check_names(out)) == sorted(
        ["label.npy", "pixel_0.npy", "Price (EUR).npy", "note é.values.npy", "note é.offsets.npy"]
    )
    sh = str(tmp_path / "sh")
    assert lovecraft("shard", str(src), "-o", sh, "--to", "memmap", "--num-shards", "2", "-q").exit_code == 0
    assert "part-00000-of-00002.Price (EUR).npy" in _check_names(sh)


def test_a_dataset_written_with_the_old_names_still_reads(tmp_path):
    """Readers find files from the manifest: a dataset of columns ``A`` and ``a`` written as
    ``A.npy`` and ``a.npy`` (as before, on a case-sensitive file system) reads and verifies."""
    src = tmp_path / "in.csv"
    src.write_text("A,a\n1,2\n3,4\n")
    out = str(tmp_path / "out")
    assert lovecraft("convert", str(src), "-o", out, "--to", "memmap", "-q").exit_code == 0
    m = manifest(out)
    for f in m["files"]:
        os.rename(os.path.join(out, f["path"]), os.path.join(out, f["column"] + ".npy"))
        f["path"] = f["column"] + ".npy"
    m.pop("memmap", None)
    for s in m["shards"]:
        s["files"] = [f["path"] for f in m["files"]]
    with open(os.path.join(out, "_manifest.json"), "w") as fh:
        json.dump(m, fh)
    assert sorted(os.listdir(out)) == ["A.npy", "_manifest.json", "a.npy"]
    assert lc.verify(out).lines() == []
    batch = next(iter(lc.open_dataset(out).batches(2)))
    assert (list(batch["A"]), list(batch["a"])) == ([1, 3], [2, 4])


_NAME = st.text(st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=90) | st.sampled_from(
    ["a", "A", "a.values", "a.offsets", "A.Values", ".", "..", "../x", "~", "~a", "%41", "é", "e\u0301", "ﬁ", "fi"]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(_NAME, min_size=1, max_size=6, unique=True), long=st.integers(0, 2))
def test_any_header_gets_distinct_files_that_np_load_reads(tmp_path_factory, names, long):
    """Arbitrary column names (any character, NUL, ``/`` and ``..`` included; some of 300 bytes),
    half text and half numbers: every file name is distinct (also folded), within 255 bytes,
    inside the dataset, and each column reads back from its files with np.load."""
    names = list(names)
    if long:
        names.append("é" * 150 + str(long))  # 302 bytes of UTF-8: the escape is cut and hashed
        names.append("é" * 150 + str(long) + "x")
    d = tmp_path_factory.mktemp("names")
    cols = {}
    for k, n in enumerate(names):
        cols[n] = [f"{k}:{i}" for i in range(3)] if k % 2 else [k * 10 + i for i in range(3)]
    table = pa.table({f"c{k}": pa.array(v) for k, v in enumerate(cols.values())}).rename_columns(list(cols))
    pq.write_table(table, str(d / "in.parquet"))
    out = str(d / "out")
    lc.convert([str(d / "in.parquet")], out, to="memmap", progress=False)
    assert _read_back(out) == cols
    assert lc.verify(out).lines() == []
    _check_names(out)
    shutil.rmtree(d)


def test_load_snippets_give_every_column_its_own_variable(tmp_path):
    """``inspect``'s numpy snippet ran: columns ``a`` (text) and ``a.values``, ``np`` and ``class``
    each get a variable of their own (``a_values`` twice, ``np = np.load`` and ``class = ...``
    broke the snippet)."""
    src = tmp_path / "in.csv"
    src.write_text("a,a.values,np,class\nx,1,2,3\ny,4,5,6\n")
    out = str(tmp_path / "out")
    assert lovecraft("convert", str(src), "-o", out, "--to", "memmap", "-q").exit_code == 0
    from lovecraft_convert.formats import get

    code = get("memmap").load_snippets(out, manifest(out))["numpy"]
    scope: dict = {}
    exec(code, scope)  # noqa: S102 - the snippet we print for users, run as they would
    assert [bytes(scope["a_values"][scope["a_offsets"][i] : scope["a_offsets"][i + 1]]) for i in range(2)] == [b"x", b"y"]  # fmt: skip
    assert list(scope["a_values_2"]) == [1, 4] and list(scope["np_2"]) == [2, 5] and list(scope["class_"]) == [3, 6]
