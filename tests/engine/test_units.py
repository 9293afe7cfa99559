"""Spill frames handed between units through the store (engine/units.py), against moto's S3
server: a unit's spill files go up as the sections of one object and come back byte for byte,
frame by frame or whole; a flipped byte on the store is refused naming the object; ``usable``
keeps only journalled parts whose spill a unit can still read. (The runs themselves, on a cluster
whose nodes share nothing: tests/engine/test_ray_shared_nothing.py, slow.)"""

# ruff: noqa: F811 - the store fixtures imported below are taken as parameters
from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest

from lovecraft_convert.engine.frames import UnitSpill, frames_from_buffer, read_frame, write_frame
from lovecraft_convert.engine.units import fetch, open_section, publish, usable
from lovecraft_convert.errors import OutputError
from lovecraft_convert.schema import Batch, Field, Schema, VarColumn
from tests.storage.conftest import bucket, get, objects, s3, s3_log, s3_server  # noqa: F401 - fixtures

SCHEMA = Schema((Field("x", "fixed", "<f4", (2,)), Field("t", "string", "|u1")))


def _batch(n: int, seed: int) -> Batch:
    r = np.random.default_rng(seed)
    return Batch(
        {
            "x": r.normal(size=(n, 2)).astype(np.float32),
            "t": VarColumn.from_pylist([f"row {seed}.{i}".encode() for i in range(n)], np.uint8),
        },
        n,
    )


def _same(a: Batch, b: Batch) -> None:
    assert a.num_rows == b.num_rows
    np.testing.assert_array_equal(a.columns["x"], b.columns["x"])
    np.testing.assert_array_equal(a.columns["t"].values, b.columns["t"].values)
    np.testing.assert_array_equal(a.columns["t"].offsets, b.columns["t"].offsets)


def _ctx(tmp_path, bucket: str, isolated: bool = True):
    spill = tmp_path / "spill"
    spill.mkdir(exist_ok=True)
    place = {"uri": f"s3://{bucket}/out", "run": "run-t", "prefix": "out/run-t/", "part": 5 << 20, "cap": None,
             "isolated": isolated}  # fmt: skip
    return SimpleNamespace(work=str(tmp_path), place=place)


def _spill(ctx, unit: int, buckets: int, frames: dict[int, list[Batch]]) -> list:
    spill = UnitSpill(os.path.join(ctx.work, "spill"), unit, buckets)
    for b, batches in frames.items():
        for batch in batches:
            write_frame(spill.file(b), batch, SCHEMA, counted=True)
    spill.close()
    return publish(spill, ctx)


def test_spill_goes_up_as_one_object_and_comes_back(s3, bucket, tmp_path):
    ctx = _ctx(tmp_path, bucket)
    want = {0: [_batch(50, 1), _batch(7, 2)], 2: [_batch(30, 3)]}
    out = _spill(ctx, 4, 3, want)
    assert [(b, name) for b, name, _ in out] == [(0, "u00004-b0000.bin"), (2, "u00004-b0002.bin")]
    assert os.listdir(os.path.join(ctx.work, "spill")) == []  # sent, then removed locally
    # one object, the files its sections, back to back
    infos = [info for _, _, info in out]
    assert [i["object"] for i in infos] == ["u00004.bin"] * 2 and infos[0]["at"] == 0
    assert infos[1]["at"] == infos[0]["size"]
    assert objects(s3, bucket, "out/") == {"out/run-t/_spill/u00004.bin": infos[0]["size"] + infos[1]["size"]}
    # whole sections, in the order asked
    got = fetch(ctx, [(name, info) for _, name, info in reversed(out)])
    for (b, _, _), (buf, _where) in zip(reversed(out), got, strict=True):
        frames = frames_from_buffer(buf, SCHEMA)
        assert len(frames) == len(want[b])
        for a, w in zip(frames, want[b], strict=True):
            _same(a, w)
    # plain frames (shard without --shuffle): a section read as a file with ranged GETs, frame by frame
    spill = UnitSpill(os.path.join(ctx.work, "spill"), 5, 0)
    batches = [_batch(20, 7), _batch(33, 8)]
    at = [write_frame(spill.file(0), b, SCHEMA) for b in batches]
    spill.close()
    ((_, name, info),) = publish(spill, ctx)
    for sequential in (True, False):
        with open_section(ctx, name, info, sequential=sequential) as f:
            for (offset, rows), b in reversed(list(zip(at, batches, strict=True))):
                _same(read_frame(f, offset, rows, SCHEMA), b)


def test_a_flipped_byte_on_the_store_is_refused(s3, bucket, tmp_path):
    ctx = _ctx(tmp_path, bucket)
    out = _spill(ctx, 1, 0, {0: [_batch(40, 5)]})
    key = "out/run-t/_spill/u00001.bin"
    body = bytearray(get(s3, bucket, key))
    body[len(body) // 2] ^= 0x10
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(body))
    ((buf, where),) = fetch(ctx, [(name, info) for _, name, info in out])
    with pytest.raises(OutputError) as e:
        frames_from_buffer(buf, SCHEMA, where)
    assert f"s3://{bucket}/{key}" in str(e.value) and "--resume" in str(e.value)


def test_usable_keeps_the_parts_whose_spill_can_be_read(s3, bucket, tmp_path):
    ctx = _ctx(tmp_path, bucket)
    entries = [{"phase": 1, "part": k, "files": {n: i for _, n, i in _spill(ctx, k, 0, {0: [_batch(9, k)]})}}
               for k in range(3)]  # fmt: skip
    run = SimpleNamespace(work=ctx.work, place=ctx.place)
    assert [e["part"] for e in usable(run, entries)] == [0, 1, 2]
    s3.delete_object(Bucket=bucket, Key="out/run-t/_spill/u00001.bin")  # lost
    s3.put_object(Bucket=bucket, Key="out/run-t/_spill/u00002.bin", Body=b"short")  # cut short
    assert [e["part"] for e in usable(run, entries)] == [0]
    # spill in a driver's work directory is of no use to units that cannot see it
    local = {"phase": 1, "part": 7, "files": {"u00007.bin": {"size": 0, "crc32c": 0}}}
    open(os.path.join(ctx.work, "spill", "u00007.bin"), "wb").close()
    assert usable(run, [local]) == []
    assert usable(SimpleNamespace(work=ctx.work, place=None), [local]) == [local]


def test_starting_phase_1_over_keeps_the_files_put_there_for_the_units(s3, bucket, tmp_path):
    """A run whose input's types widened mid-way deletes its spill and starts over: the tokenizer
    file the driver put beside it must stay, or the units run next could not fetch it."""
    from lovecraft_convert.engine.units import drop_spill

    ctx = _ctx(tmp_path, bucket)
    _spill(ctx, 3, 0, {0: [_batch(5, 1)]})
    s3.put_object(Bucket=bucket, Key="out/run-t/_spill/tokenizer-tokenizer.json", Body=b"{}")
    drop_spill(ctx)
    assert list(objects(s3, bucket, "out/")) == ["out/run-t/_spill/tokenizer-tokenizer.json"]
