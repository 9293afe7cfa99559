"""WebDataset .tar shards as input: members grouped by key into one row per sample, a column per
extension with the members' bytes (or decoded images), read from shards written here with tarfile
and by webdataset's own ShardWriter (in the peers' venv); damaged shards are one line."""

from __future__ import annotations

import io
import json
import os
import tarfile

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.inputs.filetrees import image_bytes
from tests.peers import require_peers, run_peer
from tests.readback import disk_digest, manifest, read_back


def _add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def make_shards(d: str, shards: int = 2, per: int = 5, gz: bool = False) -> list[tuple[str, dict[str, bytes]]]:
    """Shards of samples {jpg, json, cls}; returns [(key, members)] in order."""
    samples = []
    for s in range(shards):
        path = os.path.join(d, f"shard-{s:03d}.tar" + (".gz" if gz else ""))
        with tarfile.open(path, "w:gz" if gz else "w") as tf:
            for i in range(per):
                key = f"s{s}/{i:06d}"
                members = {
                    "jpg": image_bytes("JPEG", "RGB", (20 + i, 16), 10 * s + i),
                    "json": json.dumps({"i": i, "shard": s}).encode(),
                    "cls": str(i % 3).encode(),
                }
                for ext, data in members.items():
                    _add(tf, f"{key}.{ext}", data)
                samples.append((key, members))
    return samples


@pytest.mark.parametrize("gz", [False, True], ids=["tar", "tar.gz"])
def test_samples_become_rows(tmp_path, gz):
    samples = make_shards(str(tmp_path), gz=gz)
    out = str(tmp_path / "out")
    r = lovecraft("convert", str(tmp_path / "shard-*"), "-o", out, "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr
    cols = read_back(out, "parquet")
    assert list(cols) == ["__key__", "jpg", "json", "cls"]
    assert cols["__key__"] == [k for k, _ in samples]
    for ext in ("jpg", "json", "cls"):
        assert cols[ext] == [m[ext] for _, m in samples]
    assert manifest(out)["sources"][0]["format"] == "webdataset"


def test_decoded_images_and_workers(tmp_path):
    pytest.importorskip("PIL")
    from tests.inputs.test_files_decode import pillow_reference

    samples = make_shards(str(tmp_path), shards=3)
    outs = []
    for workers in (1, 2):
        out = str(tmp_path / f"w{workers}")
        lc.shard(str(tmp_path / "shard-*.tar"), out, to="hdf5", decode="image", image_size="12x12", num_shards=2,
                 shuffle=True, seed=5, workers=workers, progress=False)  # fmt: skip
        outs.append(out)
    assert disk_digest(outs[0]) == disk_digest(outs[1])
    out = str(tmp_path / "one")
    lc.convert(str(tmp_path / "shard-*.tar"), out, to="hdf5", decode="image", image_size="12x12", progress=False)
    cols = read_back(out, "hdf5")
    assert cols["jpg"].shape == (len(samples), 12, 12, 3)
    for k, (_, m) in enumerate(samples):
        np.testing.assert_array_equal(cols["jpg"][k], pillow_reference(m["jpg"], (12, 12), "RGB", "shorter"))
    assert manifest(out)["decode"]["columns"] == ["jpg"]


def test_read_what_webdatasets_shardwriter_wrote(tmp_path):
    require_peers("webdataset")
    code = """
import json, sys, webdataset as wds
with wds.ShardWriter(sys.argv[1] + "/peer-%03d.tar", maxcount=4) as sink:
    for i in range(10):
        sink.write({"__key__": f"k{i:04d}", "txt": f"text {i}", "cls": i % 2, "npy.bin": bytes([i] * 3)})
print(json.dumps("ok"))
"""
    run_peer(code, str(tmp_path))
    out = str(tmp_path / "out")
    lc.convert(str(tmp_path / "peer-*.tar"), out, to="parquet", progress=False)
    cols = read_back(out, "parquet")
    assert cols["__key__"] == [f"k{i:04d}" for i in range(10)]
    assert cols["txt"] == [f"text {i}".encode() for i in range(10)]
    assert cols["cls"] == [str(i % 2).encode() for i in range(10)]
    assert cols["npy.bin"] == [bytes([i] * 3) for i in range(10)]


def test_columns_choose_the_extensions(tmp_path):
    samples = make_shards(str(tmp_path))
    out = str(tmp_path / "out")
    lc.convert(str(tmp_path / "shard-*.tar"), out, to="parquet", columns=["__key__", "cls"], progress=False)
    cols = read_back(out, "parquet")
    assert cols["cls"] == [m["cls"] for _, m in samples]


def test_a_new_extension_late_and_a_duplicate_member(tmp_path):
    make_shards(str(tmp_path), shards=1)
    path = str(tmp_path / "late.tar")
    with tarfile.open(path, "w") as tf:
        for i in range(70):
            _add(tf, f"{i:04d}.txt", b"x")
        _add(tf, "0070.txt", b"y")
        _add(tf, "0070.wav", b"z")
    r = lovecraft("convert", path, "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {path}, sample 0070: a .wav member, an extension the first 64 samples do not have; "
        "name the columns with --columns __key__,txt,... (members of other extensions are then left out)\n",
    )
    dup = str(tmp_path / "dup.tar")
    with tarfile.open(dup, "w") as tf:
        _add(tf, "a.txt", b"1")
        _add(tf, "a.txt", b"2")
    r = lovecraft("convert", dup, "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {dup}, member a.txt: a second .txt member of sample 'a'; give each member of a sample its own extension\n",
    )


def test_a_truncated_shard(tmp_path):
    make_shards(str(tmp_path), shards=1, per=8)
    path = str(tmp_path / "shard-000.tar")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2 + 100])
    r = lovecraft("convert", path, "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {path}: not a readable tar after member s0/")
    assert r.stderr.endswith("; re-create the shard\n") and r.stderr.count("\n") == 1
    assert not os.path.exists(str(tmp_path / "o"))


