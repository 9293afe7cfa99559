"""NPZ input (``np.savez``, ``np.savez_compressed``): each array a column, read back with np.load
and pyarrow and compared with the arrays saved; stored members split into row parts for workers,
deflated ones stream; pickles, ragged lengths and damaged members are refused in one line."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft


def open_text(*parts: str) -> str:
    return Path(*parts).read_text()


def _arrays(n: int = 5000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "x": rng.standard_normal((n, 3, 2)).astype(np.float32),
        "label": rng.integers(0, 10, n).astype(np.uint8),
        "big_endian": np.arange(n, dtype=">i4"),
        "name": np.array([f"row {i} é" for i in range(n)]),
        "fortran": np.asfortranarray(rng.standard_normal((n, 4))),
    }


@pytest.mark.parametrize("compressed", [False, True], ids=["savez", "savez_compressed"])
@pytest.mark.parametrize("command", ["convert", "shard"])
def test_every_array_a_column(tmp_path, compressed, command):
    arrays = _arrays()
    if compressed:
        arrays.pop("fortran")  # refused there (below): a deflated member streams by rows
    src = str(tmp_path / "d.npz")
    (np.savez_compressed if compressed else np.savez)(src, **arrays)
    out = str(tmp_path / "out")
    if command == "shard":  # parts of 64 KiB: stored members are read as row ranges by two workers
        lc.shard(src, out, to="memmap", num_shards=3, workers=2, part_bytes=65536, progress=False)
    else:
        r = lovecraft(command, src, "-o", out, "--to", "memmap", "-q")
        assert r.exit_code == 0, r.stderr
    m = json.loads(open_text(out, "_manifest.json"))
    assert [f["name"] for f in m["schema"]] == list(arrays)
    got: dict[str, list] = {k: [] for k in arrays}
    for shard in m["shards"]:
        for path in shard["files"]:
            col = next(f["column"] for f in m["files"] if f["path"] == path)
            got[col].append(np.load(os.path.join(out, path)))
    for k, a in arrays.items():
        np.testing.assert_array_equal(np.concatenate(got[k]), a)
    assert lovecraft("verify", out, "--against", src).exit_code == 0


def test_to_parquet_and_a_projection(tmp_path):
    arrays = _arrays(100)
    src = str(tmp_path / "d.npz")
    np.savez(src, **arrays)
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "--columns", "name,label", "-q")
    assert r.exit_code == 0, r.stderr
    t = pq.read_table(out)
    assert t.column_names == ["name", "label"]
    assert t.column("name").to_pylist() == arrays["name"].tolist()
    assert t.column("label").to_pylist() == arrays["label"].tolist()
    r = lovecraft("convert", src, "-o", str(tmp_path / "o2"), "--to", "parquet", "--columns", "nope")
    assert r.exit_code == 2
    assert r.stderr == f"Error: --columns: no array 'nope' in {src}; arrays are x, label, big_endian, name, fortran\n"


def test_positional_arrays_and_inspect(tmp_path):
    src = str(tmp_path / "p.npz")
    np.savez_compressed(src, np.arange(4), np.ones((4, 2)))
    r = lovecraft("inspect", src)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith(f"{src}: npz, deflate-compressed inside, ")
    assert r.stdout.splitlines()[0].endswith(", 2 arrays")
    assert "column 'arr_0': int64" in r.stdout and "column 'arr_1': float64[2]" in r.stdout


def _bad(tmp_path, name: str, **arrays) -> str:
    src = str(tmp_path / name)
    np.savez(src, **arrays)
    return src


def test_refusals(tmp_path):
    cases = []
    src = _bad(tmp_path, "pickled.npz", ok=np.arange(2), obj=np.array([{"a": 1}, None], dtype=object))
    cases.append((src, f"{src}, member obj.npy: holds Python objects (dtype object); refusing to unpickle; "
                       "save it with a numeric or fixed-width string dtype"))  # fmt: skip
    src = _bad(tmp_path, "ragged.npz", a=np.arange(3), b=np.arange(4))
    cases.append((src, f"{src}: arrays have different numbers of rows (a: 3, b: 4); "
                       "convert arrays of one length together (--columns a,b)"))  # fmt: skip
    src = _bad(tmp_path, "scalar.npz", s=np.float64(3.0))
    cases.append((src, f"{src}, member s.npy: a 0-d array has no record axis; save it with at least one dimension"))
    src = str(tmp_path / "mixed.npz")
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("table.csv", "a,b\n1,2\n")
    cases.append((src, f"{src}, member table.csv: not a .npy array; an .npz holds only .npy members"))
    src = str(tmp_path / "fortran.npz")
    np.savez_compressed(src, f=np.asfortranarray(np.ones((3, 2))))
    cases.append((src, f"{src}, member f.npy: a Fortran-order array inside a compressed member cannot be "
                       "streamed by rows; save it with np.savez (uncompressed) or in C order"))  # fmt: skip
    src = str(tmp_path / "notzip.npz")
    Path(src).write_bytes(b"PK\x03\x04 not really a zip")
    cases.append((src, f"{src}: not a readable .npz (zip) file (File is not a zip file); check the file"))
    for src, message in cases:
        r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet")
        assert (r.exit_code, r.stderr) == (1, f"Error: {message}\n"), src


def test_a_damaged_deflated_member_is_named(tmp_path):
    src = str(tmp_path / "d.npz")
    np.savez_compressed(src, x=np.random.default_rng(0).standard_normal(200_000))
    data = bytearray(Path(src).read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the deflated data
    Path(src).write_bytes(bytes(data))
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet")
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {src}, member x.npy: ") and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.endswith("; re-create the file\n")
    assert not (tmp_path / "out").exists()


def test_a_member_inflating_past_the_limit_is_refused_before_reading(tmp_path):
    src = str(tmp_path / "zeros.npz")
    np.savez_compressed(src, z=np.zeros(10_000_000, dtype=np.float64))  # 80 MB of zeros, ~80 KB deflated
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet", "--max-expansion", "100")
    assert r.exit_code == 1
    assert r.stderr == (
        f"Error: {src}, member z.npy: inflates more than 100x its compressed size (decompression bomb?); "
        "if the file is genuine, raise the limit with --max-expansion\n"
    )
