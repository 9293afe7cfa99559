"""The hashing writer every TFRecord, memmap and Parquet file goes through: direct I/O where the
file system takes it, buffered elsewhere, the same bytes and digest either way (BLAKE3 by default,
SHA-256 on request)."""

from __future__ import annotations

import errno
import os
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lovecraft_convert.runtime import durable as util
from lovecraft_convert.runtime.durable import HashingWriter
from tests.readback import digest_of

STAGE = HashingWriter.STAGE
# piece sizes around the staging buffer and the alignment, where the bookkeeping can slip
SIZES = st.one_of(
    st.integers(0, 10_000),
    st.sampled_from([4095, 4096, 4097, STAGE - 1, STAGE, STAGE + 1, 2 * STAGE + 4096]),
)


def _write(path: str, pieces: list[bytes], preallocate: int = 0) -> tuple[int, str, bool]:
    w = HashingWriter(path, preallocate=preallocate)
    direct = w.direct
    for p in pieces:
        w.write(p)
    n, digest = w.close()
    return n, digest, direct


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(SIZES, max_size=6), seed=st.integers(0, 255), direct=st.booleans())
def test_bytes_and_digest_match_what_was_written(tmp_path_factory, sizes, seed, direct):
    rng = random.Random(seed)
    pieces = [rng.randbytes(n) for n in sizes]
    path = str(tmp_path_factory.mktemp("w") / "f.bin")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOVECRAFT_DIRECT_IO", "1" if direct else "0")
        n, digest, used = _write(path, pieces)
    whole = b"".join(pieces)
    assert n == len(whole) == os.path.getsize(path)
    assert digest == digest_of(whole, "blake3")
    with open(path, "rb") as f:
        assert f.read() == whole
    if not direct:
        assert not used


def test_direct_io_is_used_where_the_file_system_takes_it(tmp_path, monkeypatch):
    monkeypatch.delenv("LOVECRAFT_DIRECT_IO", raising=False)
    probe = str(tmp_path / "probe")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT))
    except OSError:
        pytest.skip("this file system does not take O_DIRECT")
    data = os.urandom(3 * STAGE + 12345)
    n, digest, used = _write(str(tmp_path / "f.bin"), [data[:100], data[100:]])
    assert used
    assert (n, digest) == (len(data), digest_of(data, "blake3"))


def test_a_refused_direct_write_carries_on_buffered(tmp_path, monkeypatch):
    monkeypatch.delenv("LOVECRAFT_DIRECT_IO", raising=False)
    real_write = os.write
    refused = []

    def write(fd, data):
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(util.os, "write", write)
    data = os.urandom(2 * STAGE + 777)
    path = str(tmp_path / "f.bin")
    w = HashingWriter(path)
    if not w.direct:
        w.abort()
        pytest.skip("this file system does not take O_DIRECT")
    w.write(data)
    n, digest = w.close()
    assert refused and not w.direct
    assert (n, digest) == (len(data), digest_of(data, "blake3"))
    with open(path, "rb") as f:
        assert f.read() == data


def test_an_exactly_preallocated_file_ends_at_its_size(tmp_path):
    # the unaligned tail is written buffered, never padded past the reserved blocks
    data = os.urandom(STAGE + 4096 + 5)
    path = str(tmp_path / "f.bin")
    n, digest, _ = _write(path, [data], preallocate=len(data))
    assert n == os.path.getsize(path) == len(data)
    with open(path, "rb") as f:
        assert digest_of(f.read(), "blake3") == digest


def test_a_write_error_names_the_file_and_is_raised_by_close(tmp_path, monkeypatch):
    def write(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(util.os, "write", write)
    path = str(tmp_path / "f.bin")
    w = HashingWriter(path)
    w.write(b"x" * (STAGE + 1))
    with pytest.raises(OSError) as e:
        w.close()
    assert e.value.errno == errno.ENOSPC and e.value.filename == path


def test_many_writers_at_once_share_a_bounded_staging_budget(tmp_path, monkeypatch):
    # a memmap dataset of many columns has a writer per column: past the budget they write buffered
    monkeypatch.delenv("LOVECRAFT_DIRECT_IO", raising=False)
    n = util._STAGING_LIMIT // STAGE + 4
    data = [os.urandom(STAGE + 100 + i) for i in range(n)]
    writers = [HashingWriter(str(tmp_path / f"c{i}.bin")) for i in range(n)]
    if not writers[0].direct:
        for w in writers:
            w.abort()
        pytest.skip("this file system does not take O_DIRECT")
    for w, d in zip(writers, data, strict=True):
        w.write(d)
    deadline = time.monotonic() + 30
    while not all(w._stage is not None or not w.direct for w in writers):  # all took their buffer
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert sum(w.direct for w in writers) == util._STAGING_LIMIT // STAGE
    assert util._staging_used == util._STAGING_LIMIT
    for i, (w, d) in enumerate(zip(writers, data, strict=True)):
        assert w.close() == (len(d), digest_of(d, "blake3"))
        assert (tmp_path / f"c{i}.bin").read_bytes() == d
    assert util._staging_used == 0


def test_sha256_on_request(tmp_path):
    data = bytes(range(256)) * 5000
    w = HashingWriter(str(tmp_path / "s.bin"), hash="sha256")
    w.write(data)
    assert w.close() == (len(data), digest_of(data, "sha256"))
