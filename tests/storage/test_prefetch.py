"""Prefetching a reader's pieces in its order (storage/prefetch.py) and reading a remote dataset's
files through the cache (storage/remote.py), against the S3 test server: the pieces come in the
reader's order, a few ahead, each fetched once; the cache never holds more than its limit; reads
of any range and a Parquet file read by pyarrow through it give the object's bytes."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from lovecraft_convert.storage.cache import Cache, Piece
from lovecraft_convert.storage.prefetch import Prefetcher
from lovecraft_convert.storage.remote import DEMAND_BLOCK, RemoteFile, Sessions

from .test_cache import blake3_hex, cache_bytes, put


class Sampler:
    """The cache directory's size, sampled every few milliseconds while a test reads."""

    def __init__(self, root: str) -> None:
        self.root, self.peak, self.stop = root, 0, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(
                self.peak,
                cache_bytes(os.path.join(self.root, "objects")) + cache_bytes(os.path.join(self.root, "partial")),
            )
            time.sleep(0.002)

    def close(self) -> int:
        self.stop.set()
        self.t.join()
        return self.peak


def test_prefetch_in_order_each_once_within_the_limit(s3, bucket, s3_log, tmp_path):
    size = 1 << 20
    datas = [os.urandom(size) for _ in range(12)]
    pieces = [put(s3, bucket, f"f{i:02d}", d) for i, d in enumerate(datas)]
    s3_log.clear()
    c = Cache(str(tmp_path / "c"), 4 * size + 100)
    sampler = Sampler(c.root)
    with Prefetcher(c, pieces, ahead_bytes=3 * size, threads=2) as pf:
        for p, d in zip(pieces, datas, strict=True):
            h = pf.take(p.uri, 0)
            assert h is not None and h.pread(size, 0) == d
            time.sleep(0.01)  # the reader's work: the prefetch runs ahead meanwhile
        assert pf.taken == 12
    # within the limit, plus one piece: when the reader overtakes the prefetch (a loaded machine
    # leaves the fetchers behind), its own fetch goes over the limit rather than wait (cache.py)
    assert sampler.close() <= c.limit + size
    got = [k for k, _ in s3_log.gets(bucket)]
    assert sorted(got) == [f"f{i:02d}" for i in range(12)]  # each once
    # in the reader's order, give or take the fetchers racing each other: piece j is fetched once the
    # reader is at j - 3 (the prefetch keeps 3 pieces ahead), so every piece before j - 3 came
    # first, and no more than the next 3 can; a fetcher a loaded machine stalls moves its piece
    # within that window, no further
    assert all(abs(got.index(f"f{i:02d}") - i) <= 3 for i in range(12)), got


def test_prefetch_of_byte_ranges_and_pieces_not_planned(s3, bucket, s3_log, tmp_path):
    data = os.urandom(4 << 20)
    whole = put(s3, bucket, "blocks.bin", data)
    ranges = [(a, a + (1 << 20)) for a in (3 << 20, 0, 2 << 20)]  # a block order: not the file's
    pieces = [Piece(whole.uri, whole.size, whole.digest, a, b) for a, b in ranges]
    s3_log.clear()
    c = Cache(str(tmp_path / "c"), 64 << 20)
    sessions = Sessions()
    rf = RemoteFile(whole.uri, whole.size, whole.digest, c, sessions)
    with Prefetcher(c, pieces, ahead_bytes=2 << 20) as pf:
        sessions.add(pf)
        for a, b in ranges:
            assert rf.read(a + 10, 5000) == data[a + 10 : a + 5010]
            assert rf.read(a, b - a) == data[a:b]
        assert pf.taken >= 3
        # a read no plan named (the block between): an aligned demand range of it
        assert rf.read((1 << 20) + 7, 100) == data[(1 << 20) + 7 : (1 << 20) + 107]
        sessions.remove(pf)
    rng = [r for _, r in s3_log.gets(bucket, "blocks.bin")]
    assert sorted(rng) == sorted(
        [f"bytes={a}-{b - 1}" for a, b in ranges] + [f"bytes={1 << 20}-{(1 << 20) + DEMAND_BLOCK - 1}"]
    )


