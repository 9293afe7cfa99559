"""The token pipeline under a hard memory limit: a text corpus four times larger than a 256 MiB
cgroup cap (``../shared/tools/memcap``) is tokenized with a BPE ``tokenizer.json`` trained here and
written as Megatron's ``.bin``/``.idx`` by ``convert`` and by ``shard --workers 2``, and packed into
rows of L tokens by ``bucket --layout packed --workers 2``, with ``--max-memory 128MiB`` (bucket:
``64MiB``, see its test).

The corpus is one generated block of lines written again and again, so the expected token stream
is the ``tokenizers`` package's own ids of the block's lines (each with the EOS id) repeated: the
outputs are compared with it whole (the ``.bin`` read with np.memmap, the ``.idx`` parsed here from
its layout, the packed rows and their document starts with np.load). Slow (BPE over 1 GiB three
times: many minutes on a loaded machine); skipped with the reason when memcap is absent or cannot
make a cgroup, when ``tokenizers`` is not installed, or when the disk has less than 6 GB free.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

from tests.conftest import SHARED, SUBPROCESS_ENV, memcapped, require_memcap

pytestmark = pytest.mark.slow

MEMCAP = os.path.join(SHARED, "tools", "memcap")
CAP_MIB = 256
BUDGET = "128MiB"
INPUT_BYTES = 4 * CAP_MIB << 20  # 1 GiB: four times the cap
FREE_BYTES = 6 * 10**9
SEQ_LEN = 2048
LOVECRAFT = os.path.join(os.path.dirname(sys.executable), "lovecraft")
STEP = 1 << 24  # tokens per comparison step


def _capped(*args: str, timeout: float = 3600) -> tuple[subprocess.CompletedProcess, int | None]:
    return memcapped(MEMCAP, CAP_MIB, [LOVECRAFT, *args], timeout=timeout, env=SUBPROCESS_ENV)


class Stream:
    """The expected token stream: the block's documents (ids + EOS) ``reps`` times over."""

    def __init__(self, docs: list[list[int]], reps: int) -> None:
        self.lengths = np.array([len(d) for d in docs], dtype=np.int64)
        self.block = np.array([t for d in docs for t in d], dtype=np.int64)
        self.reps = reps
        self.docs = len(docs) * reps
        self.tokens = len(self.block) * reps
        first = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])
        self.starts = (first[None, :] + len(self.block) * np.arange(reps)[:, None]).reshape(-1)  # of every document

    def tokens_of(self, a: int, b: int) -> np.ndarray:
        return self.block[np.arange(a, b) % len(self.block)]

    def lengths_of(self, a: int, b: int) -> np.ndarray:
        return self.lengths[np.arange(a, b) % len(self.lengths)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Iterator[tuple[str, str, Stream]]:
    """(the 1 GiB text file, the tokenizer.json, the expected stream)."""
    require_memcap()
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    d = tmp_path_factory.mktemp("memcap_tokens")
    free = shutil.disk_usage(d).free
    if free < FREE_BYTES:
        pytest.skip(
            f"needs {FREE_BYTES / 1e9:.0f} GB free for a 1 GiB corpus and its outputs; {free / 1e9:.1f} GB free"
        )
    rng = random.Random(17)
    syllables = ["ka", "lo", "ve", "cra", "ft", "mem", "or", "y", "bou", "nd", "str", "eam", "sh", "tok", "en", "é"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    lines = [
        " ".join(rng.choice(words) for _ in range(max(1, int(rng.lognormvariate(3.0, 0.8))))) + ("." if i % 3 else "")
        for i in range(40_000)
    ]
    tok = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=2000, special_tokens=["[UNK]", "<s>", "</s>"]))
    assert 256 < tok.get_vocab_size() <= 2000  # uint16 ids
    path = str(d / "tokenizer.json")
    tok.save(path)
    eos = tok.token_to_id("</s>")
    docs = [e.ids + [eos] for e in tok.encode_batch(lines)]  # the tokenizer's own ids, in this process
    block = ("\n".join(lines) + "\n").encode()
    reps = -(-INPUT_BYTES // len(block))
    src = str(d / "corpus.txt")
    with open(src, "wb") as f:
        for _ in range(reps):
            f.write(block)
    assert os.path.getsize(src) >= INPUT_BYTES
    yield src, path, Stream(docs, reps)
    shutil.rmtree(d, ignore_errors=True)  # 1 GiB: gone with the module, not kept to the session's end


def _idx(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lengths, pointers, document indices) of a Megatron .idx: 9-byte magic, <Q version, <B dtype
    code, <Q sequences, <Q documents, then int32 lengths, int64 pointers, int64 document indices."""
    with open(path, "rb") as f:
        head = f.read(34)
    assert head[:9] == b"MMIDIDX\x00\x00"
    version, code, n, d = np.frombuffer(head[9:17], "<u8")[0], head[17], *np.frombuffer(head[18:34], "<u8")
    assert (version, code) == (1, 8)  # uint16: a vocabulary of up to 2,000 tokens
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=34)
    lengths = raw[: 4 * n].view("<i4")
    pointers = raw[4 * n : 12 * n].view("<i8")
    docs = raw[12 * n : 12 * n + 8 * d].view("<i8")
    assert len(raw) == 12 * n + 8 * d
    return lengths, pointers, docs


def _check_pair(out: str, name: str, stream: Stream, doc0: int, tok0: int) -> tuple[int, int]:
    """One .bin/.idx pair holds documents doc0.. of the stream from token tok0; returns where it ends."""
    lengths, pointers, docs = _idx(os.path.join(out, name + ".idx"))
    n = len(lengths)
    for a in range(0, n, STEP):
        b = min(n, a + STEP)
        np.testing.assert_array_equal(
            lengths[a:b], stream.lengths_of(doc0 + a, doc0 + b), err_msg=f"{name}.idx lengths"
        )
    total = int(np.asarray(lengths, dtype=np.int64).sum())
    want = np.zeros(n, dtype=np.int64)
    np.cumsum(np.asarray(lengths[:-1], dtype=np.int64) * 2, out=want[1:])
    np.testing.assert_array_equal(pointers, want, err_msg=f"{name}.idx pointers")
    np.testing.assert_array_equal(docs, np.arange(n + 1), err_msg=f"{name}.idx document indices")
    values = np.memmap(os.path.join(out, name + ".bin"), dtype="<u2", mode="r")
    assert len(values) == total
    for a in range(0, total, STEP):
        b = min(total, a + STEP)
        np.testing.assert_array_equal(values[a:b], stream.tokens_of(tok0 + a, tok0 + b), err_msg=f"{name}.bin")
    return doc0 + n, tok0 + total


def _manifest(out: str) -> dict:
    with open(os.path.join(out, "_manifest.json")) as f:
        return json.load(f)


def _run(corpus, tmp_path, *args: str, budget: str = BUDGET) -> str:
    src, tok, _ = corpus
    out = str(tmp_path / "out")
    t0 = time.time()
    r, peak = _capped(
        args[0], src, "-o", out, "--tokenizer", tok, "--eos", "</s>", "--max-memory", budget, "-q", *args[1:]
    )
    print(f"\n{' '.join(args)}: rc {r.returncode}, {time.time() - t0:.0f}s, peak {peak} MiB (cap {CAP_MIB})")
    assert r.returncode == 0, f"rc {r.returncode} (137: killed for memory): {r.stderr[-2000:]}"
    assert _manifest(out)["complete"] is True
    return out


def test_convert_to_megatron_under_memcap(corpus, tmp_path):
    stream = corpus[2]
    out = _run(corpus, tmp_path, "convert", "--to", "megatron")
    assert sorted(os.listdir(out)) == ["_manifest.json", "data.bin", "data.idx"]
    assert _check_pair(out, "data", stream, 0, 0) == (stream.docs, stream.tokens)
    assert _manifest(out)["rows"] == stream.docs


def test_shard_to_megatron_with_two_workers_under_memcap(corpus, tmp_path):
    stream = corpus[2]
    out = _run(corpus, tmp_path, "shard", "--to", "megatron", "--num-shards", "3", "--workers", "2")
    m = _manifest(out)
    assert [s["name"] for s in m["shards"]] == [f"part-0000{i}-of-00003" for i in range(3)]
    doc, tok = 0, 0
    for s in m["shards"]:
        doc, tok = _check_pair(out, s["name"], stream, doc, tok)
    assert (doc, tok) == (stream.docs, stream.tokens)


def test_bucket_packed_under_memcap(corpus, tmp_path):
    stream = corpus[2]
    L = SEQ_LEN
    # three interpreters (the driver, two workers: ~30 MiB each before any buffer) beside two units'
    # buffers: with --max-memory 128MiB this peaked at ~180 MiB of anonymous memory and, with the
    # spill files' page cache, a worker was killed at the 256 MiB cap; the budget is what bounds it
    out = _run(
        corpus, tmp_path, "bucket", "--to", "memmap", "--layout", "packed", "--seq-len", str(L), "--workers", "2",
        budget="64MiB",
    )  # fmt: skip
    m = _manifest(out)
    rows = stream.tokens // L
    p = m["packing"]
    assert (p["rows"], p["tokens"], p["documents"], p["dropped_tokens"]) == (
        rows, stream.tokens, stream.docs, stream.tokens - rows * L
    )  # fmt: skip
    row0 = 0
    for s in m["shards"]:
        by = {(f["column"], f.get("role")): os.path.join(out, f["path"]) for f in m["files"] if f["path"] in s["files"]}
        tokens = np.load(by["tokens", "data"], mmap_mode="r")
        assert tokens.shape == (s["rows"], L) and tokens.dtype == np.uint16
        flat = tokens.reshape(-1)
        for a in range(0, len(flat), STEP):
            b = min(len(flat), a + STEP)
            want = stream.tokens_of(row0 * L + a, row0 * L + b)
            np.testing.assert_array_equal(flat[a:b], want, err_msg=f"packed rows of {s['name']}")
        # where each row's documents start: the stream's document starts within the row
        values = np.load(by["doc_starts", "values"])
        offsets = np.load(by["doc_starts", "offsets"])
        edges = np.arange(row0, row0 + s["rows"] + 1, dtype=np.int64) * L
        at = np.searchsorted(stream.starts, edges)
        np.testing.assert_array_equal(offsets, at - at[0], err_msg="doc_starts offsets")
        np.testing.assert_array_equal(values, stream.starts[at[0] : at[-1]] % L, err_msg="doc_starts values")
        row0 += s["rows"]
    assert row0 == rows
