"""convert, shard, open_dataset and verify with s3:// inputs and outputs, against local runs of
the same commands (byte for byte) and independent readers."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from lovecraft_convert.formats import builtin_names

from ..conftest import lovecraft
from .conftest import get, objects, same_as_local

CSV = "".join(f"{i},{i * 0.5},w{i % 97}\n" for i in range(5000))


@pytest.fixture
def csv_on_s3(s3, bucket, tmp_path):
    p = tmp_path / "in.csv"
    p.write_text("a,b,c\n" + CSV)
    s3.put_object(Bucket=bucket, Key="in/data.csv", Body=p.read_bytes())
    return str(p), f"s3://{bucket}/in/data.csv"


@pytest.mark.parametrize("fmt", builtin_names())
def test_convert_s3_to_s3_equals_local(fmt, s3, bucket, csv_on_s3, tmp_path):
    local_in, remote_in = csv_on_s3
    extra: list[str] = []
    r = lovecraft("convert", local_in, "-o", str(tmp_path / "loc"), "--to", fmt, "-q")
    if r.exit_code != 0:  # a format of token sequences only: text, tokenized
        text = tmp_path / "in.txt"
        text.write_text("".join(f"line {i} of text\n" for i in range(3000)))
        s3.put_object(Bucket=bucket, Key="in/data.txt", Body=text.read_bytes())
        local_in, remote_in, extra = str(text), f"s3://{bucket}/in/data.txt", ["--tokenizer", "bytes"]
        r = lovecraft("convert", local_in, "-o", str(tmp_path / "loc"), "--to", fmt, "-q", *extra)
    assert r.exit_code == 0, r.stderr
    r = lovecraft("convert", remote_in, "-o", f"s3://{bucket}/out", "--to", fmt, "-q", *extra)
    assert r.exit_code == 0, r.stderr
    same_as_local(s3, bucket, "out", str(tmp_path / "loc"))
    # nothing but the manifest and the run's objects
    keys = objects(s3, bucket, "out/")
    assert {k.split("/")[1] for k in keys} - {"_manifest.json"} == {
        json.loads(get(s3, bucket, "out/_manifest.json"))["files"][0]["path"].split("/")[0]
    }
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    from lovecraft_convert import open_dataset

    remote = open_dataset(f"s3://{bucket}/out")
    local = open_dataset(str(tmp_path / "loc"))
    assert len(remote) == len(local) > 0
    for a, b in zip(remote.batches(700), local.batches(700), strict=True):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])

    r = lovecraft("verify", f"s3://{bucket}/out")
    assert r.exit_code == 0 and r.stdout.startswith(f"ok: s3://{bucket}/out: {fmt}, "), (r.stdout, r.stderr)


def test_verify_names_the_flipped_object_and_strays(s3, bucket, csv_on_s3, tmp_path):
    _, remote_in = csv_on_s3
    fmt = builtin_names()[0]
    assert lovecraft("convert", remote_in, "-o", f"s3://{bucket}/out", "--to", fmt, "-q").exit_code == 0
    m = json.loads(get(s3, bucket, "out/_manifest.json"))
    victim = max(m["files"], key=lambda f: f["bytes"])["path"]
    data = bytearray(get(s3, bucket, f"out/{victim}"))
    data[len(data) // 2] ^= 0x01
    s3.put_object(Bucket=bucket, Key=f"out/{victim}", Body=bytes(data))
    s3.put_object(Bucket=bucket, Key="out/run-dead/x.npy", Body=b"left by a dead run")
    s3.create_multipart_upload(Bucket=bucket, Key="out/run-dead/y.npy")  # an upload a SIGKILL left open
    run = victim.split("/")[0]
    s3.put_object(Bucket=bucket, Key=f"out/{run}/notes.txt", Body=b"put there by hand")
    r = lovecraft("verify", f"s3://{bucket}/out")
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert any(
        line.startswith(f"s3://{bucket}/out/{victim}: blake3 ") and "differs from the manifest's" in line
        for line in lines
    ), lines
    assert (
        f"s3://{bucket}/out/run-dead/x.npy: an object of another run, not listed in the manifest "
        "(stray: --overwrite removes it)" in lines
    )
    # (it said "an object of another run" of an object in the manifest's own run folder)
    assert (
        f"s3://{bucket}/out/{run}/notes.txt: in this dataset's own run folder, not listed in the manifest "
        "(a stray object)" in lines
    )
    assert (
        f"s3://{bucket}/out/run-dead/y.npy: an unfinished multipart upload (of a dead run: --overwrite aborts it)"
        in lines
    )
    # the loaders refuse the damaged object when they come to it (fetched whole, its digest checked;
    # a cache of its own: the session's holds the good bytes under the manifest's digest)
    from lovecraft_convert import open_dataset
    from lovecraft_convert.errors import DatasetError

    with pytest.raises(DatasetError, match=f"s3://{bucket}/out/{victim}: fetched twice, and both times its blake3 "):
        list(open_dataset(f"s3://{bucket}/out", cache_dir=str(tmp_path / "cache")).batches(64))
    # --overwrite writes a new run and removes the old one and the stray
    assert lovecraft("convert", remote_in, "-o", f"s3://{bucket}/out", "--to", fmt, "-q", "--overwrite").exit_code == 0
    runs = {k.split("/")[1] for k in objects(s3, bucket, "out/")} - {"_manifest.json"}
    assert len(runs) == 1 and victim.split("/")[0] not in runs
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert lovecraft("verify", f"s3://{bucket}/out").exit_code == 0


def test_without_manifest_readers_refuse(s3, bucket):
    s3.put_object(Bucket=bucket, Key="half/run-x/data.npy", Body=b"x")
    from lovecraft_convert import open_dataset
    from lovecraft_convert.errors import DatasetError

    with pytest.raises(DatasetError) as e:
        open_dataset(f"s3://{bucket}/half")
    assert str(e.value) == (
        f"s3://{bucket}/half: no _manifest.json; not a lovecraft dataset, or its writing did not finish; "
        "give the output of a completed `lovecraft convert`/`shard` run"
    )
    r = lovecraft("verify", f"s3://{bucket}/half")
    assert r.exit_code == 1
    assert r.stdout.splitlines()[0] == (
        f"s3://{bucket}/half/_manifest.json: missing: not a lovecraft dataset, or the run that wrote it did not finish"
    )


@pytest.mark.parametrize("workers", ["1", "2"])
def test_shard_s3_to_s3_equals_local(workers, s3, bucket, csv_on_s3, tmp_path):
    local_in, remote_in = csv_on_s3
    fmt = builtin_names()[0]
    args = ["--to", fmt, "--num-shards", "3", "--max-memory", "64MiB", "-q"]
    assert lovecraft("shard", local_in, "-o", str(tmp_path / "loc"), *args).exit_code == 0
    r = lovecraft("shard", remote_in, "-o", f"s3://{bucket}/sh", *args, "--workers", workers)
    assert r.exit_code == 0, r.stderr
    assert len(same_as_local(s3, bucket, "sh", str(tmp_path / "loc"))) >= 3
    assert "sh/_partial.json" not in objects(s3, bucket, "sh/")
    assert lovecraft("verify", f"s3://{bucket}/sh").exit_code == 0
    # --resume of the finished dataset: nothing to do
    r = lovecraft("shard", remote_in, "-o", f"s3://{bucket}/sh", *args[:-1], "--resume")
    assert r.exit_code == 0 and "already complete" in r.stderr


def test_inputs_from_prefix_and_glob(s3, bucket, tmp_path):
    parts = []
    for i in range(3):
        body = "a,b\n" + "".join(f"{i * 100 + j},{j}\n" for j in range(100))
        s3.put_object(Bucket=bucket, Key=f"in/p{i}.csv", Body=body.encode())
        (tmp_path / f"p{i}.csv").write_text(body)
        parts.append(str(tmp_path / f"p{i}.csv"))
    s3.put_object(Bucket=bucket, Key="in/_SUCCESS", Body=b"")
    fmt = builtin_names()[0]
    assert lovecraft("convert", *parts, "-o", str(tmp_path / "loc"), "--to", fmt, "-q").exit_code == 0
    for src in (f"s3://{bucket}/in/*.csv", f"s3://{bucket}/in/", f"s3://{bucket}/in"):
        r = lovecraft("convert", src, "-o", f"s3://{bucket}/o", "--to", fmt, "-q", "--overwrite")
        assert r.exit_code == 0, r.stderr
        same_as_local(s3, bucket, "o", str(tmp_path / "loc"))


def test_a_double_star_glob_is_any_number_of_folders_here_and_on_s3(s3, bucket, tmp_path):
    """d/**/*.jsonl matched only d/*/*.jsonl locally (glob without recursive=True: 1,000 rows of
    3,000) and left out d/top.jsonl on S3 (fnmatch's **/ needs a folder: 2,000), exit 0 both."""
    import glob

    d = tmp_path / "d"
    for k, rel in enumerate(("top.jsonl", "a/one.jsonl", "a/b/two.jsonl")):
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        body = "".join(f'{{"i": {k * 1000 + j}}}\n' for j in range(1000))
        (d / rel).write_text(body)
        s3.put_object(Bucket=bucket, Key=f"d/{rel}", Body=body.encode())
    assert len(glob.glob(str(d / "**" / "*.jsonl"), recursive=True)) == 3
    for src, out in (
        (str(d / "**" / "*.jsonl"), str(tmp_path / "loc")),
        (f"s3://{bucket}/d/**/*.jsonl", f"s3://{bucket}/o"),
    ):
        r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q", "--json")
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["rows"] == 3000, src
    # and a bare s3:// is one line, not a traceback
    for args in (("inspect", "s3://"), ("convert", "s3://", "-o", str(tmp_path / "x"), "--to", "parquet")):
        r = lovecraft(*args)
        assert (r.exit_code, r.stderr) == (1, "Error: s3://: no bucket named; give a URI like s3://bucket/path\n")


@pytest.mark.parametrize("kind", ["npy", "parquet", "arrow"])
def test_columnar_and_npy_inputs_from_s3(kind, s3, bucket, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / f"x.{kind}"
    if kind == "npy":
        np.save(src, np.arange(18000, dtype=np.float32).reshape(6000, 3))
    else:
        t = pa.table({"a": np.arange(6000), "s": [f"w{i}" for i in range(6000)]})
        if kind == "parquet":
            pq.write_table(t, src, row_group_size=1000)
        else:
            with pa.ipc.new_file(str(src), t.schema) as w:
                w.write_table(t, max_chunksize=1000)
    s3.put_object(Bucket=bucket, Key=f"in/x.{kind}", Body=src.read_bytes())
    fmt = builtin_names()[0]
    workers = "2" if kind == "parquet" else "1"  # one case through worker processes, the others in-process
    for cmd, extra in (("convert", []), ("shard", ["--num-shards", "2", "--workers", workers])):
        out = tmp_path / f"loc-{cmd}"
        assert lovecraft(cmd, str(src), "-o", str(out), "--to", fmt, "-q", *extra).exit_code == 0
        r = lovecraft(cmd, f"s3://{bucket}/in/x.{kind}", "-o", f"s3://{bucket}/{cmd}", "--to", fmt, "-q", *extra)
        assert r.exit_code == 0, r.stderr
        same_as_local(s3, bucket, cmd, str(out))


def test_inspect_reads_s3_input(s3, bucket, csv_on_s3):
    _, remote_in = csv_on_s3
    r = lovecraft("inspect", remote_in)
    assert r.exit_code == 0, r.stderr
    assert remote_in in r.stdout


def test_file_uri_is_a_local_path(tmp_path, csv_on_s3):
    local_in, _ = csv_on_s3
    fmt = builtin_names()[0]
    r = lovecraft("convert", f"file://{local_in}", "-o", f"file://{tmp_path / 'o'}", "--to", fmt, "-q")
    assert r.exit_code == 0, r.stderr
    assert os.path.isfile(tmp_path / "o" / "_manifest.json")


@pytest.mark.parametrize("fmt", builtin_names()[1:2])  # a format whose buckets get an index file
def test_bucket_s3_to_s3_equals_local(fmt, s3, bucket, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("".join("x" * (1 + i % 37) + "\n" for i in range(4000)))
    s3.put_object(Bucket=bucket, Key="in/t.txt", Body=text.read_bytes())
    args = ["--to", fmt, "--num-buckets", "3", "-q"]
    assert lovecraft("bucket", str(text), "-o", str(tmp_path / "loc"), *args).exit_code == 0
    r = lovecraft("bucket", f"s3://{bucket}/in/t.txt", "-o", f"s3://{bucket}/bk", *args)
    assert r.exit_code == 0, r.stderr
    same_as_local(s3, bucket, "bk", str(tmp_path / "loc"))
    r = lovecraft("verify", f"s3://{bucket}/bk")
    assert r.exit_code == 0, r.stdout

    from lovecraft_convert import open_dataset

    remote, local = open_dataset(f"s3://{bucket}/bk"), open_dataset(str(tmp_path / "loc"))
    assert remote.bucketed and len(remote) == len(local) == 4000


def test_dataset_on_s3_as_input_and_inspected(s3, bucket, csv_on_s3, tmp_path):
    local_in, remote_in = csv_on_s3
    fmt = builtin_names()[0]
    assert lovecraft("convert", remote_in, "-o", f"s3://{bucket}/ds", "--to", fmt, "-q").exit_code == 0
    r = lovecraft("inspect", f"s3://{bucket}/ds")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith(f"s3://{bucket}/ds: lovecraft dataset, {fmt}, 5,000 rows")
    r = lovecraft("convert", f"s3://{bucket}/ds", "-o", str(tmp_path / "again"), "--to", fmt, "-q")
    assert r.exit_code == 0, r.stderr

    from lovecraft_convert import open_dataset

    a = open_dataset(str(tmp_path / "again")).take(np.arange(5000))
    b = open_dataset(f"s3://{bucket}/ds").take(np.arange(5000))
    for k in b:
        np.testing.assert_array_equal(a[k], b[k])


def test_shard_parts_read_their_byte_ranges(s3, bucket, tmp_path, monkeypatch):
    """Each part of a remote input is read with GETs inside its own byte range, and the parts
    together fetch each byte once (cutting the input into parts reads only around the cuts)."""
    import threading

    from lovecraft_convert.jobs.shard import shard
    from lovecraft_convert.storage.rangefile import RangeFile
    from lovecraft_convert.storage.s3 import S3Store

    body = "a,b\n" + "".join(f"{i},{i % 7}\n" for i in range(200_000))
    s3.put_object(Bucket=bucket, Key="in/big.csv", Body=body.encode())
    size = len(body.encode())
    reading = threading.local()
    gets: list[tuple[int, int, int, int]] = []  # (file's start, file's end, GET start, GET end)
    readinto, open_body = RangeFile.readinto, S3Store.open_body

    def tagged(self, b):
        reading.file = self
        try:
            return readinto(self, b)
        finally:
            reading.file = None

    def recorded(self, key, start, end):
        f = getattr(reading, "file", None)
        if key == "in/big.csv" and f is not None:
            gets.append((f.start, f.end, start, end))
        return open_body(self, key, start, end)

    monkeypatch.setattr(RangeFile, "readinto", tagged)
    monkeypatch.setattr(S3Store, "open_body", recorded)
    fmt = builtin_names()[0]
    shard(
        [f"s3://{bucket}/in/big.csv"], f"s3://{bucket}/sh", to=fmt, num_shards=2, workers=1,
        part_bytes=size // 6, progress=False,
    )  # fmt: skip
    parts = sorted({(fs, fe) for fs, fe, _, _ in gets if (fs, fe) != (0, size)})
    assert len(parts) >= 5
    assert parts[-1][1] == size and all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))  # they tile
    part_gets = [(fs, fe, s, e) for fs, fe, s, e in gets if (fs, fe) in parts]
    assert all(fs <= s < e <= fe for fs, fe, s, e in part_gets)
    assert sum(e - s for _, _, s, e in part_gets) == size - parts[0][0]
    local = tmp_path / "big.csv"
    local.write_text(body)
    assert (
        lovecraft("shard", str(local), "-o", str(tmp_path / "loc"), "--to", fmt, "--num-shards", "2", "-q").exit_code
        == 0
    )
    same_as_local(s3, bucket, "sh", str(tmp_path / "loc"))


def test_jsonl_input_from_s3_sharded(s3, bucket, tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps({"a": i, "s": "w" * (i % 9), "f": i / 3}) + "\n" for i in range(20000)))
    s3.put_object(Bucket=bucket, Key="in/t.jsonl", Body=src.read_bytes())
    fmt = builtin_names()[0]
    args = ["--to", fmt, "--num-shards", "2", "--max-memory", "64MiB", "-q"]
    assert lovecraft("shard", str(src), "-o", str(tmp_path / "loc"), *args).exit_code == 0
    r = lovecraft("shard", f"s3://{bucket}/in/t.jsonl", "-o", f"s3://{bucket}/jl", *args)
    assert r.exit_code == 0, r.stderr
    same_as_local(s3, bucket, "jl", str(tmp_path / "loc"))


def test_an_interrupted_run_to_a_store_names_the_store(s3, bucket, csv_on_s3, tmp_path, monkeypatch):
    """Ctrl-C once both shards are on the store (just before the manifest): the line names the
    output's URI and the local journal --resume reads (it named only the local scratch directory,
    as if the shards were there); --resume then finishes with the same objects as a run never
    interrupted."""
    import re
    import signal

    from lovecraft_convert import manifest as mf

    local_in, _ = csv_on_s3
    args = ["--num-shards", "2", "--to", "parquet", "-q"]
    real = mf.build

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with monkeypatch.context() as m:
            m.setattr(mf, "build", interrupted)
            r = lovecraft("shard", local_in, "-o", f"s3://{bucket}/out", *args)
    finally:
        signal.signal(signal.SIGINT, old)
    assert r.exit_code == 130
    assert re.fullmatch(
        rf"Error: interrupted; 2 shards committed for s3://{bucket}/out \(its journal in (/\S+)\); run the same "
        r"command with --resume to finish, or --overwrite to start over\n",
        r.stderr,
    ), r.stderr
    assert "out/_manifest.json" not in objects(s3, bucket, "out/")
    assert mf.build is real
    # resumed with another --num-shards: refused naming the run on the store (it named this
    # machine's scratch, which a user resuming from another machine does not have)
    r = lovecraft("shard", local_in, "-o", f"s3://{bucket}/out", "--num-shards", "3", *args[2:], "--resume")
    assert r.exit_code != 0
    assert re.match(
        rf"Error: s3://{bucket}/out: the unfinished run in s3://{bucket}/out/run-\S+ cannot be resumed: it was "
        r"made with --num-shards 2, this run has 3; run it with the same command and --resume",
        r.stderr,
    ), r.stderr
    r = lovecraft("shard", local_in, "-o", f"s3://{bucket}/out", *args, "--resume")
    assert r.exit_code == 0, r.stderr
    assert lovecraft("shard", local_in, "-o", str(tmp_path / "loc"), *args).exit_code == 0
    same_as_local(s3, bucket, "out", str(tmp_path / "loc"))
