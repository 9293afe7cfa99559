"""CSV files of the shapes scikit-learn ships (issue 39, point 7): a metadata first line (iris,
wine), a headerless matrix (digits), space-separated values (diabetes), and ``--column-names``.
Each shape is made here; the bundled files are read too where scikit-learn is installed."""

from __future__ import annotations

import gzip
import os

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import leftovers, lovecraft
from tests.readback import manifest, read_back

IRIS = "150,4,setosa,versicolor,virginica\n5.1,3.5,1.4,0.2,0\n4.9,3.0,1.4,0.2,0\n7.0,3.2,4.7,1.4,1\n6.3,3.3,6.0,2.5,2\n"
WINE = (
    "178,13,class_0,class_1,class_2\n"
    "14.23,1.71,2.43,15.6,127,2.8,3.06,0.28,2.29,5.64,1.04,3.92,1065,0\n"
    "13.2,1.78,2.14,11.2,100,2.65,2.76,0.26,1.28,4.38,1.05,3.4,1050,0\n"
    "12.37,.94,1.36,10.6,88,1.98,.57,.28,.42,1.95,1.05,1.82,520,1\n"
)
DIGITS = "0,0,5,13,9,1,0,0\n0,0,0,12,13,5,0,0\n0,0,0,4,15,12,0,0\n"  # headerless; the first row repeats 0
DIABETES = "59 2 32.1 101.0 157 93.2 38.0 4.0 4.8598 87\n48 1 21.6 87.0 183 103.2 70.0 3.0 3.8918 69\n72 2 30.5 93.0 156 93.6 41.0 4.0 4.6728 85\n"


def _sklearn_file(name: str) -> str:
    sklearn = pytest.importorskip("sklearn")
    path = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "data", name)
    if not os.path.exists(path):
        pytest.skip(f"this scikit-learn has no {name}")
    return path


def _text(path: str) -> str:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return f.read()


def _rows(text: str, sep: str = ",", skip: int = 0) -> list[list[str]]:
    return [line.split(sep) for line in text.splitlines()[skip:] if line]


# -- iris: a metadata line that parses as a header -----------------------------------------------


def _iris_note(src: str) -> str:
    return (
        f"note: {src}: the header '150,4,setosa,versicolor,virginica' starts with a number over a column of "
        "numbers: if that line is data, pass --no-header (or --column-names); if it is a line before the data "
        "(scikit-learn's CSVs begin with one), --skip-rows 1 --no-header\n"
    )


@pytest.mark.parametrize("real", [False, True])
def test_iris_metadata_line_is_named_in_a_note_and_skip_rows_reads_it(tmp_path, real):
    if real:
        src = _sklearn_file("iris.csv")
    else:
        src = str(tmp_path / "iris.csv")
        (tmp_path / "iris.csv").write_text(IRIS)
    text = _text(src)
    r = lovecraft("convert", src, "-o", str(tmp_path / "a"), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (0, _iris_note(src))
    assert manifest(str(tmp_path / "a"))["sources"][0]["notes"] == [_iris_note(src)[6:-1]]
    out = str(tmp_path / "b")
    r = lovecraft("convert", src, "-o", out, "--to", "memmap", "-q", "--skip-rows", "1", "--no-header")
    assert (r.exit_code, r.stderr) == (0, "")
    want = _rows(text, skip=1)
    got = read_back(out, "memmap")
    assert list(got) == ["f0", "f1", "f2", "f3", "f4"]
    np.testing.assert_array_equal(got["f0"], [float(r[0]) for r in want])
    assert got["f4"].dtype == np.int64 and got["f4"].tolist() == [int(r[4]) for r in want]
    rep = lc.inspect(src)
    assert rep["inputs"][0]["notes"] == [_iris_note(src)[6:-1]]


def test_a_header_of_names_gets_no_note(tmp_path):
    src = tmp_path / "w.csv"
    src.write_text("country,1960,1961\nFrance,1.5,2.5\nPeru,3,4\n")  # names that are numbers, but not the first
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    assert "notes" not in manifest(str(tmp_path / "o"))["sources"][0]


# -- wine: a metadata line with another number of fields ---------------------------------------------


@pytest.mark.parametrize("real", [False, True])
def test_wine_field_count_error_names_skip_rows(tmp_path, real):
    if real:
        src = _sklearn_file("wine_data.csv")
    else:
        src = str(tmp_path / "wine_data.csv")
        (tmp_path / "wine_data.csv").write_text(WINE)
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, row 1 (line 2): expected 5 fields, as the header has, found 14; if the header line is a "
        "line before the data instead (scikit-learn's CSVs begin with one), pass --skip-rows 1 --no-header; "
        "else fix the row (is a quote unbalanced or a delimiter missing?)\n",
    )
    assert leftovers(tmp_path) == []
    out = str(tmp_path / "ok")
    r = lovecraft("convert", src, "-o", out, "--to", "memmap", "-q", "--skip-rows", "1", "--no-header")
    assert (r.exit_code, r.stderr) == (0, "")
    want = _rows(_text(src), skip=1)
    np.testing.assert_array_equal(np.load(os.path.join(out, "f0.npy")), [float(r[0]) for r in want])
    assert np.load(os.path.join(out, "f13.npy")).tolist() == [int(r[13]) for r in want]


