"""The data CRCs of a run of equal-length TFRecord records checked with one CRC32C pass
(formats/tfrecord/crcspan.py): it must agree with the record-by-record check, catch every single
damaged bit, and the reader must still name the damaged record."""

from __future__ import annotations

import os

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lovecraft_convert.errors import DatasetError
from lovecraft_convert.formats.tfrecord import framing
from lovecraft_convert.formats.tfrecord.crcspan import length_crcs, run_crcs_ok
from lovecraft_convert.formats.tfrecord.framing import RecordRuns, masked_crc32c, unmask_array


def _record(data: bytes) -> bytes:
    head = len(data).to_bytes(8, "little")
    return head + masked_crc32c(head).to_bytes(4, "little") + data + masked_crc32c(data).to_bytes(4, "little")


def _check(run: bytes, n: int, L: int) -> bool:
    words = np.frombuffer(run, dtype=np.uint8).reshape(n, L + 16)[:, -4:]
    stored = np.ascontiguousarray(words).view("<u4").ravel()
    return run_crcs_ok(memoryview(run), n, L, stored, unmask_array(stored))


def test_unmask_inverts_the_mask():
    rng = np.random.default_rng(1)
    crcs = rng.integers(0, 1 << 32, size=1000, dtype=np.uint64).astype(np.uint32)
    np.testing.assert_array_equal(unmask_array(framing.mask_array(crcs).astype(np.uint32)), crcs)


@settings(max_examples=60, deadline=None)
@given(
    L=st.integers(0, 700),
    n=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
    where=st.floats(0, 1, exclude_max=True),
    bit=st.integers(0, 7),
)
def test_one_pass_agrees_and_catches_any_flipped_bit(L, n, seed, where, bit):
    rng = np.random.default_rng(seed)
    run = b"".join(_record(rng.bytes(L)) for _ in range(n))
    assert _check(run, n, L)
    S = L + 16
    # one bit flipped in a record's data or in its stored data CRC (the header is the caller's)
    i = int(where * n)
    tail = L + 4
    at = i * S + 12 + int(where * tail * 7919) % tail
    damaged = bytearray(run)
    damaged[at] ^= 1 << bit
    assert not _check(bytes(damaged), n, L)


def test_it_agrees_with_the_library_record_by_record():
    rng = np.random.default_rng(7)
    L, n = 264, 5000
    datas = [rng.bytes(L) for _ in range(n)]
    run = b"".join(_record(d) for d in datas)
    S = L + 16
    words = np.frombuffer(run, dtype=np.uint8).reshape(n, S)[:, -4:]
    stored = np.ascontiguousarray(words).view("<u4").ravel()
    np.testing.assert_array_equal(unmask_array(stored), [crc32c.crc32c(d) for d in datas])
    assert _check(run, n, L)


@pytest.mark.parametrize("damaged_record", [0, 1, 1234, 2999])
def test_the_reader_names_the_damaged_record_of_a_long_run(tmp_path, damaged_record):
    rng = np.random.default_rng(3)
    L, n = 100, 3000
    path = os.path.join(tmp_path, "run.tfrecord")
    raw = bytearray(b"".join(_record(rng.bytes(L)) for _ in range(n)))
    raw[damaged_record * (L + 16) + 12 + 50] ^= 0x01
    with open(path, "wb") as f:
        f.write(raw)
    runs = RecordRuns(path, False)
    with pytest.raises(DatasetError) as e:
        for _ in runs.runs(0, n):
            pass
    assert f"record {damaged_record + 1}: data CRC mismatch (file is corrupt)" in str(e.value)


def test_the_reader_takes_a_whole_run_in_one_pass(tmp_path, monkeypatch):
    """A valid run of equal records is checked by the one pass, not record by record."""
    rng = np.random.default_rng(4)
    L, n = 64, 2000
    path = os.path.join(tmp_path, "run.tfrecord")
    with open(path, "wb") as f:
        f.write(b"".join(_record(rng.bytes(L)) for _ in range(n)))
    calls = []
    real = crc32c.crc32c
    monkeypatch.setattr(framing, "crc32c_fn", lambda: lambda data, *a: calls.append(len(data)) or real(data, *a))
    got = sum(len(run) if kind == "fixed" else 1 for kind, run in RecordRuns(path, False).runs(0, n))
    assert got == n
    assert not any(size == L for size in calls)  # no data CRC computed on its own


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=0, max_size=50))
def test_length_crcs_are_the_librarys_crc_of_each_header(values):
    """The vectorised CRC32C of 8-byte lengths (a span's header check) is the library's, value by
    value, over the whole uint64 range."""
    got = length_crcs(np.array(values, dtype=np.uint64))
    assert got.dtype == np.uint32
    assert got.tolist() == [crc32c.crc32c(v.to_bytes(8, "little")) for v in values]


@pytest.mark.parametrize("damaged_record", [0, 1, 777, 1999])
def test_a_damaged_length_crc_among_records_of_varying_lengths_is_named(tmp_path, damaged_record):
    """Records of many lengths (a span): a length CRC with one bit flipped names its record and byte."""
    rng = np.random.default_rng(5)
    datas = [rng.bytes(int(k)) for k in rng.integers(0, 300, 2000)]
    records = [_record(d) for d in datas]
    at = sum(len(r) for r in records[:damaged_record])
    raw = bytearray(b"".join(records))
    raw[at + 9] ^= 0x10
    path = os.path.join(tmp_path, "span.tfrecord")
    with open(path, "wb") as f:
        f.write(raw)
    with pytest.raises(DatasetError) as e:
        for _ in RecordRuns(path, False).runs(0, len(datas)):
            pass
    assert f"record {damaged_record + 1} at byte {at}: length CRC mismatch (file is corrupt)" in str(e.value)
    with open(path, "wb") as f:
        f.write(b"".join(records))
    got = [
        bytes(r.buf[s : s + n])
        for _, r in RecordRuns(path, False).runs(0, len(datas))
        for s, n in zip(r.starts, r.lens, strict=True)
    ]
    assert got == datas
