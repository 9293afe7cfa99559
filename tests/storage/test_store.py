"""The storage layer against a real S3-protocol server: ranged reads, listing, multipart uploads
hashed on the way, the conditional put, and one-line errors."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from .conftest import get, objects


def test_uri_helpers():
    from lovecraft_convert.storage import child_path, is_remote, join, local_path, split

    assert is_remote("s3://b/k") and is_remote("gs://b/k") and not is_remote("/tmp/x") and not is_remote("file:///x")
    assert local_path("file:///tmp/x") == "/tmp/x"
    assert split("s3://bkt/a/b.csv") == ("s3", "bkt", "a/b.csv")
    assert join("s3://bkt/out/", "run-1", "/x.npy") == "s3://bkt/out/run-1/x.npy"
    assert child_path("s3://bkt/out", "run-1/x.npy") == "s3://bkt/out/run-1/x.npy"
    assert child_path("/d", "run-1/x.npy") == "/d/run-1/x.npy"


def test_range_file_reads_and_seeks(s3, bucket):
    from lovecraft_convert.storage.rangefile import RangeFile

    data = os.urandom(3 << 20)
    s3.put_object(Bucket=bucket, Key="blob", Body=data)
    f = io.BufferedReader(RangeFile(f"s3://{bucket}/blob", readahead=256 << 10), 64 << 10)
    assert f.read(10) == data[:10]
    f.seek(2 << 20)
    assert f.read(1000) == data[2 << 20 : (2 << 20) + 1000]
    f.seek(-5, 2)
    assert f.read() == data[-5:]
    f.seek(0)
    assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()
    part = RangeFile(f"s3://{bucket}/blob", start=100, end=200)
    assert part.read() == data[100:200]


def test_list_matches_objects_prefixes_globs(s3, bucket):
    from lovecraft_convert.storage import list_matches

    for k in ("d/a.csv", "d/b.csv", "d/c.txt", "d/sub/e.csv", "d/_SUCCESS"):
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    base = f"s3://{bucket}/"
    assert [u for u, _ in list_matches(base + "d/*.csv")] == [base + "d/a.csv", base + "d/b.csv"]
    assert [u for u, _ in list_matches(base + "d/**.csv")] == [base + "d/a.csv", base + "d/b.csv", base + "d/sub/e.csv"]
    assert [u for u, _ in list_matches(base + "d")] == [
        base + k for k in ("d/a.csv", "d/b.csv", "d/c.txt", "d/sub/e.csv")
    ]
    assert list_matches(base + "d/a.csv") == [(base + "d/a.csv", 1)]


def test_multipart_upload_hashed_on_the_way(s3, bucket, tmp_path):
    from lovecraft_convert.runtime.hashing import new_hash
    from lovecraft_convert.storage import store_for

    data = os.urandom((12 << 20) + 12345)
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    n, digest = store_for(f"s3://{bucket}").upload(str(p), "x/f.bin", part=5 << 20, hash="sha256")
    assert n == len(data) and digest == hashlib.sha256(data).hexdigest()
    assert get(s3, bucket, "x/f.bin") == data
    h = new_hash("blake3")
    h.update(data)
    assert store_for(f"s3://{bucket}").upload(str(p), "x/g.bin", part=5 << 20, hash="blake3")[1] == h.hexdigest()
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_failed_multipart_upload_is_aborted(s3, bucket, tmp_path, monkeypatch):
    from lovecraft_convert.storage import store_for

    p = tmp_path / "f.bin"
    p.write_bytes(os.urandom(11 << 20))
    store = store_for(f"s3://{bucket}")
    calls = []

    def broken(*a, **k):
        calls.append(a)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return {"PartNumber": a[3], "ETag": "x"}

    monkeypatch.setattr(store, "_part", broken)
    with pytest.raises(KeyboardInterrupt):
        store.upload(str(p), "x/f.bin", part=5 << 20, hash="blake3")
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert objects(s3, bucket) == {}


def test_put_if_absent_refuses_the_second(s3, bucket):
    from lovecraft_convert.storage import store_for
    from lovecraft_convert.storage.base import PreconditionFailed

    store = store_for(f"s3://{bucket}")
    store.put("m.json", b"first", if_absent=True)
    with pytest.raises(PreconditionFailed):
        store.put("m.json", b"second", if_absent=True)
    assert get(s3, bucket, "m.json") == b"first"


def test_missing_object_is_none(s3, bucket):
    from lovecraft_convert.storage import store_for

    store = store_for(f"s3://{bucket}")
    assert store.size("nope") is None and store.read_all("nope") is None


def test_gcs_round_trip():
    """gs:// needs a GCS server: none is started here (no emulator installed), so this skips unless
    LOVECRAFT_TEST_GCS names a bucket to write to."""
    bucket = os.environ.get("LOVECRAFT_TEST_GCS")
    if not bucket:
        pytest.skip("no GCS emulator or bucket (set LOVECRAFT_TEST_GCS=<bucket> to run against one)")
    from lovecraft_convert.storage import store_for

    store = store_for(f"gs://{bucket}")
    store.put("lovecraft-test/x", b"abc")
    assert store.read_all("lovecraft-test/x") == b"abc"
    store.delete(["lovecraft-test/x"])
