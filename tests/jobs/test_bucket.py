"""``lovecraft bucket``: every sequence in exactly one bucket, unchanged, read back with the formats'
own readers (np.load, h5py, polars, tf.data) and compared with sequences the test makes itself."""

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

from lovecraft_convert import bucket as run_bucket
from lovecraft_convert.transforms.bucketing import padding_stats
from tests.conftest import leftovers, lovecraft, write
from tests.readback import assert_manifest_matches_disk, disk_digest, file_matches

FORMATS = ["memmap", "hdf5", "parquet", "tfrecord"]


def skewed_lines(n: int = 3000, seed: int = 1) -> list[str]:
    """Mostly short lines, a long tail (a log-normal), some non-ASCII, a few empty."""
    r = random.Random(seed)
    alphabet = "abcdefghij klmnop éü€"
    out = []
    for i in range(n):
        length = 0 if i % 97 == 0 else min(2000, int(r.lognormvariate(3.0, 0.9)))
        out.append("".join(r.choice(alphabet) for _ in range(length)))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[str, list[str]]:
    d = tmp_path_factory.mktemp("corpus")
    lines = skewed_lines()
    p = write(d / "corpus.txt", ("\n".join(lines) + "\n").encode())
    return p, lines


def manifest(out) -> dict:
    with open(os.path.join(out, "_manifest.json")) as f:
        return json.load(f)


def _file(m: dict, shard: dict, column: str, role: str | None = None) -> str:
    for f in m["files"]:
        if f["path"] in shard["files"] and f.get("column") == column and f.get("role") == role:
            return f["path"]
    raise AssertionError(f"no {column}/{role} file in {shard['files']}")


def read_shard(out: str, m: dict, bucket: dict, shard: dict) -> tuple[list, np.ndarray, list]:
    """(stored rows as the format holds them, lengths, sequences cut to their length)."""
    fmt = m["output_format"]
    col = m["schema"][0]["name"]
    padded = bucket["layout"] == "padded"
    width = bucket["max_length"]
    if fmt == "memmap":
        lengths = np.load(os.path.join(out, _file(m, shard, "length", "data")))
        if padded:
            rows = list(np.load(os.path.join(out, _file(m, shard, col, "data")), mmap_mode="r"))
        else:
            values = np.load(os.path.join(out, _file(m, shard, col, "values")))
            offs = np.load(os.path.join(out, _file(m, shard, col, "offsets")))
            rows = [values[offs[i] : offs[i + 1]] for i in range(len(offs) - 1)]
    elif fmt == "hdf5":
        (path,) = shard["files"]
        with h5py.File(os.path.join(out, path), "r") as f:
            lengths = f["length"][:]
            rows = list(f[col][:])
    elif fmt == "parquet":
        (path,) = shard["files"]
        df = pl.read_parquet(os.path.join(out, path))
        lengths = df["length"].to_numpy()
        rows = [np.asarray(r) for r in df[col].to_list()]
    else:
        tf = pytest.importorskip(
            "tensorflow", reason="the tf extra is not installed (pip install 'lovecraft-convert[tf]')"
        )
        (path,) = shard["files"]
        kind = tf.int64 if np.dtype(m["schema"][0]["dtype"]).kind in "iub" else tf.float32
        spec = {"length": tf.io.FixedLenFeature([], tf.int64)}
        spec[col] = tf.io.FixedLenFeature([width], kind) if padded else tf.io.VarLenFeature(kind)
        rows, lengths = [], []
        for rec in tf.data.TFRecordDataset(os.path.join(out, path)).batch(512):
            ex = tf.io.parse_example(rec, spec)
            lengths.extend(ex["length"].numpy().tolist())
            if padded:
                rows.extend(ex[col].numpy())
            else:
                dense = tf.sparse.to_dense(ex[col]).numpy()
                rows.extend(dense[i, :n] for i, n in enumerate(ex["length"].numpy()))
        lengths = np.array(lengths)
    if padded:
        for r in rows:
            assert len(r) == width
    seqs = [tuple(np.asarray(r)[:n].tolist()) for r, n in zip(rows, lengths, strict=True)]
    return rows, np.asarray(lengths), seqs


