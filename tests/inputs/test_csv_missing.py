"""CSV missing values: an empty field, and ``--na-values`` (default NA, N/A, NULL, null) in columns
of numbers and booleans, read as NaN (issue 39, point 2: palmerpenguins' ``NA``)."""

from __future__ import annotations

import csv
import io
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import lovecraft_convert as lc
from tests.conftest import leftovers, lovecraft
from tests.readback import manifest

# palmerpenguins' shape: NA in four numeric columns and in the text column sex
PENGUINS = (
    "species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year\n"
    "Adelie,Torgersen,39.1,18.7,181,3750,male,2007\n"
    "Adelie,Torgersen,39.5,17.4,186,3800,female,2007\n"
    "Adelie,Torgersen,NA,NA,NA,NA,NA,2007\n"
    "Gentoo,Biscoe,47.3,13.8,216,4725,NA,2009\n"
    "Chinstrap,Dream,50.9,19.1,196,3550,male,2008\n"
)
NUMERIC = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _expected(values: list[str], missing=("NA",)) -> list[float]:
    return [np.nan if v in missing or v == "" else float(v) for v in values]


def _write(tmp_path, text: str, name: str = "penguins.csv") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _check_penguins(out: str, text: str) -> None:
    rows = _rows(text)
    types = {f["name"]: (f["kind"], f["dtype"]) for f in manifest(out)["schema"]}
    t = pq.read_table(out)  # pyarrow, the independent reader
    for name in NUMERIC:
        assert types[name] == ("fixed", "<f8"), name
        np.testing.assert_array_equal(t.column(name).to_numpy(), _expected([r[name] for r in rows]))
    assert types["year"] == ("fixed", "<i8")
    # a text column keeps NA as text: it is also a country code and a name
    assert types["sex"] == ("string", "|u1")
    assert t.column("sex").to_pylist() == [r["sex"] for r in rows]


@pytest.mark.parametrize("to", ["parquet", "hdf5"])
def test_na_in_number_columns_is_missing_by_default(tmp_path, to):
    src = _write(tmp_path, PENGUINS)
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", to, "-q")
    assert r.exit_code == 0, r.stderr
    types = {f["name"]: f["dtype"] for f in manifest(out)["schema"]}
    assert [types[n] for n in NUMERIC] == ["<f8"] * 4
    if to == "parquet":
        _check_penguins(out, PENGUINS)
    else:
        import h5py

        with h5py.File(os.path.join(out, "data.h5")) as f:
            got = f["bill_length_mm"][:]
            sex = [bytes(x).decode() if not isinstance(x, str) else x for x in f["sex"][:]]
        np.testing.assert_array_equal(got, _expected([r["bill_length_mm"] for r in _rows(PENGUINS)]))
        assert sex == [r["sex"] for r in _rows(PENGUINS)]


def test_the_real_palmerpenguins_csv(tmp_path):
    palmerpenguins = pytest.importorskip("palmerpenguins")
    src = os.path.join(os.path.dirname(palmerpenguins.__file__), "data", "penguins.csv")
    with open(src) as f:
        text = f.read()
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr
    _check_penguins(out, text)
    assert manifest(out)["rows"] == len(_rows(text)) == 344


def test_without_the_default_na_is_text_and_a_fixed_type_names_the_flag(tmp_path):
    src = _write(tmp_path, PENGUINS)
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q", "--na-values", "")
    assert r.exit_code == 0, r.stderr
    types = {f["name"]: f["kind"] for f in manifest(out)["schema"]}
    assert [types[n] for n in NUMERIC] == ["string"] * 4  # what every run did before --na-values
    r = lovecraft(
        "convert", src, "-o", str(tmp_path / "o2"), "--to", "parquet", "-q",
        "--na-values", "", "--column-type", "bill_length_mm=float64",
    )  # fmt: skip
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, row 3 (line 4), column 'bill_length_mm': 'NA' is not a valid float64; fix the value, "
        "choose another --column-type, or pass --na-values NA if it marks a missing value\n",
    )
    assert not os.path.exists(tmp_path / "o2") and leftovers(tmp_path) == []


def test_na_values_list_replaces_the_default(tmp_path):
    text = "id,x\n1,2.5\n2,-999\n3,\n4,7\n"
    src = _write(tmp_path, text, "s.csv")
    out = str(tmp_path / "out")
    r = lovecraft(
        "convert", src, "-o", out, "--to", "memmap", "-q", "--na-values", "-999,NA", "--column-type", "x=float32"
    )
    assert r.exit_code == 0, r.stderr
    x = np.load(os.path.join(out, "x.npy"))
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x, np.array([2.5, np.nan, np.nan, 7], dtype=np.float32))
    assert manifest(out)["options"]["na_values"] == ["-999", "NA"]
    # an integer column holding a marker becomes float64 (NaN), as with an empty field
    src = _write(tmp_path, "id,n\n1,5\n2,-999\n3,6\n", "i.csv")
    r = lovecraft("convert", src, "-o", str(tmp_path / "o2"), "--to", "memmap", "-q", "--na-values", "-999")
    assert r.exit_code == 0, r.stderr
    n = np.load(str(tmp_path / "o2" / "n.npy"))
    assert n.dtype == np.float64 and np.isnan(n[1]) and n[[0, 2]].tolist() == [5, 6]


def test_a_marker_in_a_fixed_integer_column_names_row_line_and_value(tmp_path):
    src = _write(tmp_path, "a,b\n1,2\nNA,4\n", "n.csv")
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "-q", "--column-type", "a=int64")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, row 2 (line 3), column 'a': missing value 'NA' in a int64 column; "
        "fill it, or pass --column-type a=float64 to read missing values as NaN\n",
    )


def test_na_values_is_for_csv_only(tmp_path):
    src = _write(tmp_path, '{"a": 1}\n', "d.jsonl")
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "--na-values", "NA")
    assert (r.exit_code, r.stderr) == (2, "Error: --na-values applies to CSV inputs only\n")


def test_library_keyword_and_help(tmp_path):
    src = _write(tmp_path, "x,y\n1,?\n2,3\n", "q.csv")
    m = lc.convert(src, str(tmp_path / "o"), to="parquet", na_values=["?"])
    assert m["schema"][1]["dtype"] == "<f8"
    assert np.isnan(pq.read_table(str(tmp_path / "o")).column("y").to_numpy()[0])
    rep = lc.inspect(src, na_values=["?"])
    assert [c["type"] for c in rep["columns"]] == ["int64", "float64"]
    import inspect

    for fn in (lc.convert, lc.shard, lc.bucket, lc.inspect):  # the library's keywords, as the flags
        params = inspect.signature(fn).parameters
        assert params["na_values"].default is None and params["column_names"].default is None, fn
    h = lovecraft("convert", "--help").stdout
    assert "--na-values" in h and "Default NA,N/A,NULL,null" in " ".join(h.split())