def test_column_type_on_a_members_column_is_one_line(tmp_path):
    """The members' columns are their bytes: `--column-type cls=int64` was silently ignored (the
    output still binary); it is one line, exit 1, nothing written. float16 still narrows a decoded
    image column."""
    make_shards(str(tmp_path), shards=1, per=3)
    src = str(tmp_path / "shard-000.tar")
    r = lovecraft("convert", src, "-o", str(tmp_path / "bad"), "--to", "parquet", "--column-type", "cls=int64", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: --column-type cls=int64: 'cls' is a column of the webdataset input {src} itself, whose type is "
        "fixed; only float16 narrows it; --column-type types the columns of a --metadata sidecar\n",
    )
    assert not os.path.exists(tmp_path / "bad")
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "hdf5", "--columns", "__key__,jpg", "--decode", "image",
                  "--image-size", "8x8", "--column-type", "jpg=float16", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    got = read_back(out, "hdf5")["jpg"]
    assert got.dtype == np.float16 and got.shape == (3, 8, 8, 3)


def test_a_first_image_that_does_not_decode_is_skipped_when_asked(tmp_path):
    """With --on-bad-file skip, a first sample whose image does not decode was still fatal ('the
    first image gives the shape'): the shape now comes from the first that decodes, as for files;
    without skip, the one line says how to skip it."""
    samples = make_shards(str(tmp_path), shards=1, per=4)
    src = str(tmp_path / "shard-000.tar")
    with tarfile.open(src, "w") as tf:  # the same samples, the first one's jpg broken
        for i, (key, members) in enumerate(samples):
            for ext, data in members.items():
                _add(tf, f"{key}.{ext}", b"broken" if (i, ext) == (0, "jpg") else data)
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "hdf5", "--decode", "image", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, member s0/000000.jpg: not an image (no format Pillow reads); the first image gives the "
        "shape: fix or remove it, or pass --on-bad-file skip to leave such samples out (counted)\n",
    )
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "hdf5", "--decode", "image", "--on-bad-file", "skip", "-q")
    assert r.exit_code == 0, r.stderr
    from PIL import Image

    got = read_back(out, "hdf5")  # the shape of the 2nd (21x16): the 3rd and 4th (22x16, 23x16) do not fit
    assert [k.decode() if isinstance(k, bytes) else k for k in got["__key__"]] == ["s0/000001"]
    want = np.asarray(Image.open(io.BytesIO(samples[1][1]["jpg"])).convert("RGB"))
    assert want.shape == (16, 21, 3)
    np.testing.assert_array_equal(got["jpg"][0], want)
    assert manifest(out)["skipped_files"]["count"] == 3


def test_a_webdataset_of_json_members_converts_to_a_webdataset(tmp_path):
    """The common layout {jpg, json, cls} written back as WebDataset (to reshard, filter, dedup):
    each sample's own .json member kept as it came, and the text columns (the sample's original
    ``__key__``) in a <key>.meta.json member beside it, not refused as one extension. Read back with
    tarfile and json, with our loader, and verified."""
    samples = make_shards(str(tmp_path))
    out = tmp_path / "out"
    r = lovecraft("convert", str(tmp_path / "shard-*"), "-o", str(out), "--to", "webdataset", "-q")
    assert r.exit_code == 0, r.stderr
    with tarfile.open(out / "data.tar") as tf:
        names = tf.getnames()
        got = {n: tf.extractfile(n).read() for n in names}
    width = len(names[0].split(".", 1)[0])
    assert names == [f"{k:0{width}d}.{e}" for k in range(len(samples)) for e in ("cls", "jpg", "json", "meta.json")]
    for k, (key, members) in enumerate(samples):
        stem = f"{k:0{width}d}"
        for ext in ("cls", "jpg", "json"):
            assert got[f"{stem}.{ext}"] == members[ext]
        assert json.loads(got[f"{stem}.meta.json"]) == {"__key__": key}
    (batch,) = lc.open_dataset(str(out)).batches(len(samples))  # our loader
    assert batch["__key__"].tolist() == [key for key, _ in samples]
    assert batch["json"].tolist() == [m["json"] for _, m in samples]
    r = lovecraft("verify", str(out), "-q")
    assert r.exit_code == 0, r.stdout + r.stderr
