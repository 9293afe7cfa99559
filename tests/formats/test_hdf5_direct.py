"""HDF5 chunks written by us (``write_direct_chunk``) carry the fletcher32 HDF5 itself computes,
and read back through h5py, which checks every checksum, equal to the source; a changed byte in a
chunk is caught by h5py, not only by our manifest."""

from __future__ import annotations

import io
import os

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lovecraft_convert as lc
from lovecraft_convert.formats.hdf5.fletcher import fletcher32


def _hdf5_fletcher32(data: bytes) -> int:
    """The checksum HDF5's own filter appends to one chunk holding ``data``."""
    a = np.frombuffer(data, np.uint8)
    bio = io.BytesIO()
    with h5py.File(bio, "w") as f:
        d = f.create_dataset("x", data=a, chunks=(len(a),), fletcher32=True)
        _, raw = d.id.read_direct_chunk((0,))
    return int.from_bytes(raw[-4:], "little")


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=5000))
def test_fletcher32_is_hdf5s(data):
    assert fletcher32(data) == _hdf5_fletcher32(data)


@pytest.mark.parametrize("n", [1, 255, 256, 257, 4096 * 3 + 1, (1 << 22) + 7, 1 << 23])
@pytest.mark.parametrize("fill", ["zero", "ones", "random"])
def test_fletcher32_edges(n, fill):
    """Lengths around the 256-word rows and the 2**21-word segments; all-zero data (sums 0) and
    all-0xFF data (sums that fold to 65535, never 0)."""
    data = {
        "zero": bytes(n),
        "ones": b"\xff" * n,
        "random": np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes(),
    }[fill]
    assert fletcher32(data) == _hdf5_fletcher32(data)


@pytest.mark.parametrize(
    "dtype,shape",
    [("bool", ()), ("int8", (3,)), ("uint16", (2, 3)), ("float64", ()), ("float32", (64,)), ("int64", (5,))],
)
def test_npy_round_trip_through_h5py(tmp_path, dtype, shape):
    """Odd chunk sizes (int8 x 3), multi-dimensional rows, a zero-padded edge chunk; several
    batches that split chunks (--max-memory small)."""
    rng = np.random.default_rng(3)
    rows = 50_001
    a = (
        (rng.normal(scale=100, size=(rows, *shape)) > 0)
        if dtype == "bool"
        else rng.normal(scale=100, size=(rows, *shape)).astype(dtype)
    )
    src = tmp_path / "x.npy"
    np.save(src, a)
    out = tmp_path / "out"
    lc.convert([str(src)], str(out), to="hdf5", max_memory="16MiB", progress=False)
    with h5py.File(out / "data.h5", "r") as f:
        d = f["x"]
        assert d.fletcher32 and d.compression is None
        assert d.shape == a.shape and d.dtype == a.dtype
        assert np.array_equal(d[:], a)  # h5py checks every chunk's fletcher32 on the way


def test_a_changed_byte_is_caught_by_hdf5(tmp_path):
    a = np.arange(1_000_000, dtype=np.float32)
    src = tmp_path / "x.npy"
    np.save(src, a)
    out = tmp_path / "out"
    lc.convert([str(src)], str(out), to="hdf5", progress=False)
    path = out / "data.h5"
    with h5py.File(path, "r") as f:
        d = f["x"]
        info = d.id.get_chunk_info(1)  # a chunk in the middle of the data
        offset, rows = info.byte_offset, d.chunks[0]
    with open(path, "r+b") as fh:
        fh.seek(offset + 10)
        b = fh.read(1)
        fh.seek(offset + 10)
        fh.write(bytes([b[0] ^ 0x01]))
    with h5py.File(path, "r") as f:
        d = f["x"]
        assert np.array_equal(d[:rows], a[:rows])  # the first chunk is intact
        with pytest.raises(OSError):
            d[rows : 2 * rows]
    assert os.path.getsize(path) > a.nbytes
