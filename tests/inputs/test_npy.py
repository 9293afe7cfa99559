"""NPY input: arrays with an axis of length 0 (issue 38, point 6). ``np.save(np.zeros((5, 0)))`` to
Parquet or HDF5, and headers claiming ``(2**60, 0)`` or ``(0, 2**60)`` to every format, ended in a
traceback. What a format can hold is written and read back with its own reader at the source's
shape; the rest is refused in one line naming the file and the axis, without allocating or
looping per claimed row."""

from __future__ import annotations

import io
import os

import h5py
import numpy as np
import pytest

import lovecraft_convert as lc
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
    days = np.array(["2020-01-01", "2021-02-03"], dtype="datetime64[D]")
    np.save(dt, days)
    r = lovecraft("convert", str(dt), "-o", str(tmp_path / "o"), "--to", "hdf5", "-q")
    assert r.exit_code == 0, r.stderr  # (a date column now: int64 days, see the test below)
    with h5py.File(tmp_path / "o" / "data.h5") as f:
        assert f["dt"][:].tolist() == days.astype(np.int64).tolist()


@pytest.mark.parametrize("to", ["parquet", "hdf5", "memmap", "tfrecord"])
def test_datetime64_and_timedelta64_are_times_in_every_format(tmp_path, to):
    """NumPy datetime64 and timedelta64 arrays were written as they were, then called damaged by
    verify, inspect and open_dataset ('<M8[s]' is no dtype a manifest holds); HDF5 and TFRecord
    refused them. They are times now, as Arrow's are: int64 counts of their unit, NaT missing,
    Parquet's timestamp/duration types, the loaders' datetime64 (found by an outside trial)."""
    import pyarrow.parquet as pq

    ts = np.arange(6).astype("datetime64[s]")
    ts[2] = np.datetime64("NaT")
    cols = {"ts": ts, "td": np.arange(6).astype("timedelta64[ms]"), "day": np.arange(6).astype("datetime64[D]")}
    for name, a in cols.items():
        np.save(tmp_path / f"{name}.npy", a)
    out = tmp_path / "o"
    srcs = [str(tmp_path / f"{n}.npy") for n in cols]
    r = lovecraft("convert", *srcs, "-o", str(out), "--to", to, "-q")
    assert r.exit_code == 0, r.stderr
    got = next(iter(lc.open_dataset(str(out)).batches(6)))
    for name, a in cols.items():
        assert got[name].dtype == a.dtype and np.array_equal(got[name].view("i8"), a.view("i8")), name
    assert lovecraft("verify", str(out), "--against", *srcs).exit_code == 0
    assert lovecraft("inspect", str(out)).exit_code == 0
    if to == "parquet":
        t = pq.read_table(out / "data.parquet")
        assert str(t.schema.field("ts").type) == "timestamp[ms]" and t["ts"].null_count == 1  # (Parquet has no seconds)
        assert str(t.schema.field("td").type) == "duration[ms]" and str(t.schema.field("day").type) == "date32[day]"


@pytest.mark.parametrize(
    "dtype, message",
    [
        ("complex64", "holds complex numbers (complex64), which no output format holds; save the real and imaginary "
         "parts as two .npy files (a.real, a.imag)"),
        ("datetime64[h]", "holds datetime64[h] values, which the formats' times do not hold (one datetime64 per row, "
         "in s, ms, us or ns, or days); save it as a 1-d array in one of those units (a.astype('datetime64[s]'))"),
        ("timedelta64[D]", "holds timedelta64[D] values, which the formats' times do not hold (one timedelta64 per "
         "row, in s, ms, us or ns); save it as a 1-d array in one of those units (a.astype('timedelta64[s]'))"),
    ],
)  # fmt: skip
def test_numbers_no_format_holds_are_one_line(tmp_path, dtype, message):
    src = tmp_path / "a.npy"
    np.save(src, np.arange(4).astype(dtype))
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet")
    assert (r.exit_code, r.stderr) == (1, f"Error: {src}: {message}\n")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("to", ["parquet", "hdf5", "memmap"])
def test_fixed_width_text_keeps_its_nuls_and_loads_back(tmp_path, to):
    """pyarrow's conversion ended a NumPy fixed-width value at its first NUL (b'a\\x00b' became
    b'a' in Parquet, exit 0, verify ok); and an S/U column written to Parquet or HDF5 could not be
    loaded ('holds object, the schema says bytes32 ... the manifest was edited'). Found by an
    outside trial."""
    import pyarrow.parquet as pq

    b = np.array([b"a\x00b" + bytes([k]) for k in range(1, 5)] + [b"", b"\x00\x00z"], dtype="S4")
    u = np.array(["x\x00y", "\x00x", "é\x00", "ab", "", "ü"], dtype="U3")
    if to == "hdf5":  # HDF5 strings cannot hold a NUL (refused in one line): NUL-free text there
        u = np.array(["xy", "x", "é", "ab", "", "ü"], dtype="U3")
    np.save(tmp_path / "b.npy", b)
    np.save(tmp_path / "u.npy", u)
    out = tmp_path / "o"
    srcs = [str(tmp_path / "b.npy"), str(tmp_path / "u.npy")]
    r = lovecraft("convert", *srcs, "-o", str(out), "--to", to, "-q")
    assert r.exit_code == 0, r.stderr
    got = next(iter(lc.open_dataset(str(out)).batches(6)))
    assert got["b"].dtype == b.dtype and got["b"].tolist() == b.tolist()
    assert got["u"].dtype == u.dtype and got["u"].tolist() == u.tolist()
    assert lovecraft("verify", str(out), "--against", *srcs).exit_code == 0
    if to == "parquet":  # pyarrow reads the values NumPy holds
        t = pq.read_table(out / "data.parquet")
        assert t["b"].to_pylist() == b.tolist() and t["u"].to_pylist() == u.tolist()


def test_a_row_larger_than_the_memory_allows_is_one_line(tmp_path):
    """One NumPy row of 72 MB was taken at --max-memory 256MiB, and memory grew with it (a 320 MB
    row peaked at 947 MiB; an outside trial): a row must fit in 1/16 of --max-memory, as a CSV
    record does. Given the memory, it converts, and its HDF5 output verifies (a one-row chunk of
    more than 64 MiB was refused by verify)."""
    src = str(tmp_path / "big.npy")
    a = np.lib.format.open_memmap(src, mode="w+", dtype="<f8", shape=(2, 9_000_000))
    a[:] = 1.5
    a.flush()
    del a
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}: a row holds 72000000 bytes, more than --max-memory allows (a row must fit in 1/16 of "
        "it); raise --max-memory to 1099MiB or more\n",
    )
    assert not os.path.exists(tmp_path / "o")
    out = str(tmp_path / "h")
    assert lovecraft("convert", src, "-o", out, "--to", "hdf5", "--max-memory", "1100MiB", "-q").exit_code == 0
    r = lovecraft("verify", out)
    assert r.exit_code == 0, r.stdout
