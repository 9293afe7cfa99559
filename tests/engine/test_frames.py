"""Spill frames carry digests, checked on read: every single flipped byte of a plain frame (shard,
packed buckets), of a counted frame file and of a grouped frame (buckets) is refused with one line
naming the spill file and the frame, never read as other values and never another exception; a
grouped frame's reader checks the values of the lengths it reads; counts a damaged frame declares
allocate nothing (they are checked against the file's size first)."""

from __future__ import annotations

import numpy as np
import pytest

from lovecraft_convert.engine.frames import (
    Digesting,
    file_crc,
    frames_from_buffer,
    read_frame,
    read_grouped,
    write_frame,
    write_grouped,
)
from lovecraft_convert.errors import OutputError
from lovecraft_convert.schema import Batch, Field, Schema, VarColumn

SCHEMA = Schema(
    (
        Field("x", "fixed", "<f4", (3,)),
        Field("t", "string", "|u1"),
        Field("s", "sequence", "<i2"),
        Field("l", "string_list", "|u1"),
    )
)
HINT = "; run the same command with --resume: the part that wrote it is read again"


def _batch(n: int, seed: int = 0) -> Batch:
    r = np.random.default_rng(seed)
    words = [[f"w{j}" * (j % 3) for j in range(i % 4)] for i in range(n)]
    inner = VarColumn.from_pylist([w.encode() for ws in words for w in ws], np.uint8)
    outer = np.zeros(n + 1, np.int64)
    np.cumsum([len(ws) for ws in words], out=outer[1:])
    return Batch(
        {
            "x": r.normal(size=(n, 3)).astype(np.float32),
            "t": VarColumn.from_pylist([f"row {i}".encode() * (i % 3) for i in range(n)], np.uint8),
            "s": VarColumn.from_pylist([np.arange(i % 5, dtype=np.int16) for i in range(n)], np.int16),
            "l": VarColumn(inner, outer),
        },
        n,
    )


def _same(a: Batch, b: Batch) -> None:
    assert a.num_rows == b.num_rows
    for k in ("x", "t", "s"):
        ca, cb = a.columns[k], b.columns[k]
        if isinstance(ca, VarColumn):
            np.testing.assert_array_equal(ca.offsets, cb.offsets)
            np.testing.assert_array_equal(ca.values, cb.values)
        else:
            np.testing.assert_array_equal(ca, cb)
    la, lb = a.columns["l"], b.columns["l"]
    np.testing.assert_array_equal(la.offsets, lb.offsets)
    np.testing.assert_array_equal(la.values.values, lb.values.values)


def _flipped(path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x10]))


def test_plain_frames_read_back_and_every_flipped_byte_is_refused(tmp_path):
    p = tmp_path / "u00000.bin"
    batches = [_batch(7, 1), _batch(5, 2)]
    with open(p, "wb") as f:
        spans = [write_frame(f, b, SCHEMA) for b in batches]
    good = p.read_bytes()
    with open(p, "rb") as f:
        for (offset, rows), b in zip(spans, batches, strict=True):
            _same(read_frame(f, offset, rows, SCHEMA), b)
    second = spans[1][0]
    for at in range(len(good)):
        p.write_bytes(good)
        _flipped(p, at)
        offset, rows = spans[0] if at < second else spans[1]
        with open(p, "rb") as f, pytest.raises(OutputError) as e:
            read_frame(f, offset, rows, SCHEMA)
        assert e.value.one_line().startswith(f"{p}: spill frame at byte {offset} is "), at
        assert e.value.one_line().endswith(HINT)
    p.write_bytes(good)
    _flipped(p, second - 6)  # a value of the first frame's last column
    with open(p, "rb") as f, pytest.raises(OutputError) as e:
        read_frame(f, 0, 7, SCHEMA)
    assert (
        e.value.one_line()
        == f"{p}: spill frame at byte 0 is damaged (its CRC32C differs from the one written with it){HINT}"
    )


