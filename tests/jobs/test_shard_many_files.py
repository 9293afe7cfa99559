"""``shard`` of many small files (issue 38, point 13): each unit of work resolved every input (a
stat and a peek per file) and there was a unit per file, so the cost per file grew with the count
(100 files 3.5 s, 1,000 files 37 s, 100,000 files: 237 units in 5 minutes). Now small files are
gathered into parts of up to the part size, a unit opens only the files of its part (and the first,
which settles the columns), and a part of small CSV files is parsed in a few calls, not one per
file. Counted here (file resolutions and opens), not timed."""

from __future__ import annotations

import os
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

import lovecraft_convert.inputs.sources as sources
import lovecraft_convert.storage as storage
from lovecraft_convert import shard
from lovecraft_convert.inputs import open_reader
from tests.conftest import SHARED, SUBPROCESS_ENV, lovecraft, memcapped

MEMCAP = os.path.join(SHARED, "tools", "memcap")


def _files(d, n: int, kind: str = "csv") -> list[str]:
    os.makedirs(d, exist_ok=True)
    out = []
    for i in range(n):
        p = os.path.join(d, f"f{i:06d}.{kind}")
        with open(p, "w") as f:
            if kind == "csv":  # (every file the same size: numbers in 7 digits)
                f.write(f"a,b\n{i:07d},{2 * i:07d}\n{i:07d},{3 * i:07d}\n")
            elif kind == "jsonl":  # (the first file holds the records that settle the columns)
                reps = 500 if i == 0 else 1
                f.write(f'{{"a": {i:7d}, "b": {2 * i:7d}}}\n{{"a": {i:7d}, "b": {3 * i:7d}}}\n' * reps)
            else:
                f.write(f"line {i:07d}\nmore {i:07d}\n")
        out.append(p)
    return out


def test_small_files_are_gathered_into_parts_of_the_part_size(tmp_path):
    from lovecraft_convert.jobs.shard import unit_inputs

    files = _files(tmp_path / "in", 600)
    size = os.path.getsize(files[0])
    reader = open_reader(files, budget=64 << 20)
    (part,) = reader.partitions(64 << 20)
    assert (part.spec, part.stop_spec) == (0, 600)
    parts = reader.partitions(10 * size)
    assert len(parts) == 60 and all(len(p.spec_range) == 10 for p in parts)
    local, specs = unit_inputs(reader, parts[7])
    assert [s.path for s in specs] == [files[0], *files[70:80]]  # the first (columns), and its own
    assert list(local.spec_range) == list(range(1, 11)) and local.index == 7


@pytest.mark.parametrize("kind", ["csv", "jsonl", "txt"])
def test_each_unit_opens_its_own_files(tmp_path, monkeypatch, kind):
    """Was: every unit resolved every input (units x files stats and peeks)."""
    n = 400
    files = _files(tmp_path / "in", n, kind)
    resolved, opened = [], []
    check, open_input = sources._check_file, storage.open_input
    monkeypatch.setattr(sources, "_check_file", lambda p, *a, **k: (resolved.append(p), check(p, *a, **k))[1])
    monkeypatch.setattr(storage, "open_input", lambda p, *a, **k: (opened.append(p), open_input(p, *a, **k))[1])
    out = str(tmp_path / "out")
    size = os.path.getsize(files[0])
    shard(files, out, to="parquet", num_shards=3, workers=1, progress=False, part_bytes=10 * size)
    assert len(resolved) <= 2 * n  # (once by the command's check of its inputs, once by the run)
    assert sum(p.startswith(str(tmp_path / "in")) for p in opened) <= 4 * n
    t = pq.read_table(out)
    if kind == "txt":
        want = [f"line {i:07d}" for i in range(n)] + [f"more {i:07d}" for i in range(n)]
        assert sorted(t.column("text").to_pylist()) == sorted(want)
    else:
        got = sorted(zip(t.column("a").to_pylist(), t.column("b").to_pylist(), strict=True))
        first = 499 if kind == "jsonl" else 0
        assert got == sorted([(i, 2 * i) for i in range(n)] + [(i, 3 * i) for i in range(n)] + [(0, 0), (0, 0)] * first)


def test_a_bad_file_among_gathered_small_files_is_named(tmp_path):
    files = _files(tmp_path / "in", 200)
    with open(files[57], "a") as f:
        f.write("1,2,3\n")
    r = lovecraft("shard", *files, "-o", str(tmp_path / "out"), "--to", "parquet", "--num-shards", "2", "-q")
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {files[57]}")


@pytest.mark.slow
def test_100000_small_files_under_a_512_mib_cap(tmp_path):
    if not os.access(MEMCAP, os.X_OK):
        pytest.skip(f"{MEMCAP} not found")
    d = tmp_path / "in"
    d.mkdir()
    n = 100_000
    for i in range(n):
        (d / f"f{i:06d}.csv").write_text(f"a,b\n{i},{2 * i}\n{i + 1},{3 * i}\n")
    out = str(tmp_path / "out")
    lovecraft_bin = os.path.join(os.path.dirname(sys.executable), "lovecraft")
    r, peak = memcapped(
        MEMCAP, 512, [lovecraft_bin, "shard", f"{d}/*.csv", "-o", out, "--to", "parquet", "--num-shards", "4", "-q"],
        env=SUBPROCESS_ENV, timeout=3600,
    )  # fmt: skip
    if r.returncode == 3:
        pytest.skip("memcap cannot make a memory cgroup here")
    print(f"\n100,000 files: rc {r.returncode}, peak {peak} MiB (cap 512)")
    assert r.returncode == 0, r.stderr[-2000:]
    t = pq.read_table(out)
    a = np.sort(np.asarray(t.column("a")))
    np.testing.assert_array_equal(a, np.sort(np.concatenate([np.arange(n), np.arange(1, n + 1)])))