def read_all(out: str) -> tuple[dict, list[tuple]]:
    """Every stored sequence; checks each length fits its bucket and padding is --pad-id."""
    m = manifest(out)
    pad = m["bucketing"]["pad_id"]
    seqs = []
    for b in m["buckets"]:
        n = 0
        for s in b["shards"]:
            rows, lengths, got = read_shard(out, m, b, s)
            assert len(rows) == s["rows"]
            assert ((lengths >= b["min_length"]) & (lengths <= b["max_length"])).all()
            for r, ln in zip(rows, lengths, strict=True):
                assert len(np.asarray(r)) >= ln
                if b["layout"] == "padded":
                    assert (np.asarray(r)[ln:] == pad).all()
            seqs.extend(got)
            n += len(got)
        assert n == b["rows"]
    assert len(seqs) == m["rows"]
    return m, seqs


def as_bytes(lines: list[str]) -> collections.Counter:
    return collections.Counter(tuple(line.encode()) for line in lines)


# ---------------------------------------------------------------------------------------------
# every sequence exactly once, unchanged, in every format and layout
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["padded", "ragged"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_line_in_exactly_one_bucket_unchanged(corpus, tmp_path, fmt, layout):
    src, lines = corpus
    out = str(tmp_path / "b")
    r = lovecraft("bucket", src, "-o", out, "--to", fmt, "--num-buckets", "4", "--layout", layout, "-q")
    assert r.exit_code == 0, r.stderr
    m, seqs = read_all(out)
    assert collections.Counter(seqs) == as_bytes(lines)
    assert m["schema"][0] == {"name": "tokens", "kind": "sequence", "dtype": "|u1", "shape": []}
    assert len(m["buckets"]) == 4
    assert lovecraft("verify", out).exit_code == 0
    assert leftovers(tmp_path) == []


def test_shards_within_buckets_and_shuffle(corpus, tmp_path):
    src, lines = corpus
    out = str(tmp_path / "b")
    args = ["--to", "parquet", "--num-buckets", "3", "--rows-per-shard", "400", "-q"]
    assert lovecraft("bucket", src, "-o", out, *args, "--shuffle", "--seed", "5").exit_code == 0
    m, seqs = read_all(out)
    assert collections.Counter(seqs) == as_bytes(lines)
    for b in m["buckets"]:
        assert [s["rows"] for s in b["shards"]][:-1] == [400] * (len(b["shards"]) - 1)
        assert sum(s["rows"] for s in b["shards"]) == b["rows"]
    assert len(m["files"]) > 3
    # same seed: byte-identical, whatever the workers; another seed: another order
    again = str(tmp_path / "again")
    assert lovecraft("bucket", src, "-o", again, *args, "--shuffle", "--seed", "5", "--workers", "1").exit_code == 0
    other = str(tmp_path / "other")
    assert lovecraft("bucket", src, "-o", other, *args, "--shuffle", "--seed", "6", "--workers", "2").exit_code == 0
    digests = [disk_digest(d) for d in (out, again, other)]  # hashed here, from the files
    assert digests[0] == digests[1]
    assert assert_manifest_matches_disk(out) == digests[0]
    assert digests[0] != digests[2]
    assert collections.Counter(read_all(other)[1]) == as_bytes(lines)
    assert lovecraft("verify", out).exit_code == 0


def test_workers_do_not_change_the_bytes(corpus, tmp_path):
    src, _ = corpus
    outs = []
    for w in ("1", "2"):
        out = str(tmp_path / f"w{w}")
        args = ["--to", "hdf5", "--boundaries", "8,32,64", "--num-shards", "2", "--workers", w, "-q"]
        assert lovecraft("bucket", src, "-o", out, *args, "--max-memory", "16MiB").exit_code == 0
        outs.append(disk_digest(out))  # every file of the directory, the index included, hashed here
        assert assert_manifest_matches_disk(out) == outs[-1]
    assert outs[0] == outs[1]
    assert "buckets.h5" in outs[0] and len(outs[0]) > 4


def _index_rows(group, col: str) -> list:
    """The rows of one bucket through the index: its own group, or its shards' groups in order."""
    if col in group:
        return list(group[col][:])
    return [r for part in sorted(group) for r in group[part][col][:]]


@pytest.mark.parametrize("shards", [None, "3"])
def test_hdf5_index_has_a_group_per_bucket(corpus, tmp_path, monkeypatch, shards):
    src, lines = corpus
    out = str(tmp_path / "b")
    args = ["--num-shards", shards] if shards else []
    r = lovecraft("bucket", src, "-o", out, "--to", "hdf5", "--num-buckets", "4", "--layout", "ragged", *args, "-q")
    assert r.exit_code == 0, r.stderr
    m, seqs = read_all(out)
    assert m["hdf5_index"]["path"] == "buckets.h5"
    assert m["hdf5_index"]["groups"] == [f"bucket-{i:05d}" for i in range(4)]
    assert file_matches(os.path.join(out, "buckets.h5"), m["hdf5_index"])
    moved = str(tmp_path / "moved")
    os.rename(out, moved)  # the links are relative to the index: the directory can move
    monkeypatch.chdir(tmp_path)
    through_index = []
    with h5py.File(os.path.join(moved, "buckets.h5"), "r") as f:
        assert json.loads(f.attrs["lovecraft_boundaries"]) == m["bucketing"]["boundaries"]
        for b in m["buckets"]:
            g = f[f"bucket-{b['index']:05d}"]
            if shards:
                assert sorted(g) == [f"part-{j:05d}-of-00003" for j in range(3)]
            rows = _index_rows(g, "tokens")
            assert len(rows) == b["rows"]
            assert all(b["min_length"] <= len(x) <= b["max_length"] for x in rows)
            through_index += [tuple(np.asarray(x).tolist()) for x in rows]
    assert collections.Counter(through_index) == collections.Counter(seqs) == as_bytes(lines)
    assert lovecraft("verify", moved).exit_code == 0


def test_verify_checks_the_hdf5_index(corpus, tmp_path):
    src, _ = corpus
    out = str(tmp_path / "b")
    assert lovecraft("bucket", src, "-o", out, "--to", "hdf5", "--num-buckets", "2", "-q").exit_code == 0
    index = os.path.join(out, "buckets.h5")
    with open(index, "rb") as f:
        original = f.read()
    with h5py.File(index, "r+") as f:  # point a bucket elsewhere
        del f["bucket-00001"]
        f["bucket-00001"] = h5py.ExternalLink("/etc/passwd", "/")
    r = lovecraft("verify", out)
    assert r.exit_code == 1
    assert f"{index}: 'bucket-00001' links to /etc/passwd:/ (as 'bucket-00001'), not to the bucket's files" in r.stdout
    with h5py.File(index, "r+") as f:
        del f["bucket-00001"]
    r = lovecraft("verify", out)
    assert r.exit_code == 1 and f"{index}: has no group 'bucket-00001'" in r.stdout
    os.unlink(index)
    r = lovecraft("verify", out)
    assert r.exit_code == 1 and f"{index}: listed in the manifest but missing" in r.stdout
    with open(index, "wb") as f:
        f.write(original)
    assert lovecraft("verify", out).exit_code == 0


def test_truncate_drop_longer_and_min_length(corpus, tmp_path):
    src, lines = corpus
    enc = [line.encode() for line in lines]
    out = str(tmp_path / "t")
    r = lovecraft("bucket", src, "-o", out, "--to", "memmap", "--boundaries", "16,64", "--max-length", "100",
                  "--truncate", "--min-length", "2", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    m, seqs = read_all(out)
    want = [tuple(e[:100]) for e in enc if len(e) >= 2]
    assert collections.Counter(seqs) == collections.Counter(want)
    b = m["bucketing"]
    assert b["truncated"] == sum(len(e) > 100 for e in enc if len(e) >= 2)
    assert b["dropped_shorter"] == sum(len(e) < 2 for e in enc)
    assert b["boundaries"] == [16, 64, 100]  # the rest up to the longest kept: one more bucket
    assert [x["min_length"] for x in m["buckets"]] == [0, 17, 65]

    out2 = str(tmp_path / "d")
    r = lovecraft("bucket", src, "-o", out2, "--to", "parquet", "--boundaries", "16,64", "--drop-longer", "-q")
    assert r.exit_code == 0, r.stderr
    m2, seqs2 = read_all(out2)
    assert collections.Counter(seqs2) == collections.Counter(tuple(e) for e in enc if len(e) <= 64)
    assert m2["bucketing"]["dropped_longer"] == sum(len(e) > 64 for e in enc)
    assert m2["bucketing"]["boundaries"] == [16, 64]


@pytest.mark.parametrize("text", [b"ab\ncd\n", b"ab\n", b"ab\ncde\nfg\n"])
def test_hdf5_ragged_bucket_of_equal_lengths(tmp_path, text):
    src = write(tmp_path / "same.txt", text)
    out = str(tmp_path / "b")
    r = lovecraft("bucket", src, "-o", out, "--to", "hdf5", "--layout", "ragged", "--boundaries", "2,3", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    _, seqs = read_all(out)
    assert collections.Counter(seqs) == as_bytes(text.decode().splitlines())


def test_chars_tokenizer_and_token_dtype(tmp_path):
    lines = ["héllo", "wörld €", "", "plain", "emoji 🙂 here"]
    src = write(tmp_path / "u.txt", ("\n".join(lines) + "\n").encode())
    out = str(tmp_path / "c")
    assert lovecraft("bucket", src, "-o", out, "--to", "hdf5", "--num-buckets", "2", "--tokenizer", "chars",
                     "-q").exit_code == 0  # fmt: skip
    m, seqs = read_all(out)
    assert collections.Counter(seqs) == collections.Counter(tuple(ord(c) for c in line) for line in lines)
    assert m["bucketing"]["dtype"] == "int32"  # U+1F642 does not fit uint16
    out2 = str(tmp_path / "c2")
    assert lovecraft("bucket", src, "-o", out2, "--to", "memmap", "--num-buckets", "2", "--tokenizer", "chars",
                     "--min-length", "1", "--max-length", "7", "--drop-longer", "-q").exit_code == 0  # fmt: skip
    assert manifest(out2)["bucketing"]["dtype"] == "uint16"  # € is U+20AC
    # the tokenizer's section says the narrowed dtype too, which verify holds to the column's (it
    # said int32, the chars tokenizer's own, and verify failed every such dataset)
    for d, dt in ((out, "int32"), (out2, "uint16")):
        assert manifest(d)["bucketing"]["tokenizer"]["dtype"] == dt
        r = lovecraft("verify", d, "--against", src, "-q")
        assert r.exit_code == 0, r.stdout + r.stderr
    out4, ascii_src = str(tmp_path / "p4"), write(tmp_path / "a.txt", b"plain\ntext only\nhere\n")
    assert lovecraft("bucket", ascii_src, "-o", out4, "--to", "memmap", "--layout", "packed", "--seq-len", "4",
                     "--tokenizer", "chars", "-q").exit_code == 0  # fmt: skip
    assert manifest(out4)["packing"]["dtype"] == manifest(out4)["packing"]["tokenizer"]["dtype"] == "uint8"
    assert lovecraft("verify", out4, "-q").exit_code == 0
    out3 = str(tmp_path / "b3")
    assert lovecraft("bucket", src, "-o", out3, "--to", "memmap", "--num-buckets", "2", "--pad-id", "256",
                     "-q").exit_code == 0  # fmt: skip
    m3, seqs3 = read_all(out3)
    assert m3["bucketing"]["dtype"] == "uint16"  # bytes, but the pad id needs 9 bits
    assert collections.Counter(seqs3) == as_bytes(lines)
    assert np.load(os.path.join(out3, "bucket-00000.tokens.npy")).dtype == np.uint16


def test_tokenizer_json(corpus, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    src, lines = corpus
    tok = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]", "[PAD]"]))
    path = str(tmp_path / "tokenizer.json")
    tok.save(path)
    out = str(tmp_path / "t")
    r = lovecraft("bucket", src, "-o", out, "--to", "tfrecord", "--boundaries", "4,8,16,32", "--tokenizer", path,
                  "--pad-id", "1", "--layout", "ragged", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    m, seqs = read_all(out)
    want = collections.Counter(tuple(e.ids) for e in tok.encode_batch(lines))
    assert collections.Counter(seqs) == want
    assert m["bucketing"]["dtype"] == "uint16"
    assert m["bucketing"]["tokenizer"]["vocab_size"] == tok.get_vocab_size(with_added_tokens=True)


# ---------------------------------------------------------------------------------------------
# boundaries
# ---------------------------------------------------------------------------------------------


def quantile_boundaries(lengths: np.ndarray, k: int) -> list[int]:
    qs = np.quantile(lengths, np.arange(1, k + 1) / k, method="higher")
    return sorted({int(q) for q in qs} | {int(lengths.max())})


def test_computed_boundaries_pad_less_than_quantiles_and_one_bucket(tmp_path):
    r = np.random.default_rng(3)
    lengths = np.concatenate([r.integers(1, 20, 5000), r.pareto(1.2, 3000).astype(int) * 10 + 20]).clip(1, 3000)
    r.shuffle(lengths)
    lines = ["x" * int(n) for n in lengths]
    src = write(tmp_path / "s.txt", ("\n".join(lines) + "\n").encode())
    for k in (2, 4, 8):
        out = str(tmp_path / f"k{k}")
        assert lovecraft("bucket", src, "-o", out, "--to", "memmap", "--num-buckets", str(k), "-q").exit_code == 0
        b = manifest(out)["bucketing"]
        q = padding_stats(dict(collections.Counter(lengths.tolist())), quantile_boundaries(lengths, k))
        assert b["padded_tokens"] <= q["padded"], (k, b["boundaries"])
        assert b["padded_tokens"] < 0.5 * b["single_bucket_padded_tokens"]
        assert b["padded_tokens_saved"] == b["single_bucket_padded_tokens"] - b["padded_tokens"]
        assert b["tokens"] == int(lengths.sum())
        assert b["single_bucket_padded_tokens"] == len(lengths) * int(lengths.max())
        assert len(b["boundaries"]) == k


def test_manifest_padding_figures_match_the_files(corpus, tmp_path):
    src, lines = corpus
    out = str(tmp_path / "b")
    assert lovecraft("bucket", src, "-o", out, "--to", "memmap", "--num-buckets", "5", "-q").exit_code == 0
    m = manifest(out)
    total_padded = 0
    for b in m["buckets"]:
        lengths = np.concatenate([np.load(os.path.join(out, f"{s['name']}.length.npy")) for s in b["shards"]])
        tokens = np.load(os.path.join(out, f"bucket-{b['index']:05d}.tokens.npy"))
        assert tokens.shape == (b["rows"], b["max_length"])
        assert b["tokens"] == int(lengths.sum())
        assert b["padded_tokens"] == tokens.size
        assert b["padding_efficiency"] == pytest.approx(lengths.sum() / tokens.size, abs=1e-6)
        total_padded += tokens.size
    assert m["bucketing"]["padded_tokens"] == total_padded
    assert m["bucketing"]["tokens"] == sum(len(line.encode()) for line in lines)


# ---------------------------------------------------------------------------------------------
# other inputs
# ---------------------------------------------------------------------------------------------


def test_ragged_csv_rows_are_numeric_sequences(tmp_path):
    r = random.Random(4)
    rows = [[r.randint(-1000, 1000) for _ in range(r.randint(1, 30))] for _ in range(500)]
    text = "t0,t1,t2\n" + "\n".join(",".join(map(str, row)) for row in rows) + "\n\n"
    src = write(tmp_path / "series.csv", text.encode(), "gz")
    out = str(tmp_path / "r")
    res = lovecraft("bucket", src, "-o", out, "--to", "hdf5", "--num-buckets", "3", "--ragged", "--layout", "ragged",
                    "-q")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    m, seqs = read_all(out)
    assert collections.Counter(seqs) == collections.Counter(tuple(row) for row in rows)
    assert m["schema"][0]["name"] == "values" and m["schema"][0]["dtype"] == "<i8"
    floats = write(tmp_path / "f.csv", b"1.5,2\n3\n")
    out2 = str(tmp_path / "f")
    assert lovecraft("bucket", floats, "-o", out2, "--to", "parquet", "--num-buckets", "2", "--ragged",
                     "-q").exit_code == 0  # fmt: skip
    m2, seqs2 = read_all(out2)
    assert m2["schema"][0]["dtype"] == "<f8"
    assert sorted(seqs2) == [(1.5, 2.0), (3.0,)]


def test_a_datasets_column(corpus, tmp_path):
    src, lines = corpus
    ds = str(tmp_path / "ds")
    assert lovecraft("shard", src, "-o", ds, "--to", "parquet", "--num-shards", "3", "-q").exit_code == 0
    out = str(tmp_path / "b")
    assert lovecraft("bucket", ds, "-o", out, "--to", "memmap", "--num-buckets", "3", "-q").exit_code == 0
    _, seqs = read_all(out)
    assert collections.Counter(seqs) == as_bytes(lines)
    # a dataset of sequences: bucket again by its sequence column
    out2 = str(tmp_path / "again")
    ragged = str(tmp_path / "ragged")
    assert lovecraft("bucket", src, "-o", ragged, "--to", "parquet", "--num-buckets", "1", "--layout", "ragged",
                     "-q").exit_code == 0  # fmt: skip
    r = lovecraft("bucket", ragged, "-o", out2, "--to", "memmap", "--num-buckets", "2", "-q")
    assert r.exit_code == 1
    assert r.stderr == f"Error: {ragged}: is already bucketed; bucket its source instead\n"


# ---------------------------------------------------------------------------------------------
# the independent consumers: tf.data and the loaders
# ---------------------------------------------------------------------------------------------


def test_bucketed_tfrecord_feeds_padded_batches_and_bucket_by_sequence_length(corpus, tmp_path):
    tf = pytest.importorskip("tensorflow")
    src, lines = corpus
    out = str(tmp_path / "tf")
    assert lovecraft("bucket", src, "-o", out, "--to", "tfrecord", "--num-buckets", "4", "-q").exit_code == 0
    m = manifest(out)
    seen, seen_unpadded = collections.Counter(), collections.Counter()
    for b in m["buckets"]:
        width = b["max_length"]
        assert b["feature_spec"]["tokens"] == {"type": "FixedLenFeature", "shape": [width], "dtype": "int64"}
        spec = {"tokens": tf.io.FixedLenFeature([width], tf.int64), "length": tf.io.FixedLenFeature([], tf.int64)}

        def cut(r, spec=spec):  # each row back to its own length: padded_batch pads it again
            ex = tf.io.parse_single_example(r, spec)
            return ex["tokens"][: ex["length"]], ex["length"]

        rows = tf.data.TFRecordDataset([os.path.join(out, f) for f in b["files"]]).map(cut)
        # to the bucket's width, whatever the batch holds: the shape every batch of the bucket has
        for tokens, lengths in rows.padded_batch(64, padded_shapes=([width], [])):
            assert tokens.shape[1] == width
            for row, n in zip(tokens.numpy(), lengths.numpy(), strict=True):
                assert (row[n:] == 0).all()
                seen[tuple(row[:n].tolist())] += 1
        # to each batch's longest row
        for tokens, lengths in rows.padded_batch(64):
            assert tokens.shape[1] == int(lengths.numpy().max())
            for row, n in zip(tokens.numpy(), lengths.numpy(), strict=True):
                seen_unpadded[tuple(row[:n].tolist())] += 1
    assert seen == seen_unpadded == as_bytes(lines)

    # the ragged layout straight into tf.data's own bucketing
    rag = str(tmp_path / "rag")
    assert lovecraft("bucket", src, "-o", rag, "--to", "tfrecord", "--num-buckets", "4", "--layout", "ragged",
                     "-q").exit_code == 0  # fmt: skip
    m = manifest(rag)
    bounds = m["bucketing"]["boundaries"]
    spec = {"tokens": tf.io.VarLenFeature(tf.int64)}
    files = [os.path.join(rag, f["path"]) for f in m["files"]]
    d = tf.data.TFRecordDataset(files).map(lambda r: tf.sparse.to_dense(tf.io.parse_single_example(r, spec)["tokens"]))
    got = collections.Counter()
    for batch in d.padded_batch(32, padding_values=tf.constant(-1, tf.int64)):
        assert batch.shape[1] == max(int((row != -1).sum()) for row in batch.numpy())
        got.update(tuple(int(x) for x in row if x != -1) for row in batch.numpy())
    assert got == as_bytes(lines)
    d = d.bucket_by_sequence_length(
        lambda t: tf.shape(t)[0], [b + 1 for b in bounds[:-1]], [32] * len(bounds), pad_to_bucket_boundary=False
    )
    rows = 0
    for batch in d:
        rows += int(batch.shape[0])
    assert rows == len(lines)


def test_loaders_read_buckets_with_shards(corpus, tmp_path):
    from lovecraft_convert import open_dataset

    src, lines = corpus
    out = str(tmp_path / "b")
    assert lovecraft("bucket", src, "-o", out, "--to", "hdf5", "--num-buckets", "3", "--rows-per-shard", "500",
                     "-q").exit_code == 0  # fmt: skip
    ds = open_dataset(out)
    assert len(ds) == len(lines) and ds.bucketed
    seen = collections.Counter()
    for batch in ds.batches(batch_size=64):
        widths = {batch["tokens"].shape[1]}
        assert len(widths) == 1
        for row, n in zip(batch["tokens"], batch["length"], strict=True):
            seen[tuple(row[:n].tolist())] += 1
    assert seen == as_bytes(lines)


# ---------------------------------------------------------------------------------------------
# mistakes: one line, the exit code, nothing left behind
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def txt(tmp_path) -> str:
    return write(tmp_path / "a.txt", b"abc\nde\n")


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--to", "memmap"], 2, "give exactly one of --num-buckets and --boundaries"),
        (["--to", "memmap", "--num-buckets", "2", "--boundaries", "4"], 2,
         "give exactly one of --num-buckets and --boundaries"),
        (["--to", "memmap", "--boundaries", "8,4"], 2, "give increasing positive lengths, like 32,64,128"),
        (["--to", "memmap", "--num-buckets", "2", "--max-length", "5"], 2,
         "--max-length 5: say what happens to longer sequences; add --truncate or --drop-longer"),
        (["--to", "memmap", "--num-buckets", "2", "--truncate"], 2,
         "--truncate needs --max-length L (or --boundaries: the last one is the limit)"),
        (["--to", "memmap", "--num-buckets", "2", "--truncate", "--drop-longer", "--max-length", "3"], 2,
         "give only one of --truncate and --drop-longer"),
        (["--to", "memmap", "--num-buckets", "2", "--shuffle"], 2, "--shuffle needs --seed N"),
        (["--to", "memmap", "--num-buckets", "2", "--tokenizer", "nope.json"], 1,
         "--tokenizer nope.json: no such file; give bytes, chars, or the path of a Hugging Face tokenizer.json"),
        (["--to", "memmap", "--num-buckets", "2", "--min-length", "9"], 1,
         "{src}: all 2 sequences were dropped by --min-length/--max-length; loosen the limits"),
    ],
)  # fmt: skip
def test_flag_mistakes(txt, tmp_path, args, code, message):
    out = str(tmp_path / "out")
    r = lovecraft("bucket", txt, "-o", out, *args)
    assert r.exit_code == code
    assert message.format(src=txt) in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 or code == 2
    assert not os.path.exists(out)
    assert leftovers(tmp_path) == []


def test_input_mistakes(tmp_path):
    out = str(tmp_path / "out")
    np.save(tmp_path / "x.npy", np.zeros((3, 2), np.float32))
    npy = str(tmp_path / "x.npy")
    csv = write(tmp_path / "d.csv", b"a,b\n1,x\n")
    bad = write(tmp_path / "r.csv", b"1,2\n3,oops,4\n")
    cases = [
        ([npy], f"Error: {npy}: an NPY array has rows of one length, there is nothing to bucket; bucket text lines, "
                "ragged CSV rows (--ragged) or a dataset's variable-length column"),
        ([csv], f"Error: {csv}: say which CSV column holds the text (columns: a, b), or pass --ragged to read each row "
                "as a sequence of numbers; pass --column NAME or --ragged"),
        ([csv, "--column", "a"], f"Error: {csv}: column 'a' is int64, not text; give a text column, or --ragged for "
                                 "rows of numbers"),
        ([bad, "--ragged"], f"Error: {bad}, line 2, column 2: 'oops' is not a number; --ragged reads every field as a "
                            "number; fix the row"),
        ([bad, "--ragged", "--pad-id", "0.5"], f"Error: {bad}, line 2, column 2: 'oops' is not a number; --ragged "
                                                "reads every field as a number; fix the row"),
    ]  # fmt: skip
    for extra, message in cases:
        r = lovecraft("bucket", *extra, "-o", out, "--to", "memmap", "--num-buckets", "2")
        assert (r.exit_code, r.stderr) == (1, message + "\n")
        assert not os.path.exists(out)
        assert leftovers(tmp_path) == []
    ints = write(tmp_path / "i.csv", b"1,2\n3\n")
    r = lovecraft("bucket", ints, "-o", out, "--to", "memmap", "--num-buckets", "2", "--ragged", "--pad-id", "0.5")
    assert (r.exit_code, r.stderr) == (1, "Error: --pad-id 0.5 does not fit the values' dtype int64; choose a pad "
                                          "value that does\n")  # fmt: skip


def test_existing_output_and_json_summary(txt, tmp_path):
    out = str(tmp_path / "out")
    r = lovecraft("bucket", txt, "-o", out, "--to", "parquet", "--num-buckets", "2", "--json")
    assert r.exit_code == 0
    s = json.loads(r.stdout)
    assert s["rows"] == 2 and s["format"] == "parquet"
    r = lovecraft("bucket", txt, "-o", out, "--to", "parquet", "--num-buckets", "2")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {out}: output already exists; pass --overwrite to replace it or choose another path\n",
    )


# ---------------------------------------------------------------------------------------------
# property: any lines, any options, read back unchanged
# ---------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\n\r\ufeff"), max_size=60),
                   min_size=1, max_size=80),
    k=st.integers(1, 6),
    layout=st.sampled_from(["padded", "ragged"]),
    fmt=st.sampled_from(["memmap", "parquet"]),
    tokenizer=st.sampled_from(["bytes", "chars"]),
)  # fmt: skip
def test_property_round_trip(tmp_path_factory, lines, k, layout, fmt, tokenizer):
    d = tmp_path_factory.mktemp("p")
    src = write(d / "in.txt", ("\n".join(lines) + "\n").encode())
    out = str(d / "o")
    run_bucket(src, out, to=fmt, num_buckets=k, layout=layout, tokenizer=tokenizer, progress=False, workers=1)
    m, seqs = read_all(out)
    if tokenizer == "bytes":
        want = as_bytes(lines)
    else:
        want = collections.Counter(tuple(ord(c) for c in line) for line in lines)
    assert collections.Counter(seqs) == want
    assert len(m["bucketing"]["boundaries"]) <= k
    for f in m["files"]:
        assert file_matches(os.path.join(out, f["path"]), f)


