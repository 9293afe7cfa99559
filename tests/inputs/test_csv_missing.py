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
from tests.readback import manifest, read_back

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


def _parquet(tmp_path, name: str, text: str, *extra: str):
    src = _write(tmp_path, text, f"{name}.csv")
    out = str(tmp_path / name)
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", *extra)
    return r, out


def test_a_bool_column_with_a_missing_value_is_float64(tmp_path):
    """An empty field or NA in a column of booleans is NaN in a float64 column (1.0, 0.0), as the
    docs say and as JSON Lines and Parquet bools with nulls are; it was refused with a hint,
    --column-type b=float64, that failed on 'true'. A fixed --column-type b=bool still refuses it,
    with a hint that works."""
    text = "b,x\ntrue,1\n,2\nfalse,3\nNA,4\n"
    r, out = _parquet(tmp_path, "b", text, "-q")
    assert r.exit_code == 0, r.stderr
    t = pq.read_table(os.path.join(out, "data.parquet"))
    assert str(t.schema.field("b").type) == "double"
    np.testing.assert_array_equal(t.column("b").to_numpy(), [1.0, np.nan, 0.0, np.nan])
    r, _ = _parquet(tmp_path, "b2", text, "--column-type", "b=bool")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {tmp_path / 'b2.csv'}, row 2 (line 3), column 'b': empty value in a bool column; fill it, or leave "
        "out --column-type b=bool to read it as float64 (1, 0 and NaN)\n",
    )
    r, out = _parquet(tmp_path, "b3", text + "maybe,5\n", "-q")  # not a boolean: text
    assert r.exit_code == 0, r.stderr
    assert pq.read_table(os.path.join(out, "data.parquet")).column("b").to_pylist() == [
        "true", "", "false", "NA", "maybe"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "name,text,arrow_type,values,note",
    [
        # pyarrow infers float64 for integers past int64: 2**63 and 2**63 + 1 were one value
        ("u64", "id,v\n9223372036854775808,1\n9223372036854775809,2\n1,3\n", "uint64",
         [2**63, 2**63 + 1, 1], "read as uint64"),
        ("neg", "id,v\n-9223372036854775809,1\n5,2\n", "string", ["-9223372036854775809", "5"], "read as text, exact"),
        # one late in an int64 column: uint64 (it widened to float64)
        ("late", "id,v\n" + "".join(f"{i},{i}\n" for i in range(400_000)) + "18446744073709551615,1\n", "uint64",
         None, "read as uint64"),
        # integers past 2**53 and a missing value: text (float64 rounded them)
        ("nulls", "id,v\n" + "".join(f"{2**60 + i},{i}\n" for i in range(400_000)) + ",1\n", "string", None,
         "beyond 2**53 and a missing value"),
        ("small", "id,v\n" + "".join(f"{i},{i}\n" for i in range(400_000)) + ",1\n", "double", None, None),
        # 2**53 + 1 parses to 2**53 itself, which the bound (> 2**53) let through: rounded, no note
        ("edge", "id,v\n9007199254740993,1\n,2\n5,3\n", "string", None, "beyond 2**53 and a missing value"),
        # the missing value early, the big integer in a later piece without one: it was not checked
        ("late_big", "id,v\n,0\n" + "".join(f"{i},{i}\n" for i in range(400_000)) + "9007199254740995,1\n",
         "string", None, "beyond 2**53 and a missing value"),
        ("floats", "id,v\n1e19,1\n2.5,2\n", "double", [1e19, 2.5], None),
        # hexadecimal: pyarrow reads them as int64 and wraps those past 2**63 to negative numbers
        # (numpy's random test CSVs: seeds 0xa475f55fbb6bc638...)
        ("hex", "id,v\n0xa475f55fbb6bc638,1\n0x10,2\n", "uint64", [0xA475F55FBB6BC638, 16], "hexadecimal integers"),
        ("decimal", "id,t\n5,0xzz\n-7,a\n", "int64", [5, -7], None),  # a 0x in the text: ids stay int64
        # first met after the first piece, in a column typed int64 from it: widened, the read begun again
        ("late_hex", "id,v\n" + "".join(f"{i},{i}\n" for i in range(400_000)) + "0xa475f55fbb6bc638,1\n",
         "uint64", list(range(400_000)) + [0xA475F55FBB6BC638], "hexadecimal integers"),
        ("late_hex_neg", "id,v\n-1,0\n" + "".join(f"{i},{i}\n" for i in range(400_000)) + "0x8000000000000000,1\n",
         "string", None, "hexadecimal integers"),
        # a late hexadecimal value int64 holds is read right: no retyping
        ("late_small_hex", "id,v\n" + "".join(f"{i},{i}\n" for i in range(400_000)) + "0x10,1\n",
         "int64", list(range(400_000)) + [16], None),
    ],
)  # fmt: skip
def test_integers_past_int64_are_kept_exact(tmp_path, name, text, arrow_type, values, note):
    r, out = _parquet(tmp_path, name, text)
    assert r.exit_code == 0, r.stderr
    col = pq.read_table(os.path.join(out, "data.parquet")).column("id")
    assert str(col.type) == arrow_type
    want = values if values is not None else [row.split(",")[0] for row in text.splitlines()[1:]]
    got = col.to_pylist()
    if arrow_type in ("uint64", "int64"):
        want = [int(v) for v in want]
    elif arrow_type == "double":
        want = [float(v) if v else None for v in want]
        got = [None if v != v else v for v in got]
    assert got == want
    notes = [n for n in manifest(out)["sources"][0].get("notes", []) if " integers" in n]
    assert (note is None and notes == []) or (note is not None and note in " ".join(notes)), notes
    assert note is None or note in r.stderr


@pytest.mark.parametrize("to", ["hdf5", "memmap", "parquet"])
def test_a_header_field_without_a_name_is_named_as_no_header_would(tmp_path, to):
    """A delimiter at the end of every line (`a,b,`) gave a column named '': HDF5 refused it and
    memmap wrote `~.values.npy`. Such a field is named f<i> (0-based, as --no-header names
    columns), with a note; a blank name in the middle too, without the trailing-delimiter hint."""
    src = tmp_path / "t.csv"
    src.write_text("a,b,\n1,2,\n3,4,\n")
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", to, "-q")
    note = (
        "note: the header gives no name to field 3: its column is called 'f2', as --no-header names columns "
        "(a delimiter at the end of every line makes an empty last field)\n"
    )
    assert (r.exit_code, r.stderr) == (0, note)
    cols = read_back(out, to)
    assert list(cols) == ["a", "b", "f2"] and np.asarray(cols["b"]).tolist() == [2, 4]
    src.write_text(",f0,\n1,2,x\n")  # names taken are not reused
    r = lovecraft("convert", str(src), "-o", out, "--to", to, "-q", "--overwrite")
    assert r.exit_code == 0, r.stderr
    assert "no name to fields 1, 3: their columns are called 'f0_', 'f2'" in r.stderr
    assert list(read_back(out, to)) == ["f0_", "f0", "f2"]
