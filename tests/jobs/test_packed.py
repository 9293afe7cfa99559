"""``bucket --layout packed --seq-len L``: documents (with their --eos/--bos) concatenated and cut into
rows of exactly L tokens with each row's document starts, read back with the formats' own readers
(np.load, h5py, polars, tf.data) and compared with rows the test cuts itself from the lines it wrote."""

from __future__ import annotations

import collections
import json
import os
import random

import h5py
import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lovecraft_convert as lc
from lovecraft_convert import bucket as run_bucket
from tests.conftest import leftovers, lovecraft, write
from tests.readback import entry_digest

FORMATS = ["memmap", "hdf5", "parquet", "tfrecord"]
EOS = 10  # "\n": the bytes tokenizer's ids are the UTF-8 bytes


def docs_of(n: int = 1500, seed: int = 4) -> list[str]:
    r = random.Random(seed)
    out = []
    for i in range(n):
        k = 0 if i % 61 == 0 else min(700, int(r.lognormvariate(3.2, 1.0)))
        out.append("".join(r.choice("abcdefg hijk éü") for _ in range(k)))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[str, list[str]]:
    d = tmp_path_factory.mktemp("packed")
    lines = docs_of()
    return write(d / "docs.txt", ("\n".join(lines) + "\n").encode()), lines


def manifest(out: str) -> dict:
    with open(os.path.join(out, "_manifest.json")) as f:
        return json.load(f)


def expected(lines: list[str], L: int, *, eos=EOS, bos=None, pad_last=False, pad=0):
    """(rows [n, L], doc starts per row, tokens, dropped tokens): cut here, from the lines."""
    stream, starts = [], []
    for line in lines:
        doc = ([bos] if bos is not None else []) + list(line.encode()) + ([eos] if eos is not None else [])
        if doc:
            starts.append(len(stream))
        stream.extend(doc)
    full, rem = divmod(len(stream), L)
    rows = [stream[i * L : (i + 1) * L] for i in range(full)]
    if pad_last and rem:
        rows.append(stream[full * L :] + [pad] * (L - rem))
    per_row = [[s - i * L for s in starts if i * L <= s < (i + 1) * L] for i in range(len(rows))]
    return rows, per_row, len(stream), (0 if pad_last else rem)


def read_shard(out: str, m: dict, shard: dict) -> tuple[list[list[int]], list[list[int]]]:
    """(rows, doc starts) of one shard, read with the format's own reader."""
    fmt = m["output_format"]
    L = m["packing"]["seq_len"]
    if fmt == "memmap":
        by = {(f["column"], f.get("role")): f["path"] for f in m["files"] if f["path"] in shard["files"]}
        tokens = np.load(os.path.join(out, by["tokens", "data"]))
        values = np.load(os.path.join(out, by["doc_starts", "values"]))
        offs = np.load(os.path.join(out, by["doc_starts", "offsets"]))
        starts = [values[offs[i] : offs[i + 1]].tolist() for i in range(len(offs) - 1)]
    elif fmt == "hdf5":
        (path,) = shard["files"]
        with h5py.File(os.path.join(out, path), "r") as f:
            tokens = f["tokens"][:]
            starts = [np.asarray(x).tolist() for x in f["doc_starts"][:]]
    elif fmt == "parquet":
        (path,) = shard["files"]
        df = pl.read_parquet(os.path.join(out, path))
        tokens = np.array(df["tokens"].to_list())
        starts = [list(x) for x in df["doc_starts"].to_list()]
    else:
        import tensorflow as tf

        (path,) = shard["files"]
        spec = {"tokens": tf.io.FixedLenFeature([L], tf.int64), "doc_starts": tf.io.VarLenFeature(tf.int64)}
        tokens, starts = [], []
        for rec in tf.data.TFRecordDataset(os.path.join(out, path)).batch(1024):
            ex = tf.io.parse_example(rec, spec)
            tokens.extend(ex["tokens"].numpy().tolist())
            starts.extend(r.numpy().tolist() for r in tf.RaggedTensor.from_sparse(ex["doc_starts"]))
        tokens = np.array(tokens)
    assert tokens.shape == (shard["rows"], L)
    return tokens.tolist(), starts


def read_all(out: str) -> tuple[list, list]:
    m = manifest(out)
    rows, starts = [], []
    for s in m["shards"]:
        r, d = read_shard(out, m, s)
        rows += r
        starts += d
    return rows, starts


def _digest(out: str) -> dict[str, str]:
    return {f["path"]: entry_digest(f)[1] for f in manifest(out)["files"]}


