"""CSV preambles: ``--skip-rows N`` (lines before the header, or before the first row with
``--no-header``) and ``--comment CHAR`` (lines starting with it skipped anywhere outside quoted
values), through convert, shard (byte-range parts), bucket, inspect and verify --against."""

from __future__ import annotations

import csv
import glob
import io
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import lovecraft_convert as lc
from lovecraft_convert.errors import OptionsError, surface
from tests.conftest import leftovers, lovecraft
from tests.readback import manifest, read_back

# scikit-learn's bundled wine_data.csv starts with a line of metadata (rows, features, class
# names) that is not the header. Written here, never downloaded: the layout with a header after it,
# and the bundled layout (the metadata line, then data rows; sklearn names the features itself).
META = "178,13,class_0,class_1,class_2\n"
NAMES = (
    "alcohol,malic_acid,ash,alcalinity_of_ash,magnesium,total_phenols,flavanoids,nonflavanoid_phenols,"
    "proanthocyanins,color_intensity,hue,od280_od315_of_diluted_wines,proline,target\n"
)
ROWS = (
    "14.23,1.71,2.43,15.6,127.0,2.8,3.06,0.28,2.29,5.64,1.04,3.92,1065.0,0\n"
    "13.2,1.78,2.14,11.2,100.0,2.65,2.76,0.26,1.28,4.38,1.05,3.4,1050.0,0\n"
    "12.37,.94,1.36,10.6,88.0,1.98,.57,0.28,0.42,1.95,1.05,1.82,520.0,1\n"
    "12.86,1.35,2.32,18.0,122.0,1.51,1.25,0.21,0.94,4.1,0.76,1.29,630.0,2\n"
)
WINE = META + NAMES + ROWS


def _csv_rows(text: str, skip: int = 0, comment: str | None = None) -> list[list[str]]:
    """Python's csv module on the lines after ``skip``, comment lines (no quotes here) left out."""
    lines = text.splitlines(keepends=True)[skip:]
    lines = [x for x in lines if not (comment and x.startswith(comment))]
    return [r for r in csv.reader(io.StringIO("".join(lines), newline="")) if r]


@pytest.mark.parametrize("to", ["parquet", "memmap"])
def test_sklearn_style_metadata_line_is_skipped(tmp_path, to):
    src = tmp_path / "wine_data.csv"
    src.write_text(WINE)
    out = str(tmp_path / "out")
    r = lovecraft("convert", str(src), "-o", out, "--to", to, "--skip-rows", "1", "-q")
    assert r.exit_code == 0, r.stderr
    want = _csv_rows(WINE, skip=1)
    got = read_back(out, to)
    assert [f["name"] for f in manifest(out)["schema"]] == want[0]
    for j, name in enumerate(want[0]):
        np.testing.assert_array_equal(np.asarray(got[name]), [float(row[j]) for row in want[1:]])
    assert np.asarray(got["target"]).dtype == np.int64
    assert manifest(out)["options"]["skip_rows"] == 1


def test_sklearn_bundled_layout_without_a_header(tmp_path):
    src = tmp_path / "wine_data.csv"
    src.write_text(META + ROWS)
    out = str(tmp_path / "out")
    r = lovecraft("convert", str(src), "-o", out, "--to", "memmap", "--skip-rows", "1", "--no-header", "-q")
    assert r.exit_code == 0, r.stderr
    want = _csv_rows(META + ROWS, skip=1)
    assert np.load(os.path.join(out, "f0.npy")).tolist() == [float(row[0]) for row in want]
    assert np.load(os.path.join(out, "f13.npy")).tolist() == [int(row[13]) for row in want]


def test_without_skip_rows_the_metadata_line_is_the_header(tmp_path):
    src = tmp_path / "wine_data.csv"
    src.write_text(WINE)
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "out"), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, row 1 (line 2): expected 5 fields, as the header has, found 14; "
        "if the header line is a line before the data instead (scikit-learn's CSVs begin with one), "
        "pass --skip-rows 1; else fix the row (is a quote unbalanced or a delimiter missing?)\n",
    )


PREAMBLE = (
    '# exported by a tool "v2", 2024\n'  # a comment with an odd number of quotes
    "# columns: id, text, x\n"
    "id,text,x\n"
    '1,"a\n# inside a value, not a comment",0.5\n'
    "# between rows\n"
    '2,y"z,1.5\n'  # a stray quote in an unquoted field
    '#3,"never read\n'
    "3,plain,2.5\n"
)


def test_comment_lines_anywhere_but_inside_values(tmp_path):
    src = tmp_path / "c.csv"
    src.write_text(PREAMBLE)
    out = str(tmp_path / "out")
    r = lovecraft("convert", str(src), "-o", out, "--to", "parquet", "--comment", "#", "-q")
    assert r.exit_code == 0, r.stderr
    got = pq.read_table(os.path.join(out, "data.parquet")).to_pylist()
    assert got == [
        {"id": 1, "text": "a\n# inside a value, not a comment", "x": 0.5},
        {"id": 2, "text": 'y"z', "x": 1.5},
        {"id": 3, "text": "plain", "x": 2.5},
    ]


