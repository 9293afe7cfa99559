"""Outputs that only append (Parquet, TFRecord, Megatron) go to the store as they are written:
multipart uploads of parts sized from the budget, nothing of the output in local scratch, the
same bytes as a local run; a failed run leaves neither objects nor unfinished uploads."""

from __future__ import annotations

import csv
import os
import sys

import numpy as np
import pytest

from ..conftest import lovecraft
from .conftest import get, objects, same_as_local

_opened: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _opened is None or event != "open":
        return
    path, mode, flags = args
    writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
        isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR)
    )
    if writing and isinstance(path, str):
        _opened.append(path)


sys.addaudithook(_audit)  # an audit hook cannot be removed: it records only while a test asks


@pytest.fixture
def opened_for_writing():
    global _opened
    _opened = []
    try:
        yield _opened
    finally:
        _opened = None


@pytest.fixture(scope="module")
def floats_csv(tmp_path_factory):
    """~24 MB of CSV: outputs of several 5 MiB parts."""
    rng = np.random.default_rng(5)
    p = tmp_path_factory.mktemp("stream") / "floats.csv"
    with open(p, "w") as f:
        f.write("a,b,c,d,label\n")
        for _ in range(4):
            block = rng.normal(size=(100_000, 4))
            np.savetxt(f, np.column_stack([block, np.arange(len(block))]), fmt=["%.9g"] * 4 + ["%d"], delimiter=",")
    return str(p)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("stream") / "docs.txt"
    with open(p, "w") as f:
        for i in range(120_000):
            f.write(f"document {i} says {'word ' * (i % 13)}and ends\n")
    return str(p)


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord", "megatron"])
def test_appended_outputs_stream_to_the_store_and_not_to_scratch(
    fmt, s3, bucket, floats_csv, text_file, tmp_path, opened_for_writing
):
    src, extra = (floats_csv, []) if fmt != "megatron" else (text_file, ["--tokenizer", "bytes"])
    args = ["--to", fmt, "--max-memory", "64MiB", "-q", *extra]
    r = lovecraft("convert", src, "-o", f"s3://{bucket}/out", *args)
    assert r.exit_code == 0, r.stderr
    scratch = os.environ["LOVECRAFT_SCRATCH"]
    data_ext = {"parquet": ".parquet", "tfrecord": ".tfrecord", "megatron": (".bin", ".idx")}[fmt]
    local_data = [p for p in opened_for_writing if p.startswith(scratch) and p.endswith(data_ext)]
    assert local_data == []
    opened_for_writing.clear()
    assert lovecraft("convert", src, "-o", str(tmp_path / "loc"), *args).exit_code == 0
    names = same_as_local(s3, bucket, "out", str(tmp_path / "loc"))
    sizes = {k.rsplit("/", 1)[1]: v for k, v in objects(s3, bucket, "out/").items()}
    assert max(sizes[n] for n in names) > 5 << 20  # at least one went up in several parts
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert lovecraft("verify", f"s3://{bucket}/out").exit_code == 0


def test_a_parquet_writer_that_starts_a_second_file_renames_the_streamed_first(s3, bucket, tmp_path):
    """A 600-column table at --max-memory 16MiB is written as several files; the first, streamed
    as data.parquet, becomes data-00000.parquet on the store as it does on disk."""
    rng = np.random.default_rng(2)
    values = np.round(rng.normal(size=(3000, 600)), 4)
    src = tmp_path / "wide.csv"
    with open(src, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([f"c{i}" for i in range(600)])
        w.writerows(values.tolist())
    args = ["--to", "parquet", "--max-memory", "16MiB", "-q"]
    assert lovecraft("convert", str(src), "-o", str(tmp_path / "loc"), *args).exit_code == 0
    r = lovecraft("convert", str(src), "-o", f"s3://{bucket}/wide", *args)
    assert r.exit_code == 0, r.stderr
    names = same_as_local(s3, bucket, "wide", str(tmp_path / "loc"))
    assert sorted(names)[:2] == ["data-00000.parquet", "data-00001.parquet"]
    assert not any(k.endswith("/data.parquet") for k in objects(s3, bucket, "wide/"))


def test_a_run_failing_mid_stream_leaves_no_object_and_no_upload(s3, bucket, floats_csv, tmp_path):
    """Parts are up when a bad line ~20 MB into the input fails the run: the upload is aborted."""
    bad = tmp_path / "bad.csv"
    with open(floats_csv) as f, open(bad, "w") as g:
        g.write(f.read())
        g.write("1,2,3\n")
    r = lovecraft("convert", str(bad), "-o", f"s3://{bucket}/bad", "--to", "tfrecord", "--max-memory", "64MiB", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {bad}, row 400001 (line 400002): expected 5 fields, found 3; "
        "fix the row (is a quote unbalanced or a delimiter missing?)\n",
    )
    assert objects(s3, bucket, "bad/") == {}
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_parts_grow_after_their_count_and_stop_at_the_limit(s3, bucket, monkeypatch):
    from lovecraft_convert.storage import s3 as s3mod
    from lovecraft_convert.storage.base import StorageError
    from lovecraft_convert.storage.stores import get_store

    store = get_store(f"s3://{bucket}/x")
    monkeypatch.setattr(s3mod, "GROW_AFTER", 2)
    mib = 1 << 20
    data = np.random.default_rng(0).integers(0, 256, size=20 * mib + 123, dtype=np.uint8).tobytes()
    sent: list[tuple[int, int]] = []
    send = store._part

    def recorded(uri, key, upload_id, number, part):
        sent.append((number, len(part)))
        return send(uri, key, upload_id, number, part)

    monkeypatch.setattr(store, "_part", recorded)
    w = store.open_writer("grown", part=5 * mib, cap=6 * mib)
    for i in range(0, len(data), 777_777):  # odd pieces
        w.write(data[i : i + 777_777])
    assert w.close() == len(data)
    assert get(s3, bucket, "grown") == data
    assert sorted(sent) == [(1, 5 * mib), (2, 5 * mib), (3, 6 * mib), (4, len(data) - 16 * mib)]

    monkeypatch.setattr(s3mod, "MAX_PARTS", 3)
    w = store.open_writer("too-big", part=5 * mib, cap=6 * mib)
    with pytest.raises(StorageError) as e:  # the fourth part is sent by close(), which then aborts
        w.write(data)
        w.close()
    assert e.value.one_line() == (
        f"s3://{bucket}/too-big: an object larger than {2 * 5 * mib + 6 * mib} bytes cannot be written in S3's "
        "10,000 parts of this size; raise max_memory (parts are sized from it)"
    )
    assert "too-big" not in objects(s3, bucket)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_type_change_late_in_the_input_starts_the_streamed_files_over(s3, bucket, floats_csv, tmp_path):
    """A word in a float column ~20 MB in: the run starts over with the column as text, and what
    was streamed before is gone from the store (only the files the manifest names remain)."""
    late = tmp_path / "late.csv"
    with open(floats_csv) as f, open(late, "w") as g:
        g.write(f.read())
        g.write("1,2,3,oops,5\n")
    args = ["--to", "tfrecord", "--max-memory", "64MiB", "-q"]
    r = lovecraft("convert", str(late), "-o", f"s3://{bucket}/late", *args)
    assert r.exit_code == 0, r.stderr
    assert lovecraft("convert", str(late), "-o", str(tmp_path / "loc"), *args).exit_code == 0
    names = same_as_local(s3, bucket, "late", str(tmp_path / "loc"))
    assert len(objects(s3, bucket, "late/")) == len(names) + 1  # and the manifest
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
