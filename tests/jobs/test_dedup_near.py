"""``shard --dedup near`` (and ``bucket``'s): the same bytes and report for 1 and 2 workers and as
``convert``'s single part, a run killed (SIGKILL) during its decisions finishes byte-identical with
``--resume``, and ``verify --against`` passes a near-deduplicated dataset and catches a source that
does not give it."""

from __future__ import annotations

import glob
import json
import os
import random
import subprocess
import sys

import pytest

import lovecraft_convert as lc
from lovecraft_convert import bucket, convert, shard
from tests.conftest import SUBPROCESS_ENV, lovecraft, sigkilled_at
from tests.readback import manifest

pl = pytest.importorskip("polars")
ROWS = 2_500


def _texts(rows: int, seed: int) -> list[str]:
    """Texts of 60-200 words; one in four a copy of an earlier one with one or two words replaced."""
    rng = random.Random(seed)
    vocab = [f"v{k}" for k in range(3_000)]
    out: list[list[str]] = []
    for _ in range(rows):
        if len(out) > 10 and rng.random() < 0.25:
            w = list(rng.choice(out))
            for _ in range(rng.randint(1, 2)):
                w[rng.randrange(len(w))] = rng.choice(vocab)
        else:
            w = [rng.choice(vocab) for _ in range(rng.randint(60, 200))]
        out.append(w)
    return [" ".join(w) for w in out]


def _write(path, texts: list[str]) -> str:
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> str:
    return _write(tmp_path_factory.mktemp("near") / "docs.jsonl", _texts(ROWS, 4))


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _files(out: str) -> dict[str, bytes]:
    return {os.path.basename(p): _read(p) for p in sorted(glob.glob(os.path.join(out, "*.parquet")))}


ARGS = dict(to="parquet", num_shards=3, dedup="near", dedup_columns=["text"], part_bytes=128 << 10,
            max_memory="16MiB")  # fmt: skip


def test_same_bytes_for_any_workers_and_as_convert(tmp_path, src):
    reports = [str(tmp_path / f"r{w}.jsonl") for w in (1, 2)]
    for w, r in zip((1, 2), reports, strict=True):
        shard(src, str(tmp_path / f"w{w}"), workers=w, dedup_report=r, **ARGS)
    assert _files(str(tmp_path / "w1")) == _files(str(tmp_path / "w2"))
    assert _read(reports[0]) == _read(reports[1])
    m = manifest(str(tmp_path / "w1"))
    dup = m["removed"]["duplicate"]
    assert dup["groups"] > 1 and dup["rows"] > ROWS // 5
    # convert reads the input as one part: the same rows are dropped, for the same kept rows
    one = str(tmp_path / "r.jsonl")
    convert(src, str(tmp_path / "c"), to="parquet", dedup="near", dedup_columns=["text"], dedup_report=one)
    assert _read(one) == _read(reports[0])
    kept = pl.read_parquet(os.path.join(tmp_path / "w1", "*.parquet"))["id"].to_list()
    assert kept == pl.read_parquet(os.path.join(tmp_path / "c", "*.parquet"))["id"].to_list()
    assert len(kept) == ROWS - dup["rows"]
    # another seed: other hash functions, the same near-duplicates found here (they are far above 0.8)
    shard(src, str(tmp_path / "s9"), workers=1, seed=9, **ARGS)
    assert manifest(str(tmp_path / "s9"))["removed"]["duplicate"]["minhash"]["seed"] == 9


def test_sigkill_then_resume_is_byte_identical(tmp_path, src):
    ref = str(tmp_path / "ref")
    shard(src, ref, workers=1, **ARGS)
    out = str(tmp_path / "out")
    script = (
        "import sys; from lovecraft_convert import shard; "
        f"shard({src!r}, {out!r}, to='parquet', num_shards=3, dedup='near', dedup_columns=['text'], "
        "part_bytes=128 << 10, max_memory='16MiB', workers=1, progress=False, resume=sys.argv[1] == 'resume')"
    )
    cmd = [sys.executable, "-c", script]
    journal = os.path.join(tmp_path, ".out.partial", "journal.jsonl")
    if not sigkilled_at([*cmd, "first"], journal, b'"phase": "decide"'):
        pytest.skip("the run finished before it could be killed")
    assert b'"phase": "components"' not in _read(journal)
    r = subprocess.run([*cmd, "resume"], env=SUBPROCESS_ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert _files(out) == _files(ref)


def test_verify_against_passes_and_catches_one_more_near_duplicate(tmp_path, src):
    out = str(tmp_path / "out")
    r = lovecraft("shard", src, "-o", out, "--to", "parquet", "--num-shards", "2", "--workers", "1", "--dedup", "near",
                  "--dedup-columns", "text", "--threshold", "0.7", "--ngram", "4", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    report = lc.verify(out, against=[src])
    assert report.lines() == []
    assert report.against["complete"] is True
    dropped = manifest(out)["removed"]["duplicate"]["rows"]
    # a source with one more near duplicate (the first text, its first word replaced) gives one more
    texts = [json.loads(line)["text"] for line in _read(src).decode().splitlines()]
    more = _write(tmp_path / "more.jsonl", [*texts, "changed " + texts[0].split(" ", 1)[1]])
    r = lovecraft("verify", out, more, "--against", "-q")
    assert (r.exit_code, r.stdout) == (
        1,
        f"{out}/_manifest.json: records {dropped} by --dedup removed, the source gives {dropped + 1} by --dedup\n",
    )
    # a dataset whose rows are not the kept ones: a kept row's text changed in the source
    texts[1] = "other words entirely " * 20
    r = lovecraft("verify", out, _write(tmp_path / "edit.jsonl", texts), "--against", "-q")
    assert r.exit_code == 1


def test_bucket_near_verifies(tmp_path, src):
    """bucket's text column is near's by default; its kept documents are shard's."""
    out = str(tmp_path / "b")
    bucket(src, out, to="parquet", layout="ragged", num_buckets=2, dedup="near", workers=1, part_bytes=128 << 10,
           max_memory="16MiB")  # fmt: skip
    m = manifest(out)
    assert m["removed"]["duplicate"]["columns"] == ["text"]
    shard(src, str(tmp_path / "s"), workers=1, **ARGS)
    assert m["removed"]["duplicate"]["rows"] == manifest(str(tmp_path / "s"))["removed"]["duplicate"]["rows"]
    assert lc.verify(out, against=[src]).lines() == []
