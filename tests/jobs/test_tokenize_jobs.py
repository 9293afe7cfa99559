"""``convert`` and ``shard`` with ``--tokenizer``: a text column of text or CSV inputs becomes token
ids through the one output plan, in every format, read back with the formats' own readers and
compared with what the ``tokenizers`` package (or the test itself, for bytes and chars) gives."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import lovecraft_convert as lc
from lovecraft_convert.schema import VarColumn
from lovecraft_convert.transforms import tokenize as tk
from tests.conftest import lovecraft, write
from tests.readback import READERS, manifest, read_back

FORMATS = ["memmap", "hdf5", "parquet", "tfrecord"]
DOCS = ["the quick brown fox", "", "jumps over é the lazy dog", "a", "über naïve café " * 5] * 40


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    t = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.train_from_iterator(DOCS, trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]", "</s>"]))
    path = str(tmp_path_factory.mktemp("tok") / "tokenizer.json")
    t.save(path)
    return path, t


@pytest.fixture(scope="module")
def csv_src(tmp_path_factory):
    d = tmp_path_factory.mktemp("csv")
    rows = "".join(f'{i},"{x}",{i / 4}\n' for i, x in enumerate(DOCS))
    return write(d / "d.csv", ("id,body,score\n" + rows).encode())


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("command", ["convert", "shard"])
def test_csv_text_column_to_every_format(csv_src, tok, tmp_path, fmt, command):
    path, t = tok
    out = str(tmp_path / "out")
    shard = ["--num-shards", "1", "--workers", "2"] if command == "shard" else []
    r = lovecraft(command, csv_src, "-o", out, "--to", fmt, "--tokenizer", path, "--column", "body", "--eos", "</s>",
                  "--columns", "id,body", *shard, "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    with open(os.path.join(out, "_manifest.json")) as f:
        m = json.load(f)
    assert [f["name"] for f in m["schema"]] == ["id", "tokens"]
    assert m["schema"][1]["kind"] == "sequence" and m["schema"][1]["dtype"] == "|u1"  # 120 tokens: uint8
    if fmt == "memmap" and command == "convert":
        got = READERS[fmt](out)
    elif fmt == "memmap":  # shard files are part-...: read them with np.load here
        d = {f["column"] + "." + (f.get("role") or "data"): os.path.join(out, f["path"]) for f in m["files"]}
        values, offs = np.load(d["tokens.values"]), np.load(d["tokens.offsets"])
        got = {"id": np.load(d["id.data"]), "tokens": [values[offs[i] : offs[i + 1]] for i in range(len(offs) - 1)]}
    elif fmt == "hdf5" and command == "shard":
        import h5py

        with h5py.File(os.path.join(out, "part-00000-of-00001.h5"), "r") as h:
            got = {"id": h["id"][:], "tokens": list(h["tokens"][:])}
    else:
        got = READERS[fmt](out)
    eos = t.token_to_id("</s>")
    assert [list(map(int, x)) for x in got["tokens"]] == [t.encode(x).ids + [eos] for x in DOCS]
    assert np.asarray(got["id"]).reshape(-1).tolist() == list(range(len(DOCS)))
    assert lovecraft("verify", out, "--against", csv_src).exit_code == 0


def test_text_lines_bytes_and_chars(tmp_path):
    src = write(tmp_path / "t.txt", ("\n".join(DOCS) + "\n").encode())
    for spec, want in (("bytes", [list(x.encode()) for x in DOCS]), ("chars", [[ord(c) for c in x] for x in DOCS])):
        out = str(tmp_path / spec)
        lc.convert(src, out, to="parquet", tokenizer=spec, bos=1, progress=False)
        got = READERS["parquet"](out)["tokens"]
        assert got == [[1, *w] for w in want]


def test_columns_keep_other_columns_beside_the_tokens(csv_src, tmp_path):
    m = lc.convert(csv_src, str(tmp_path / "a"), to="parquet", tokenizer="bytes", column="body",
                   columns=["score", "body", "id"], progress=False)  # fmt: skip
    assert [f["name"] for f in m["schema"]] == ["score", "tokens", "id"]
    m = lc.convert(csv_src, str(tmp_path / "b"), to="parquet", tokenizer="bytes", column="body", columns=["score"],
                   progress=False)  # fmt: skip
    assert [f["name"] for f in m["schema"]] == ["tokens", "score"]
    m = lc.convert(csv_src, str(tmp_path / "c"), to="parquet", tokenizer="bytes", column="body", progress=False)
    assert [f["name"] for f in m["schema"]] == ["tokens"]


def test_a_kept_column_named_tokens_is_refused(tmp_path):
    src = write(tmp_path / "d.csv", b"tokens,text\n1,ab\n")
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "--tokenizer", "bytes",
                  "--columns", "tokens,text")  # fmt: skip
    assert (r.exit_code, r.stderr) == (
        2,
        "Error: --columns keeps a column named 'tokens', the name of the token column; leave it out, or tokenize "
        "that column with --column tokens\n",
    )


def test_resume_notices_a_changed_tokenizer_file(tok, tmp_path):
    path, _ = tok
    mine = str(tmp_path / "tok.json")
    with open(path) as f, open(mine, "w") as g:
        g.write(f.read())
    src = write(tmp_path / "t.txt", ("\n".join(DOCS) + "\n").encode())
    out = str(tmp_path / "out")
    args = ["shard", src, "-o", out, "--to", "parquet", "--tokenizer", mine, "--num-shards", "2", "-q"]
    assert lovecraft(*args).exit_code == 0
    assert lovecraft(*args, "--resume").exit_code == 0  # nothing to do
    with open(mine, "a") as g:
        g.write("\n")
    r = lovecraft(*args, "--resume")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {out}: a finished dataset is there, but {mine} changed since it was made (size, mtime differ); "
        "run the same command as before, or pass --overwrite to replace it\n",
    )


def test_with_markers_around_every_row_empty_ones_too():
    col = VarColumn(np.array([5, 6, 7], np.uint16), np.array([0, 2, 2, 3]))
    out = tk.with_markers(col, 1, 2)
    assert out.to_pylist("sequence") == [[1, 5, 6, 2], [1, 2], [1, 7, 2]] and out.values.dtype == np.uint16
    assert tk.with_markers(col, None, 9).to_pylist("sequence") == [[5, 6, 9], [9], [7, 9]]
    assert tk.with_markers(col.slice(1, 3), 4, None).to_pylist("sequence") == [[4], [4, 7]]


def test_token_dtypes_and_markers():
    assert [tk.token_dtype(x) for x in (255, 256, 65535, 65536, None)] == [
        np.uint8, np.uint16, np.uint16, np.int32, np.int32,
    ]  # fmt: skip
    assert tk.Tokens("bytes").dtype == np.uint8 and tk.Tokens("bytes", eos="\n").eos == 10
    assert tk.Tokens("bytes", eos=256).dtype == np.uint16
    assert tk.Tokens("chars", bos="é").bos == 233 and tk.Tokens("chars").dtype == np.int32


def test_a_tokenizer_json_in_overlapping_pieces_gives_the_same_ids(tok, monkeypatch):
    path, t = tok
    lines = VarColumn.from_pylist([x.encode() for x in DOCS], np.uint8)
    one = tk.Tokens(path, eos="</s>").encode(lines)
    monkeypatch.setattr(tk, "PIECE_ROWS", 7)  # many pieces: the next one encodes while this one is read
    many = tk.Tokens(path, eos="</s>").encode(lines)
    assert one.to_pylist("sequence") == many.to_pylist("sequence")
    assert one.to_pylist("sequence") == [t.encode(x).ids + [t.token_to_id("</s>")] for x in DOCS]


def test_bucket_takes_the_markers_too(tmp_path):
    src = write(tmp_path / "t.txt", b"ab\n\ncde\n")
    out = str(tmp_path / "b")
    m = lc.bucket(src, out, to="parquet", num_buckets=1, layout="ragged", eos=0, bos="\t", progress=False)
    assert sorted(READERS["parquet"](out)["tokens"]) == sorted([[9, 97, 98, 0], [9, 0], [9, 99, 100, 101, 0]])
    assert m["bucketing"]["tokenizer"]["eos_id"] == 0 and m["bucketing"]["tokenizer"]["bos_id"] == 9


def test_a_tokenizer_files_padding_and_truncation_are_not_applied(tok, tmp_path):
    """A tokenizer.json saved with padding on padded every document to its piece's longest (the
    EOS after the pads); one saved with truncation cut every document without a word. Documents
    are tokenized whole, as Tokenizer.encode does without those settings, and a note says so."""
    import tokenizers

    from tests.readback import read_megatron

    path, plain = tok
    padded = tokenizers.Tokenizer.from_file(path)
    padded.enable_padding(pad_id=0, pad_token="[UNK]")
    padded.enable_truncation(max_length=3)
    p2 = str(tmp_path / "padded.json")
    padded.save(p2)
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", "megatron", "--tokenizer", p2, "--eos", "</s>", "-q")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == (
        "note: padded.json asks for padding and truncation, which is not applied: each document is tokenized whole "
        "(bucket --truncate cuts sequences, and counts them)\n"
    )
    eos = plain.token_to_id("</s>")
    want = [plain.encode(d).ids + [eos] for d in DOCS]
    assert [list(x) for x in read_megatron(out)["tokens"]] == want
    assert manifest(out)["tokenizer"]["settings_not_applied"] == ["padding", "truncation"]
    # bucket said nothing (the docs say a note does): padded and packed layouts
    for opts in (["--num-buckets", "2"], ["--layout", "packed", "--seq-len", "8"]):
        out = str(tmp_path / f"b{len(opts)}")
        r = lovecraft("bucket", str(src), "-o", out, "--to", "parquet", "--tokenizer", p2, "--eos", "</s>", "-q", *opts)
        assert r.exit_code == 0, r.stderr
        assert r.stderr.startswith(
            "note: padded.json asks for padding and truncation, which is not applied: each document is tokenized "
            "whole (bucket --truncate cuts sequences, and counts them)\n"
        ), r.stderr
        assert manifest(out)["notes"] == [r.stderr.splitlines()[0][len("note: ") :]]


def test_chars_of_a_binary_column_that_is_not_utf8_stay_in_their_document(tmp_path):
    """chars counted characters by their first bytes: a lone 0x93 (cp1252's quote) is one U+FFFD
    and no first byte, so every later document began a character early and the last lost its
    tail (verify --against said ok). Each such row is decoded alone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [b"\x93quoted\x94 \xa3 5", b"hello", b"ab\x80cd", b"world"]
    src = tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": pa.array(rows, pa.binary())}), src)
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", "parquet", "--tokenizer", "chars", "-q")
    assert r.exit_code == 0, r.stderr
    got = ["".join(map(chr, x)) for x in read_back(out, "parquet")["tokens"]]
    assert got == [b.decode("utf-8", "replace") for b in rows]
    assert lovecraft("verify", out, "--against", str(src)).exit_code == 0


def test_markers_of_unicode_digits_and_documents_all_empty(tmp_path):
    """--eos '²' passed isdigit() and broke int() (a traceback); bucket of documents all empty
    divided by zero in its summary (a traceback after writing)."""
    src = tmp_path / "e.jsonl"
    src.write_text('{"text": "a²b"}\n{"text": ""}\n')
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", "parquet", "--tokenizer", "chars", "--eos", "²", "-q")
    assert r.exit_code == 0, r.stderr
    assert [list(x) for x in read_back(out, "parquet")["tokens"]] == [[97, 178, 98, 178], [178]]
    empty = tmp_path / "z.jsonl"
    empty.write_text('{"text": ""}\n{"text": ""}\n')
    r = lovecraft("bucket", str(empty), "-o", str(tmp_path / "b"), "--to", "memmap", "--num-buckets", "2",
                  "--tokenizer", "bytes")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    # one bucket of width 1 (every bucket is at least one wide), which one bucket would be too: none saved
    assert "1 bucket, boundaries 1; padding efficiency 0.0% (one bucket: 0.0%), 0 padded tokens saved" in r.stderr


def test_a_pad_id_that_is_no_integer_and_a_marker_beyond_the_vocabulary_are_one_line(tok, tmp_path):
    """--pad-id nan (or inf) was a traceback (int() of NaN); --eos 99999 with a tokenizer.json of
    a few hundred ids was taken silently, every document ending in an id no embedding row has (and
    the tokens widened to int32); --eos=-1 was 'not in the vocabulary ... or an integer id'. Found
    by an outside trial."""
    path, _ = tok
    src = write(tmp_path / "c.txt", b"hello world\nfoo\n")
    base = ["bucket", str(src), "-o", str(tmp_path / "o"), "--to", "memmap", "--boundaries", "2,4", "--tokenizer", path]
    for pad in ("nan", "inf"):
        r = lovecraft(*base, "--pad-id", pad)
        assert (r.exit_code, r.stderr) == (1, f"Error: --pad-id {pad}: token ids are integers\n")
    vocab = tk.load_tokenizer(path).vocab_size
    r = lovecraft(*base, "--eos", "99999")
    assert r.exit_code == 2 and r.stderr.startswith(
        f"Error: --eos 99999: beyond the vocabulary of {os.path.basename(path)} (ids 0 to {vocab - 1}); give a token "
        "or an id of it"
    ), r.stderr
    r = lovecraft(*base, "--eos=-1")
    assert (r.exit_code, r.stderr) == (2, "Error: --eos -1: token ids are 0 to 2147483647\n")
    assert not os.path.exists(tmp_path / "o")