# ---------------------------------------------------------------------------------------------
# killed at seeded random moments, then resumed: the bytes of an uninterrupted run
# ---------------------------------------------------------------------------------------------


def _digest(out: str) -> dict[str, str]:
    return disk_digest(out)


@pytest.mark.parametrize("fmt, shuffle", [("memmap", False), ("tfrecord", True)])
def test_sigkill_then_resume_is_byte_identical(tmp_path, fmt, shuffle):
    import signal
    import subprocess
    import sys
    import time

    r = np.random.default_rng(7)
    lengths = r.lognormal(3.5, 0.9, 120_000).astype(int).clip(0, 3000)
    text = b"\n".join(b"y" * int(n) for n in lengths) + b"\n"
    src = write(tmp_path / "big.txt", text)
    kw = dict(to=fmt, num_buckets=4, rows_per_shard=20_000, shuffle=shuffle, seed=2 if shuffle else None,
              progress=False, part_bytes=1 << 20, max_memory="32MiB", workers=2)  # fmt: skip
    ref = str(tmp_path / "ref")
    run_bucket(src, ref, **kw)
    want = _digest(ref)
    rng = random.Random(f"bucket-{fmt}-{shuffle}")  # seeded: a failing trial can be replayed
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
        if os.path.exists(out):  # only a finished run may have put anything at the output path
            assert os.path.exists(os.path.join(out, "_manifest.json")), f"trial {trial}: an incomplete {out}"
            assert _digest(out) == want, f"trial {trial}, delay {delay:.2f}s"
        else:
            resume = f"from lovecraft_convert import bucket; bucket({src!r}, {out!r}, resume=True, **{kw!r})"
            subprocess.run([sys.executable, "-c", resume], check=True)
        assert _digest(out) == want, f"trial {trial}, delay {delay:.2f}s"
        assert [n for n in leftovers(d) if n != ".out.lock"] == []
        assert lovecraft("verify", out).exit_code == 0
        assert assert_manifest_matches_disk(out) == want


