"""NPY input: arrays with an axis of length 0 (issue 38, point 6). ``np.save(np.zeros((5, 0)))`` to
Parquet or HDF5, and headers claiming ``(2**60, 0)`` or ``(0, 2**60)`` to every format, ended in a
traceback. What a format can hold is written and read back with its own reader at the source's
shape; the rest is refused in one line naming the file and the axis, without allocating or
looping per claimed row."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

from tests.conftest import leftovers, lovecraft
from tests.readback import READERS

FORMATS = ["memmap", "hdf5", "parquet", "tfrecord"]
HOLDS_ZERO_WIDTH = ["memmap", "hdf5", "tfrecord"]


def _header(path, shape: tuple, descr: str = "<f8") -> str:
    with open(path, "wb") as f:
        np.lib.format.write_array_header_2_0(f, {"descr": descr, "fortran_order": False, "shape": shape})
    return str(path)


@pytest.mark.parametrize("shape,dtype", [((5, 0), np.float64), ((5, 0, 3), np.int16), ((7, 2, 0), np.float32)])
@pytest.mark.parametrize("to", HOLDS_ZERO_WIDTH)
def test_a_zero_width_axis_is_written_where_the_format_holds_it(tmp_path, to, shape, dtype):
    src = str(tmp_path / "x.npy")
    np.save(src, np.zeros(shape, dtype=dtype))
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", to, "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    got = np.asarray(READERS[to](out)["x"])
    assert got.shape == shape  # np.load, h5py, tf.data: rows of no values, as many as the source
    assert lovecraft("verify", out, "-q").exit_code == 0


def test_a_zero_width_column_to_parquet_is_one_line(tmp_path):
    src = str(tmp_path / "x.npy")
    np.save(src, np.zeros((5, 0)))
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet")
    assert r.exit_code == 1
    assert r.stderr == (
        f"Error: {src}, column 'x': rows of shape (0,) hold no values (axis 1 has length 0), which Parquet cannot "
        "hold: a fixed-size list has at least one value; write memmap, hdf5 or tfrecord, or leave the column out\n"
    )
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("to", FORMATS)
def test_a_header_claiming_2_60_rows_of_nothing_is_one_line(tmp_path, to):
    f8 = _header(tmp_path / "f8.npy", (2**60, 0))
    r = lovecraft("convert", f8, "-o", str(tmp_path / "o1"), "--to", to)
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {f8}: .npy header declares shape (1152921504606846976, 0) of float64: axis 0 "
        "(1152921504606846976) is beyond what NumPy can address; the file is corrupt or hostile; re-create it\n",
    )
    u1 = _header(tmp_path / "u1.npy", (2**60, 0), "|u1")  # within NumPy's limit: bounded by the file's size
    r = lovecraft("convert", u1, "-o", str(tmp_path / "o2"), "--to", to)
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {u1}: the header declares 1152921504606846976 rows of shape (0,) (axis 1 has length 0: rows of "
        "no bytes), more rows than the input has bytes (128); re-create the file; rows that hold no values are "
        "read up to one per byte of the input\n",
    )
    assert leftovers(tmp_path) == [] and not os.path.exists(tmp_path / "o1")


@pytest.mark.parametrize("to", FORMATS)
def test_a_header_claiming_0_rows_of_2_60_values_is_one_line(tmp_path, to):
    src = _header(tmp_path / "z.npy", (0, 2**60))
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", to)
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}: .npy header declares shape (0, 1152921504606846976) of float64: axis 1 "
        "(1152921504606846976) is beyond what NumPy can address; the file is corrupt or hostile; re-create it\n",
    )
    r = lovecraft("inspect", src)
    assert r.exit_code == 1 and r.stderr.count("\n") == 1


def test_zero_byte_rows_beside_a_real_column_are_bounded_by_it(tmp_path):
    """Only when every input's rows are empty is the count bounded by the inputs' bytes: a
    zero-width column beside a real one has the real one's rows."""
    a, b = str(tmp_path / "a.npy"), str(tmp_path / "b.npy")
    np.save(a, np.zeros((1000, 0), dtype=np.float32))
    np.save(b, np.arange(1000, dtype=np.int64))
    out = str(tmp_path / "out")
    r = lovecraft("convert", a, b, "-o", out, "--to", "memmap", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    assert np.load(os.path.join(out, "a.npy")).shape == (1000, 0)
    np.testing.assert_array_equal(np.load(os.path.join(out, "b.npy")), np.arange(1000))


def test_a_zero_width_array_saved_by_numpy_reads_as_numpy_wrote_it(tmp_path):
    buf = io.BytesIO()
    np.save(buf, np.zeros((3, 0), dtype=np.uint8))
    src = tmp_path / "x.npy"
    src.write_bytes(buf.getvalue())
    r = lovecraft("inspect", str(src))
    assert r.exit_code == 0 and "rows: 3" in r.stdout and "parquet   cannot hold these columns" in r.stdout


@pytest.mark.parametrize("to", FORMATS)
def test_a_header_claiming_no_rows_of_2_60_bytes_is_empty(tmp_path, to):
    """(0, 2**60) of uint8 is within NumPy's limit: it reached the HDF5 and Parquet writers' chunk
    and list shapes (tracebacks). No rows is an empty input, whatever its rows claim."""
    src = _header(tmp_path / "z.npy", (0, 2**60), "|u1")
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", to)
    assert (r.exit_code, r.stderr) == (1, f"Error: {src}: empty input (no records); check the file\n")
    assert leftovers(tmp_path) == [] and not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("shape", [(3, 0, 2**40), (3, 2**31, 0)])
@pytest.mark.parametrize("to", HOLDS_ZERO_WIDTH)
def test_rows_of_no_values_with_a_long_axis_are_written(tmp_path, to, shape):
    """HDF5 chunked such rows by their own shape: a chunk axis of 2**40, or 2**31 elements, which
    HDF5 refuses (a traceback); a column of no values is chunked by 1 on every row axis."""
    src = _header(tmp_path / "x.npy", shape, "|u1")
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", to, "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    assert np.asarray(READERS[to](out)["x"]).shape == shape
    assert lovecraft("verify", out, "-q").exit_code == 0


def _npz(path, shape: tuple, descr: str = "|u1") -> str:
    import zipfile

    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", buf.getvalue())
    return str(path)


@pytest.mark.parametrize("to", FORMATS)
def test_npz_members_claiming_rows_of_nothing_are_one_line(tmp_path, to):
    """An .npz member is an .npy header too: (2**60, 0) looped on its rows without end (memmap,
    HDF5, TFRecord) and (0, 2**60) ended in tracebacks (HDF5, Parquet)."""
    many = _npz(tmp_path / "many.npz", (2**60, 0))
    r = lovecraft("convert", many, "-o", str(tmp_path / "o1"), "--to", to)
    size = os.path.getsize(many)
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {many}, member x.npy: the header declares 1152921504606846976 rows of shape (0,) (axis 1 has "
        f"length 0: rows of no bytes), more rows than the input has bytes ({size}); re-create the file; rows that "
        "hold no values are read up to one per byte of the input\n",
    )
    none = _npz(tmp_path / "none.npz", (0, 2**60))
    r = lovecraft("convert", none, "-o", str(tmp_path / "o2"), "--to", to)
    assert (r.exit_code, r.stderr) == (1, f"Error: {none}: empty input (no records); check the file\n")
    assert leftovers(tmp_path) == []


def test_fixed_width_bytes_and_dates_are_named_as_numpy_spells_them(tmp_path):
    """inspect showed an S6 column as 'bytes48' (NumPy's name counts bits); HDF5's refusal of a
    datetime64 column named no file."""
    import json

    s6 = tmp_path / "s6.npy"
    np.save(s6, np.array([b"abc", b"defghi"], dtype="S6"))
    r = lovecraft("inspect", str(s6), "-q")
    assert r.exit_code == 0 and "column 's6': S6\n" in r.stdout, r.stdout
    r = lovecraft("inspect", str(s6), "-q", "--json")
    assert json.loads(r.stdout)["columns"][0]["type"] == "S6"
    dt = tmp_path / "dt.npy"
    np.save(dt, np.array(["2020-01-01", "2021-02-03"], dtype="datetime64[D]"))
    r = lovecraft("convert", str(dt), "-o", str(tmp_path / "o"), "--to", "hdf5")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {dt}, column 'dt' has dtype datetime64[D], which HDF5 cannot hold; write it to memmap or parquet\n",
    )
    assert not (tmp_path / "o").exists()