def test_skip_rows_with_no_header_and_comments(tmp_path):
    src = tmp_path / "n.csv"
    src.write_text('title line, with "a quote\n1,2\n; note\n3,4\n')
    out = str(tmp_path / "out")
    r = lovecraft(
        "convert", str(src), "-o", out, "--to", "memmap", "--no-header", "--skip-rows", "1", "--comment", ";", "-q"
    )
    assert r.exit_code == 0, r.stderr
    assert np.load(os.path.join(out, "f0.npy")).tolist() == [1, 3]
    assert np.load(os.path.join(out, "f1.npy")).tolist() == [2, 4]


def test_error_rows_and_lines_count_the_preamble(tmp_path):
    """Rows count data rows; lines count every line of the file (preamble, comments included)."""
    src = tmp_path / "e.csv"
    src.write_text("meta\nmeta\na,b\n1,2\n# c\n\n3,x\n")
    args = ("--skip-rows", "2", "--comment", "#", "--column-type", "b=int64")
    want = (
        f"Error: {src}, row 2 (line 7), column 'b': 'x' is not a valid int64; "
        "fix the value or choose another --column-type\n"
    )
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet", *args, "-q")
    assert (r.exit_code, r.stderr) == (1, want)
    r = lovecraft("shard", str(src), "-o", str(tmp_path / "s"), "--to", "parquet", "--num-shards", "2", *args, "-q")
    assert (r.exit_code, r.stderr) == (1, want)
    src.write_text('meta "\na,b\n1,2\n# "\n3,"open\n')
    r = lovecraft(
        "convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet", "--skip-rows", "1", "--comment", "#"
    )
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, line 5: a quoted field opened here is never closed (unterminated quote); "
        "fix the quoting (a quote inside a quoted field is written twice)\n",
    )
    assert leftovers(tmp_path) == []


def _big_preamble_csv(path, rows: int = 4000) -> list[list[str]]:
    lines = ['source: "lab 7', "version 3", "id,name,v"]
    want = []
    for i in range(rows):
        if i % 97 == 0:
            lines.append(f'# checkpoint {i} "')
        name = f'"n{i}\n# still the value"' if i % 31 == 0 else f"n{i}"
        lines.append(f"{i},{name},{i * 0.5}")
        want.append([str(i), f"n{i}\n# still the value" if i % 31 == 0 else f"n{i}", str(i * 0.5)])
    path.write_text("\n".join(lines) + "\n")
    return want


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_shard_parts_after_a_preamble_are_identical_for_any_workers(tmp_path):
    src = tmp_path / "big.csv"
    want = _big_preamble_csv(src)
    outs = {}
    for workers in (1, 2):
        out = str(tmp_path / f"s{workers}")
        m = lc.shard(
            [str(src)],
            out,
            to="parquet",
            num_shards=3,
            workers=workers,
            part_bytes=2048,  # dozens of parts: cuts fall among comment lines and quoted values
            skip_rows=2,
            comment="#",
            progress=False,
        )
        assert m["rows"] == len(want)
        outs[workers] = {os.path.basename(p): _read(p) for p in glob.glob(out + "/*.parquet")}
        rows = [r for p in sorted(glob.glob(out + "/*.parquet")) for r in pq.read_table(p).to_pylist()]
        assert [[str(r["id"]), r["name"], str(r["v"])] for r in rows] == want
    assert outs[1] == outs[2]
    r = lc.verify(str(tmp_path / "s2"), against=[str(src)])  # reads the source with the manifest's options
    assert r.ok and r.against["differing_rows"] == 0, r.problems


def test_partitions_start_after_the_preamble_and_header(tmp_path):
    from lovecraft_convert.inputs import open_reader

    src = tmp_path / "big.csv"
    _big_preamble_csv(src)
    data = src.read_bytes()
    header_end = data.index(b"id,name,v\n") + len(b"id,name,v\n")
    reader = open_reader([str(src)], budget=64 << 20, skip_rows=2, comment="#")
    parts = reader.partitions(100)
    assert len(parts) > 100
    assert all(p.start == 0 or p.start > header_end for p in parts)
    for p in parts[1:]:
        assert data[p.start - 1 : p.start] == b"\n"


