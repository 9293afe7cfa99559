"""Property-based round trips: generated schemas and values through every output format."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lovecraft_convert import convert
from tests.readback import read_back

DTYPES = [
    np.float16,
    np.float32,
    np.float64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.bool_,
]
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def npy_columns(draw):
    rows = draw(st.integers(1, 40))
    ncols = draw(st.integers(1, 3))
    cols = {}
    for i in range(ncols):
        dt = np.dtype(draw(st.sampled_from(DTYPES)))
        shape = (rows, *draw(st.lists(st.integers(1, 3), max_size=2)))
        elements = None
        if dt.kind == "f":
            elements = st.floats(width=dt.itemsize * 8, allow_nan=False, allow_infinity=False)
        cols[f"c{i}"] = draw(hnp.arrays(dt, shape, elements=elements))
    return cols


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord"])
@SETTINGS
@given(cols=npy_columns())
def test_npy_roundtrip(tmp_path_factory, fmt, cols):
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    d = tmp_path_factory.mktemp("p")
    paths = []
    for name, a in cols.items():
        np.save(d / f"{name}.npy", a)
        paths.append(str(d / f"{name}.npy"))
    convert(paths, str(d / "out"), to=fmt, progress=False)
    got = read_back(str(d / "out"), fmt)
    for name, a in cols.items():
        g = np.asarray(got[name])
        if fmt == "tfrecord":  # float64 exact (bytes), float16/32 in float_list, integers in int64_list
            if a.dtype.kind == "f":
                want = a.astype(np.float64) if a.dtype.itemsize == 8 else a.astype(np.float32)
            else:
                want = a.astype(np.int64)
            assert g.dtype == want.dtype
            np.testing.assert_array_equal(g, want)
        else:
            assert g.dtype == a.dtype
            np.testing.assert_array_equal(g, a)


text_cell = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r"), max_size=12)


@pytest.mark.parametrize("fmt", ["hdf5", "parquet", "tfrecord"])
@SETTINGS
@given(
    rows=st.lists(
        st.tuples(
            st.integers(-(2**62), 2**62),
            st.floats(allow_nan=False, allow_infinity=False, width=64),
            text_cell,
        ),
        min_size=1,
        max_size=30,
    )
)
def test_csv_roundtrip_strings(tmp_path_factory, fmt, rows):
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    d = tmp_path_factory.mktemp("c")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["i", "f", "s"])
    for r in rows:
        w.writerow([r[0], repr(r[1]), r[2]])
    (d / "d.csv").write_text(buf.getvalue(), encoding="utf-8")
    convert(
        [str(d / "d.csv")],
        str(d / "out"),
        to=fmt,
        progress=False,
        column_types={"i": "int64", "f": "float64", "s": "string"},
    )
    got = read_back(str(d / "out"), fmt)
    assert [int(x) for x in got["i"]] == [r[0] for r in rows]
    for g, r in zip(got["f"], rows, strict=True):  # float64 exact in every format, TFRecord too
        assert float(g) == r[1] or (math.isnan(r[1]) and math.isnan(float(g)))
    assert list(got["s"]) == [r[2] for r in rows]


@SETTINGS
@given(
    lines=st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=30),
        min_size=1,
        max_size=40,
    ),
    crlf=st.booleans(),
)
def test_text_roundtrip(tmp_path_factory, lines, crlf):
    d = tmp_path_factory.mktemp("t")
    nl = "\r\n" if crlf else "\n"
    data = nl.join(lines) + nl
    if data.startswith("\ufeff"):
        lines[0] = lines[0][1:]
    (d / "t.txt").write_bytes(data.encode("utf-8"))
    convert([str(d / "t.txt")], str(d / "out"), to="memmap", progress=False)
    assert read_back(str(d / "out"), "memmap")["text"] == lines
