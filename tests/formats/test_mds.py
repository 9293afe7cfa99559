"""``--to mds``: MosaicML Streaming shards read back by ``streaming.StreamingDataset`` itself (in the
peers' venv, tests/peers), every column kind from CSV, NPY, Parquet and JSON Lines compared with the
values parsed from the source; the files checked byte by byte against MDS's layout (count, offsets,
the configuration, ``index.json``); the same bytes whatever the workers and after a kill and
``--resume``; files rolled over below the 4 GiB a uint32 table holds; what MDS cannot hold refused
in one line; ``verify`` and ``open_dataset`` on the result."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.formats.shard_sources import (
    assert_same,
    blobs_parquet,
    disk_bytes,
    killed_then_resumed,
    make_sources,
)
from tests.readback import assert_manifest_matches_disk, manifest, peer_read

# the type StreamingDataset gives each column: [Python type, dtype, shape]
TYPES = {
    "csv": {"id": ["int64", "int64", []], "score": ["float64", "float64", []], "name": ["str", "", []],
            "half": ["float16", "float16", []]},
    "npy": {"img": ["ndarray", "uint8", [4, 4, 3]], "emb": ["ndarray", "float16", [5]], "lab": ["int32", "int32", []],
            "flag": ["uint8", "uint8", []]},
    "parquet": {"jpg": ["bytes", "", []], "tokens": ["ndarray", "int32", [0]], "vec": ["ndarray", "float32", [3]],
                "f16": ["float16", "float16", []], "ok": ["uint8", "uint8", []], "u8": ["uint8", "uint8", []],
                "text": ["str", "", []]},
    "jsonl": {"id": ["int64", "int64", []], "tags": ["list", "", []], "seq": ["ndarray", "float64", [0]],
              "t": ["str", "", []]},
}  # fmt: skip


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = tmp_path_factory.mktemp("mds")
    sources = make_sources(d / "src")
    outs = {}
    for name, (inputs, extra, _want) in sources.items():
        out = str(d / name)
        r = lovecraft("convert", *inputs, *extra, "-o", out, "--to", "mds", "-q")
        assert r.exit_code == 0, r.stderr
        outs[name] = out
    return sources, outs


def test_every_column_kind_reads_back_with_streaming(written):
    sources, outs = written
    got = peer_read("mds", [outs[n] for n in sources])
    for (name, (_inputs, _extra, want)), (cols, types) in zip(sources.items(), got, strict=True):
        assert set(cols) == set(want), name
        for col, values in want.items():
            assert_same(cols[col], values, f"{name}.{col}")
            assert types[col] == TYPES[name][col], (name, col, types[col])


def test_open_dataset_and_verify(written):
    sources, outs = written
    for name, (_inputs, _extra, want) in sources.items():
        assert lc.verify(outs[name]).ok, name
        assert_manifest_matches_disk(outs[name])
        ds = lc.open_dataset(outs[name])
        rows = ds.take(np.arange(len(ds)))
        for col, values in want.items():
            f = ds.schema[col]
            if f.kind == "sequence":
                got = [r[:n] for r, n in zip(rows[col], rows[f"{col}_length"], strict=True)]
            else:
                got = list(rows[col])
            assert_same(got, values, f"{name}.{col}")
    flags = lc.open_dataset(outs["npy"]).take([0, 1, 2])["flag"]
    assert flags.dtype == np.bool_  # stored as uint8 0/1, given back as the schema's bool


def test_shard_files_follow_mds_layout(tmp_path, written):
    sources, _ = written
    src = sources["parquet"][0][0]
    out = str(tmp_path / "o")
    r = lovecraft("shard", src, "-o", out, "--to", "mds", "--num-shards", "3", "--hash", "sha256", "-q")
    assert r.exit_code == 0, r.stderr
    m = manifest(out)
    index = json.loads(Path(out, "index.json").read_text())
    assert index["version"] == 2
    assert [s["raw_data"]["basename"] for s in index["shards"]] == [f["path"] for f in m["files"]]
    assert [f["path"] for f in m["files"]] == [f"part-{k:05d}-of-00003.mds" for k in range(3)]
    names = sorted(f["name"] for f in m["schema"])
    for shard, f in zip(index["shards"], m["files"], strict=True):
        assert shard["column_names"] == names and shard["format"] == "mds" and shard["zip_data"] is None
        assert shard["hashes"] == ["sha256"] and shard["samples"] == f["rows"]
        data = Path(out, f["path"]).read_bytes()
        assert shard["raw_data"] == {"basename": f["path"], "bytes": len(data), "hashes": {"sha256": f["sha256"]}}
        assert hashlib.sha256(data).hexdigest() == f["sha256"]
        (count,) = struct.unpack_from("<I", data)
        offsets = struct.unpack_from(f"<{count + 1}I", data, 4)
        assert count == f["rows"] and offsets[-1] == len(data)
        config = json.loads(data[4 + 4 * (count + 1) : offsets[0]])
        assert config == {k: v for k, v in shard.items() if k not in ("samples", "raw_data", "zip_data")}
    got = peer_read("mds", [out])[0][0]  # with validate_hash: the index's sha256 of every shard
    assert got["u8"] == sources["parquet"][2]["u8"]


VALIDATE = """
import json, sys
from streaming import StreamingDataset