# -- digits: a headerless matrix whose first row repeats a value ---------------------------------------


@pytest.mark.parametrize("real", [False, True])
def test_digits_duplicate_names_error_names_no_header(tmp_path, real):
    if real:
        src = _sklearn_file("digits.csv.gz")
    else:
        src = str(tmp_path / "digits.csv.gz")
        (tmp_path / "digits.csv.gz").write_bytes(gzip.compress(DIGITS.encode(), mtime=0))
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}: column name '0' appears twice in the header, whose names are all numbers (is the first "
        "line data?); pass --no-header if the file has no header (columns f0, f1, ...), or name the columns "
        "with --column-names\n",
    )
    want = _rows(_text(src))
    out = str(tmp_path / "ok")
    names = ",".join(f"pixel{i}" for i in range(len(want[0]) - 1)) + ",label" if real else None
    extra = ["--column-names", names] if real else ["--no-header"]
    r = lovecraft("convert", src, "-o", out, "--to", "memmap", "-q", *extra)
    assert (r.exit_code, r.stderr) == (0, "")
    got = read_back(out, "memmap")
    first = "pixel0" if real else "f0"
    assert len(got) == len(want[0]) and got[first].tolist() == [int(r[0]) for r in want]
    if real:
        assert got["label"].tolist() == [int(r[-1]) for r in want]


def test_a_header_with_a_repeated_name_names_column_names(tmp_path):
    src = tmp_path / "d.csv"
    src.write_text("a,b,a\n1,2,3\n")
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}: column name 'a' appears twice in the header; rename one of them, or name the columns "
        "with --column-names A,B,... --skip-rows 1\n",
    )
    r = lovecraft(
        "convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet", "-q",
        "--column-names", "a,b,c", "--skip-rows", "1",
    )  # fmt: skip
    assert (r.exit_code, r.stderr) == (0, "")
    import pyarrow.parquet as pq

    assert pq.read_table(str(tmp_path / "o")).to_pydict() == {"a": [1], "b": [2], "c": [3]}


# -- diabetes: space-separated numbers --------------------------------------------------------------


@pytest.mark.parametrize("real", [False, True])
def test_space_separated_numbers_are_detected_and_said(tmp_path, real):
    if real:
        src = _sklearn_file("diabetes_data_raw.csv.gz")
    else:
        src = str(tmp_path / "diabetes_data_raw.csv.gz")
        (tmp_path / "diabetes_data_raw.csv.gz").write_bytes(gzip.compress(DIABETES.encode(), mtime=0))
    want = np.loadtxt(src)  # numpy's own reader of the same file
    out = str(tmp_path / "o")
    r = lovecraft("convert", src, "-o", out, "--to", "hdf5", "-q", "--no-header")
    note = (
        f"note: {src}: no commas; the fields are separated by spaces (10 per line), so it is read so "
        "(--delimiter ' ' says so; --delimiter , keeps one column)\n"
    )
    assert (r.exit_code, r.stderr) == (0, note)
    import h5py

    with h5py.File(os.path.join(out, "data.h5")) as f:
        assert list(f) == [f"f{i}" for i in range(10)]
        got = np.stack([f[f"f{i}"][:] for i in range(10)], axis=1)
    np.testing.assert_array_equal(got, want)
    src_entry = manifest(out)["sources"][0]
    assert src_entry["delimiter"] == " " and src_entry["notes"] == [note[6:-1]]
    # shard splits the file with the same delimiter
    r = lovecraft("shard", src, "-o", str(tmp_path / "s"), "--to", "parquet", "-q", "--no-header", "--num-shards", "2")
    assert r.exit_code == 0, r.stderr
    assert manifest(str(tmp_path / "s"))["rows"] == len(want)


def test_tabs_in_a_csv_named_file_are_detected(tmp_path):
    src = tmp_path / "t.csv"
    src.write_text("name\tscore\nann lee\t1.5\nbo\t2\n")
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr
    import pyarrow.parquet as pq

    assert pq.read_table(out).to_pydict() == {"name": ["ann lee", "bo"], "score": [1.5, 2.0]}


