"""``shard --dedup exact`` (and ``bucket``'s): the rows kept equal polars' ``unique(subset, maintain_order=True,
keep="first")`` of the source across many parts and hash partitions, the bytes are the same for 1
and 2 workers, a shuffled run keeps the same rows, ``--dedup-report`` places rows across parts, and
a run killed (SIGKILL) after its scan finishes byte-identical with ``--resume``."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import lovecraft_convert as lc
from lovecraft_convert import bucket, shard
from tests.conftest import SUBPROCESS_ENV, lovecraft, sigkilled_at
from tests.readback import manifest

pl = pytest.importorskip("polars")
ROWS = 60_000


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> str:
    rng = np.random.default_rng(11)
    vocab = [f"doc {k} " + "x" * int(k % 40) for k in range(30_000)]
    p = tmp_path_factory.mktemp("dedup_shard") / "docs.jsonl"
    with open(p, "w") as f:
        for i in range(ROWS):
            f.write(
                json.dumps({"id": i, "text": vocab[int(rng.integers(0, len(vocab)))], "g": int(rng.integers(0, 2))})
                + "\n"
            )
    return str(p)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _files(out: str) -> dict[str, bytes]:
    return {os.path.basename(p): _read(p) for p in sorted(glob.glob(os.path.join(out, "*.parquet")))}


def _run(src: str, out: str, **kw):
    args = dict(to="parquet", num_shards=4, dedup="exact", dedup_columns=["text"], part_bytes=256 << 10,
                max_memory="16MiB")  # fmt: skip
    args.update(kw)
    return shard(src, out, **args)


def test_equals_polars_and_same_bytes_for_any_workers(tmp_path, src):
    reports = [str(tmp_path / f"r{w}.jsonl") for w in (1, 2)]
    _run(src, str(tmp_path / "w1"), workers=1, dedup_report=reports[0])
    _run(src, str(tmp_path / "w2"), workers=2, dedup_report=reports[1])
    want = pl.read_ndjson(src).unique(subset=["text"], maintain_order=True, keep="first")
    got = pl.read_parquet(os.path.join(tmp_path / "w1", "*.parquet"))
    assert got["id"].to_list() == want["id"].to_list()
    assert _files(str(tmp_path / "w1")) == _files(str(tmp_path / "w2"))
    assert _read(reports[0]) == _read(reports[1])
    m = manifest(str(tmp_path / "w1"))
    assert m["rows"] == len(want)
    assert m["removed"]["duplicate"]["rows"] == ROWS - len(want)
    assert m["removed"]["duplicate"]["partitions"] > 1
    # the report places each dropped row (several parts: rows of later parts counted after earlier ones)
    texts = pl.read_ndjson(src)["text"].to_list()
    first: dict[str, int] = {}
    lines = []
    for i, t in enumerate(texts):
        if t in first:
            lines.append({"row": i, "file": src, "file_row": i, "kept_row": first[t], "kept_file": src,
                          "kept_file_row": first[t]})  # fmt: skip
        else:
            first[t] = i
    assert [json.loads(x) for x in _read(reports[0]).decode().splitlines()] == lines


def test_shuffled_keeps_the_same_rows(tmp_path, src):
    _run(src, str(tmp_path / "s"), shuffle=True, seed=3, filter="g == 1")
    want = pl.read_ndjson(src).filter(pl.col("g") == 1).unique(subset=["text"], maintain_order=True, keep="first")
    got = pl.read_parquet(os.path.join(tmp_path / "s", "*.parquet"))
    assert sorted(got["id"].to_list()) == sorted(want["id"].to_list())
    assert got["id"].to_list() != want["id"].to_list()  # shuffled
    removed = manifest(str(tmp_path / "s"))["removed"]
    assert removed["filter"]["rows"] + removed["duplicate"]["rows"] == ROWS - len(want)


def test_sigkill_then_resume_is_byte_identical(tmp_path, src):
    ref = str(tmp_path / "ref")
    _run(src, ref, workers=1)
    out = str(tmp_path / "out")
    script = (
        "import sys; from lovecraft_convert import shard; "
        f"shard({src!r}, {out!r}, to='parquet', num_shards=4, dedup='exact', dedup_columns=['text'], "
        "part_bytes=256 << 10, max_memory='16MiB', workers=1, progress=False, resume=sys.argv[1] == 'resume')"
    )
    cmd = [sys.executable, "-c", script]
    journal = os.path.join(tmp_path, ".out.partial", "journal.jsonl")
    if not sigkilled_at([*cmd, "first"], journal, b'"phase": "decide"'):
        pytest.skip("the run finished before it could be killed")
    r = subprocess.run([*cmd, "resume"], env=SUBPROCESS_ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert _files(out) == _files(ref)


# --------------------------------------------------------------------------------------------
# bucket
# --------------------------------------------------------------------------------------------


def _bucket_texts(out: str) -> list[str]:
    got = pl.read_parquet(os.path.join(out, "*.parquet"))
    return sorted(bytes(t).decode() for t in got["tokens"].to_list())


def test_bucket_keeps_the_unique_texts_for_any_workers(tmp_path, src):
    outs = []
    for w in (1, 2):
        out = str(tmp_path / f"b{w}")
        bucket(src, out, to="parquet", layout="ragged", num_buckets=3, dedup="exact", filter="g == 1", workers=w,
               part_bytes=256 << 10, max_memory="16MiB")  # fmt: skip
        outs.append(out)
    want = pl.read_ndjson(src).filter(pl.col("g") == 1).unique(subset=["text"], maintain_order=True, keep="first")
    assert _bucket_texts(outs[0]) == sorted(want["text"].to_list())
    assert _files(outs[0]) == _files(outs[1])
    removed = manifest(outs[0])["removed"]
    assert removed["read"] == ROWS
    assert removed["filter"]["rows"] + removed["duplicate"]["rows"] == ROWS - len(want)
    assert removed["duplicate"]["columns"] == ["text"]
    assert lc.verify(outs[0], against=[src]).lines() == []


def test_bucket_packed_verifies_against_its_source(tmp_path, src):
    out = str(tmp_path / "p")
    bucket(src, out, to="parquet", layout="packed", seq_len=64, dedup="exact", workers=1, part_bytes=256 << 10)
    want = pl.read_ndjson(src).unique(subset=["text"], maintain_order=True, keep="first")
    assert manifest(out)["removed"]["duplicate"]["rows"] == ROWS - len(want)
    assert lc.verify(out, against=[src]).lines() == []


def test_bucket_refuses_ragged_rows(tmp_path):
    p = tmp_path / "rows.csv"
    p.write_text("1,2\n1,2\n3\n")
    r = lovecraft("bucket", str(p), "-o", str(tmp_path / "o"), "--to", "parquet", "--ragged", "--num-buckets", "1",
                  "--dedup", "exact")  # fmt: skip
    assert (r.exit_code, r.stderr.strip()) == (
        2,
        "Error: --dedup is not offered by bucket for --ragged rows yet; "
        "run `lovecraft shard` with --dedup on it first, then bucket that output without --dedup",
    )
    # a dataset (a shard output already): the hint said to shard it with --dedup and bucket "its
    # output", read as this very input (an outside trial)
    ds = str(tmp_path / "ds")
    (tmp_path / "t.jsonl").write_text('{"text": "a"}\n{"text": "a"}\n')
    assert (
        lovecraft("shard", str(tmp_path / "t.jsonl"), "-o", ds, "--to", "parquet", "--num-shards", "1", "-q").exit_code
        == 0
    )
    r = lovecraft("bucket", ds, "-o", str(tmp_path / "o"), "--to", "parquet", "--num-buckets", "1", "--dedup", "exact")
    assert (r.exit_code, r.stderr.strip()) == (
        2,
        "Error: --dedup is not offered by bucket for a dataset input yet; "
        "run `lovecraft shard` with --dedup on it first, then bucket that output without --dedup",
    )


def test_a_type_widened_late_starts_the_scan_over(tmp_path):
    """A JSON Lines key holding integers, then floats past the first records: the run starts over with
    the wider type, the scan included, and keeps the first of each value."""
    p = tmp_path / "late.jsonl"
    with open(p, "w") as f:
        for i in range(30_000):
            f.write(json.dumps({"id": i, "x": i % 500}) + "\n")
        for i in range(30_000, 31_000):
            f.write(json.dumps({"id": i, "x": (i % 700) + 0.5}) + "\n")
    out = str(tmp_path / "out")
    shard(str(p), out, to="parquet", num_shards=2, dedup="exact", dedup_columns=["x"], part_bytes=128 << 10,
          max_memory="16MiB", workers=1)  # fmt: skip
    want = pl.read_ndjson(p, infer_schema_length=None).unique(subset=["x"], maintain_order=True, keep="first")
    got = pl.read_parquet(os.path.join(out, "*.parquet"))
    assert got["id"].to_list() == want["id"].to_list()


def test_bucket_a_filter_column_widened_late_is_one_line(tmp_path):
    p = tmp_path / "w.jsonl"
    with open(p, "w") as f:
        for i in range(30_000):
            f.write(json.dumps({"text": f"t{i % 100}", "n": i % 5}) + "\n")
        f.write(json.dumps({"text": "t1", "n": 0.5}) + "\n")
    r = lovecraft("bucket", str(p), "-o", str(tmp_path / "o"), "--to", "parquet", "--num-buckets", "2", "--filter",
                  "n != 3", "--workers", "1")  # fmt: skip
    assert (r.exit_code, r.stderr.strip()) == (
        1,
        f"Error: {p}, column 'n': its type changes past the first records; give it one type throughout, or filter "
        "and deduplicate with `lovecraft shard` first",
    )
    assert not os.path.exists(tmp_path / "o")


def test_bucket_filters_on_a_json_lines_key_first_met_late(tmp_path):
    """A filter key absent from the first records was typed from nothing (a number) and
    `lang == 'en'` refused as comparing a number with a string; bucket now reads the input once
    to settle its types, as convert does, and keeps what polars keeps."""
    p = tmp_path / "late.jsonl"
    with open(p, "w") as f:
        for i in range(40_000):
            rec = {"text": "w " * (i % 30 + 1)}
            if i >= 30_000:
                rec["lang"] = "en" if i % 3 else "de"
            f.write(json.dumps(rec) + "\n")
    out = str(tmp_path / "o")
    r = lovecraft("bucket", str(p), "-o", out, "--to", "parquet", "--num-buckets", "2", "--filter", "lang == 'en'",
                  "--workers", "1", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    want = pl.read_ndjson(p, infer_schema_length=None).filter(pl.col("lang") == "en").height
    assert manifest(out)["rows"] == want == sum(1 for i in range(30_000, 40_000) if i % 3)
    assert lovecraft("verify", out, "--against", str(p)).exit_code == 0


def test_bucket_of_json_lines_names_the_flag_of_a_column_it_does_not_find(tmp_path):
    """bucket reads a JSON Lines text key and the keys the keep step needs, looked for in the whole
    file when the first records lack them: one that is nowhere was blamed on --columns (not given),
    or typed as a number first ("len() of column 'nope', a number", exit 1)."""
    p = tmp_path / "a.jsonl"
    rows = [{"id": i, "text": "w" * (i % 17 + 1), "lang": "en"} for i in range(3000)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cases = [
        (["--filter", "len(nope) > 2"], "--filter 'len(nope) > 2'"),
        (["--filter", "nope == 1"], "--filter 'nope == 1'"),
        (["--dedup", "exact", "--dedup-columns", "nope"], "--dedup-columns"),
    ]
    for extra, flag in cases:
        r = lovecraft("bucket", str(p), "-o", str(tmp_path / "o"), "--to", "memmap", "--num-buckets", "2",
                      "--column", "text", *extra)  # fmt: skip
        assert (r.exit_code, r.stderr) == (
            2,
            f"Error: {flag}: no column 'nope' in {p}; columns in the first records are text, id, lang\n",
        )
        assert not os.path.exists(tmp_path / "o")


@pytest.mark.parametrize("command", ["convert", "shard"])
def test_a_dedup_column_named_twice_is_refused(tmp_path, command):
    """--dedup-columns text,text was taken without a word (found by an outside trial)."""
    p = tmp_path / "a.jsonl"
    p.write_text("".join(json.dumps({"id": i % 3, "text": "t"}) + "\n" for i in range(30)))
    extra = ["--num-shards", "2"] if command == "shard" else []
    r = lovecraft(command, str(p), "-o", str(tmp_path / "o"), "--to", "parquet", "--dedup", "exact",
                  "--dedup-columns", "text,id,text", *extra)  # fmt: skip
    assert (r.exit_code, r.stderr) == (2, "Error: --dedup-columns names 'text' twice; name each column once\n")
    assert not os.path.exists(tmp_path / "o")


def test_shard_from_stdin_names_it_in_the_report(tmp_path):
    data = b"".join(json.dumps({"t": f"v{i % 3}"}).encode() + b"\n" for i in range(7))
    out, report = str(tmp_path / "o"), str(tmp_path / "r.jsonl")
    r = lovecraft("shard", "-", "--input-format", "jsonl", "-o", out, "--to", "parquet", "--num-shards", "1",
                  "--dedup", "exact", "--dedup-report", report, "-q", input=data)  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert pl.read_parquet(os.path.join(out, "*.parquet"))["t"].to_list() == ["v0", "v1", "v2"]
    with open(report) as f:
        lines = [json.loads(x) for x in f]
    assert lines == [
        {"row": i, "file": "<stdin>", "file_row": i, "kept_row": i % 3, "kept_file": "<stdin>", "kept_file_row": i % 3}
        for i in range(3, 7)
    ]