def test_prefetch_with_no_room_leaves_the_piece_to_the_reader(s3, bucket, tmp_path):
    datas = [os.urandom(1 << 20) for _ in range(3)]
    pieces = [put(s3, bucket, f"n{i}", d) for i, d in enumerate(datas)]
    c = Cache(str(tmp_path / "c"), (2 << 20) + 100)
    blockers = [c.get(p) for p in pieces[:2]]  # another reader holds all the room
    with Prefetcher(c, [pieces[2]]) as pf:
        time.sleep(0.2)
        assert os.listdir(c.partial) == [] and c.usage() == 2 << 20  # the prefetch waits for room
        h = pf.take(pieces[2].uri, 0)  # the reader needs it now: fetched over the limit
        assert h is not None and h.pread(1 << 20, 0) == datas[2]
        assert c.usage() == 3 << 20
    for b in blockers:
        b.release()


def test_prefetch_error_is_met_by_the_reader(s3, bucket, tmp_path):
    from lovecraft_convert.errors import DatasetError

    good = os.urandom(100_000)
    p = Piece(f"s3://{bucket}/bad", len(good), ("blake3", blake3_hex(good)))
    s3.put_object(Bucket=bucket, Key="bad", Body=good[::-1])
    c = Cache(str(tmp_path / "c"), 1 << 30)
    sessions = Sessions()
    rf = RemoteFile(p.uri, p.size, p.digest, c, sessions)
    with Prefetcher(c, [p]) as pf:
        sessions.add(pf)
        with pytest.raises(DatasetError, match=f"^s3://{bucket}/bad: fetched twice"):
            rf.read(0, 10)


def test_keep_all_prefetch_serves_reads_in_any_order(s3, bucket, s3_log, tmp_path):
    datas = [os.urandom(300_000) for _ in range(4)]
    pieces = [put(s3, bucket, f"all{i}", d) for i, d in enumerate(datas)]
    s3_log.clear()
    c = Cache(str(tmp_path / "c"), 64 << 20)
    sessions = Sessions()
    rfs = [RemoteFile(p.uri, p.size, p.digest, c, sessions) for p in pieces]
    with Prefetcher(c, pieces, ahead_bytes=1 << 30, ahead_pieces=100, advance=False) as pf:
        sessions.add(pf)
        for _ in range(50):
            i = random.randrange(4)
            a = random.randrange(300_000)
            assert rfs[i].read(a, 1000) == datas[i][a : a + 1000]
        sessions.remove(pf)
    assert sorted(k for k, _ in s3_log.gets(bucket)) == [f"all{i}" for i in range(4)]


def test_cached_file_reads_like_the_object(s3, bucket, tmp_path):
    data = os.urandom(3 * DEMAND_BLOCK + 12345)
    p = put(s3, bucket, "seek.bin", data)
    c = Cache(str(tmp_path / "c"), 64 << 20)
    rf = RemoteFile(p.uri, p.size, p.digest, c)
    f = rf.open()
    assert f.read(10) == data[:10]
    f.seek(DEMAND_BLOCK - 5)
    assert f.read(10) == data[DEMAND_BLOCK - 5 : DEMAND_BLOCK + 5]  # across two ranges
    f.seek(-7, 2)
    assert f.read() == data[-7:]
    f.seek(0)
    assert f.read() == data
    raw = rf.open(buffering=0)
    raw.seek(100)
    assert raw.readall() == data[100:]


def test_pyarrow_reads_a_parquet_file_through_the_cache(s3, bucket, tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.table({"x": np.arange(200_000), "y": np.random.default_rng(0).normal(size=200_000)})
    local = str(tmp_path / "t.parquet")
    pq.write_table(t, local, row_group_size=50_000)
    with open(local, "rb") as f:
        data = f.read()
    p = put(s3, bucket, "t.parquet", data)
    c = Cache(str(tmp_path / "c"), 64 << 20)
    pf = pq.ParquetFile(RemoteFile(p.uri, p.size, p.digest, c).open())
    assert pf.read_row_group(2).equals(t.slice(100_000, 50_000))
    assert pf.read().equals(t)