ds = StreamingDataset(local=sys.argv[1], shuffle=False, batch_size=1, validate_hash="sha256")
print(json.dumps([int(ds[i]["label"]) for i in range(len(ds))]))
"""


def test_streaming_validates_the_sha256_of_every_shard(tmp_path):
    from tests.peers import require_peers, run_peer

    require_peers("streaming")
    src = blobs_parquet(tmp_path / "b.parquet", rows=200)
    out = str(tmp_path / "o")
    r = lovecraft("shard", src, "-o", out, "--to", "mds", "--num-shards", "2", "--hash", "sha256", "-q")
    assert r.exit_code == 0, r.stderr
    import pyarrow.parquet as pq

    assert run_peer(VALIDATE, out) == pq.read_table(src).column("label").to_pylist()


def test_workers_and_resume_give_the_same_bytes(tmp_path):
    src = blobs_parquet(tmp_path / "b.parquet")
    refs = []
    for w in (1, 2):
        out = str(tmp_path / f"w{w}")
        lc.shard(src, out, to="mds", shard_size="2MiB", shuffle=True, seed=4, workers=w, progress=False,
                 part_bytes=1 << 20, max_memory="32MiB")  # fmt: skip
        refs.append(disk_bytes(out))
    assert refs[0] == refs[1] and len(refs[0]) > 3
    (tmp_path / "k").mkdir()
    out = killed_then_resumed(src, tmp_path / "k", "mds", shard_size="2MiB", shuffle=True, seed=4)
    assert disk_bytes(out) == refs[0]
    assert lc.verify(out).ok


def test_a_unit_past_the_table_limit_goes_on_in_numbered_files(tmp_path, monkeypatch):
    from lovecraft_convert.formats import itemfile

    monkeypatch.setattr(itemfile, "LIMIT", 60_000)  # instead of 4 GiB - 1: the same code path
    src = blobs_parquet(tmp_path / "b.parquet", rows=100)
    out = str(tmp_path / "o")
    r = lovecraft("convert", src, "-o", out, "--to", "mds", "-q")
    assert r.exit_code == 0, r.stderr
    m = manifest(out)
    paths = [f["path"] for f in m["files"]]
    assert len(paths) > 5 and paths == [f"data-{k:05d}.mds" for k in range(len(paths))]
    assert all(f["bytes"] <= 60_000 for f in m["files"]) and sum(f["rows"] for f in m["files"]) == 100
    assert lc.verify(out).ok
    import pyarrow.parquet as pq

    want = pq.read_table(src).column("jpg").to_pylist()
    assert peer_read("mds", [out])[0][0]["jpg"] == want
    assert list(lc.open_dataset(out).take(np.arange(100))["jpg"]) == want


def test_a_row_larger_than_a_file_can_hold_is_one_line(tmp_path, monkeypatch):
    from lovecraft_convert.formats import itemfile

    monkeypatch.setattr(itemfile, "LIMIT", 5_000)
    src = blobs_parquet(tmp_path / "b.parquet", rows=20)
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "mds", "-q")
    assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("Error: data: row 1 is ") and "an MDS shard holds at most 5000 bytes" in r.stderr
    assert not os.path.exists(tmp_path / "o")


def test_what_mds_cannot_hold_is_refused_in_one_line(tmp_path):
    # (complex numbers, which it has none of either, are refused by every input now)
    np.save(tmp_path / "z.npy", np.array([[b"a", b"b"]] * 4, dtype="S2"))
    r = lovecraft("convert", str(tmp_path / "z.npy"), "-o", str(tmp_path / "o"), "--to", "mds", "-q")
    assert r.exit_code == 1, r.stderr
    assert r.stderr == (
        f"Error: {tmp_path / 'z.npy'}, column 'z': rows of S2[2] text; MDS holds one text value per row, not "
        "arrays of them; leave the column out with --columns, or write another format\n"
    )
    assert not os.path.exists(tmp_path / "o")


def test_verify_names_an_index_that_does_not_match(written, tmp_path):
    import shutil

    _, outs = written
    ds = str(tmp_path / "copy")
    shutil.copytree(outs["csv"], ds)
    path = os.path.join(ds, "index.json")
    index = json.loads(Path(path).read_text())
    index["shards"][0]["samples"] += 1
    text = json.dumps(index, sort_keys=True).encode()
    with open(path, "wb") as f:
        f.write(text)
    report = lc.verify(ds)
    assert not report.ok
    assert "is not the MDS index of the files the manifest lists" in [
        p.message for p in report.problems if p.file == "index.json"
    ], report.lines()


def test_inspect_gives_streaming_code(written):
    _, outs = written
    rep = lc.inspect(outs["csv"])
    assert rep["format"] == "mds"
    assert f'StreamingDataset(local="{outs["csv"]}", shuffle=False)' in rep["load"]["streaming"]


def test_buckets_ragged_or_packed_but_not_padded(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("".join(" ".join(["w"] * (1 + i % 40)) + "\n" for i in range(500)))
    out = str(tmp_path / "b")
    r = lovecraft("bucket", str(text), "-o", out, "--to", "mds", "--num-buckets", "3", "--layout", "padded", "-q")
    assert r.exit_code == 2 and r.stderr == (
        "Error: --layout padded: mds is written with one type per column for the whole dataset, and padded buckets "
        "are rows of a different length in each; use --layout ragged (each row its own length) or --layout packed\n"
    )
    r = lovecraft("bucket", str(text), "-o", out, "--to", "mds", "--num-buckets", "3", "--layout", "ragged", "-q")
    assert r.exit_code == 0, r.stderr
    assert lc.verify(out).ok
    lengths = sorted(int(n) for b in lc.open_dataset(out).batches(100) for n in b["length"])
    assert lengths == sorted(len(" ".join(["w"] * (1 + i % 40))) for i in range(500))
