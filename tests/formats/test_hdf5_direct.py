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
from lovecraft_convert.formats.hdf5.fletcher import fletcher32, fletcher32_rows


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


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 70),
    st.sampled_from([1, 2, 8, 510, 512, 4096, 8192, 9000, 16384, 16386]),
    st.sampled_from(["zero", "ones", "random"]),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_fletcher32_rows_is_fletcher32_of_each_row(count, nbytes, fill, seed, strided):
    """The checksums of many equal chunks at once (a wide table's), across the step of rows taken
    at once, chunks of whole 256-word rows, with a tail, or shorter, odd and large chunks (which
    fall back to one at a time), rows apart in a wider buffer (a group's chunks, each with room for
    its checksum after it), all-zero and all-0xFF rows; checked against HDF5's own filter."""
    full = {
        "zero": np.zeros((count, nbytes + 8), np.uint8),
        "ones": np.full((count, nbytes + 8), 255, np.uint8),
        "random": np.random.default_rng(seed).integers(0, 256, (count, nbytes + 8), dtype=np.uint8),
    }[fill]
    rows = full[:, :nbytes] if strided else np.ascontiguousarray(full[:, :nbytes])
    rows[count // 2] = 0
    got = fletcher32_rows(rows, step=7)
    assert got.dtype == np.uint32
    assert got.tolist() == [fletcher32(r) for r in rows]
    assert int(got[-1]) == _hdf5_fletcher32(rows[-1].tobytes())


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


def test_a_wide_table_written_in_groups_reads_back_through_h5py(tmp_path):
    """Columns of one dtype written together (a float64 group and an int64 group, with a text
    column written on its own), across chunk and batch boundaries: h5py reads every value, its
    fletcher32 filter checking every chunk, and verify passes."""
    import csv

    from tests.conftest import lovecraft

    rng = np.random.default_rng(8)
    rows = 9_003
    floats = rng.normal(size=(rows, 40))
    ints = rng.integers(-(2**50), 2**50, size=(rows, 20))
    src = tmp_path / "w.csv"
    with open(src, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([f"f{i}" for i in range(40)] + [f"i{i}" for i in range(20)] + ["name"])
        for r in range(rows):
            w.writerow([repr(float(x)) for x in floats[r]] + [int(x) for x in ints[r]] + [f"n{r % 13}"])
    out = tmp_path / "out"
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "hdf5", "--max-memory", "16MiB", "-q")
    assert r.exit_code == 0, r.stderr
    with h5py.File(out / "data.h5", "r") as f:
        assert f["f3"].chunks[0] < rows and f["f3"].fletcher32
        for i in range(40):
            assert np.array_equal(f[f"f{i}"][:], floats[:, i])
        for i in range(20):
            assert np.array_equal(f[f"i{i}"][:], ints[:, i])
        assert f["name"].asstr()[:].tolist() == [f"n{r % 13}" for r in range(rows)]
        # every dataset has its attributes (a group's are written at close, after its chunks)
        want = {"f0": ("fixed", "<f8"), "f39": ("fixed", "<f8"), "i7": ("fixed", "<i8"), "i19": ("fixed", "<i8")}
        for name, attrs in {**want, "name": ("string", "|u1")}.items():
            assert (f[name].attrs["kind"], f[name].attrs["dtype"]) == attrs, name
    v = lovecraft("verify", str(out), "--against", str(src), "-q")
    assert v.exit_code == 0, v.stderr


def test_grouped_chunks_through_the_library_calls_make_the_file_h5py_makes(tmp_path, monkeypatch):
    """A wide group's chunks are written through the HDF5 library h5py loaded, called with
    ctypes so that the GIL is free meanwhile (native.py): on Linux it is found, used for every
    block, and the file is byte for byte the one h5py's own calls make; read back, the values."""
    import sys

    from lovecraft_convert.formats.hdf5 import native
    from tests.conftest import lovecraft

    rng = np.random.default_rng(11)
    rows, cols = 25_001, 48  # three chunks of ~11,000 rows per column
    data = rng.integers(-999, 999, size=(rows, cols))
    src = tmp_path / "w.csv"
    with open(src, "w") as f:
        f.write(",".join(f"c{i}" for i in range(cols)) + "\n")
        np.savetxt(f, data, fmt="%d", delimiter=",")
    if sys.platform.startswith("linux"):
        assert native.library() is not None, native.refused()
    used, attributed = [], []
    real = native.Bound.write_chunks

    def counted(self, *a):
        used.append(a[2])
        if a[4] is not None:  # attributes, written with the last chunks
            attributed.extend(zip(a[0], a[4], strict=True))
        return real(self, *a)

    monkeypatch.setattr(native.Bound, "write_chunks", counted)
    # the datasets after the first are made by the C calls too
    made = []
    real_create = native.Bound.create_closed
    monkeypatch.setattr(native.Bound, "create_closed", lambda self, *a: made.append(a[0]) or real_create(self, *a))
    outs = {}
    for mode in ("native", "h5py"):
        if mode == "h5py":
            monkeypatch.setenv("LOVECRAFT_HDF5_NATIVE", "0")
        out = tmp_path / mode
        r = lovecraft("convert", str(src), "-o", str(out), "--to", "hdf5", "--max-memory", "16MiB", "-q")
        assert r.exit_code == 0, r.stderr
        outs[mode] = (out / "data.h5").read_bytes()
        if mode == "native" and native.library() is not None:
            assert native.refused() is None
            assert len(used) >= 2 and used[0] == 0  # every block, from the first chunk on
            assert made == [f"c{i}".encode() for i in range(1, cols)]
            assert attributed == [(f"c{i}".encode(), [(b"kind", b"fixed"), (b"dtype", b"<i8")]) for i in range(cols)]
        if mode == "h5py":
            assert native.refused() == "LOVECRAFT_HDF5_NATIVE=0"
            assert len(made) == cols - 1  # none more
    assert outs["native"] == outs["h5py"]
    with h5py.File(tmp_path / "native" / "data.h5", "r") as f:
        got = np.stack([f[f"c{i}"][:] for i in range(cols)], axis=1)
    assert np.array_equal(got, data)


def _wide_int_csv(path, rows: int, cols: int, seed: int) -> np.ndarray:
    data = np.random.default_rng(seed).integers(-999, 999, size=(rows, cols))
    with open(path, "w") as f:
        f.write(",".join(f"c{i}" for i in range(cols)) + "\n")
        np.savetxt(f, data, fmt="%d", delimiter=",")
    return data


def test_a_wide_groups_datasets_are_made_in_a_thread_and_make_the_same_file(tmp_path, monkeypatch):
    """A table whose columns all make one group: the datasets after the first are made in a thread
    of their own while the first chunks are gathered (Hdf5Thread.first), and the file is byte for
    byte the one made when they are made in the caller's thread first."""
    import threading

    from lovecraft_convert.formats.hdf5 import native
    from lovecraft_convert.formats.hdf5.direct import Hdf5Thread
    from tests.conftest import lovecraft

    data = _wide_int_csv(tmp_path / "w.csv", 25_001, 48, 12)
    threads = set()
    real_create = native.Bound.create_closed
    monkeypatch.setattr(
        native.Bound,
        "create_closed",
        lambda self, *a: threads.add(threading.current_thread().name) or real_create(self, *a),
    )
    outs = {}
    for mode in ("thread", "inline"):
        if mode == "inline":
            monkeypatch.setattr(Hdf5Thread, "first", lambda self, fn: fn())
        out = tmp_path / mode
        r = lovecraft("convert", str(tmp_path / "w.csv"), "-o", str(out), "--to", "hdf5", "--max-memory", "16MiB", "-q")
        assert r.exit_code == 0, r.stderr
        outs[mode] = (out / "data.h5").read_bytes()
        if mode == "thread" and native.library() is not None:
            assert threads == {"lovecraft-hdf5-create"}
    assert outs["thread"] == outs["inline"]
    with h5py.File(tmp_path / "thread" / "data.h5", "r") as f:
        assert np.array_equal(np.stack([f[f"c{i}"][:] for i in range(48)], axis=1), data)


def test_a_full_disk_while_the_datasets_are_made_in_a_thread(tmp_path, monkeypatch):
    """The thread's error is raised by the next HDF5 call: the run fails as for any full disk,
    naming the file, and leaves no output."""
    import errno

    from lovecraft_convert.formats.hdf5.writer import Hdf5Writer
    from tests.conftest import lovecraft

    _wide_int_csv(tmp_path / "w.csv", 25_001, 48, 13)
    real = Hdf5Writer._make_closed

    def full(self, made):
        real(self, made[:10])
        raise OSError(errno.ENOSPC, "No space left on device", self.path)

    monkeypatch.setattr(Hdf5Writer, "_make_closed", full)
    out = tmp_path / "out"
    r = lovecraft("convert", str(tmp_path / "w.csv"), "-o", str(out), "--to", "hdf5", "--max-memory", "16MiB", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {out}: no space left on device while writing data.h5; nothing was written; "
        "free space or choose another output\n",
    )
    assert not out.exists() and not list(tmp_path.glob(".out*"))


def test_calls_wait_for_the_first_thread_and_abort_too(tmp_path):
    """Hdf5Thread.first: every call after it waits for its thread; its error is raised by every
    call after (not once only); abort raises nothing and returns only once the thread has ended,
    so the file is never touched while it still calls HDF5."""
    import threading

    from lovecraft_convert.formats.hdf5.direct import Hdf5Thread

    io = Hdf5Thread(str(tmp_path / "x.h5"), 1 << 20, threaded=False)
    order, gate = [], threading.Event()
    io.first(lambda: gate.wait() and order.append("first"))
    caller = threading.Thread(target=io.add, args=(lambda: order.append("call"),))
    caller.start()
    caller.join(0.2)
    assert caller.is_alive() and order == []  # held until the first thread ends
    gate.set()
    caller.join(5)
    assert order == ["first", "call"]

    io.first(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        io.add(lambda: order.append("never"))
    with pytest.raises(ZeroDivisionError):
        io.flush()
    io.abort()
    assert order == ["first", "call"]

    io = Hdf5Thread(str(tmp_path / "y.h5"), 1 << 20, threaded=False)
    gate = threading.Event()
    io.first(gate.wait)
    aborting = threading.Thread(target=io.abort)
    aborting.start()
    aborting.join(0.2)
    assert aborting.is_alive()  # waits for the thread
    gate.set()
    aborting.join(5)
    assert not aborting.is_alive()
