"""``--to webdataset``: tar shards read back by ``webdataset.WebDataset(...).decode()`` itself (in the
peers' venv, tests/peers), by Python's tarfile and by ``tar``; every column kind from CSV, NPY,
Parquet and JSON Lines compared with the values parsed from the source; deterministic headers (mode,
owner, time), keys that number the dataset's rows across shards, pax names, a value larger than the
writer's runs; the same bytes whatever the workers and after a kill and ``--resume``; columns
WebDataset could not tell apart refused in one line; ``verify`` catches a damaged header."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.formats.shard_sources import assert_same, blobs_parquet, disk_bytes, killed_then_resumed, make_sources
from tests.readback import assert_manifest_matches_disk, manifest, peer_read, read_webdataset_tar

# where each column is found in a sample (the member's extension, or "json" for the .json member)
MEMBERS = {
    "csv": {"id": "json", "score": "json", "name": "json", "half": "json"},
    "npy": {"img": "img.npy", "emb": "emb.npy", "lab": "json", "flag": "json"},
    "parquet": {"jpg": "jpg", "tokens": "tokens.npy", "vec": "vec.npy", "f16": "json", "ok": "json", "u8": "json",
                "text": "json"},
    "jsonl": {"id": "json", "tags": "json", "seq": "seq.npy", "t": "json"},
}  # fmt: skip


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = tmp_path_factory.mktemp("wds")
    sources = make_sources(d / "src")
    outs = {}
    for name, (inputs, extra, _want) in sources.items():
        out = str(d / name)
        r = lovecraft("convert", *inputs, *extra, "-o", out, "--to", "webdataset", "-q")
        assert r.exit_code == 0, r.stderr
        outs[name] = out
    return sources, outs


def test_every_column_kind_reads_back_with_webdataset(written):
    sources, outs = written
    got = peer_read("webdataset", [outs[n] for n in sources])
    for (name, (_inputs, _extra, want)), (cols, _types) in zip(sources.items(), got, strict=True):
        keys = set(MEMBERS[name].values())
        assert set(cols) == {"__key__", *keys}, (name, sorted(cols))
        assert cols["__key__"] == [f"{i:09d}" for i in range(len(next(iter(want.values()))))]
        for col, values in want.items():
            member = MEMBERS[name][col]
            got_col = [row[col] for row in cols["json"]] if member == "json" else cols[member]
            if member == col:  # a binary column: a sample has no member for an empty value
                got_col = [b"" if v is None else v for v in got_col]
            assert_same(got_col, values, f"{name}.{col}")


def test_python_tarfile_reads_every_kind(written):
    sources, outs = written
    for name, (_inputs, _extra, want) in sources.items():
        got = read_webdataset_tar(outs[name])
        for col, values in want.items():
            assert_same(list(got[col]), values, f"{name}.{col}")


def test_an_integer_label_is_a_cls_member(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("label,caption\n" + "".join(f"{i % 3},cap {i}\n" for i in range(10)))
    out = str(tmp_path / "o")
    assert lovecraft("convert", str(path), "-o", out, "--to", "webdataset", "-q").exit_code == 0
    with tarfile.open(os.path.join(out, "data.tar")) as tar:
        names = tar.getnames()
        assert names[:4] == ["000000000.cls", "000000000.json", "000000001.cls", "000000001.json"]
        assert tar.extractfile("000000004.cls").read() == b"1"
        assert json.loads(tar.extractfile("000000004.json").read()) == {"caption": "cap 4"}


def test_tar_lists_the_members_with_fixed_metadata(written):
    _, outs = written
    r = subprocess.run(["tar", "-tvf", os.path.join(outs["parquet"], "data.tar")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 60 * 4 - len(range(0, 60, 7))  # every 7th row's jpg is empty: no member
    first = lines[0].split()
    assert first[0] == "-r--r--r--" and first[1] == "0/0" and first[3:5] == ["1970-01-01", "00:00"]
    assert [ln.split()[-1] for ln in lines[:7]] == [
        *(f"000000000.{e}" for e in ("json", "tokens.npy", "vec.npy")),
        *(f"000000001.{e}" for e in ("jpg", "json", "tokens.npy", "vec.npy")),
    ]
    r = subprocess.run(
        ["tar", "-xOf", os.path.join(outs["parquet"], "data.tar"), "000000003.vec.npy"], capture_output=True
    )
    assert r.returncode == 0
    np.testing.assert_array_equal(np.load(io.BytesIO(r.stdout)), np.load(io.BytesIO(r.stdout)))
    with tarfile.open(os.path.join(outs["parquet"], "data.tar")) as tar:
        members = tar.getmembers()
        assert all(m.isreg() and m.mode == 0o444 and m.mtime == 0 and m.uid == m.gid == 0 for m in members)
    assert os.path.getsize(os.path.join(outs["parquet"], "data.tar")) % 10240 == 0


def test_keys_number_the_rows_across_shards(tmp_path):
    src = blobs_parquet(tmp_path / "b.parquet", rows=300)
    out = str(tmp_path / "o")
    r = lovecraft("shard", src, "-o", out, "--to", "webdataset", "--num-shards", "3", "--shuffle", "--seed", "2", "-q")
    assert r.exit_code == 0, r.stderr
    keys = []
    for f in manifest(out)["files"]:
        with tarfile.open(os.path.join(out, f["path"])) as tar:
            keys += sorted({m.name.split(".")[0] for m in tar.getmembers()})
    assert keys == [f"{i:09d}" for i in range(300)]
    assert lc.verify(out).ok


def test_long_and_non_ascii_names_go_in_pax_headers(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    long = "a" * 120
    table = pa.table(
        {long: pa.array([b"x" * (i + 1) for i in range(5)], pa.binary()), "é": pa.array([b"y", b"", b"z", b"", b"w"])}
    )
    pq.write_table(table, tmp_path / "n.parquet")
    out = str(tmp_path / "o")
    assert lovecraft("convert", str(tmp_path / "n.parquet"), "-o", out, "--to", "webdataset", "-q").exit_code == 0
    with tarfile.open(os.path.join(out, "data.tar")) as tar:
        names = tar.getnames()
        assert names[:2] == [f"000000000.{long}", "000000000.é"]
        assert tar.extractfile(f"000000004.{long}").read() == b"xxxxx"
        assert "000000001.é" not in names  # an empty value: no member
    got = peer_read("webdataset", [out])[0][0]
    assert got[long] == [b"x" * (i + 1) for i in range(5)] and got["é"] == [b"y", None, b"z", None, b"w"]
    (batch,) = lc.open_dataset(out).batches(5)
    assert batch["é"].tolist() == [b"y", b"", b"z", b"", b"w"]
    assert lc.verify(out).ok


def test_a_value_larger_than_a_run_is_written_whole(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(3)
    blobs = [rng.bytes(n) for n in (10, 9 << 20, 0, 20 << 20, 5)]
    pq.write_table(pa.table({"bin": pa.array(blobs, pa.binary())}), tmp_path / "big.parquet")
    out = str(tmp_path / "o")
    assert lovecraft("convert", str(tmp_path / "big.parquet"), "-o", out, "--to", "webdataset", "-q").exit_code == 0
    with tarfile.open(os.path.join(out, "data.tar")) as tar:
        assert [tar.extractfile(m).read() for m in tar.getmembers()] == blobs
    assert lc.verify(out).ok
    assert list(lc.open_dataset(out).take([3, 1])["bin"]) == [blobs[3], blobs[1]]


def test_workers_and_resume_give_the_same_bytes(tmp_path):
    src = blobs_parquet(tmp_path / "b.parquet")
    refs = []
    for w in (1, 2):
        out = str(tmp_path / f"w{w}")
        lc.shard(src, out, to="webdataset", shard_size="2MiB", shuffle=True, seed=9, workers=w, progress=False,
                 part_bytes=1 << 20, max_memory="32MiB")  # fmt: skip
        refs.append(disk_bytes(out))
    assert refs[0] == refs[1] and len(refs[0]) > 3
    (tmp_path / "k").mkdir()
    out = killed_then_resumed(src, tmp_path / "k", "webdataset", shard_size="2MiB", shuffle=True, seed=9)
    assert disk_bytes(out) == refs[0]
    assert lc.verify(out).ok


def test_open_dataset_and_verify(written):
    sources, outs = written
    for name, (_inputs, _extra, want) in sources.items():
        assert lc.verify(outs[name]).ok, name
        assert_manifest_matches_disk(outs[name])
        ds = lc.open_dataset(outs[name])
        rows = ds.take(np.arange(len(ds))[::-1])
        for col, values in want.items():
            f = ds.schema[col]
            if f.kind == "sequence":
                got = [r[:n] for r, n in zip(rows[col], rows[f"{col}_length"], strict=True)]
            else:
                got = list(rows[col])
            assert_same(got[::-1], values, f"{name}.{col}")


def test_columns_webdataset_cannot_tell_apart_are_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "c.parquet"
    pq.write_table(pa.table({"Json": pa.array([b"x"]), "json": pa.array([b"y"]), "n": pa.array([1])}), src)
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "webdataset", "-q")
    assert r.exit_code == 1, r.stderr
    assert r.stderr == (
        f"Error: {src}, column 'json': its member .json and column 'Json''s .Json are one extension to WebDataset, "
        "which lowercases them; rename one of the columns, or leave one out with --columns\n"
    )
    assert not os.path.exists(tmp_path / "o")


def test_a_column_named_json_moves_the_other_columns_to_meta_json(tmp_path):
    """A column of bytes named json (a WebDataset's own .json member, read back) keeps <key>.json;
    the columns that go in a JSON member go in <key>.meta.json (json.loads by its last extension,
    as webdataset's decoders do)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "c.parquet"
    pq.write_table(pa.table({"Json": pa.array([b'{"a": 1}', b"[]"]), "n": pa.array([7, 8])}), src)
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "webdataset", "-q")
    assert r.exit_code == 0, r.stderr
    with tarfile.open(tmp_path / "o" / "data.tar") as tf:
        got = {m.name.split(".", 1)[1] + str(int(m.name.split(".", 1)[0])): tf.extractfile(m).read() for m in tf}
    decoded = {k: json.loads(v) if k.startswith("meta.json") else v for k, v in got.items()}
    assert decoded == {"Json0": b'{"a": 1}', "meta.json0": {"n": 7}, "Json1": b"[]", "meta.json1": {"n": 8}}
    (batch,) = lc.open_dataset(str(tmp_path / "o")).batches(2)
    assert batch["Json"].tolist() == [b'{"a": 1}', b"[]"] and batch["n"].tolist() == [7, 8]


def test_verify_names_a_damaged_header(written, tmp_path):
    import shutil

    _, outs = written
    ds = str(tmp_path / "copy")
    shutil.copytree(outs["csv"], ds)
    path = os.path.join(ds, "data.tar")
    with open(path, "r+b") as f:
        f.seek(512 + 512 + 100)  # the second member's mode
        f.write(b"0000644\0")
    report = lc.verify(ds)
    assert not report.ok
    assert "the header at byte 1024 has checksum" in " ".join(p.message for p in report.problems), report.lines()


def test_inspect_gives_webdataset_and_tar(written):
    _, outs = written
    rep = lc.inspect(outs["csv"])
    assert rep["format"] == "webdataset"
    path = os.path.join(outs["csv"], "data.tar")
    assert f'wds.WebDataset("{path}", shardshuffle=False)' in rep["load"]["webdataset"]
    assert rep["load"]["tar"] == f"tar -tvf {path}"


DECODE_PIL = """
import json, sys
import webdataset as wds

out = []
for s in wds.WebDataset(json.loads(sys.argv[1]), shardshuffle=False).decode("pil"):
    row = {"key": s["__key__"], "exts": sorted(k for k in s if not k.startswith("__"))}
    for ext in ("jpg", "png"):
        if ext in s:
            im = s[ext]
            row["image"] = [ext, im.mode, list(im.size), im.tobytes().hex()]
    out.append(row)
print(json.dumps(out))
"""


def test_a_folder_of_files_is_named_by_each_files_extension(tmp_path):
    """A folder of images (the files input) becomes samples whose file member is ``<key>.jpg`` or
    ``<key>.png``, so WebDataset's ``.decode("pil")`` opens them: the same pixels as Pillow's own
    decode of the source. A file whose extension is another member's (``.json``) or none is
    ``<key>.bytes``; open_dataset and verify read every file's bytes back."""
    from PIL import Image

    from tests.peers import require_peers, run_peer

    root = tmp_path / "src"
    (root / "cat").mkdir(parents=True)
    (root / "dog").mkdir()
    rng = np.random.default_rng(5)
    Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(root / "cat" / "a.JPG", quality=90)
    Image.fromarray(rng.integers(0, 255, (9, 7, 4), dtype=np.uint8)).save(root / "cat" / "b.x.png")
    (root / "dog" / "doc.json").write_text('{"a": 1}')
    (root / "dog" / "README").write_text("hi")
    out = str(tmp_path / "out")
    assert lovecraft("convert", str(root), "-o", out, "--to", "webdataset", "-q").exit_code == 0
    with tarfile.open(os.path.join(out, "data.tar")) as tar:
        names = tar.getnames()
    assert names == [
        "000000000.jpg", "000000000.cls", "000000000.json",
        "000000001.png", "000000001.cls", "000000001.json",
        "000000002.bytes", "000000002.cls", "000000002.json",
        "000000003.bytes", "000000003.cls", "000000003.json",
    ]  # fmt: skip
    assert manifest(out)["webdataset"] == {"file_member": "bytes"}
    assert lovecraft("verify", out).exit_code == 0
    files = ["cat/a.JPG", "cat/b.x.png", "dog/README", "dog/doc.json"]
    got = [bytes(x) for b in lc.open_dataset(out).batches(3) for x in b["bytes"]]
    assert got == [(root / f).read_bytes() for f in files]
    require_peers("webdataset")
    rows = run_peer(DECODE_PIL, json.dumps([os.path.join(out, "data.tar")]))
    assert [r["exts"] for r in rows] == [
        ["cls", "jpg", "json"],
        ["cls", "json", "png"],
        *[["bytes", "cls", "json"]] * 2,
    ]
    for r, f in zip(rows[:2], files[:2], strict=True):
        with Image.open(root / f) as im:
            im = im.convert("RGB")  # what "pil" asks of WebDataset's decoder
            assert r["image"][1:] == [im.mode, list(im.size), im.tobytes().hex()]


def _mixed_tar(path, n: int = 6) -> list[dict[str, bytes]]:
    """A WebDataset of mixed extensions as people have them: even samples a .jpg, odd ones a
    .png, each a .cls; returns each sample's members."""
    from tests.inputs.filetrees import image_bytes

    samples = []
    with tarfile.open(path, "w") as tf:
        for i in range(n):
            ext, fmt = ("jpg", "JPEG") if i % 2 == 0 else ("png", "PNG")
            members = {"cls": str(i % 3).encode(), ext: image_bytes(fmt, "RGB", (10 + i, 8), i)}
            for e, data in sorted(members.items()):
                info = tarfile.TarInfo(f"s{i:04d}.{e}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            samples.append(members)
    return samples


def test_a_webdataset_of_mixed_extensions_writes_no_empty_members(tmp_path):
    """Samples holding a .jpg or a .png (read as two columns, empty bytes where a sample had no
    such member) are written back without the empty members: webdataset's ``.decode("pil")``
    opens every sample (it failed on the 0-byte .png of the jpeg samples), with the pixels Pillow
    decodes from the source; our loader gives the empty bytes back, and verify passes. Sharded
    too, so that a shard's first sample may lack a member."""
    from PIL import Image

    from tests.peers import require_peers, run_peer

    samples = _mixed_tar(tmp_path / "in.tar")
    for cmd, extra in (("convert", []), ("shard", ["--num-shards", "2"])):
        out = str(tmp_path / cmd)
        r = lovecraft(cmd, str(tmp_path / "in.tar"), "-o", out, "--to", "webdataset", *extra, "-q")
        assert r.exit_code == 0, r.stderr
        files = [os.path.join(out, f["path"]) for f in manifest(out)["files"]]
        names, sizes = [], []
        for f in files:
            with tarfile.open(f) as tf:
                names += [m.name.split(".", 1)[1] for m in tf]
                sizes += [m.size for m in tf]
        assert names == [e for s in samples for e in sorted(["cls", "jpg" if "jpg" in s else "png", "json"])]
        assert min(sizes) > 0
        assert lovecraft("verify", out, "-q").exit_code == 0
        (batch,) = lc.open_dataset(out).batches(len(samples))
        assert batch["jpg"].tolist() == [s.get("jpg", b"") for s in samples]
        assert batch["png"].tolist() == [s.get("png", b"") for s in samples]
    require_peers("webdataset")
    rows = run_peer(DECODE_PIL, json.dumps(files))
    assert [r["exts"] for r in rows] == [sorted(["cls", "json", *(e for e in s if e != "cls")]) for s in samples]
    for r, s in zip(rows, samples, strict=True):
        ext = "jpg" if "jpg" in s else "png"
        with Image.open(io.BytesIO(s[ext])) as im:
            im = im.convert("RGB")
            assert r["image"] == [ext, im.mode, list(im.size), im.tobytes().hex()]


def test_a_sample_whose_binary_values_are_all_empty_keeps_one_member(tmp_path):
    """Binary columns only, one row empty in both: the row's first member is written, empty, so
    the sample (and the keys after it) stays in the tar."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "b.parquet"
    a, b = [b"x", b"", b"", b"zz"], [b"", b"", b"y", b"w"]
    pq.write_table(pa.table({"a": pa.array(a, pa.binary()), "b": pa.array(b, pa.binary())}), src)
    out = str(tmp_path / "o")
    assert lovecraft("convert", str(src), "-o", out, "--to", "webdataset", "-q").exit_code == 0
    with tarfile.open(os.path.join(out, "data.tar")) as tf:
        assert [(m.name, m.size) for m in tf] == [
            ("000000000.a", 1), ("000000001.a", 0), ("000000002.b", 1), ("000000003.a", 2), ("000000003.b", 1),
        ]  # fmt: skip
    (batch,) = lc.open_dataset(out).batches(4)
    assert batch["a"].tolist() == a and batch["b"].tolist() == b
    assert lovecraft("verify", out, "-q").exit_code == 0


def test_a_sample_without_a_member_it_must_hold_is_named(written, tmp_path):
    """Only a binary column's member may be left out: a tar without one sample's .json member is
    one line naming the sample, from the reader that open_dataset and verify use."""
    from lovecraft_convert.formats.webdataset.layout import DecodeProblem, plan
    from lovecraft_convert.formats.webdataset.reader import TarIndex

    _, outs = written

    def without(name: str, member: str) -> tuple:
        path = tmp_path / f"{name}.tar"
        with tarfile.open(os.path.join(outs[name], "data.tar")) as src, tarfile.open(path, "w") as dst:
            for m in src:
                if m.name != member:
                    dst.addfile(m, src.extractfile(m))
        ds = lc.open_dataset(outs[name])
        return str(path), plan(ds.schema), len(ds)

    with pytest.raises(DecodeProblem, match=r"^sample 000000001 has no \.vec\.npy member$"):
        TarIndex(*without("parquet", "000000001.vec.npy"))
    with pytest.raises(DecodeProblem, match=r"^member 1 is named '000000002\.json', expected '000000001\.json'$"):
        TarIndex(*without("csv", "000000001.json"))  # the sample's only member
    ds = lc.open_dataset(outs["csv"])
    n = len(ds)
    with pytest.raises(DecodeProblem, match=rf"^holds {n} samples; its rows say {n + 1}$"):
        TarIndex(os.path.join(outs["csv"], "data.tar"), plan(ds.schema), n + 1)
    with pytest.raises(DecodeProblem, match=rf"^holds more than the {n - 1} samples of its rows$"):
        TarIndex(os.path.join(outs["csv"], "data.tar"), plan(ds.schema), n - 1)