def test_counted_frames_in_memory_are_checked_too(tmp_path):
    p = tmp_path / "u00001-b0000.bin"
    with open(p, "wb") as f:
        for k in range(3):
            write_frame(f, _batch(4 + k, k), SCHEMA, counted=True)
    good = p.read_bytes()
    for got, k in zip(frames_from_buffer(good, SCHEMA, str(p)), range(3), strict=True):
        _same(got, _batch(4 + k, k))
    for at in range(len(good)):
        bad = bytearray(good)
        bad[at] ^= 0x01
        with pytest.raises(OutputError) as e:
            frames_from_buffer(bytes(bad), SCHEMA, str(p))
        assert e.value.one_line().startswith(f"{p}: spill frame at byte "), at
    with pytest.raises(OutputError) as e:
        frames_from_buffer(good[:-1], SCHEMA, str(p))
    assert "reaches past the end of the file" in e.value.one_line()


def test_a_damaged_count_allocates_nothing(tmp_path):
    """A counted frame whose row count became 2**40: refused from the file's size, not allocated."""
    p = tmp_path / "u.bin"
    with open(p, "wb") as f:
        write_frame(f, _batch(3), SCHEMA, counted=True)
    data = bytearray(p.read_bytes())
    data[:8] = (1 << 40).to_bytes(8, "little")
    with pytest.raises(OutputError) as e:
        frames_from_buffer(bytes(data), SCHEMA, str(p))
    assert e.value.one_line() == f"{p}: spill frame at byte 0 is damaged (it reaches past the end of the file){HINT}"


def test_grouped_frames_check_the_lengths_they_read(tmp_path):
    p = tmp_path / "u00002.bin"
    lengths = np.repeat(np.array([1, 2, 5], np.int64), [4, 3, 2])
    values = np.arange(int(lengths.sum()), dtype=np.uint16)
    with open(p, "wb") as f:
        offset, rows = write_grouped(f, lengths, values)
    good = p.read_bytes()
    with open(p, "rb") as f:
        g = read_grouped(f, offset, 0, 10, np.dtype(np.int32))
    assert g.uniq.tolist() == [1, 2, 5] and g.counts.tolist() == [4, 3, 2]
    np.testing.assert_array_equal(g.values, values.astype(np.int32))
    index = 32 + 3 * (8 + 8 + 4) + 4
    assert len(good) == index + values.nbytes
    for at in range(len(good)):
        p.write_bytes(good)
        _flipped(p, at)
        with open(p, "rb") as f, pytest.raises(OutputError) as e:
            read_grouped(f, offset, 0, 10, np.dtype(np.uint16))
        assert e.value.one_line().startswith(f"{p}: spill frame at byte 0 is "), at
    # a value of length 5 damaged: the rows of length 1..2 still read, those of length 5 are refused
    p.write_bytes(good)
    _flipped(p, len(good) - 1)
    with open(p, "rb") as f:
        assert read_grouped(f, offset, 1, 2, np.dtype(np.uint16)).rows == 7
        with pytest.raises(OutputError) as e:
            read_grouped(f, offset, 3, 9, np.dtype(np.uint16))
    assert e.value.one_line() == (
        f"{p}: spill frame at byte 0 is damaged (the values of length 5 differ from their CRC32C){HINT}"
    )


def test_a_spill_file_is_digested_whole_as_it_is_written(tmp_path):
    p = tmp_path / "u.bin"
    with open(p, "wb") as raw:
        f = Digesting(raw)
        write_frame(f, _batch(9), SCHEMA)
        write_grouped(f, np.array([2, 2, 3]), np.arange(7, dtype=np.uint8))
    assert f.crc == file_crc(str(p)) != 0


def test_grouped_frames_hold_no_rows(tmp_path):
    """A unit whose rows all went to other buckets writes an empty grouped frame; it reads back as no rows."""
    p = tmp_path / "u00003.bin"
    with open(p, "wb") as f:
        offset, rows = write_grouped(f, np.zeros(0, np.int64), np.zeros(0, np.uint16))
    assert rows == 0
    with open(p, "rb") as f:
        g = read_grouped(f, offset, 0, 10, np.dtype(np.uint16))
    assert g.rows == 0 and g.values.size == 0
