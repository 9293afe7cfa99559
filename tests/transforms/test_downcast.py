"""--dtype float16: values, and the manifest's per-column report, checked against NumPy directly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.conftest import lovecraft
from tests.readback import manifest, read_back


def _source(tmp_path):
    rng = np.random.default_rng(3)
    a = rng.normal(scale=100, size=(2000, 3)).astype(np.float32)
    a[5, 1] = 1e-9  # flushes to zero in float16
    a[6, 0] = np.nan
    a[7, 2] = -1e5  # overflows
    a[8, 0] = 9e4  # overflows
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", np.arange(2000, dtype=np.int32))  # not floating: untouched
    return a


def _expected(a):
    with np.errstate(over="ignore"):
        h = a.astype(np.float16)
    over = np.isinf(h) & np.isfinite(a)
    h = h.copy()
    h[over] = np.sign(a[over]) * np.finfo(np.float16).max
    ok = np.isfinite(a) & ~over
    err = np.abs(h.astype(np.float32) - a)[ok]
    rel = (err / np.abs(a[ok]))[np.abs(a[ok]) > 0]
    return h, {
        "overflow": int(over.sum()),
        "clipped": int(over.sum()),
        "flushed_to_zero": int(((h == 0) & (a != 0)).sum()),
        "nan": int(np.isnan(a).sum()),
        "max_abs_error": float(err.max()),
        "max_rel_error": float(rel.max()),
    }


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet"])
def test_clip_report(tmp_path, fmt):
    a = _source(tmp_path)
    out = str(tmp_path / "out")
    r = lovecraft(
        "convert",
        str(tmp_path / "a.npy"),
        str(tmp_path / "b.npy"),
        "-o",
        out,
        "--to",
        fmt,
        "--dtype",
        "float16",
        "--on-overflow",
        "clip",
        "-q",
    )
    assert r.exit_code == 0, r.stderr
    want, report = _expected(a)
    got = read_back(out, fmt)
    assert np.asarray(got["a"]).dtype == np.float16
    np.testing.assert_array_equal(np.asarray(got["a"]), want)
    assert np.asarray(got["b"]).dtype == np.int32
    m = manifest(out)
    rep = m["float16"]["a"]
    for k in ("overflow", "clipped", "flushed_to_zero", "nan"):
        assert rep[k] == report[k], k
    assert rep["max_abs_error"] == pytest.approx(report["max_abs_error"], rel=1e-6)
    assert rep["max_rel_error"] == pytest.approx(report["max_rel_error"], rel=1e-6)
    assert "b" not in m["float16"]
    assert [f["dtype"] for f in m["schema"]] == ["<f2", "<i4"]


def test_overflow_error_names_column_and_row(tmp_path):
    _source(tmp_path)
    out = tmp_path / "out"
    r = lovecraft("convert", str(tmp_path / "a.npy"), "-o", str(out), "--to", "memmap", "--dtype", "float16", "-q")
    assert r.exit_code == 1
    assert r.stderr == (
        f"Error: {tmp_path}/a.npy, row 8, column 'a': value -100000.0 overflows float16 (max 65504.0); "
        "scale the data, keep a wider type, or pass --on-overflow clip\n"
    )
    assert not out.exists()


def test_csv_float16_column_type(tmp_path):
    (tmp_path / "d.csv").write_text("x,y\n1.5,2\n70000,3\n")
    out = tmp_path / "out"
    r = lovecraft(
        "convert", str(tmp_path / "d.csv"), "-o", str(out), "--to", "parquet", "--column-type", "x=float16", "-q"
    )
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {tmp_path}/d.csv, row 2, column 'x': value 70000.0 overflows float16")
    r = lovecraft(
        "convert",
        str(tmp_path / "d.csv"),
        "-o",
        str(out),
        "--to",
        "parquet",
        "--column-type",
        "x=float16",
        "--on-overflow",
        "clip",
        "-q",
    )
    assert r.exit_code == 0
    got = read_back(str(out), "parquet")
    assert got["x"].dtype == np.float16 and got["x"].tolist() == [1.5, 65504.0]
    assert got["y"].dtype == np.int64


@settings(max_examples=200, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        st.integers(1, 300),
        elements=st.floats(-65504, 65504, width=32)
        | st.floats(-(2.0**-13), 2.0**-13, width=32)
        | st.sampled_from([0.0, -0.0]),
    )
)
def test_fast_float16_cast_is_bit_exact(x):
    """Our integer float32 -> float16 path equals NumPy's cast bit for bit, errors included."""
    from lovecraft_convert.transforms.downcast import DowncastStats, _f32_to_f16

    out = np.empty(x.shape, np.float16)
    st_ = DowncastStats("float16")
    _f32_to_f16(x, np.abs(x), out, st_)
    want = x.astype(np.float16)
    assert np.array_equal(out.view(np.uint16), want.view(np.uint16))
    err = np.abs(want.astype(np.float32) - x)
    assert st_.max_abs_error == float(err.max())
    assert st_.flushed_to_zero == int(((want == 0) & (x != 0)).sum())


