"""``--to litdata``: litdata chunks read back by ``litdata.StreamingDataset`` itself (in the peers'
venv, tests/peers), every column kind from CSV, NPY, Parquet and JSON Lines compared with the values
parsed from the source, with the Python types litdata gives; the chunks and ``index.json`` checked
byte by byte against litdata's layout; the same bytes whatever the workers and after a kill and
``--resume``; what litdata cannot hold refused in one line; ``verify``, ``open_dataset`` (and
``to_torch``) on the result."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.formats.shard_sources import assert_same, blobs_parquet, disk_bytes, killed_then_resumed, make_sources
from tests.readback import assert_manifest_matches_disk, manifest, peer_read

# the type litdata gives each column: [Python type, dtype, shape]
TYPES = {
    "csv": {"id": ["int", "", []], "score": ["float", "", []], "name": ["str", "", []],
            "half": ["ndarray", "float16", []]},
    "npy": {"img": ["ndarray", "uint8", [4, 4, 3]], "emb": ["ndarray", "float16", [5]],
            "lab": ["ndarray", "int32", []], "flag": ["bool", "", []]},
    "parquet": {"jpg": ["memoryview", "", [0]], "tokens": ["ndarray", "int32", [0]], "vec": ["ndarray", "float32", [3]],
                "f16": ["ndarray", "float16", []], "ok": ["bool", "", []], "u8": ["ndarray", "uint8", []],
                "text": ["str", "", []]},
    "jsonl": {"id": ["int", "", []], "tags": ["list", "", []], "seq": ["ndarray", "float64", [0]],
              "t": ["str", "", []]},
}  # fmt: skip


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = tmp_path_factory.mktemp("litdata")
    sources = make_sources(d / "src")
    outs = {}
    for name, (inputs, extra, _want) in sources.items():
        out = str(d / name)
        r = lovecraft("convert", *inputs, *extra, "-o", out, "--to", "litdata", "-q")
        assert r.exit_code == 0, r.stderr
        outs[name] = out
    return sources, outs


def test_every_column_kind_reads_back_with_litdata(written):
    sources, outs = written
    got = peer_read("litdata", [outs[n] for n in sources])
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


def test_to_torch_gives_the_rows(written):
    torch = pytest.importorskip("torch")
    sources, outs = written
    ds = lc.open_dataset(outs["npy"])
    got = [b for b in torch.utils.data.DataLoader(ds.to_torch(), batch_size=16)]
    img = torch.cat([b["img"] for b in got]).numpy()
    np.testing.assert_array_equal(img, np.stack(sources["npy"][2]["img"]))


def test_chunks_and_index_follow_litdata_layout(tmp_path, written):
    sources, _ = written
    src = sources["jsonl"][0][0]
    out = str(tmp_path / "o")
    r = lovecraft("shard", src, "-o", out, "--to", "litdata", "--num-shards", "3", "-q")
    assert r.exit_code == 0, r.stderr
    m = manifest(out)
    index = json.loads(Path(out, "index.json").read_text())
    assert [c["filename"] for c in index["chunks"]] == [f["path"] for f in m["files"]]
    assert [c["chunk_size"] for c in index["chunks"]] == [f["rows"] for f in m["files"]]
    config = index["config"]
    assert config["data_format"] == ["int", "json", "no_header_numpy:10", "str"]  # 10: float64 in litdata's table
    assert config["item_loader"] == "PyTreeLoader" and config["compression"] is None
    assert json.loads(json.loads(config["data_spec"])[1]["context"]) == ["id", "tags", "seq", "t"]
    want = sources["jsonl"][2]
    row = 0
    for chunk in index["chunks"]:
        data = Path(out, chunk["filename"]).read_bytes()
        assert len(data) == chunk["chunk_bytes"]
        (count,) = struct.unpack_from("<I", data)
        offsets = struct.unpack_from(f"<{count + 1}I", data, 4)
        assert count == chunk["chunk_size"] and offsets[0] == 4 + 4 * (count + 1) and offsets[-1] == len(data)
        for k in range(count):
            item = data[offsets[k] : offsets[k + 1]]
            sizes = struct.unpack_from("<4I", item)
            at = 16
            leaves = []
            for s in sizes:
                leaves.append(item[at : at + s])
                at += s
            assert at == len(item)
            assert struct.unpack("<q", leaves[0]) == (want["id"][row],)
            assert json.loads(leaves[1]) == want["tags"][row]
            assert np.frombuffer(leaves[2], "<f8").tolist() == want["seq"][row]
            assert leaves[3].decode() == want["t"][row]
            row += 1
    assert row == len(want["id"])


def test_workers_and_resume_give_the_same_bytes(tmp_path):
    src = blobs_parquet(tmp_path / "b.parquet")
    refs = []
    for w in (1, 2):
        out = str(tmp_path / f"w{w}")
        lc.shard(src, out, to="litdata", shard_size="2MiB", workers=w, progress=False, part_bytes=1 << 20,
                 max_memory="32MiB")  # fmt: skip
        refs.append(disk_bytes(out))
    assert refs[0] == refs[1] and len(refs[0]) > 3
    (tmp_path / "k").mkdir()
    out = killed_then_resumed(src, tmp_path / "k", "litdata", shard_size="2MiB")
    assert disk_bytes(out) == refs[0]
    assert lc.verify(out).ok
    import pyarrow.parquet as pq

    got = peer_read("litdata", [out])[0][0]
    assert got["jpg"] == pq.read_table(src).column("jpg").to_pylist()


def test_what_litdata_cannot_hold_is_refused_in_one_line(tmp_path):
    np.save(tmp_path / "s.npy", np.array([["ab", "c"], ["d", "e"]]))  # text arrays: no litdata leaf
    r = lovecraft("convert", str(tmp_path / "s.npy"), "-o", str(tmp_path / "o"), "--to", "litdata", "-q")
    assert r.exit_code == 1, r.stderr
    assert r.stderr == (
        f"Error: {tmp_path / 's.npy'}, column 's': rows of U2[2] text; litdata holds one text value per row, not "
        "arrays of them; leave the column out with --columns, or write another format\n"
    )
    assert not os.path.exists(tmp_path / "o")


def test_verify_names_a_damaged_item(written, tmp_path):
    import shutil

    _, outs = written
    ds = str(tmp_path / "copy")
    shutil.copytree(outs["jsonl"], ds)
    path = os.path.join(ds, "data.bin")
    data = bytearray(Path(path).read_bytes())
    (count,) = struct.unpack_from("<I", data)
    first = struct.unpack_from("<I", data, 4)[0]
    struct.pack_into("<I", data, first, 9)  # the first item's first leaf says 9 bytes, not 8
    Path(path).write_bytes(bytes(data))
    report = lc.verify(ds)
    assert not report.ok
    assert "items 0..59: item 0: its leaf sizes do not add up to its 26 bytes" in [
        p.message for p in report.problems if p.file == "data.bin"
    ], report.lines()


def test_inspect_gives_litdata_code(written):
    _, outs = written
    rep = lc.inspect(outs["csv"])
    assert rep["format"] == "litdata"
    assert f'litdata.StreamingDataset("{outs["csv"]}")' in rep["load"]["litdata"]
