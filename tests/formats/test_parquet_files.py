"""Parquet of a wide table: pyarrow's writer holds ~0.8 KiB per column chunk until the footer, so
a unit starts a new file when one file's footer would outgrow half the writer's memory. The files
must hold the source's rows in order (read by polars over the glob and by us), verify must pass
and must name a damaged file, and a table that fits keeps its one ``data.parquet``."""

from __future__ import annotations

import csv
import json

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from lovecraft_convert.formats.base import WriteOptions
from lovecraft_convert.formats.parquet.writer import CHUNK_METADATA, ParquetWriter
from lovecraft_convert.schema import Batch, Field, Schema
from tests.conftest import lovecraft
from tests.readback import assert_manifest_matches_disk

WIDTH, ROWS = 500, 4500


@pytest.fixture(scope="module")
def wide_csv(tmp_path_factory):
    rng = np.random.default_rng(11)
    values = np.round(rng.normal(size=(ROWS, WIDTH)), 4)
    path = tmp_path_factory.mktemp("wide") / "wide.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([f"c{i}" for i in range(WIDTH)])
        w.writerows(values.tolist())
    return path, values


def _converted(tmp_path, wide_csv, memory: str):
    src, values = wide_csv
    out = tmp_path / "out"
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "parquet", "--max-memory", memory, "-q")
    assert r.exit_code == 0, r.stderr
    return out, values


def test_a_wide_table_is_written_as_several_files_holding_every_row_in_order(tmp_path, wide_csv):
    out, values = _converted(tmp_path, wide_csv, "16MiB")
    m = json.loads((out / "_manifest.json").read_text())
    names = [f["path"] for f in m["files"]]
    assert len(names) > 1 and names == [f"data-{k:05d}.parquet" for k in range(len(names))]
    assert m["shards"][0]["files"] == names and sum(f["rows"] for f in m["files"]) == ROWS
    # every file's footer within half the writer's memory (16 MiB / 4 / 2)
    for n in names:
        md = pq.ParquetFile(out / n).metadata
        assert md.num_row_groups * WIDTH * CHUNK_METADATA <= (16 << 20) // 8
    df = pl.read_parquet(str(out / "*.parquet"))  # an independent reader, over the glob
    assert df.shape == (ROWS, WIDTH) and np.array_equal(df.to_numpy(), values)
    from lovecraft_convert import open_dataset

    ds = open_dataset(str(out))
    got = np.concatenate([np.stack([b[f"c{i}"] for i in (0, 250, WIDTH - 1)], 1) for b in ds.batches(700)])
    assert np.array_equal(got, values[:, [0, 250, WIDTH - 1]])
    # a shuffled epoch draws the row groups of every file: each row exactly once
    pairs = np.concatenate([np.stack([b["c0"], b["c1"]], 1) for b in ds.batches(256, shuffle=True, seed=3)])
    assert len(pairs) == ROWS and not np.array_equal(pairs[:, 0], values[:, 0])
    order = np.lexsort(pairs.T[::-1])
    want = values[:, :2][np.lexsort(values[:, :2].T[::-1])]
    assert np.array_equal(pairs[order], want)
    assert_manifest_matches_disk(str(out))
    r = lovecraft("verify", str(out), "--against", str(wide_csv[0]))
    assert r.exit_code == 0, r.stderr + r.stdout