@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_are_the_documents_cut_every_L_tokens(corpus, tmp_path, fmt):
    src, lines = corpus
    out = str(tmp_path / "out")
    r = lovecraft("bucket", src, "-o", out, "--to", fmt, "--layout", "packed", "--seq-len", "128", "--eos", str(EOS),
                  "--num-shards", "3", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    want_rows, want_starts, tokens, dropped = expected(lines, 128)
    rows, starts = read_all(out)
    assert rows == want_rows and starts == want_starts
    m = manifest(out)
    p = m["packing"]
    assert (p["rows"], p["tokens"], p["documents"], p["dropped_tokens"]) == (
        len(want_rows),
        tokens,
        len(lines),
        dropped,
    )
    assert p["dropped_partial_row"] is (dropped > 0) and p["padding_efficiency"] == 1.0
    assert [s["name"] for s in m["shards"]] == [f"part-0000{i}-of-00003" for i in range(3)]
    assert [f["name"] for f in m["schema"]] == ["tokens", "doc_starts"]
    assert m["schema"][0]["shape"] == [128] and m["schema"][0]["dtype"] == "|u1"
    assert lovecraft("verify", out).exit_code == 0


def test_pad_last_bos_and_a_tokenizer_json(corpus, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    src, lines = corpus
    tok = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "<s>", "</s>"]))
    path = str(tmp_path / "tokenizer.json")
    tok.save(path)
    out = str(tmp_path / "out")
    r = lovecraft("bucket", src, "-o", out, "--to", "memmap", "--layout", "packed", "--seq-len", "50",
                  "--tokenizer", path, "--bos", "<s>", "--eos", "</s>", "--pad-last", "--pad-id", "0", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    stream, want_starts = [], []
    for line in lines:
        want_starts.append(len(stream))
        stream += [bos, *tok.encode(line).ids, eos]
    rows, starts = read_all(out)
    full, rem = divmod(len(stream), 50)
    assert rem  # the corpus is made to leave a partial row
    assert [t for row in rows for t in row][: len(stream)] == stream
    assert rows[-1][rem:] == [0] * (50 - rem) and len(rows) == full + 1
    assert [s + 50 * i for i, row in enumerate(starts) for s in row] == want_starts
    p = manifest(out)["packing"]
    assert (p["padding_tokens"], p["dropped_tokens"], p["dropped_partial_row"]) == (50 - rem, 0, False)
    assert p["padding_efficiency"] == round(len(stream) / (50 * len(rows)), 6)
    assert p["tokenizer"]["eos_id"] == eos and p["tokenizer"]["bos_id"] == bos
    assert manifest(out)["schema"][0]["dtype"] == "<u2"  # a 300-token vocabulary needs uint16


def _documents(rows: list, starts: list, tokens: int) -> list[tuple]:
    """The stream of a dataset with nothing dropped, cut back into its documents at their starts."""
    stream = [t for row in rows for t in row][:tokens]
    cuts = [s + len(rows[0]) * i for i, row in enumerate(starts) for s in row] + [tokens]
    return [tuple(stream[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]


def test_shuffle_is_a_seeded_document_order(tmp_path):
    # ~3 MB of documents under a 16 MiB budget: several hash buckets
    lines = docs_of(60_000, seed=9)
    src = write(tmp_path / "docs.txt", ("\n".join(lines) + "\n").encode())
    kw = dict(to="memmap", layout="packed", seq_len=64, eos=EOS, pad_last=True, shuffle=True, seed=5,
              max_memory="16MiB", rows_per_shard=10_000, progress=False)  # fmt: skip
    a, b, c = (str(tmp_path / n) for n in "abc")
    run_bucket(src, a, workers=1, **kw)
    run_bucket(src, b, workers=2, **kw)
    run_bucket(src, c, workers=2, **{**kw, "seed": 6})
    m = manifest(a)
    assert m["shuffle"]["buckets"] > 1
    assert _digest(a) == _digest(b)  # the same bytes whatever the workers
    assert _digest(a) != _digest(c)
    rows, starts = read_all(a)
    docs = _documents(rows, starts, m["packing"]["tokens"])
    want = [tuple(line.encode()) + (EOS,) for line in lines]
    assert collections.Counter(docs) == collections.Counter(want)  # every document once, whole
    assert docs != want  # in another order
    assert lovecraft("verify", a).exit_code == 0


def test_workers_and_shards_do_not_change_the_stream(corpus, tmp_path):
    src, lines = corpus
    base = dict(to="parquet", layout="packed", seq_len=33, eos=EOS, progress=False, part_bytes=1 << 14)
    outs = {}
    for name, extra in {"one": {}, "rows": {"rows_per_shard": 100}, "size": {"shard_size": "8KiB"}}.items():
        for w in (1, 2):
            outs[name, w] = str(tmp_path / f"{name}{w}")
            run_bucket(src, outs[name, w], workers=w, **base, **extra)
            assert read_all(outs[name, w]) == read_all(outs["one", 1])
        assert _digest(outs[name, 1]) == _digest(outs[name, 2])
    assert len(manifest(outs["size", 1])["shards"]) > 3
    want_rows, want_starts, _, _ = expected(lines, 33)
    assert read_all(outs["one", 1]) == (want_rows, want_starts)


@pytest.mark.parametrize("fmt", FORMATS)
def test_loaders_give_batch_by_L_and_the_document_starts(corpus, tmp_path, fmt):
    src, lines = corpus
    out = str(tmp_path / "out")
    run_bucket(src, out, to=fmt, layout="packed", seq_len=96, eos=EOS, num_shards=2, progress=False)
    want_rows, want_starts, _, _ = expected(lines, 96)
    ds = lc.open_dataset(out)
    got_rows, got_starts = [], []
    for b in ds.batches(batch_size=32):
        assert b["tokens"].shape[1:] == (96,) and b["tokens"].dtype == np.uint8
        got_rows += b["tokens"].tolist()
        got_starts += [row[:n].tolist() for row, n in zip(b["doc_starts"], b["doc_starts_length"], strict=True)]
    assert got_rows == want_rows and got_starts == want_starts
    if fmt == "memmap":  # an exact shuffle still gives [batch, L]
        b = next(iter(ds.batches(batch_size=8, shuffle=True, seed=1)))
        assert b["tokens"].shape == (8, 96)
        torch = pytest.importorskip("torch")
        loader = torch.utils.data.DataLoader(ds.to_torch(), batch_size=16)
        first = next(iter(loader))
        assert tuple(first["tokens"].shape) == (16, 96)
        assert first["tokens"].tolist() == want_rows[:16]


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--to", "memmap", "--layout", "packed"], 2,
         "Error: --layout packed needs --seq-len L; the tokens of every row, e.g. --seq-len 2048"),
        (["--to", "memmap", "--seq-len", "8", "--num-buckets", "2"], 2,
         "Error: --seq-len goes with --layout packed; add --layout packed, or drop it"),
        (["--to", "memmap", "--layout", "packed", "--seq-len", "8", "--num-buckets", "2"], 2,
         "Error: --num-buckets does not apply to --layout packed; packed rows all have --seq-len tokens"),
        (["--to", "memmap", "--layout", "packed", "--seq-len", "8", "--pad-last", "--min-length", "3"], 2,
         "Error: --min-length does not apply to --layout packed; packed rows all have --seq-len tokens"),
        (["--to", "memmap", "--pad-last", "--num-buckets", "2"], 2,
         "Error: --pad-last goes with --layout packed; add --layout packed, or drop it"),
        (["--to", "megatron", "--layout", "packed", "--seq-len", "8"], 2,
         "Error: --layout packed: megatron holds sequences as they are, not rows of one length; use --layout "
         "ragged, or write the documents with `convert --to megatron --tokenizer ...`"),
        (["--to", "megatron", "--num-buckets", "2"], 2,
         "Error: --layout padded: megatron holds sequences as they are, not rows of one length; use --layout "
         "ragged, or write the documents with `convert --to megatron --tokenizer ...`"),
        (["--to", "memmap", "--layout", "packed", "--seq-len", "8", "--eos", "</s>"], 2,
         "Error: --eos '</s>': the bytes tokenizer's tokens are single bytes; give one ASCII character or an "
         "integer id (256 or more for a token beyond the bytes)"),
        (["--to", "memmap", "--layout", "packed", "--seq-len", "1000"], 1,
         "Error: {src}: all 8 tokens are fewer than one row of --seq-len 1000; lower --seq-len, or pass --pad-last "
         "to pad the one row"),
    ],
)  # fmt: skip
def test_flag_mistakes(tmp_path, args, code, message):
    src = write(tmp_path / "t.txt", b"abcd\nefgh\n")
    out = str(tmp_path / "out")
    r = lovecraft("bucket", src, "-o", out, *args)
    assert (r.exit_code, r.stderr) == (code, message.format(src=src) + "\n")
    assert not os.path.exists(out) and [n for n in leftovers(tmp_path) if n != ".out.lock"] == []


