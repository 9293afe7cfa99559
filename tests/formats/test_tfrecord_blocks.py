"""The block index of TFRecord files (formats/tfrecord/blocks.py): written into the manifest, equal
to the offsets computed from the files themselves (plain and gzip, where every block is a gzip
member that tf.data and gzip read as one stream), checked by ``verify``, refused by the loader when
it does not fit the file, and not needed by datasets written before it (plain files are indexed on
first use; gzip ones read from their start)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lovecraft_convert as lc
from lovecraft_convert.errors import DatasetError
from lovecraft_convert.formats.tfrecord.blocks import decode_blocks, scan_index
from lovecraft_convert.loaders import open_dataset
from tests.loaders.helpers import write_npy

N = 5000


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("blocks")
    ids = np.arange(N, dtype=np.int64)
    cols = {"id": ids, "x": np.repeat(ids[:, None].astype(np.float32), 256, axis=1)}  # ~1 KiB records
    inputs = write_npy(tmp / "src", cols)
    out = {}
    for comp in (None, "gzip"):
        path = str(tmp / f"tfr-{comp}")
        opts = {"compression": comp} if comp else {}
        lc.shard(inputs, path, to="tfrecord", num_shards=2, workers=1, progress=False, **opts)
        out[comp] = path
    return out


def _count(data: bytes) -> int:
    """Records in TFRecord bytes, walking the length fields (8 + 4 + length + 4 bytes each)."""
    p = k = 0
    while p < len(data):
        p += 16 + struct.unpack_from("<Q", data, p)[0]
        k += 1
    assert p == len(data)
    return k


def _manifest(path):
    with open(os.path.join(path, "_manifest.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("comp", [None, "gzip"])
def test_the_index_is_where_the_blocks_start_in_the_files(written, comp):
    m = _manifest(written[comp])
    blocks = m["tfrecord"]["blocks"]
    assert sorted(blocks) == sorted(f["path"] for f in m["files"])
    for f in m["files"]:
        full = os.path.join(written[comp], f["path"])
        n, offsets = decode_blocks(blocks[f["path"]], f["rows"], os.path.getsize(full), full)
        assert len(offsets) - 1 == -(-f["rows"] // n) >= 2
        assert np.array_equal(offsets, scan_index(full, comp == "gzip", n))
        if comp == "gzip":  # every block a gzip member: decompressing from its offset gives record k*N
            with open(full, "rb") as fh:
                data = fh.read()
            for k in range(len(offsets) - 1):
                member = gzip.decompress(data[offsets[k] : offsets[k + 1]])
                assert _count(member) == min(n, f["rows"] - k * n)
            assert _count(gzip.decompress(data)) == f["rows"]  # and the file is one ordinary gzip file


@pytest.mark.parametrize("comp", [None, "gzip"])
def test_verify_passes_and_tf_data_reads_every_record(written, comp):
    assert lc.verify(written[comp]).ok
    tf = pytest.importorskip("tensorflow")
    files = sorted(os.path.join(written[comp], f) for f in os.listdir(written[comp]) if ".tfrecord" in f)
    count = sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP" if comp else ""))
    assert count == N


def _copy(src, tmp_path):
    dst = str(tmp_path / "copy")
    shutil.copytree(src, dst)
    return dst


def _edit_blocks(path, fn):
    mp = os.path.join(path, "_manifest.json")
    with open(mp) as f:
        m = json.load(f)
    fn(m["tfrecord"])
    with open(mp, "w") as f:
        json.dump(m, f)


@pytest.mark.parametrize("comp", [None, "gzip"])
def test_a_wrong_index_is_caught_by_verify_and_refused_by_the_loader(written, comp, tmp_path):
    ds = _copy(written[comp], tmp_path)
    rel = sorted(_manifest(ds)["tfrecord"]["blocks"])[0]

    def shift(info):  # move the second block's start by 8 bytes (the sizes still add up)
        runs = info["blocks"][rel]["bytes"]
        sizes = [s for s, c in runs for _ in range(c)]
        sizes[0] += 8
        sizes[1] -= 8
        info["blocks"][rel]["bytes"] = [[s, 1] for s in sizes]

    _edit_blocks(ds, shift)
    r = lc.verify(ds)
    assert not r.ok
    assert any(f"{rel}: block 1 starts at byte" in line for line in r.lines()), r.lines()

    def drop_one(info):
        info["blocks"][rel]["bytes"][-1][1] -= 1

    ds2 = _copy(written[comp], tmp_path / "b")
    _edit_blocks(ds2, drop_one)
    with pytest.raises(DatasetError) as e:
        list(open_dataset(ds2).batches(100, shuffle=True, seed=1))
    assert "the manifest lists" in str(e.value) and rel in str(e.value)


@pytest.mark.parametrize("comp", [None, "gzip"])
def test_datasets_written_without_an_index_read_the_same(written, comp, tmp_path):
    ds = _copy(written[comp], tmp_path)
    _edit_blocks(ds, lambda info: info.pop("blocks"))
    opts = dict(shuffle=True, seed=3, shuffle_buffer=1500)
    want = [b["id"] for b in open_dataset(written[comp]).batches(100, **opts)]
    got = [b["id"] for b in open_dataset(ds).batches(100, **opts)]
    assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
    st = open_dataset(ds).state_at(100, shuffle=True, seed=3, step=30, shuffle_buffer=1500)
    rest = [b["id"] for b in open_dataset(ds).batches(100, **opts, state=st)]
    assert all(np.array_equal(a, b) for a, b in zip(want[30:], rest, strict=True))


def _frame(payload: bytes) -> bytes:
    return struct.pack("<Q", len(payload)) + b"\0" * 4 + payload + b"\0" * 4  # (scan_index reads lengths only)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    runs=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 300)), min_size=1, max_size=40),
    n=st.integers(1, 50),
    chunk=st.sampled_from([64, 1000, 1 << 16]),
)
def test_scan_index_of_runs_of_lengths_is_where_each_block_starts(tmp_path, runs, n, chunk, monkeypatch):
    """Records of varying lengths and runs of one length, read in chunks of any size: the offsets
    of records 0, n, 2n, ... and the file's size. (A record of varying length was checked against
    every record left in its chunk: 63 s to verify a 160 MB shuffled dataset, 5.6 s now.)"""
    import lovecraft_convert.formats.tfrecord.blocks as blocks

    read = blocks._read_chunks
    monkeypatch.setattr(blocks, "_read_chunks", lambda path, size=None: read(path, chunk))
    data, starts = b"", []
    for length, count in runs:
        for _ in range(count):
            starts.append(len(data))
            data += _frame(b"x" * length)
    path = tmp_path / "r.tfrecord"
    path.write_bytes(data)
    want = np.array([*starts[::n], len(data)], dtype=np.int64)
    assert np.array_equal(scan_index(str(path), False, n), want)
