"""The channel of input bytes from running units to the driver's bar (:mod:`engine.meter`), and
what the units count: each part's reader counts the bytes of its own part, so that the parts of
an input add up to its size, whatever reads them."""

from __future__ import annotations

import gzip
import io
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lovecraft_convert.engine import meter
from lovecraft_convert.engine.journal import SPILL
from lovecraft_convert.engine.meter import ByteBar, UnitMeter, meter_dir, read_count
from lovecraft_convert.inputs import open_reader


@pytest.fixture
def work(tmp_path):
    os.makedirs(tmp_path / SPILL)
    return str(tmp_path)


@pytest.fixture
def terminal(monkeypatch):
    """stderr as a buffer the bar draws into."""
    buf = io.StringIO()
    monkeypatch.setattr("sys.stderr", buf)
    return buf


def test_no_bar_no_counts(work):
    bar = ByteBar(work, 1000, 0, False, "reading")
    m = UnitMeter(work, 0, lambda: 500)
    m.tick()
    assert m.close() == 500  # the unit's count still goes in its fragment
    assert not os.path.exists(meter_dir(work))  # nothing written where no bar is shown
    bar.finished(0, 500)
    bar.close()


def test_unit_counts_reach_the_bar(work, terminal, monkeypatch):
    monkeypatch.setattr(meter, "INTERVAL", 0.0)
    bar = ByteBar(work, 1000, 100, True, "reading")  # 100 bytes read before a --resume
    done = {"a": 0, "b": 0}
    a = UnitMeter(work, 1, lambda: done["a"])
    b = UnitMeter(work, 2, lambda: done["b"])
    done.update(a=300, b=200)
    a.tick()
    b.tick()
    assert read_count(os.path.join(meter_dir(work), "1")) == 300
    assert read_count(os.path.join(meter_dir(work), "2")) == 200
    bar.finished(1, a.close())  # unit 1 done: its fragment's count replaces its file
    assert not os.path.exists(os.path.join(meter_dir(work), "1"))
    assert bar.bar.n >= 400
    bar.close()
    assert not os.path.exists(meter_dir(work))


def test_the_bar_stops_at_the_total(work, terminal):
    bar = ByteBar(work, 1000, 0, True, "reading")
    bar.finished(0, 600)
    bar.finished(1, 900)  # counts over the total (footers, headers): the bar stops at the total
    assert bar.bar.n == 1000
    bar.close()


@pytest.mark.parametrize("raw", [b"", b"123", b"0" * 20 + b"1" * 20, b"x" * 40])
def test_a_torn_or_foreign_count_is_ignored(tmp_path, raw):
    p = tmp_path / "k"
    p.write_bytes(raw)
    assert read_count(str(p)) is None


def _parts_bytes(paths: list[str], target: int, **kw) -> tuple[list[int], int]:
    """What each part's own reader (as in a unit) counts after reading it, and the input's total."""
    reader = open_reader(paths, budget=1 << 20, **kw)
    counts = []
    for part in reader.partitions(target):
        r = open_reader(paths, budget=1 << 20, **kw)
        for _ in r.part_batches(part):
            pass
        counts.append(r.progress_done())
    return counts, reader.progress_total()


def test_text_and_csv_parts_add_up_to_the_input(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_bytes(b"".join(b"line %d\n" % i for i in range(200_000)))
    counts, total = _parts_bytes([str(txt)], 256 << 10)
    assert len(counts) > 3 and all(c > 0 for c in counts) and sum(counts) == total == txt.stat().st_size
    csv = tmp_path / "a.csv"
    csv.write_bytes(b"a,b\n" + b"".join(b"%d,%d\n" % (i, i * 3) for i in range(200_000)))
    counts, total = _parts_bytes([str(csv)], 256 << 10)
    assert len(counts) > 3 and sum(counts) == total == csv.stat().st_size


def test_compressed_input_counts_its_compressed_bytes(tmp_path):
    gz = tmp_path / "a.txt.gz"
    gz.write_bytes(gzip.compress(b"".join(b"line %d\n" % i for i in range(100_000)), mtime=0))
    counts, total = _parts_bytes([str(gz)], 256 << 10)
    assert counts == [total] == [gz.stat().st_size]


def test_npy_parts_add_up_to_the_input(tmp_path):
    a = tmp_path / "x.npy"
    np.save(a, np.arange(300_000, dtype=np.float64).reshape(-1, 3))
    counts, total = _parts_bytes([str(a)], 64 << 10)
    assert len(counts) > 3 and all(c > 0 for c in counts)
    assert abs(sum(counts) - total) <= len(counts)  # each part's share of the file (rounded down)


def test_parquet_parts_count_their_row_groups(tmp_path):
    p = tmp_path / "x.parquet"
    pq.write_table(pa.table({"x": np.arange(400_000)}), p, row_group_size=50_000)
    counts, total = _parts_bytes([str(p)], 64 << 10)
    assert len(counts) > 3 and all(c > 0 for c in counts)
    assert 0.9 * total < sum(counts) <= total  # the row groups, not the footer
