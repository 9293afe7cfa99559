"""Bounded memory for the JSON array, NPZ and HDF5 inputs, proved under a hard limit: each input is
four times larger than a 256 MiB cgroup cap (``../shared/tools/memcap``) and converts to Parquet
with ``--max-memory 128MiB``; the rows and a sample of values are checked against what the test
wrote. The inputs are written in bounded memory too (a JSON array block by block, an NPZ member
through ``zipfile`` as a stream, HDF5 by row ranges). Slow (``make test-slow``); skipped with the
reason when memcap cannot make a cgroup or the disk is short."""

from __future__ import annotations

import json
import os
import shutil
import sys
import zipfile

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.conftest import SHARED, SUBPROCESS_ENV, memcapped, require_memcap

pytestmark = pytest.mark.slow

MEMCAP = os.path.join(SHARED, "tools", "memcap")
CAP_MIB = 256
INPUT_BYTES = 4 * CAP_MIB << 20
LOVECRAFT = os.path.join(os.path.dirname(sys.executable), "lovecraft")
COLS = 32  # float32 features per row (NPZ, HDF5)


@pytest.fixture(scope="module")
def memcap() -> str:
    return require_memcap()


@pytest.fixture(scope="module")
def base(memcap, tmp_path_factory):
    d = tmp_path_factory.mktemp("memcap_new")
    if shutil.disk_usage(d).free < 8 * 10**9:
        pytest.skip("needs 8 GB free for 1 GiB inputs and their outputs")
    return d


def _block(i: int, rows: int) -> np.ndarray:
    return np.arange(i, i + rows, dtype=np.float32)[:, None] + np.arange(COLS, dtype=np.float32)[None, :] / 64


def _json_array(d) -> tuple[str, int]:
    path = str(d / "big.json")
    records = [{"id": i, "text": f"document {i} " + "lorem ipsum " * (i % 40), "score": i / 7} for i in range(10_000)]
    block = ",\n".join(json.dumps(r) for r in records).encode()
    rows = 0
    with open(path, "wb") as f:
        f.write(b"[\n")
        while f.tell() < INPUT_BYTES:
            if rows:
                f.write(b",\n")
            f.write(block)
            rows += len(records)
        f.write(b"\n]\n")
    return path, rows


def _npz(d) -> tuple[str, int]:
    path = str(d / "big.npz")
    rows = INPUT_BYTES // (4 * COLS)
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z,
        z.open("x.npy", "w", force_zip64=True) as f,
    ):
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (rows, COLS)})
        for i in range(0, rows, 1 << 16):
            f.write(_block(i, min(1 << 16, rows - i)).tobytes())
    return path, rows


def _hdf5(d) -> tuple[str, int]:
    import h5py

    path = str(d / "big.h5")
    rows = INPUT_BYTES // (4 * COLS)
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", shape=(rows, COLS), dtype=np.float32, chunks=(4096, COLS), compression="gzip")
        y = f.create_dataset("y", shape=(rows,), dtype=np.int64, chunks=(1 << 16,))
        for i in range(0, rows, 1 << 16):
            n = min(1 << 16, rows - i)
            x[i : i + n] = _block(i, n)
            y[i : i + n] = np.arange(i, i + n)
    return path, rows


@pytest.mark.parametrize("kind", ["json", "npz", "hdf5"])
def test_a_large_input_converts_under_the_cap(base, kind):
    src, rows = {"json": _json_array, "npz": _npz, "hdf5": _hdf5}[kind](base)
    data = os.path.getsize(src) if kind == "json" else rows * COLS * 4  # NPZ, HDF5: compressed on disk
    assert data >= INPUT_BYTES
    out = str(base / f"out-{kind}")
    r, peak = memcapped(
        MEMCAP, CAP_MIB, [LOVECRAFT, "convert", src, "-o", out, "--to", "parquet", "--max-memory", "128MiB", "-q"],
        env=SUBPROCESS_ENV, timeout=3600,
    )  # fmt: skip
    print(f"\n{kind}: {data >> 20} MiB of data ({os.path.getsize(src) >> 20} MiB on disk), rc {r.returncode}, "
          f"peak {peak} MiB (cap {CAP_MIB})")  # fmt: skip
    assert r.returncode == 0, f"rc {r.returncode} (137: killed for memory): {r.stderr[-2000:]}"
    with open(os.path.join(out, "_manifest.json")) as f:
        assert json.load(f)["rows"] == rows
    pf = pq.ParquetFile(os.path.join(out, "data.parquet"))
    last = pf.read_row_group(pf.num_row_groups - 1).to_pylist()[-1]
    if kind == "json":
        assert last["id"] == 9_999 and last["score"] == 9_999 / 7
    else:
        np.testing.assert_array_equal(np.asarray(last["x"], np.float32), _block(rows - 1, 1)[0])
    shutil.rmtree(out)
    os.remove(src)