def test_ragged_buckets_to_megatron_leave_out_the_length_column(corpus, tmp_path):
    from tests.readback import read_megatron

    src, lines = corpus
    out = str(tmp_path / "out")
    r = lovecraft("bucket", src, "-o", out, "--to", "megatron", "--layout", "ragged", "--num-buckets", "3",
                  "--eos", str(EOS), "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    m = manifest(out)
    assert [f["name"] for f in m["schema"]] == ["tokens"]
    assert sorted(f["path"] for f in m["files"]) == sorted(
        f"bucket-0000{i}.{ext}" for i in range(3) for ext in ("bin", "idx")
    )
    got = read_megatron(out)["tokens"]  # megatron-core's IndexedDataset, bucket after bucket
    assert collections.Counter(tuple(x.tolist()) for x in got) == collections.Counter(
        (*line.encode(), EOS) for line in lines
    )
    assert lovecraft("verify", out).exit_code == 0
    batches = list(lc.open_dataset(out).batches(64))
    assert sum(len(b["length"]) for b in batches) == len(lines)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.text(alphabet="ab€\t ", max_size=40), min_size=1, max_size=60),
    L=st.integers(1, 50),
    pad_last=st.booleans(),
    bos=st.sampled_from([None, 2]),
)
def test_property_rows_and_starts(tmp_path_factory, lines, L, pad_last, bos):
    d = tmp_path_factory.mktemp("prop")
    src = write(d / "t.txt", ("\n".join(lines) + "\n").encode())
    want_rows, want_starts, _, _ = expected(lines, L, bos=bos, pad_last=pad_last, pad=7)
    out = str(d / "out")
    kw = dict(to="memmap", layout="packed", seq_len=L, eos=EOS, bos=bos, pad_last=pad_last, pad_id=7, progress=False,
              workers=1)  # fmt: skip
    if not want_rows:
        with pytest.raises(lc.LovecraftError, match="fewer than one row"):
            run_bucket(src, out, **kw)
        return
    run_bucket(src, out, **kw)
    assert read_all(out) == (want_rows, want_starts)


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", [False, True])
def test_sigkill_then_resume_is_byte_identical(tmp_path, shuffle):
    import signal
    import subprocess
    import sys
    import time

    lines = docs_of(60_000, seed=3)
    src = write(tmp_path / "big.txt", ("\n".join(lines) + "\n").encode())
    kw = dict(to="tfrecord" if shuffle else "memmap", layout="packed", seq_len=256, eos=EOS, rows_per_shard=3000,
              shuffle=shuffle, seed=2 if shuffle else None, progress=False, part_bytes=1 << 20,
              max_memory="16MiB", workers=2)  # fmt: skip
    ref = str(tmp_path / "ref")
    run_bucket(src, ref, **kw)
    want = _digest(ref)
    rng = random.Random(f"packed-{shuffle}")  # seeded: a failing trial can be replayed
    for trial in range(3):
        d = tmp_path / f"t{trial}"
        d.mkdir()
        out = str(d / "out")
        code = f"from lovecraft_convert import bucket; bucket({src!r}, {out!r}, **{kw!r})"
        p = subprocess.Popen([sys.executable, "-c", code])
        delay = rng.uniform(0.3, 2.5)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        complete = os.path.exists(os.path.join(out, "_manifest.json"))
        assert not complete or _digest(out) == want, f"trial {trial}, delay {delay:.2f}s"
        if not os.path.exists(out):
            resume = f"from lovecraft_convert import bucket; bucket({src!r}, {out!r}, resume=True, **{kw!r})"
            subprocess.run([sys.executable, "-c", resume], check=True)
        assert _digest(out) == want, f"trial {trial}, delay {delay:.2f}s"
        assert [n for n in leftovers(d) if n != ".out.lock"] == []
        assert lovecraft("verify", out).exit_code == 0


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_damaged_spill_frame_of_a_journalled_part_is_read_again_on_resume(corpus, tmp_path, shuffle):
    """``bucket --layout packed`` interrupted once its first phase is journalled, a byte of a spill
    frame flipped, then ``--resume``: the part is read again and the rows are the uninterrupted
    run's (they were other tokens, which verify called ok and ``--against`` could not check)."""
    from tests.conftest import interrupted_after_first_phase
    from tests.jobs.test_bucket import flip_a_value

    src, _ = corpus
    kw = dict(to="memmap", layout="packed", seq_len=64, eos=EOS, rows_per_shard=20, shuffle=shuffle,
              seed=5 if shuffle else None, progress=False, workers=1)  # fmt: skip
    ref = str(tmp_path / "ref")
    run_bucket(src, ref, **kw)
    out = str(tmp_path / "packed")
    work = interrupted_after_first_phase(lambda: run_bucket(src, out, **kw), out)
    flip_a_value(work)
    run_bucket(src, out, resume=True, **kw)
    assert _digest(out) == _digest(ref)
    assert lovecraft("verify", out).exit_code == 0
    assert [n for n in leftovers(tmp_path) if n != ".packed.lock"] == []