def test_verify_names_the_damaged_file_of_several(tmp_path, wide_csv):
    out, _ = _converted(tmp_path, wide_csv, "16MiB")
    victim = out / "data-00001.parquet"
    data = bytearray(victim.read_bytes())
    data[len(data) // 3] ^= 0xFF
    victim.write_bytes(bytes(data))
    r = lovecraft("verify", str(out))
    assert r.exit_code == 1
    assert "data-00001.parquet" in r.stdout + r.stderr


def test_a_table_that_fits_keeps_one_file(tmp_path, wide_csv):
    out, values = _converted(tmp_path, wide_csv, "256MiB")
    m = json.loads((out / "_manifest.json").read_text())
    assert [f["path"] for f in m["files"]] == ["data.parquet"]
    assert np.array_equal(pl.read_parquet(out / "data.parquet").to_numpy(), values)


def test_the_writer_rolls_over_by_its_memory(tmp_path):
    """Direct: 100 columns and 4 MiB of memory (footers within a quarter of it) allow 6 row groups
    per file."""
    schema = Schema(tuple(Field(f"x{i}", "fixed", "<i8") for i in range(100)))
    opts = WriteOptions(row_group_bytes=1, memory=4 << 20)
    w = ParquetWriter(str(tmp_path), "shard-00003", schema, opts)
    per_file = (1 << 20) // (CHUNK_METADATA * 100)
    assert per_file == 6
    for k in range(20):  # each batch is a row group (row_group_bytes=1)
        w.write(Batch({f"x{i}": np.arange(k * 10, k * 10 + 10, dtype=np.int64) + i for i in range(100)}, 10))
    files = w.close()
    assert [f.path for f in files] == [f"shard-00003-{k:05d}.parquet" for k in range(len(files))]
    assert len(files) == -(-20 // per_file) and [f.rows for f in files][:-1] == [10 * per_file] * (len(files) - 1)
    df = pl.concat([pl.read_parquet(tmp_path / f.path) for f in files])
    assert np.array_equal(df["x7"].to_numpy(), np.arange(200) + 7)


def test_verify_refuses_file_rows_that_do_not_add_up(tmp_path, wide_csv):
    out, _ = _converted(tmp_path, wide_csv, "16MiB")
    p = out / "_manifest.json"
    m = json.loads(p.read_text())
    m["files"][1]["rows"] += 5
    p.write_text(json.dumps(m))
    r = lovecraft("verify", str(out))
    assert r.exit_code == 1
    text = r.stdout + r.stderr
    assert f"data-00000.parquet: the files of shard 0 add up to {ROWS + 5} rows, the manifest says {ROWS}" in text
    assert "data-00001.parquet: holds" in text


def _row_groups(path) -> list[int]:
    md = pq.ParquetFile(path).metadata
    return [md.row_group(g).num_rows for g in range(md.num_row_groups)]


def test_the_manifest_lists_each_files_row_groups_as_its_footer_says(tmp_path, wide_csv):
    """parquet.blocks: what a reader plans an epoch from without opening every file (a GET each on
    a store); pyarrow's own footers are the reference, for a unit written as several files."""
    out, _ = _converted(tmp_path, wide_csv, "16MiB")
    m = json.loads((out / "_manifest.json").read_text())
    listed = m["parquet"]["blocks"]
    assert sorted(listed) == sorted(f["path"] for f in m["files"]) and len(listed) > 1
    for name, entry in listed.items():
        assert entry["rows"] == _row_groups(out / name)


def test_the_direct_writers_listing_follows_a_renamed_first_file(tmp_path):
    schema = Schema(tuple(Field(f"x{i}", "fixed", "<i8") for i in range(100)))
    w = ParquetWriter(str(tmp_path), "shard-00003", schema, WriteOptions(row_group_bytes=1, memory=4 << 20))
    for k in range(9):
        w.write(Batch({f"x{i}": np.arange(k * 10, k * 10 + 10 + k, dtype=np.int64) for i in range(100)}, 10 + k))
    files = w.close()
    listed = w.manifest_extra()["parquet"]["blocks"]
    assert sorted(listed) == sorted(f.path for f in files) == ["shard-00003-00000.parquet", "shard-00003-00001.parquet"]
    for f in files:
        assert listed[f.path]["rows"] == _row_groups(tmp_path / f.path) and sum(listed[f.path]["rows"]) == f.rows
    assert listed["shard-00003-00000.parquet"]["rows"] == [10, 11, 12, 13, 14, 15]


def test_an_edited_row_group_listing_is_refused_by_the_reader_and_verify(tmp_path):
    """Rows moved from one listed row group to another (the file's total unchanged): the reader
    would cut the blocks wrong, so it names the file and both listings; verify names it too."""
    from lovecraft_convert import open_dataset
    from lovecraft_convert.errors import DatasetError

    src = tmp_path / "x.npy"
    np.save(src, np.arange(3000, dtype=np.int64))
    out = tmp_path / "out"
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr
    p = out / "_manifest.json"
    m = json.loads(p.read_text())
    assert m["parquet"]["blocks"] == {"data.parquet": {"rows": [3000]}}
    m["parquet"]["blocks"]["data.parquet"]["rows"] = [1000, 2000]
    p.write_text(json.dumps(m))
    want = "holds row groups of [3000] rows, the manifest's parquet.blocks says [1000, 2000]"
    with pytest.raises(DatasetError) as e:
        list(open_dataset(str(out)).batches(100, shuffle=True, seed=0))
    assert str(e.value) == f"{out / 'data.parquet'}: {want}; the manifest was edited or damaged; re-create the dataset"
    r = lovecraft("verify", str(out))
    assert r.exit_code == 1
    assert f"data.parquet: {want}" in r.stdout + r.stderr
