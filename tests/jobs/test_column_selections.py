"""The types and selections people use (issue 39, point 8): ``--column-type`` takes the selections
``--stack-columns`` takes (names, ranges, patterns), ``--columns`` names a stacked column, and
``--dtype float16`` says which integer columns it leaves alone (and how to narrow them too)."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.readback import manifest

CSV = "id,f1,f2,f3,g\n1,1.5,2,3,x\n2,4,5,6.25,y\n"


@pytest.fixture
def src(tmp_path) -> str:
    p = tmp_path / "t.csv"
    p.write_text(CSV)
    return str(p)


def _dtypes(out: str) -> dict[str, str]:
    return {
        f["name"]: np.load(os.path.join(out, f"{f['name']}.npy")).dtype.name
        for f in manifest(out)["schema"]
        if f["kind"] == "fixed"
    }


def test_column_type_takes_a_pattern_and_a_range(tmp_path, src):
    out = str(tmp_path / "a")
    r = lovecraft("convert", src, "-o", out, "--to", "memmap", "-q", "--column-type", "f*=float32")
    assert (r.exit_code, r.stderr) == (0, "")
    assert _dtypes(out) == {"id": "int64", "f1": "float32", "f2": "float32", "f3": "float32"}
    np.testing.assert_array_equal(np.load(os.path.join(out, "f3.npy")), np.array([3, 6.25], np.float32))
    out = str(tmp_path / "b")  # a column's own name wins over the pattern
    r = lovecraft(
        "convert", src, "-o", out, "--to", "memmap", "-q", "--column-type", "f*=float32", "--column-type", "f2=int16"
    )
    assert r.exit_code == 0, r.stderr
    assert _dtypes(out) == {"id": "int64", "f1": "float32", "f2": "int16", "f3": "float32"}
    m = lc.convert(src, str(tmp_path / "c"), to="memmap", column_types={"f1:f2": "float16"})
    assert {f["name"]: f["dtype"] for f in m["schema"]}["f2"] == "<f2" and m["float16"]["f1"]["target"] == "float16"


def test_column_type_selection_errors(tmp_path, src):
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "memmap", "--column-type", "q*=float32")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: --column-type q*=...: no column matches 'q*' in {src}; columns are id, f1, f2, f3, g\n",
    )
    r = lovecraft(
        "convert", src, "-o", str(tmp_path / "o"), "--to", "memmap",
        "--column-type", "f*=float32", "--column-type", "f1:f2=float64",
    )  # fmt: skip
    assert (r.exit_code, r.stderr) == (
        2,
        "Error: --column-type: column 'f1' is float32 by f* and float64 by f1:f2; make the selections not "
        "overlap, or give the column by its own name\n",
    )


def test_column_type_pattern_in_json_lines_and_parquet(tmp_path):
    j = tmp_path / "d.jsonl"
    j.write_text('{"id": 1, "x_a": 1, "x_b": 2}\n{"id": 2, "x_a": 3, "x_b": 4, "x_c": 5}\n')
    m = lc.convert(str(j), str(tmp_path / "j"), to="parquet", column_types={"x_*": "float32"})
    assert {f["name"]: f["dtype"] for f in m["schema"]} == {"id": "<i8", "x_a": "<f4", "x_b": "<f4", "x_c": "<f4"}
    t = pq.read_table(str(tmp_path / "j"))
    assert str(t.schema.field("x_c").type) == "float" and t.column("x_c").to_pylist()[1] == 5.0
    pq.write_table(t, str(tmp_path / "in.parquet"))
    m = lc.convert(str(tmp_path / "in.parquet"), str(tmp_path / "p"), to="parquet", column_types={"x_?": "float64"})
    assert {f["name"]: f["dtype"] for f in m["schema"]}["x_b"] == "<f8"
    r = lovecraft("convert", str(j), "-o", str(tmp_path / "n"), "--to", "parquet", "--column-type", "z*=string")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: --column-type z*=...: no key matches 'z*' in {j}; keys in the first records are id, x_a, x_b, x_c\n",
    )


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_columns_can_name_a_stacked_column(tmp_path, kind):
    if kind == "csv":
        p = tmp_path / "s.csv"
        p.write_text("id,c0,c1,c2,label\n1,1.5,2,3,0\n2,4,5,6.25,1\n")
    else:
        p = tmp_path / "s.jsonl"
        rows = [{"id": 1, "c0": 1.5, "c1": 2, "c2": 3, "label": 0}, {"id": 2, "c0": 4, "c1": 5, "c2": 6.25, "label": 1}]
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = str(tmp_path / "o")
    r = lovecraft(
        "convert", str(p), "-o", out, "--to", "parquet", "-q", "--stack-columns", "x=c*", "--columns", "label,x"
    )
    assert (r.exit_code, r.stderr) == (0, "")
    t = pq.read_table(out)
    assert t.column_names == ["label", "x"]
    assert t.to_pydict() == {"label": [0, 1], "x": [[1.5, 2.0, 3.0], [4.0, 5.0, 6.25]]}
    r = lovecraft("verify", out, "--against", str(p))
    assert r.exit_code == 0, r.stdout + r.stderr
    r = lovecraft(
        "convert", str(p), "-o", str(tmp_path / "o2"), "--to", "parquet", "--stack-columns", "x=c*", "--columns", "x,c1"
    )
    assert (r.exit_code, r.stderr) == (2, "Error: --columns names 'c1', which is stacked into 'x'; name 'x' alone\n")


def test_dtype_float16_note_of_an_npy_input_suggests_no_column_type(tmp_path):
    """NPY inputs do not take --column-type: the note suggested it, and following it was refused
    ("--column-type applies to CSV, JSON Lines, ..."). Found by an outside trial of the docs."""
    np.save(tmp_path / "features.npy", np.ones((4, 3), np.float32))
    np.save(tmp_path / "labels.npy", np.arange(4))
    r = lovecraft(
        "convert", str(tmp_path / "features.npy"), str(tmp_path / "labels.npy"), "-o", str(tmp_path / "o"),
        "--to", "hdf5", "-q", "--dtype", "float16",
    )  # fmt: skip
    note = "--dtype float16 narrows floating columns; integer columns are kept as they are: labels"
    assert (r.exit_code, r.stderr) == (0, f"note: {note}\n")


def test_dtype_float16_names_the_integer_columns_it_leaves(tmp_path):
    p = tmp_path / "px.csv"
    p.write_text("label,pixel0,pixel1,v\n1,0,255,1.5\n2,3,4,2.5\n")
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(p), "-o", out, "--to", "memmap", "-q", "--dtype", "float16")
    note = (
        "--dtype float16 narrows floating columns; integer columns are kept as they are: label, pixel0, pixel1 "
        "(to narrow them too: --column-type label=float16)"
    )
    assert (r.exit_code, r.stderr) == (0, f"note: {note}\n")
    assert manifest(out)["notes"] == [note]
    assert _dtypes(out) == {"label": "int64", "pixel0": "int64", "pixel1": "int64", "v": "float16"}
    out = str(tmp_path / "o2")  # the per-column way: a pattern, with the float16 report
    r = lovecraft(
        "convert", str(p), "-o", out, "--to", "memmap", "-q", "--dtype", "float16", "--column-type", "pixel*=float16"
    )
    note2 = (
        "--dtype float16 narrows floating columns; integer columns are kept as they are: label "
        "(to narrow them too: --column-type label=float16)"
    )
    assert (r.exit_code, r.stderr) == (0, f"note: {note2}\n")
    assert _dtypes(out) == {"label": "int64", "pixel0": "float16", "pixel1": "float16", "v": "float16"}
    assert np.load(os.path.join(out, "pixel1.npy")).tolist() == [255.0, 4.0]
    assert manifest(out)["float16"]["pixel1"]["values"] == 2
    m = lc.shard(str(p), str(tmp_path / "s"), to="memmap", dtype="float16", num_shards=2)
    assert m["notes"] == [note]
    assert "notes" not in lc.convert(str(p), str(tmp_path / "n"), to="memmap")  # nothing to say
