"""A remote dataset's file as its readers see it (storage/remote.py): a seekable file whose reads
come through the cache, compared byte for byte with the object's bytes, against the S3 test server."""

from __future__ import annotations

import os
import random

from lovecraft_convert.storage.cache import Cache
from lovecraft_convert.storage.remote import RemoteFile


def test_a_cached_file_reads_what_the_object_holds(s3, bucket, tmp_path):
    data = os.urandom(3 << 20)
    s3.put_object(Bucket=bucket, Key="f.bin", Body=data)
    rf = RemoteFile(f"s3://{bucket}/f.bin", len(data), None, Cache(str(tmp_path / "c"), 1 << 20))
    rng = random.Random(0)
    for buffering in (0, -1):
        with rf.open(buffering) as f:
            for _ in range(40):
                at, n = rng.randrange(len(data) + 10), rng.choice([1, 100, 70_000, 300_000, 2 << 20])
                f.seek(at)
                assert f.read(n) == data[at : at + n]
                assert f.tell() == min(len(data), at + n)
            f.seek(-5, 2)
            assert f.read() == data[-5:]


def test_read_buffer_gives_the_bytes_in_a_buffer_of_their_own(s3, bucket, tmp_path):
    """What pyarrow's adapter of a Python file calls when the file has it: the bytes from the
    position (fewer at the end), the position moved past them."""
    data = os.urandom(1 << 20)
    s3.put_object(Bucket=bucket, Key="g.bin", Body=data)
    rf = RemoteFile(f"s3://{bucket}/g.bin", len(data), None, Cache(str(tmp_path / "c"), 4 << 20))
    f = rf.open(buffering=0)
    f.seek(1000)
    got = f.read_buffer(300_000)
    assert bytes(got) == data[1000:301_000] and f.tell() == 301_000
    f.seek(len(data) - 10)
    got = f.read_buffer(100)
    assert bytes(got) == data[-10:] and f.tell() == len(data)
    assert bytes(f.read_buffer(5)) == b""