def flip_a_value(work: str) -> str:
    """Flip a bit of the byte in the middle of the first spill file of a journalled part (a token:
    the values are most of a frame), as a damaged disk would. Returns the file."""
    import glob

    path = sorted(glob.glob(os.path.join(work, "spill", "*.bin")))[0]
    with open(path, "r+b") as f:
        at = os.path.getsize(path) // 2
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x01]))
    return path


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_damaged_spill_frame_of_a_journalled_part_is_read_again_on_resume(corpus, tmp_path, shuffle):
    """A run interrupted once its first phase is journalled, a byte of a spill frame flipped, then
    ``--resume``: the part whose spill no longer matches its digest is read again, and the output
    is the uninterrupted run's, byte for byte (it was other tokens, silently)."""
    from tests.conftest import interrupted_after_first_phase

    src, _ = corpus
    kw = dict(to="memmap", num_buckets=3, rows_per_shard=40, shuffle=shuffle, seed=5 if shuffle else None,
              progress=False, workers=1)  # fmt: skip
    ref = str(tmp_path / "ref")
    run_bucket(src, ref, **kw)
    out = str(tmp_path / "out")
    work = interrupted_after_first_phase(lambda: run_bucket(src, out, **kw), out)
    flip_a_value(work)
    run_bucket(src, out, resume=True, **kw)
    assert disk_digest(out) == disk_digest(ref)
    assert lovecraft("verify", out).exit_code == 0
    assert [n for n in leftovers(tmp_path) if n != ".out.lock"] == []


@pytest.mark.parametrize("compressed", [False, True])
def test_bucket_from_stdin(tmp_path, compressed):
    """bucket opens its input twice (a probe for the column, then the reader): from stdin the
    second read found the pipe drained by the first's spool ('<stdin>: empty input (no records)').
    A second reader of '-' reads the spooled copy (found by an outside trial)."""
    import gzip

    docs = [" ".join(["w"] * (1 + i % 20)) for i in range(300)]
    data = "".join(json.dumps({"id": i, "text": d}) + "\n" for i, d in enumerate(docs)).encode()
    out = str(tmp_path / "out")
    r = lovecraft(
        "bucket", "-", "--input-format", "jsonl", "-o", out, "--to", "parquet", "--num-buckets", "2", "-q",
        input=gzip.compress(data) if compressed else data,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    m = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert m["rows"] == 300
    assert sorted(m["bucketing"]["length_histogram"][0]) == sorted({len(d.encode()) for d in docs})
