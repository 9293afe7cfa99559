"""What ``inspect`` says: with ``--tokenizer`` a text column's lengths, suggested buckets and plot
are in tokens, as ``bucket`` counts them (its boundaries are bucket's own); a bucketed dataset is
shown bucket by bucket with the code that loads its dense files; options as flags give them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import lovecraft

WORDS = [f"w{i}" for i in range(300)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    d = tmp_path_factory.mktemp("tok")
    tok = tokenizers.Tokenizer(models.WordLevel({"<EOT>": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}, "<EOT>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = str(d / "tokenizer.json")
    tok.save(path)
    rng = np.random.default_rng(5)
    lines = [" ".join(rng.choice(WORDS, size=int(n))) for n in rng.integers(1, 60, size=700)]
    src = d / "corpus.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(lines)))
    return str(src), path, lines


def test_lengths_in_tokens_as_bucket_counts_them(corpus, tmp_path):
    src, tok, lines = corpus
    r = lovecraft("inspect", src, "--tokenizer", tok, "--eos", "<EOT>", "--num-buckets", "3", "--json")
    assert r.exit_code == 0, r.stderr
    col = next(c for c in json.loads(r.stdout)["columns"] if c["name"] == "text")
    words = sorted(len(t.split()) + 1 for t in lines)  # a token a word, and the <EOT>
    assert col["length_unit"] == "tokens" and col["tokenizer"]["vocab_size"] == 301
    assert (col["lengths"]["min"], col["lengths"]["max"]) == (words[0], words[-1])
    out = str(tmp_path / "b")
    r = lovecraft(
        "bucket", src, "-o", out, "--to", "parquet", "--tokenizer", tok, "--eos", "<EOT>", "--num-buckets", "3", "-q"
    )
    assert r.exit_code == 0, r.stderr
    m = json.loads((tmp_path / "b" / "_manifest.json").read_text())
    assert col["lengths"]["buckets"]["boundaries"] == m["bucketing"]["boundaries"]
    text = lovecraft("inspect", src, "--tokenizer", tok, "-q").stdout
    assert "  length (tokens): min" in text and "column 'id': int64" in text
    plain = lovecraft("inspect", src, "-q").stdout
    assert "  length (bytes): min" in plain


def test_sizes_with_a_tokenizer_are_those_of_the_tokens_convert_writes(corpus, tmp_path):
    """With --tokenizer, the size per format was that of the text (Megatron: "cannot hold these
    columns", though convert --tokenizer --to megatron writes it): it is now that of the tokens
    alone, as convert --tokenizer writes them; the whole input is sampled here, so the figures are
    the files' bytes (memmap's headers within a few hundred bytes)."""
    src, tok, _ = corpus
    r = lovecraft("inspect", src, "--tokenizer", tok, "--eos", "<EOT>", "--json")
    assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["estimated_of"] == "tokens"
    for fmt in ("megatron", "parquet", "memmap"):
        out = tmp_path / fmt
        r = lovecraft("convert", src, "-o", str(out), "--to", fmt, "--tokenizer", tok, "--eos", "<EOT>", "-q")
        assert r.exit_code == 0, r.stderr
        written = sum(p.stat().st_size for p in out.iterdir() if p.name != "_manifest.json")
        assert abs(report["estimated_bytes"][fmt] - written) <= 0.01 * written, (fmt, written)
    text = lovecraft("inspect", src, "--tokenizer", tok, "-q").stdout
    assert "; of the tokens alone, as convert --tokenizer writes them):" in text
    assert "cannot hold" not in text


def test_a_plot_in_tokens(corpus, tmp_path):
    pytest.importorskip("matplotlib")
    src, tok, _ = corpus
    png = str(tmp_path / "lengths.png")
    r = lovecraft("inspect", src, "--tokenizer", tok, "--plot", png, "-q")
    assert r.exit_code == 0, r.stderr
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_tokenizer_flags_without_a_tokenizer_or_a_text_column(corpus, tmp_path):
    src, tok, _ = corpus
    r = lovecraft("inspect", src, "--column", "text")
    assert (r.exit_code, r.stderr) == (
        2,
        "Error: --column goes with --tokenizer; add --tokenizer bytes|chars|tokenizer.json\n",
    )
    r = lovecraft("inspect", src, "--tokenizer", tok, "--column", "id")
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {src}, column 'id': holds int64, not text; --tokenizer reads a text column")


def test_a_bucketed_memmap_dataset_bucket_by_bucket(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_text("".join(f"{'x' * (1 + i % 50)}\n" for i in range(600)))
    out = str(tmp_path / "b")
    r = lovecraft("bucket", str(src), "-o", out, "--to", "memmap", "--num-buckets", "3", "-q")
    assert r.exit_code == 0, r.stderr
    m = json.loads((tmp_path / "b" / "_manifest.json").read_text())
    text = lovecraft("inspect", out).stdout
    b = m["bucketing"]
    assert f"buckets: 3 (boundaries {','.join(map(str, b['boundaries']))}, padded layout; padding efficiency" in text
    for bk in m["buckets"]:
        assert f"  bucket {bk['index']}: lengths {bk['min_length']}..{bk['max_length']}, {bk['rows']} rows, " in text
    assert "shards:" not in text and "  0: " not in text  # not three shards all numbered 0
    assert "tokens_values[tokens_offsets[i]" not in text  # the files are dense
    assert "each bucket's 'tokens' is [rows, its max_length], padded with 0" in text
    scope: dict = {}
    code = text.split("load with numpy:\n", 1)[1].split("\n\n", 2)
    exec("\n".join(line[4:] for line in "\n\n".join(code[:2]).splitlines()), scope)  # the code as printed
    assert [a.shape for a in scope["tokens"]] == [(bk["rows"], bk["max_length"]) for bk in m["buckets"]]
    r = lovecraft("bucket", str(src), "-o", str(tmp_path / "s"), "--to", "memmap", "--num-buckets", "2",
                  "--rows-per-shard", "200", "-q")  # fmt: skip
    text = lovecraft("inspect", str(tmp_path / "s")).stdout
    assert "rows in 2 shards" in text and "    shard 1: " in text


def test_options_as_flags_give_them(tmp_path):
    src = tmp_path / "d.csv"
    src.write_text("zip,price\n08123,1.5\n")
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", "parquet", "--column-type", "zip=string", "-q")
    assert r.exit_code == 0, r.stderr
    text = lovecraft("inspect", out).stdout
    options = next(line for line in text.splitlines() if line.startswith("options: "))
    assert "column_types=zip=string" in options and "max_memory=256.0MiB" in options and "{" not in options


def test_an_arrow_files_codec_and_its_record_batches_are_named(tmp_path):
    """A Feather file (lz4 by default) and an Arrow file of zstd bodies were reported 'not
    compressed'; four record batches were '4 record batchs' (found by an outside trial)."""
    import pyarrow as pa
    import pyarrow.feather as feather
    import pyarrow.ipc as ipc

    t = pa.table({"a": list(range(4000))})
    feather.write_feather(t, tmp_path / "f.feather", chunksize=1000)
    with ipc.new_stream(tmp_path / "z.arrows", t.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(t)
    with ipc.new_file(tmp_path / "u.arrow", t.schema) as w:
        w.write_table(t.slice(0, 10))
    lines = {
        n: lovecraft("inspect", str(tmp_path / n)).stdout.splitlines()[0].removeprefix(f"{tmp_path}/")
        for n in ("f.feather", "z.arrows", "u.arrow")
    }
    assert lines["f.feather"].startswith("f.feather: arrow, lz4-compressed inside, ")
    assert lines["f.feather"].endswith(", 4 record batches")
    assert lines["z.arrows"].startswith("z.arrows: arrow, zstd-compressed inside, ")
    assert lines["u.arrow"].startswith("u.arrow: arrow, not compressed, ") and lines["u.arrow"].endswith(
        ", 1 record batch"
    )


def test_missing_lists_and_missing_elements_are_counted_apart(tmp_path):
    """A list<float> column of 2 missing lists and 3 missing elements said '5 nulls' (found by an
    outside trial): the lists are read as empty, the elements as NaN, each counted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ln = [None, [1.0, None], [2.0], None, [None, None, 3.0]]
    pq.write_table(pa.table({"ln": pa.array(ln, pa.list_(pa.float32()))}), tmp_path / "l.parquet")
    r = lovecraft("inspect", str(tmp_path / "l.parquet"))
    assert "  input type list<element: float>; 2 nulls (read as empty lists), 3 null elements\n" in r.stdout
    c = json.loads(lovecraft("inspect", str(tmp_path / "l.parquet"), "--json").stdout)["columns"][0]
    assert (c["nulls"], c["null_elements"]) == (2, 3)
