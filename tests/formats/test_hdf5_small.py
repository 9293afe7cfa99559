"""A table of unknown length (a CSV) that turns out small is written knowing its length: its chunks
are no longer than the table, so the file is about the size of the data, not of one 1 MiB chunk
per column. A larger one is written as it comes, its datasets growing. Either way h5py reads back
the values parsed from the source, and verify passes."""

import csv
import os

import h5py
import numpy as np

from tests.conftest import lovecraft


def _csv(path, rows: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64) * 7 - 1000
    xs = rng.normal(size=(rows, 3))
    names = [f"city-{i % 17}-é" for i in range(rows)]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "x0", "x1", "x2", "name"])
        for i in range(rows):
            w.writerow([int(ids[i]), *(repr(float(v)) for v in xs[i]), names[i]])
    return ids, xs, names


def _check(out, ids, xs, names):
    with h5py.File(out / "data.h5", "r") as f:
        assert list(f.keys()) == ["id", "x0", "x1", "x2", "name"]  # the columns' order kept
        assert np.array_equal(f["id"][:], ids) and f["id"].dtype == np.int64
        for j in range(3):
            assert np.array_equal(f[f"x{j}"][:], xs[:, j]) and f[f"x{j}"].fletcher32
        assert f["name"].asstr()[:].tolist() == names
        return {k: f[k].chunks[0] for k in f}


def test_a_small_csv_makes_a_small_file(tmp_path):
    src = tmp_path / "small.csv"
    ids, xs, names = _csv(src, 500)
    out = tmp_path / "out"
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "hdf5", "-q")
    assert r.exit_code == 0, r.stderr
    chunks = _check(out, ids, xs, names)
    assert set(chunks.values()) == {500}
    data = 500 * (4 * 8 + 16)  # four 8-byte columns, a string reference per row
    assert os.path.getsize(out / "data.h5") < data + (64 << 10)  # was ~4.2 MB of padded chunks
    v = lovecraft("verify", str(out), "--against", str(src), "-q")
    assert v.exit_code == 0, v.stderr


def test_a_table_larger_than_the_writers_share_grows_as_it_comes(tmp_path):
    """At --max-memory 16MiB the writer holds up to 1 MiB before it makes the file: 40,000 rows
    (~2 MB) are past it, so the datasets are made for an unknown length and grow."""
    src = tmp_path / "big.csv"
    ids, xs, names = _csv(src, 40_000)
    out = tmp_path / "out"
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "hdf5", "--max-memory", "16MiB", "-q")
    assert r.exit_code == 0, r.stderr
    chunks = _check(out, ids, xs, names)
    assert chunks["name"] == 4096 and chunks["x0"] != 40_000
    v = lovecraft("verify", str(out), "--against", str(src), "-q")
    assert v.exit_code == 0, v.stderr


def test_a_bad_row_while_the_table_is_held_leaves_no_output(tmp_path):
    src = tmp_path / "bad.csv"
    lines = ["a,b,name"] + [f"{i},{i * 0.5},n{i}" for i in range(300)]
    lines[200] = "199,1.5,x,extra"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "hdf5", "-q")
    assert r.exit_code == 1
    assert r.stderr.strip() == (
        f"Error: {src}, row 200 (line 201): expected 3 fields, found 4; "
        "fix the row (is a quote unbalanced or a delimiter missing?)"
    )
    assert not out.exists()
