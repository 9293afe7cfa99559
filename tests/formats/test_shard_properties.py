"""Property-based round trips through ``--to mds`` and ``--to litdata``: generated NPY columns (every
number dtype, float16, bools, shapes, NaN, infinities, -0.0, subnormals, int64's limits, some past a
1 MiB batch) written, then decoded two ways and compared bit for bit with the source: by a reader
written here from the formats' layouts (the table, MDS's configuration, litdata's serializers;
struct and NumPy only, nothing of lovecraft), and by ``open_dataset``. WebDataset's round trips are
in tests/formats/test_properties.py (read with Python's tarfile). The peers' own readers read every
column kind in test_mds.py and test_litdata.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

import lovecraft_convert as lc
from tests.formats.test_properties import SETTINGS, SMALL_BATCHES, _assert_same_values, npy_columns

LITDATA_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
                  "float64", "complex64", "complex128", "bool"]  # fmt: skip


def _items(path: Path):
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data)
    offsets = struct.unpack_from(f"<{count + 1}I", data, 4)
    assert offsets[-1] == len(data)
    return [data[offsets[i] : offsets[i + 1]] for i in range(count)]


def read_mds(out: str) -> dict[str, list]:
    index = json.loads(Path(out, "index.json").read_text())
    cols: dict[str, list] = {}
    for shard in index["shards"]:
        names, encs, sizes = shard["column_names"], shard["column_encodings"], shard["column_sizes"]
        assert all(s is not None for s in sizes)  # numbers only: every column of a fixed size
        for item in _items(Path(out, shard["raw_data"]["basename"])):
            at = 0
            for name, enc, size in zip(names, encs, sizes, strict=True):
                parts = enc.split(":")
                dtype = parts[1] if parts[0] == "ndarray" else enc
                shape = tuple(int(x) for x in parts[2].split(",")) if parts[0] == "ndarray" else ()
                cols.setdefault(name, []).append(
                    np.frombuffer(item[at : at + size], "<" + np.dtype(dtype).str[1:]).reshape(shape)
                )
                at += size
            assert at == len(item)
    return cols


def read_litdata(out: str) -> dict[str, list]:
    index = json.loads(Path(out, "index.json").read_text())
    formats = index["config"]["data_format"]
    names = json.loads(json.loads(index["config"]["data_spec"])[1]["context"])
    cols: dict[str, list] = {}
    for chunk in index["chunks"]:
        for item in _items(Path(out, chunk["filename"])):
            sizes = struct.unpack_from(f"<{len(formats)}I", item)
            at = 4 * len(formats)
            for name, fmt, size in zip(names, formats, sizes, strict=True):
                leaf = item[at : at + size]
                at += size
                if fmt == "int":
                    v = np.array(struct.unpack("<q", leaf)[0])
                elif fmt == "float":
                    v = np.frombuffer(leaf, "<f8")[0]
                elif fmt == "bool":
                    v = np.array(leaf == b"\x01")
                elif fmt == "numpy":
                    code, ndim = struct.unpack_from("<2I", leaf)
                    dims = struct.unpack_from(f"<{ndim}I", leaf, 8)
                    v = np.frombuffer(leaf[8 + 4 * ndim :], np.dtype(LITDATA_DTYPES[code]).newbyteorder("<")).reshape(
                        dims
                    )
                else:
                    v = np.frombuffer(leaf, np.dtype(LITDATA_DTYPES[int(fmt.split(":")[1])]).newbyteorder("<"))
                cols.setdefault(name, []).append(v)
            assert at == len(item)
    return cols


@pytest.mark.parametrize("fmt", ["mds", "litdata"])
@SETTINGS
@given(cols=npy_columns())
def test_npy_roundtrip(tmp_path_factory, fmt, cols):
    d = tmp_path_factory.mktemp("p")
    paths = []
    for name, a in cols.items():
        np.save(d / f"{name}.npy", a)
        paths.append(str(d / f"{name}.npy"))
    out = str(d / "out")
    lc.convert(paths, out, to=fmt, progress=False, max_memory=SMALL_BATCHES)
    got = (read_mds if fmt == "mds" else read_litdata)(out)
    ds = lc.open_dataset(out)
    ours = ds.take(np.arange(len(ds)))
    for name, a in cols.items():
        here = np.stack(got[name]).reshape(a.shape)
        if a.dtype == np.bool_ and fmt == "mds":  # MDS has no bool: uint8 0 or 1
            assert here.dtype == np.uint8
            here = here.astype(np.bool_)
        _assert_same_values(here.astype(here.dtype.newbyteorder("=")), a)
        _assert_same_values(ours[name], a)