@pytest.mark.parametrize(
    "text,want",
    [
        ("a;b;c\n1;x;2.5\n2;y;3.5\n", {"a": [1, 2], "b": ["x", "y"], "c": [2.5, 3.5]}),
        # a European export: decimal commas (not the same number a line), quoted text with a ';'
        ('id;price;name\n1;3,14;"a;b"\n2;2;c\n3;10,5;d\n',
         {"id": [1, 2, 3], "price": ["3,14", "2", "10,5"], "name": ["a;b", "c", "d"]}),
    ],
)  # fmt: skip
def test_semicolons_are_detected_and_said(tmp_path, text, want):
    """A semicolon-separated file was read as one column, and a European one with decimal commas
    refused with a hint to --skip-rows (an outside trial): the delimiter is detected, with a note."""
    import pyarrow.parquet as pq

    src = tmp_path / "s.csv"
    src.write_text(text)
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", "parquet")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.splitlines()[0] == (
        f"note: {src}: the fields are separated by semicolons (3 per line), so it is read so (--delimiter ';' says "
        "so; --delimiter , reads commas); a decimal comma (3,14) stays text"
    )
    assert pq.read_table(out).to_pydict() == want
    assert manifest(out)["sources"][0]["delimiter"] == ";"


@pytest.mark.parametrize(
    "text,columns",
    [
        ("a,b;c\n1,x;y\n2,z;w\n", 2),  # commas, the same number a line, and a ';' in every line: commas
        ("a,b\n1,x;y\n2,z\n", 2),  # a ';' in some values
        ("name\nann lee\nbo kim\n", 1),  # one column of text with spaces: never split
        ("a b\n1 2\n3  4\n", 1),  # a run of spaces: not a delimiter we can read
        ("x\n1\n2\n", 1),  # one column of numbers
    ],
)
def test_no_other_delimiter_is_taken_where_none_is(tmp_path, text, columns):
    """Commas kept where semicolons are only in the text; text with spaces stays one column."""
    src = tmp_path / "c.csv"
    src.write_text(text)
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    assert len(manifest(out)["schema"]) == columns and "delimiter" not in manifest(out)["sources"][0]


# -- --column-names ------------------------------------------------------------------------------


def test_column_names_name_a_headerless_file(tmp_path):
    src = tmp_path / "h.csv"
    src.write_text("1,2.5,x\n3,4.5,y\n")
    m = lc.convert(str(src), str(tmp_path / "o"), to="parquet", column_names=["id", "v", "tag"])
    assert [f["name"] for f in m["schema"]] == ["id", "v", "tag"]
    assert m["options"]["header"] is False and m["options"]["column_names"] == ["id", "v", "tag"]
    import pyarrow.parquet as pq

    assert pq.read_table(str(tmp_path / "o")).to_pydict() == {"id": [1, 3], "v": [2.5, 4.5], "tag": ["x", "y"]}
    r = lovecraft("verify", str(tmp_path / "o"), "--against", str(src))
    assert r.exit_code == 0, r.stdout + r.stderr
    h = " ".join(lovecraft("convert", "--help").stdout.split())
    assert "--column-names A,B,..." in h


def test_column_names_errors(tmp_path):
    src = tmp_path / "h.csv"
    src.write_text("1,2,3\n")
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet", "--column-names", "a,b")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}: --column-names gives 2 names, the first row has 3 fields; give one name per column\n",
    )
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet", "--column-names", "a,b,a")
    assert (r.exit_code, r.stderr) == (2, "Error: --column-names: 'a' is given twice; give each column its own name\n")
    j = tmp_path / "d.jsonl"
    j.write_text('{"a": 1}\n')
    r = lovecraft("convert", str(j), "-o", str(tmp_path / "o"), "--to", "parquet", "--column-names", "a")
    assert (r.exit_code, r.stderr) == (2, "Error: --column-names applies to CSV inputs only\n")


def test_carriage_returns_alone_are_named(tmp_path):
    """Classic Mac OS line endings (CR alone) read as one header line: "no data rows (header
    only)" misled; the line names the line endings and how to convert them."""
    src = tmp_path / "cr.csv"
    src.write_bytes(b"a,b\r1,2\r3,4\r")
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}: its lines end with a carriage return alone (classic Mac OS), not a newline; convert them, "
        f"e.g. tr '\\r' '\\n' < {src} > fixed.csv\n",
    )
    crlf = tmp_path / "crlf.csv"
    crlf.write_bytes(b"a,b\r\n1,2\r\n")
    assert lovecraft("convert", str(crlf), "-o", str(tmp_path / "o2"), "--to", "parquet", "-q").exit_code == 0
