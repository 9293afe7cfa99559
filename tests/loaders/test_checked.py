"""The loaders' checked reader (loaders/checked.py) hands a window's blocks to the format's own
``read_blocks`` in one call (TFRecord decodes them together), and checks the rows it gives back."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import lovecraft_convert as lc
from lovecraft_convert.errors import DatasetError
from lovecraft_convert.formats.base import PartReader
from lovecraft_convert.formats.tfrecord import reader as tfrecord_reader
from lovecraft_convert.loaders import open_dataset
from lovecraft_convert.loaders.checked import CheckedReader
from lovecraft_convert.schema import FIXED, Batch, Field, Schema

SCHEMA = Schema((Field("x", FIXED, "int64"),))


class BlockReader(PartReader):
    """A format's reader (as a plugin writes one) of 40 rows in blocks of 10, with a
    ``read_blocks`` of its own that notes each call; ``lose``: rows it drops (a broken one)."""

    def __init__(self, lose: int = 0) -> None:
        super().__init__(40, SCHEMA)
        self.calls: list[list] = []
        self.lose = lose

    def block_starts(self) -> np.ndarray:
        return np.arange(0, 41, 10, dtype=np.int64)

    def read(self, start: int, stop: int) -> Batch:
        return Batch({"x": np.arange(start, stop, dtype=np.int64)})

    def take(self, idx: np.ndarray) -> Batch:
        return Batch({"x": np.asarray(idx, dtype=np.int64)})

    def read_blocks(self, blocks: list) -> Batch:
        self.calls.append(blocks)
        b = super().read_blocks(blocks)
        return b.slice(0, b.num_rows - self.lose)


def test_a_windows_blocks_go_to_the_formats_own_read_blocks_in_one_call():
    inner = BlockReader()
    r = CheckedReader(inner, SCHEMA, lambda f: f.np_dtype, "part 0")
    blocks = [(2, None), (0, np.array([1, 3])), (3, np.array([0, 9]))]
    got = r.read_blocks(blocks)
    assert len(inner.calls) == 1 and inner.calls[0] == blocks
    assert got.columns["x"].tolist() == [*range(20, 30), 1, 3, 30, 39]


def test_rows_missing_from_read_blocks_are_one_line_naming_the_part():
    r = CheckedReader(BlockReader(lose=1), SCHEMA, lambda f: f.np_dtype, "part 0")
    with pytest.raises(DatasetError) as e:
        r.read_blocks([(1, None), (2, np.array([4]))])
    assert str(e.value).splitlines()[0].startswith("part 0: 10 rows read where the manifest's counts promise 11")


@pytest.mark.parametrize("group_bytes", [None, 4096])
def test_tfrecord_blocks_through_the_checked_reader_are_the_formats_own(tmp_path, monkeypatch, group_bytes):
    """A real TFRecord part of text and float64 rows: the checked reader's ``read_blocks`` gives the
    blocks asked for (whole, or some rows of them), in that order, with the CSV's values; also when
    they are framed and decoded in many small groups (by the decoding threads, out of step), whose
    threads are gone when it returns."""
    if group_bytes:
        monkeypatch.setattr(tfrecord_reader, "GROUP_BYTES", group_bytes)
    n = 30_000
    src = tmp_path / "t.csv"
    text = [f"row {i} " + "word " * (i % 13) for i in range(n)]
    with open(src, "w") as f:
        f.write("id,text,v\n")
        f.writelines(f"{i},{text[i]},{i / 7!r}\n" for i in range(n))
    out = str(tmp_path / "ds")
    lc.convert(str(src), out, to="tfrecord", progress=False)
    ds = open_dataset(out)
    g = ds.groups[0]
    r = ds.reader(g, g.parts[0])
    assert isinstance(r, CheckedReader)
    starts = r.block_starts()
    assert len(starts) > 3
    got = r.read_blocks([(2, None), (0, np.array([0, 5, 7])), (1, None)])
    expect = np.concatenate([np.arange(starts[2], starts[3]), [0, 5, 7], np.arange(starts[1], starts[2])])
    np.testing.assert_array_equal(got.columns["id"], expect)
    assert got.columns["text"].to_pylist("string") == [text[i] for i in expect]
    np.testing.assert_array_equal(got.columns["v"], expect / 7)
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("lovecraft-decode", "lovecraft-reader"))]