# --------------------------------------------------------------------------------------------
# the whole downcast, as the writers call it: every value class, every path
# --------------------------------------------------------------------------------------------

F16_MAX = 65504.0
SUB = 1 << 18  # downcast's step; arrays of 4 steps or more are split over two threads


def _numpy_f16(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NumPy's cast, with overflow (a finite value that became inf) clipped: (result, overflowed)."""
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16)
    over = np.isinf(h) & np.isfinite(x)
    h[over] = np.where(x[over] > 0, F16_MAX, -F16_MAX).astype(np.float16)
    return h, over


special_f32 = (
    st.floats(65504, 65536, width=32)  # the band: below 65520 rounds to 65504, from 65520 overflows
    | st.floats(-65536, -65504, width=32)
    | st.floats(width=32)  # anything, NaN and inf included
    | st.floats(-(2.0**-13), 2.0**-13, width=32)  # float16's subnormals and the flush to zero
    | st.sampled_from([0.0, -0.0, float("nan"), float("inf"), float("-inf"), 65519.996, 65520.0, 2.0**-25])
)


@settings(max_examples=60, deadline=None)
@given(
    specials=st.lists(st.tuples(st.integers(0, 10**9), special_f32), max_size=12),
    size=st.sampled_from([1, 7, 300, SUB - 1, SUB + 3, 4 * SUB + 5]),
    seed=st.integers(0, 2**16),
)
def test_downcast_is_numpy_bit_for_bit_on_every_path(specials, size, seed):
    """``downcast_array`` (the fast path for clean steps, the careful one for steps with NaN, inf or
    overflow, two threads for large arrays) equals NumPy's cast bit for bit, overflow clipped,
    with every figure of the report recomputed here."""
    from lovecraft_convert.transforms.downcast import DowncastStats, downcast_array

    x = (np.random.default_rng(seed).standard_normal(size) * 300).astype(np.float32)
    for pos, v in specials:
        x[pos % size] = v
    st_ = DowncastStats("float16")
    got = downcast_array(x, np.dtype(np.float16), st_, "clip", lambda i: ("src.npy", "x", i, i))
    want, over = _numpy_f16(x)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))  # NaN bits and -0.0 included
    finite = np.isfinite(x) & ~over
    with np.errstate(invalid="ignore"):
        err = np.abs(want.astype(np.float32) - x)[finite]
    rel = err[np.abs(x[finite]) > 0] / np.abs(x[finite][np.abs(x[finite]) > 0])
    assert (st_.values, st_.nan, st_.overflow, st_.clipped) == (
        size,
        int(np.isnan(x).sum()),
        int(over.sum()),
        int(over.sum()),
    )
    assert st_.flushed_to_zero == int(((want == 0) & (x != 0) & ~np.isnan(x)).sum())
    assert st_.max_abs_error == (float(err.max()) if err.size else 0.0)
    assert st_.max_rel_error == (float(rel.max()) if rel.size else 0.0)
    if over.any():  # without clip: refused at the first overflowing value, named by its index
        first = int(np.flatnonzero(over)[0])
        with pytest.raises(
            Exception, match=rf"^src\.npy, row {first}, column 'x': value .* overflows float16 \(max 65504\.0\)"
        ):
            downcast_array(x, np.dtype(np.float16), DowncastStats("float16"), "error", lambda i: ("src.npy", "x", i, i))


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord"])
def test_clip_end_to_end_on_fast_and_careful_steps(tmp_path, fmt):
    """1.2 M values (more than 4 steps: two threads): most steps are clean and take the fast
    integer path, a few hold NaN, inf, overflow, the rounding band or subnormals; the files hold
    NumPy's rounding bit for bit and the manifest's report matches a count made here."""
    rng = np.random.default_rng(11)
    a = (rng.standard_normal((300_000, 4)) * 1000).astype(np.float32)
    a[10, 0], a[11, 1], a[12, 2], a[13, 3] = np.nan, np.inf, -7e4, 65519.0  # step 0: careful
    a[SUB // 4 + 5, 0] = -65530.0  # step 1 (4 values a row): rounds past the max, clipped
    a[2 * SUB // 4 + 9, 2] = 3e-8  # step 2: a subnormal, but clean: fast path
    a[3 * SUB // 4 + 1, 1] = -0.0
    a[-1, 3] = 65504.0  # the last step: in range exactly
    src = tmp_path / "a.npy"
    np.save(src, a)
    out = str(tmp_path / "out")
    r = lovecraft("convert", str(src), "-o", out, "--to", fmt, "--dtype", "float16", "--on-overflow", "clip", "-q")
    assert r.exit_code == 0, r.stderr
    want, over = _numpy_f16(a)
    got = np.asarray(read_back(out, fmt, {"a": ("fixed", np.float16, (4,))})["a"])
    if fmt == "tfrecord":  # float_list: the float16 values as float32
        assert np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))
    else:
        assert got.dtype == np.float16 and np.array_equal(got.view(np.uint16), want.view(np.uint16))
    rep = manifest(out)["float16"]["a"]
    finite = np.isfinite(a) & ~over
    with np.errstate(invalid="ignore"):
        err = np.abs(want.astype(np.float32) - a)[finite]
    nz = np.abs(a[finite]) > 0
    assert (rep["values"], rep["nan"], rep["overflow"], rep["clipped"]) == (a.size, 1, 2, 2)
    assert rep["flushed_to_zero"] == int(((want == 0) & (a != 0) & ~np.isnan(a)).sum())
    assert rep["max_abs_error"] == float(err.max())
    assert rep["max_rel_error"] == float((err[nz] / np.abs(a[finite][nz])).max())


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord"])
def test_dtype_float32(tmp_path, fmt):
    """--dtype float32: float64 columns (NPY and CSV) become float32 by NumPy's rounding, bit for
    bit (NaN, inf, -0.0, float32's subnormals and what flushes to zero); integer columns are left
    alone; overflow is an error naming the row, or clipped with --on-overflow clip."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(5000) * 1e6
    x[:8] = [np.nan, np.inf, -np.inf, -0.0, 1e-40, 1e-50, 3.4028234e38, 0.1]
    k = rng.integers(-(2**62), 2**62, 5000)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "k.npy", k)
    out = str(tmp_path / "npy")
    r = lovecraft("convert", str(tmp_path / "x.npy"), str(tmp_path / "k.npy"), "-o", out, "--to", fmt, "--dtype",
                  "float32", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    m = manifest(out)
    assert [(f["name"], f["dtype"]) for f in m["schema"]] == [("x", "<f4"), ("k", "<i8")]
    got = read_back(out, fmt, {"x": ("fixed", np.float32, ()), "k": ("fixed", np.int64, ())})
    want = x.astype(np.float32)
    assert np.asarray(got["x"]).dtype == np.float32
    assert np.array_equal(np.asarray(got["x"]).view(np.uint32), want.view(np.uint32))
    assert np.asarray(got["k"]).tolist() == k.tolist()
    rep = m["float16"]["x"]
    finite = np.isfinite(x)
    assert (rep["target"], rep["values"], rep["nan"], rep["overflow"]) == ("float32", 5000, 1, 0)
    assert rep["flushed_to_zero"] == int(((want == 0) & (x != 0) & finite).sum()) == 1
    assert "k" not in m["float16"]

    # CSV: the values as written in the file, parsed here
    lines = ["x,k"] + [f"{v!r},{i}" for v, i in zip(x.tolist(), k.tolist(), strict=True)]
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    out = str(tmp_path / "csv")
    r = lovecraft("convert", str(tmp_path / "d.csv"), "-o", out, "--to", fmt, "--dtype", "float32", "-q")
    assert r.exit_code == 0, r.stderr
    got = read_back(out, fmt, {"x": ("fixed", np.float32, ()), "k": ("fixed", np.int64, ())})
    parsed = np.array([float(line.split(",")[0]) for line in lines[1:]]).astype(np.float32)
    assert np.array_equal(np.asarray(got["x"]).view(np.uint32), parsed.view(np.uint32))
    assert np.asarray(got["k"]).tolist() == [int(line.split(",")[1]) for line in lines[1:]]

    # overflow: refused, naming the row; or clipped to float32's largest finite value
    x[4321] = -1e39
    np.save(tmp_path / "x.npy", x)
    out = str(tmp_path / "over")
    r = lovecraft("convert", str(tmp_path / "x.npy"), "-o", out, "--to", fmt, "--dtype", "float32", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {tmp_path}/x.npy, row 4322, column 'x': value -1e+39 overflows float32 (max 3.4028234663852886e+38); "
        "scale the data, keep a wider type, or pass --on-overflow clip\n",
    )
    r = lovecraft("convert", str(tmp_path / "x.npy"), "-o", out, "--to", fmt, "--dtype", "float32", "--on-overflow",
                  "clip", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    got = np.asarray(read_back(out, fmt, {"x": ("fixed", np.float32, ())})["x"])
    assert got[4321] == -np.finfo(np.float32).max
    assert manifest(out)["float16"]["x"]["clipped"] == 1


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16, np.int64])
def test_integer_sources_narrow_as_numpy_casts(dtype):
    """An integer column narrowed by --column-type NAME=float16 reaches the downcast as integers
    (a decoded image's pixels): the cast equals NumPy's and the errors are measured without
    wrapping around in the integer type (uint8 raised NumPy's casting error)."""
    from lovecraft_convert.transforms.downcast import DowncastStats, downcast_array

    info = np.iinfo(dtype)
    x = np.linspace(max(info.min, -60000), min(info.max, 60000), 1001).astype(dtype)
    st_ = DowncastStats("float16")
    got = downcast_array(x, np.dtype(np.float16), st_, "error", lambda i: ("src", "x", i, i))
    want = x.astype(np.float16)
    assert np.array_equal(got, want)
    err = np.abs(want.astype(np.float64) - x.astype(np.float64))
    nz = x != 0
    assert st_.values == x.size and st_.overflow == 0
    assert st_.max_abs_error == float(err.max())
    assert st_.max_rel_error == float((err[nz] / np.abs(x[nz].astype(np.float64))).max())
