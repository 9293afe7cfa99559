"""Tokenizing while keeping other columns: ``--columns rownames`` keeps ``rownames`` beside the
tokens of the text column (``--column``, else ``text``), whatever the input kind. Readers that read
only the ``--columns`` (Parquet, JSON Lines) read the text column too: before, JSON Lines said
"pass --column NAME", then "no column 'text' to tokenize; columns are rownames", and Parquet
raised a KeyError. A marker the tokenizer lacks is refused naming the tokenizer's own special
tokens."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import lovecraft

TEXTS = ["hello world", "the quick brown fox", "", "naïve café"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The Rdatasets shape (a ``rownames`` column beside the text) as CSV, Parquet and JSON Lines."""
    d = tmp_path_factory.mktemp("rn")
    rows = [{"rownames": i + 1, "text": t, "score": i / 2} for i, t in enumerate(TEXTS)]
    (d / "rn.csv").write_text(
        "rownames,text,score\n" + "".join(f'{r["rownames"]},"{r["text"]}",{r["score"]}\n' for r in rows)
    )
    pq.write_table(pa.Table.from_pylist(rows), d / "rn.parquet")
    (d / "rn.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "body.jsonl").write_text(
        "".join(json.dumps({"rownames": r["rownames"], "body": r["text"]}) + "\n" for r in rows)
    )
    return d


@pytest.mark.parametrize("kind", ["csv", "parquet", "jsonl"])
@pytest.mark.parametrize("command", ["convert", "shard"])
@pytest.mark.parametrize("column", [[], ["--column", "text"]], ids=["default", "named"])
def test_columns_kept_beside_the_tokens(inputs, tmp_path, kind, command, column):
    out = str(tmp_path / "out")
    shard = ["--num-shards", "1"] if command == "shard" else []
    r = lovecraft(command, str(inputs / f"rn.{kind}"), "-o", out, "--to", "parquet", "--tokenizer", "bytes",
                  "--columns", "rownames", *column, *shard, "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    t = pq.read_table(out)
    assert t.column_names == ["tokens", "rownames"]  # tokens first unless --columns places them
    assert t.column("rownames").to_pylist() == [1, 2, 3, 4]
    assert [bytes(np.array(x, np.uint8)).decode() for x in t.column("tokens").to_pylist()] == TEXTS


def test_the_text_column_in_its_place_among_the_kept(inputs, tmp_path):
    out = str(tmp_path / "out")
    r = lovecraft("convert", str(inputs / "rn.jsonl"), "-o", out, "--to", "parquet", "--tokenizer", "bytes",
                  "--columns", "text,rownames", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert pq.read_table(out).column_names == ["tokens", "rownames"]


def test_another_text_column_by_name(inputs, tmp_path):
    out = str(tmp_path / "out")
    src = str(inputs / "body.jsonl")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "--tokenizer", "bytes", "--columns", "rownames", "-q")
    assert r.exit_code == 1
    assert r.stderr == (
        f"Error: {src}: no column 'text' to tokenize; columns in the first records are rownames, body; "
        "pass --column NAME\n"
    )
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "--tokenizer", "bytes", "--columns", "rownames",
                  "--column", "body", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert pq.read_table(out).column_names == ["tokens", "rownames"]


def test_a_marker_the_tokenizer_lacks_names_its_special_tokens(inputs, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    tok = tokenizers.Tokenizer(models.WordLevel({"<EOT>": 0, "<PAD>": 1, "hello": 2, "world": 3}, unk_token="<PAD>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<EOT>", "<PAD>"])
    path = str(tmp_path / "tokenizer.json")
    tok.save(path)
    src = str(inputs / "rn.csv")
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "--tokenizer", path, "--eos", "</s>")
    assert r.exit_code == 2
    assert r.stderr == (
        "Error: --eos '</s>': not in the vocabulary of tokenizer.json; its special tokens are '<EOT>', '<PAD>'; "
        "give one of them or an integer id\n"
    )
    plain = tokenizers.Tokenizer(models.WordLevel({"hello": 0, "[UNK]": 1}, unk_token="[UNK]"))
    plain.save(path)
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "--tokenizer", path, "--eos", "</s>")
    assert r.stderr == (
        "Error: --eos '</s>': not in the vocabulary of tokenizer.json; it has no special tokens; "
        "give a token of its vocabulary or an integer id\n"
    )
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "--tokenizer", path, "--eos", "1", "-q")
    assert r.exit_code == 0, r.stderr
