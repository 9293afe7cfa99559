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
