"""JSON Lines through the jobs: shard (parts of a large file, a file per part of many files, the
same bytes for any --workers, with and without --shuffle, types widened in a later part), bucket
--column, inspect (dotted columns, types, null counts, lengths) and verify --against."""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import os

import pytest

from lovecraft_convert import bucket, shard
from tests.conftest import lovecraft
from tests.inputs.test_jsonl import check_parquet, expected, lines
from tests.readback import manifest


def _digest(out: str) -> dict[str, str]:
    return {
        os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
        for p in sorted(glob.glob(os.path.join(out, "*")))
        if not p.endswith("_manifest.json")
    }


def _records(n: int) -> list[dict]:
    recs = []
    for i in range(n):
        r = {"id": i, "text": f"record {i} " + "é" * (i % 13), "meta": {"lang": ["en", "de"][i % 2], "score": i / 7}}
        if i % 5 == 0:
            r["tags"] = [f"t{i % 3}", "x"]
        recs.append(r)
    # met only in later parts: a new key, a float in an integer column, a null in a bool column
    recs[n - 900]["late"] = [1, 2]
    recs[n - 600]["id"] = 0.5
    recs[n - 300]["meta"]["flag"] = True
    recs[n - 299]["meta"]["flag"] = None
    return recs


@pytest.fixture(scope="module")
def big_jsonl(tmp_path_factory):
    d = tmp_path_factory.mktemp("jsonl_in")
    recs = _records(30_000)  # ~1.5 MB: with 256 KB parts, the changes are parts away from the first
    p = d / "big.jsonl"
    p.write_bytes(lines(recs))
    return str(p), recs


def test_shard_same_bytes_for_any_workers(tmp_path, big_jsonl):
    src, recs = big_jsonl
    kw = dict(to="parquet", num_shards=4, part_bytes=256 << 10, progress=False)
    outs = {}
    for workers in (1, 2):
        for shuffle in (False, True):
            out = str(tmp_path / f"w{workers}{shuffle}")
            extra = dict(shuffle=True, seed=7) if shuffle else {}
            shard(src, out, workers=workers, **kw, **extra)
            outs[workers, shuffle] = out
    assert _digest(outs[1, False]) == _digest(outs[2, False])
    assert _digest(outs[1, True]) == _digest(outs[2, True])
    assert _digest(outs[1, False]) != _digest(outs[1, True])
    want = expected(recs)
    assert want["id"][0] == "float64" and want["meta.flag"][0] == "float64" and want["late"][0] == "sequence<int64>"
    import pyarrow.parquet as pq

    got = pq.read_table(outs[2, False])
    for name, (_, values) in want.items():
        assert len(got.column(name)) == len(values)
    assert got.column("late").to_pylist()[30_000 - 900] == [1, 2]
    assert got.column("tags").to_pylist()[:6] == [["t0", "x"], [], [], [], [], ["t2", "x"]]
    shuffled = pq.read_table(outs[2, True])
    assert sorted(shuffled.column("text").to_pylist()) == sorted(want["text"][1])
    r = lovecraft("verify", outs[2, True], "--against", src)
    assert r.exit_code == 0, r.stdout + r.stderr


def test_shard_many_compressed_files(tmp_path, big_jsonl):
    _, recs = big_jsonl
    d = tmp_path / "many"
    d.mkdir()
    for k in range(5):
        with gzip.open(d / f"part-{k}.jsonl.gz", "wb") as f:
            f.write(lines(recs[k * 1000 : (k + 1) * 1000]))
    outs = []
    for workers in (1, 2):
        out = str(tmp_path / f"out{workers}")
        m = shard(str(d / "*.jsonl.gz"), out, to="parquet", rows_per_shard=1500, workers=workers, progress=False)
        assert m["rows"] == 5000 and len(m["sources"]) == 5
        outs.append(out)
    assert _digest(outs[0]) == _digest(outs[1])
    import pyarrow.parquet as pq

    assert pq.read_table(outs[0]).column("id").to_pylist() == list(range(5000))


def test_convert_and_verify_against(tmp_path, big_jsonl):
    src, recs = big_jsonl
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr
    check_parquet(out, expected(recs))
    r = lovecraft("verify", out, "--against", src)
    assert r.exit_code == 0, r.stdout + r.stderr
    # a changed source is found
    changed = tmp_path / "changed.jsonl"
    recs2 = [dict(r) for r in recs]
    recs2[123] = dict(recs2[123], text="something else")
    changed.write_bytes(lines(recs2))
    r = lovecraft("verify", out, "--against", str(changed))
    assert r.exit_code == 1
    assert (
        f"{changed}: row 124, column 'text': 'record 123 ééééééé' in the source, 'record 123 ééééééé' in the dataset"
        not in r.stdout
    )
    assert f"{changed}: row 124, column 'text': 'something else' in the source" in r.stdout


def test_columns_selection_is_recorded_and_verified(tmp_path, big_jsonl):
    src, recs = big_jsonl
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "hdf5", "--columns", "text,meta.score", "-q")
    assert r.exit_code == 0, r.stderr
    assert [f["name"] for f in manifest(out)["schema"]] == ["text", "meta.score"]
    r = lovecraft("verify", out, "--against", src)
    assert r.exit_code == 0, r.stdout + r.stderr


