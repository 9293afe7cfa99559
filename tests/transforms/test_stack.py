"""``--stack-columns``: many numeric columns become one ``[rows, k]`` column, in every format,
read back with the standard readers against the values the test wrote."""

from __future__ import annotations

import os

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.readback import READERS, manifest


@pytest.fixture
def wide(tmp_path):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(500, 40))
    x[:, 7] = np.round(x[:, 7] * 100)  # an int-looking column: promoted with the floats
    label = rng.integers(0, 9, size=500)
    header = ["id", *[f"c{i}" for i in range(40)], "label"]
    lines = [",".join(header)]
    for i in range(500):
        vals = [repr(int(v)) if j == 7 else repr(float(v)) for j, v in enumerate(x[i])]
        lines.append(",".join([str(i), *vals, str(label[i])]))
    p = tmp_path / "w.csv"
    p.write_text("\n".join(lines) + "\n")
    return str(p), x, label


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord"])
def test_stacked_columns_in_every_format(wide, tmp_path, fmt):
    src, x, label = wide
    out = str(tmp_path / fmt)
    r = lovecraft("convert", src, "-o", out, "--to", fmt, "--stack-columns", "x=c0:c39", "-q")
    assert r.exit_code == 0, r.stderr
    m = manifest(out)
    assert [(f["name"], f["dtype"], f["shape"]) for f in m["schema"]] == [
        ("id", "<i8", []),
        ("x", "<f8", [40]),
        ("label", "<i8", []),
    ]
    got = READERS[fmt](out)
    np.testing.assert_array_equal(np.asarray(got["x"]).reshape(500, 40), x)
    np.testing.assert_array_equal(np.asarray(got["label"]).reshape(-1), label)
    if fmt == "memmap":
        assert np.load(os.path.join(out, "x.npy"), mmap_mode="r").shape == (500, 40)
    assert lc.verify(out, against=src).ok


def test_patterns_several_stacks_and_shard(wide, tmp_path):
    src, x, _ = wide
    out = str(tmp_path / "s")
    r = lovecraft("shard", src, "-o", out, "--to", "parquet", "--num-shards", "3", "--workers", "2",
                  "--stack-columns", "a=c?", "--stack-columns", "b=c[1-3]?", "--dtype", "float16", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    m = manifest(out)
    shapes = {f["name"]: (f["dtype"], f["shape"]) for f in m["schema"]}
    assert shapes["a"] == ("<f2", [10]) and shapes["b"] == ("<f2", [30])
    got = READERS["parquet"](out)
    np.testing.assert_array_equal(np.asarray(got["a"]).reshape(500, 10), x[:, :10].astype(np.float16))
    assert lc.verify(out, against=src).ok


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--stack-columns", "x"], 2, "--stack-columns 'x': give NAME=FIRST:LAST or NAME=PATTERN; e.g. x=c0:c1999"),
        (["--stack-columns", "x=q*"], 2, "--stack-columns x=q*: no column matches 'q*'"),
        (["--stack-columns", "x=c0:c99"], 2, "--stack-columns: no column 'c99'; the range FIRST:LAST names two columns"),
        (["--stack-columns", "x=c0:c3", "--stack-columns", "y=c2:c5"], 2, "--stack-columns: column 'c2' is in both x and y"),
        (["--stack-columns", "label=c0:c3"], 2, "--stack-columns: 'label' would name two columns; choose another name"),
    ],
)  # fmt: skip
def test_mistakes(wide, tmp_path, args, code, message):
    src = wide[0]
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", *args)
    assert r.exit_code == code and message in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "o")


def test_text_cannot_be_stacked(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("a,b\n1,x\n2,y\n")
    r = lovecraft("convert", str(p), "-o", str(tmp_path / "o"), "--to", "parquet", "--stack-columns", "s=a:b")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {p}, column 'b': string cannot be stacked into 's'; stack numeric columns only "
        "(give it a numeric --column-type, or leave it out)\n",
    )


def test_a_table_too_wide_for_the_budget_says_how_much_it_needs(tmp_path):
    p = tmp_path / "w.csv"
    cols = 5000
    p.write_text(",".join(f"c{i}" for i in range(cols)) + "\n" + ",".join("1.5" for _ in range(cols)) + "\n")
    r = lovecraft("convert", str(p), "-o", str(tmp_path / "o"), "--to", "hdf5", "--max-memory", "16MiB")
    assert (r.exit_code, r.stderr) == (
        2,
        f"Error: {p}: 5000 columns need at least 126 MiB to be written as hdf5 (24 KiB per column), more than "
        "--max-memory 16MiB; raise --max-memory to 126MiB or more, or stack numeric columns with --stack-columns\n",
    )
    r = lovecraft("convert", str(p), "-o", str(tmp_path / "o"), "--to", "hdf5", "--max-memory", "16MiB",
                  "--stack-columns", "x=c0:c4999", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
