"""CSV specifics: types inferred over the whole file, forced types, delimiters, quoting, BOM."""

from __future__ import annotations

import numpy as np

from tests.conftest import lovecraft
from tests.readback import manifest, read_back


def _convert(tmp_path, text: str | bytes, *extra, name="d.csv", to="parquet"):
    src = tmp_path / name
    src.write_bytes(text.encode() if isinstance(text, str) else text)
    out = tmp_path / "out"
    r = lovecraft("convert", str(src), "-o", str(out), "--to", to, "-q", "--overwrite", *extra)
    assert r.exit_code == 0, r.stderr
    return read_back(str(out), to), manifest(str(out))


def test_int_column_turning_float_after_first_megabytes(tmp_path):
    body = "a,b\n" + "1,2\n" * 600_000 + "2.5,x\n"  # 2.4 MB of ints, then a float and a string
    got, m = _convert(tmp_path, body)
    types = {f["name"]: (f["kind"], f["dtype"]) for f in m["schema"]}
    assert types == {"a": ("fixed", "<f8"), "b": ("string", "|u1")}
    assert got["a"][-1] == 2.5 and got["a"][0] == 1.0 and len(got["a"]) == 600_001
    assert got["b"][-1] == "x" and got["b"][0] == "2"


def test_int_column_with_empty_value_later_becomes_float_nan(tmp_path):
    body = "a\n" + "1\n" * 400_000 + "\n" + "3\n"
    got, m = _convert(
        tmp_path,
        body.replace("\n\n", "\n,\n").replace("a\n", "a,b\n", 1).replace("1\n", "1,1\n").replace("3\n", "3,1\n"),
    )
    assert m["schema"][0]["dtype"] == "<f8"
    assert np.isnan(got["a"][400_000]) and got["a"][-1] == 3


def test_string_column_type_keeps_leading_zeros(tmp_path):
    got, _ = _convert(tmp_path, "zip,n\n08123,1\n00001,2\n", "--column-type", "zip=string")
    assert got["zip"] == ["08123", "00001"]
    got, _ = _convert(tmp_path, "zip,n\n08123,1\n00001,2\n")
    assert got["zip"].tolist() == [8123, 1]  # inferred: the user must say it is a string


def test_column_types_fix_dtype(tmp_path):
    got, m = _convert(
        tmp_path,
        "a,b,c\n1,2,true\n3,4,false\n",
        "--column-type",
        "a=uint8",
        "--column-type",
        "b=float32",
        "--column-type",
        "c=bool",
        to="hdf5",
    )
    assert got["a"].dtype == np.uint8 and got["b"].dtype == np.float32 and got["c"].dtype == np.bool_
    assert got["c"].tolist() == [True, False]


def test_nan_and_inf_are_floats_not_nulls(tmp_path):
    got, m = _convert(tmp_path, "x,s\nnan,NA\ninf,null\n-inf,\n1,x\n", to="hdf5")
    assert np.isnan(got["x"][0]) and got["x"][1] == np.inf and got["x"][2] == -np.inf
    assert got["s"] == ["NA", "null", "", "x"]  # only an empty field is empty; NA stays text


def test_delimiter_tsv_no_header(tmp_path):
    got, m = _convert(tmp_path, "1\t2\n3\t4\n", "--no-header", name="d.tsv")
    assert [f["name"] for f in m["schema"]] == ["f0", "f1"]
    assert got["f0"].tolist() == [1, 3]
    got, m = _convert(tmp_path, "a;b\n1;2\n", "--delimiter", ";")
    assert got["b"].tolist() == [2]


def test_bom_crlf_quotes_and_embedded_newlines(tmp_path):
    text = b'\xef\xbb\xbfid,text\r\n1,"say ""hi""\r\nthere"\r\n2,plain\r\n'
    got, m = _convert(tmp_path, text)
    assert [f["name"] for f in m["schema"]] == ["id", "text"]
    assert got["text"] == ['say "hi"\r\nthere', "plain"]


def test_quoted_newlines_across_piece_boundaries(tmp_path):
    # many records with embedded newlines so that piece boundaries fall inside some of them
    rows = [f'{i},"line one {i}\nline two ""{i}""",{i * 0.5}' for i in range(200_000)]
    got, m = _convert(tmp_path, "id,t,x\n" + "\n".join(rows) + "\n", "--max-memory", "16MiB")
    assert len(got["t"]) == 200_000
    assert got["t"][123_457] == 'line one 123457\nline two "123457"'
    assert got["id"].tolist() == list(range(200_000))


def test_columns_selection_order(tmp_path):
    got, m = _convert(tmp_path, "a,b,c\n1,x,2.5\n", "--columns", "c,a", to="memmap")
    assert [f["name"] for f in m["schema"]] == ["c", "a"]
    assert got["c"].tolist() == [2.5]


def test_pieces_with_and_without_quotes_parse_alike(tmp_path):
    # Pieces without a quote are parsed with pyarrow's fast newline chunking; a quoted newline
    # in a later piece must still be read as part of its value, and both kinds of piece agree.
    import csv
    import io

    plain = [f"{i},word{i},{i * 0.25}" for i in range(150_000)]
    quoted = [f'{i},"two\nlines {i}",{i * 0.25}' for i in range(150_000, 150_010)]
    text = "id,t,x\n" + "\n".join(plain + quoted + plain[:5]) + "\n"
    got, _ = _convert(tmp_path, text, "--max-memory", "16MiB")
    want = list(csv.reader(io.StringIO(text, newline="")))[1:]
    assert got["t"] == [r[1] for r in want]
    assert got["id"].tolist() == [int(r[0]) for r in want]
    assert got["x"].tolist() == [float(r[2]) for r in want]