def test_bucket_text_column_and_ragged_rows_after_a_preamble(tmp_path):
    src = tmp_path / "t.csv"
    src.write_text('made by "x\nid,text\n# c\n1,hello world\n2,"a\n# b"\n3,xyz\n')
    out = str(tmp_path / "b")
    r = lovecraft(
        "bucket", str(src), "-o", out, "--to", "parquet", "--column", "text", "--num-buckets", "2",
        "--skip-rows", "1", "--comment", "#", "-q",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert manifest(out)["rows"] == 3
    src = tmp_path / "r.csv"
    src.write_text("series export\n# units: mV\na,b,c\n1,2,3\n4,5\n# gap\n6\n")
    out = str(tmp_path / "r")
    r = lovecraft(
        "bucket", str(src), "-o", out, "--to", "parquet", "--ragged", "--layout", "ragged", "--num-buckets", "2",
        "--skip-rows", "1", "--comment", "#", "-q",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    rows = [r for p in sorted(glob.glob(out + "/**/*.parquet", recursive=True)) for r in pq.read_table(p).to_pylist()]
    assert sorted(tuple(r["values"]) for r in rows) == [(1, 2, 3), (4, 5), (6,)]


def test_inspect_takes_the_preamble_flags(tmp_path):
    src = tmp_path / "wine_data.csv"
    src.write_text(WINE)
    r = lovecraft("inspect", str(src), "--skip-rows", "1", "--json", "-q")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["rows"] == 4 and [c["name"] for c in rep["columns"]][0] == "alcohol"
    rep = lc.inspect(str(tmp_path / "wine_data.csv"), skip_rows=1)
    assert rep["rows"] == 4


def test_verify_against_uses_the_recorded_options(tmp_path):
    src = tmp_path / "wine_data.csv"
    src.write_text(WINE)
    out = str(tmp_path / "out")
    lc.convert([str(src)], out, to="hdf5", skip_rows=1, progress=False)
    assert lc.verify(out, against=[str(src)]).ok
    src.write_text(WINE.replace("12.37", "12.38"))
    r = lc.verify(out, against=[str(src)])
    assert not r.ok and r.against["differing_rows"] == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"comment": "##"}, "--comment '##': give one ASCII character"),
        ({"comment": '"'}, "--comment '\"' cannot be a quote or a line end; choose another character"),
        ({"comment": ";", "delimiter": ";"}, "--comment ';' is the delimiter too; choose another character"),
        ({"comment": "§"}, "--comment '§': give one ASCII character"),
        ({"skip_rows": -1}, "--skip-rows -1: give a number of lines, 0 or more"),
    ],
)
def test_option_mistakes(tmp_path, kwargs, message):
    """Each message names the option as the caller spelled it: the keyword argument and its value
    from Python, the flag where the command line shows it."""
    src = tmp_path / "a.csv"
    src.write_text("a,b\n1,2\n")
    with pytest.raises(OptionsError) as e:
        lc.convert([str(src)], str(tmp_path / "o"), to="parquet", progress=False, **kwargs)
    flag, _, rest = message.partition(" ")
    assert e.value.one_line() == f"{flag[2:].replace('-', '_')}={rest}"  # comment='##': ...
    with surface("cli"):
        assert e.value.one_line() == message
    with pytest.raises(OptionsError):
        lc.inspect(str(src), **kwargs)


def test_option_mistakes_on_the_command_line(tmp_path):
    src = tmp_path / "a.tsv"
    src.write_text("a\tb\n1\t2\n")
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", "parquet", "--comment", "\t", "-q")
    assert (r.exit_code, r.stderr) == (2, f"Error: --comment '\\t' is the delimiter of {src}; choose another one\n")
    np.save(tmp_path / "x.npy", np.arange(3))
    r = lovecraft("convert", str(tmp_path / "x.npy"), "-o", out, "--to", "parquet", "--skip-rows", "1", "-q")
    assert (r.exit_code, r.stderr) == (2, "Error: --skip-rows applies to CSV inputs only\n")
    r = lovecraft("convert", str(tmp_path / "x.npy"), "-o", out, "--to", "parquet", "--comment", "#", "-q")
    assert (r.exit_code, r.stderr) == (2, "Error: --comment applies to CSV inputs only\n")
    assert not os.path.exists(out)


@pytest.mark.parametrize(
    "data, header, want",
    [
        (b"\na,b\n1,2", True, [{"a": 1, "b": 2}]),  # blank lines before the header (found by hypothesis)
        (b"\n\r\n\na,b\n1,2\n3,4\n", True, [{"a": 1, "b": 2}, {"a": 3, "b": 4}]),
        (b"a,b\n1,2", True, [{"a": 1, "b": 2}]),  # no last newline: types still from the rows
        (b"\n,", False, [{"f0": "", "f1": ""}]),
        (b"\n7,8", False, [{"f0": 7, "f1": 8}]),
    ],
)
def test_blank_lines_first_and_no_last_newline(tmp_path, data, header, want):
    src = tmp_path / "in.csv"
    src.write_bytes(data)
    out = tmp_path / "out"
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "parquet", "-q", *([] if header else ["--no-header"]))
    assert r.exit_code == 0, r.stderr
    got = pq.read_table(out / "data.parquet").to_pylist()
    assert got == want
    rows = list(csv.reader(io.StringIO(data.decode())))
    assert [r for r in rows if r][1 if header else 0 :] == [[str(v) for v in w.values()] for w in want]