def test_tokenized_and_stacked_verified_against(tmp_path, big_jsonl):
    """--tokenizer and --stack-columns on JSON Lines, verified against it: the token column and the
    stacked one are no keys of the source, and keys met late that the dataset does not hold
    ('late', 'meta.flag') change nothing; a changed text is still found."""
    src, recs = big_jsonl
    tok = str(tmp_path / "tok")
    r = lovecraft("convert", src, "-o", tok, "--to", "parquet", "--tokenizer", "bytes", "--column", "text", "-q")
    assert r.exit_code == 0, r.stderr
    import pyarrow.parquet as pq

    got = pq.read_table(tok)
    assert got.column_names == ["tokens"]
    assert [bytes(t) for t in got.column("tokens").to_pylist()[:3]] == [r["text"].encode() for r in recs[:3]]
    stacked = str(tmp_path / "stacked")
    r = lovecraft(
        "convert", src, "-o", stacked, "--to", "memmap", "--columns", "id,meta.score", "--stack-columns", "x=id:meta.score", "-q"
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    for out in (tok, stacked):
        r = lovecraft("verify", out, "--against", src)
        assert r.exit_code == 0, r.stdout + r.stderr
    changed = tmp_path / "changed.jsonl"
    recs2 = [dict(r) for r in recs]
    recs2[5] = dict(recs2[5], text="other")
    changed.write_bytes(lines(recs2))
    r = lovecraft("verify", tok, "--against", str(changed))
    assert (
        r.exit_code == 1 and f"{changed}: row 6, column 'tokens': [111, 116, 104, 101, 114] in the source" in r.stdout
    )


def test_bucket_text_key(tmp_path, big_jsonl):
    """bucket --column text of a JSON Lines input is the bucketing of the same text as lines."""
    src, recs = big_jsonl
    txt = tmp_path / "same.txt"
    txt.write_text("".join(r["text"] + "\n" for r in recs), encoding="utf-8")
    a = str(tmp_path / "a")
    b = str(tmp_path / "b")
    bucket(src, a, to="memmap", column="text", num_buckets=4, workers=2, part_bytes=256 << 10, progress=False)
    bucket(str(txt), b, to="memmap", num_buckets=4, progress=False)
    ma, mb = manifest(a), manifest(b)
    assert [x["max_length"] for x in ma["buckets"]] == [x["max_length"] for x in mb["buckets"]]
    assert [x["rows"] for x in ma["buckets"]] == [x["rows"] for x in mb["buckets"]]
    # without --column: the key named text, as convert --tokenizer takes it (the README's default)
    r = lovecraft("bucket", src, "-o", str(tmp_path / "c"), "--to", "memmap", "--num-buckets", "4", "-q")
    assert r.exit_code == 0, r.stderr
    assert [x["rows"] for x in manifest(str(tmp_path / "c"))["buckets"]] == [x["rows"] for x in ma["buckets"]]
    nokey = tmp_path / "nokey.jsonl"
    nokey.write_text('{"id": 1, "body": "x"}\n')
    r = lovecraft("bucket", str(nokey), "-o", str(tmp_path / "d"), "--to", "memmap", "--num-buckets", "2", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {nokey}: say which key holds the text (columns: id, body); pass --column NAME\n",
    )
    r = lovecraft(
        "bucket", src, "-o", str(tmp_path / "c"), "--to", "memmap", "--num-buckets", "2", "--column", "id", "-q"
    )
    assert (r.exit_code, r.stderr) == (1, f"Error: {src}: column 'id' is int64, not text; give a key that holds text\n")


def test_inspect_shows_columns_types_nulls_and_lengths(tmp_path):
    recs = [
        {"text": "abc", "meta": {"lang": "en", "score": 1.5}, "n": 1},
        {"text": "abcdef", "meta": {"lang": None}, "n": None},
        {"text": "", "n": 3, "tags": ["a"]},
    ]
    src = tmp_path / "i.jsonl"
    src.write_bytes(lines(recs))
    r = lovecraft("inspect", str(src), "--json", "-q")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    cols = {c["name"]: c for c in rep["columns"]}
    assert rep["format"] == "jsonl" and rep["rows"] == 3 and rep["rows_exact"]
    assert {k: (c["type"], c["nulls"]) for k, c in cols.items()} == {
        "text": ("string", 0),
        "meta.lang": ("string", 2),
        "meta.score": ("float64", 2),
        "n": ("float64", 1),
        "tags": ("list<string>", 2),
    }
    assert cols["text"]["lengths"]["max"] == 6 and cols["text"]["lengths"]["min"] == 0
    assert rep["estimated_bytes"]["hdf5"] is None and rep["estimated_bytes"]["parquet"] > 0
    r = lovecraft("inspect", str(src), "-q")
    assert "column 'meta.lang': string, 2 null or missing" in r.stdout
    assert "column 'tags': list<string>, 2 null or missing" in r.stdout
