"""``verify --against`` of bucketed datasets: the source re-read as ``bucket`` reads it (ragged CSV
rows, text through the bytes tokenizer, a dataset's text column), the same sequences dropped or
truncated, compared with the rows' first ``length`` values as multisets; a changed source is one
line naming it; a packed dataset against the rows packing its source makes (in order, with their
documents' starts), or by its tokens when packed in a shuffled order."""

from __future__ import annotations

import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft

FORMATS = ("memmap", "hdf5", "parquet", "tfrecord")


def _ragged_csv(path, n: int = 2000, change: int | None = None) -> str:
    """Rows of 1 to 29 numbers; row ``change`` (if any) with its last number changed."""
    lines = []
    for i in range(n):
        row = [(i * 7 + k * 13) % 1000 for k in range(1 + i % 29)]
        if i == change:
            row[-1] += 1
        lines.append(",".join(map(str, row)))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "opts",
    [
        ["--num-buckets", "3"],
        ["--boundaries", "8,16", "--max-length", "16", "--truncate", "--layout", "ragged"],
        ["--boundaries", "10,20", "--drop-longer", "--min-length", "3"],
    ],
    ids=["padded", "ragged-truncated", "dropped"],
)
def test_a_bucketed_dataset_is_verified_against_its_source(tmp_path, fmt, opts):
    src = _ragged_csv(tmp_path / "rows.csv")
    out = str(tmp_path / "out")
    r = lovecraft("bucket", src, "-o", out, "--to", fmt, "--ragged", *opts, "--workers", "1", "-q")
    assert r.exit_code == 0, r.stderr
    rows = lc.open_dataset(out).manifest["rows"]
    report = lc.verify(out, against=[src])
    assert report.lines() == []
    assert report.against["mode"] == "multiset" and report.against["complete"] is True
    assert report.against["source_rows"] == report.against["rows_compared"] == rows
    assert report.against["source_digest"] == report.against["dataset_digest"]
    r = lovecraft("verify", out, src, "--against", "-q")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")


def test_a_changed_source_is_one_line(tmp_path):
    src = _ragged_csv(tmp_path / "rows.csv")
    out = str(tmp_path / "out")
    assert lovecraft("bucket", src, "-o", out, "--to", "parquet", "--ragged", "--num-buckets", "2", "-q").exit_code == 0
    changed = _ragged_csv(tmp_path / "changed.csv", change=1234)
    r = lovecraft("verify", out, changed, "--against", "-q")
    assert r.exit_code == 1 and r.stdout.count("\n") == 1, r.stdout
    assert r.stdout.startswith(
        f"{changed}: the dataset does not hold the same sequences (their order-independent digests differ: source "
    )
    longer = _ragged_csv(tmp_path / "longer.csv", n=2001)
    r = lovecraft("verify", out, longer, "--against", "-q")
    assert (r.exit_code, r.stdout) == (1, f"{longer}: gives 2001 sequences to bucket, the dataset holds 2000\n")


def test_text_and_a_dataset_column_through_the_tokenizer(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_text("".join(f"line {i} {'w' * (i % 31)}\n" for i in range(1500)))
    out = str(tmp_path / "out")
    assert lovecraft("bucket", str(src), "-o", out, "--to", "hdf5", "--num-buckets", "4", "-q").exit_code == 0
    assert lc.verify(out, against=[str(src)]).lines() == []
    ds = str(tmp_path / "ds")
    assert lovecraft("convert", str(src), "-o", ds, "--to", "parquet", "-q").exit_code == 0
    again = str(tmp_path / "again")
    assert lovecraft("bucket", ds, "-o", again, "--to", "memmap", "--num-buckets", "2", "-q").exit_code == 0
    assert lc.verify(again, against=[ds]).lines() == []
    other = tmp_path / "other.txt"
    other.write_text(src.read_text().replace("line 7 ", "line 8 "))
    assert len(lc.verify(out, against=[str(other)]).lines()) == 1


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("opts", [[], ["--pad-last", "--pad-id", "0", "--eos", "10"], ["--num-shards", "3"]],
                         ids=["dropped-tail", "pad-last", "shards"])  # fmt: skip
def test_a_packed_dataset_is_verified_against_its_source(tmp_path, fmt, opts):
    """Rows cut from the source's token stream in order, with their documents' starts: the same
    rows at the same places (an edited source, a shorter one, a document moved: one line)."""
    src = tmp_path / "lines.txt"
    src.write_text("".join(f"line {i} {'w' * (i % 37)}\n" for i in range(800)))
    out = str(tmp_path / "out")
    r = lovecraft("bucket", str(src), "-o", out, "--to", fmt, "--layout", "packed", "--seq-len", "16", *opts, "-q")
    assert r.exit_code == 0, r.stderr
    report = lc.verify(out, against=[str(src)])
    assert report.lines() == []
    assert report.against["mode"] == "packed rows" and report.against["complete"] is True
    assert report.against["source_rows"] == report.against["rows_compared"] == lc.open_dataset(out).manifest["rows"]
    r = lovecraft("verify", out, str(src), "--against", "-q")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")
    swapped = tmp_path / "swapped.txt"  # the same tokens, two documents in the other order
    lines = src.read_text().splitlines(keepends=True)
    lines[3], lines[4] = lines[4], lines[3]
    swapped.write_text("".join(lines))
    r = lovecraft("verify", out, str(swapped), "--against", "-q")
    assert r.exit_code == 1 and r.stdout.count("\n") == 1, r.stdout
    assert r.stdout.startswith(f"{swapped}: the dataset's rows are not the source's tokens packed in order")


def test_a_packed_dataset_of_another_source_is_one_line(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_text("".join(f"line {i}\n" for i in range(500)))
    out = str(tmp_path / "out")
    r = lovecraft("bucket", str(src), "-o", out, "--to", "parquet", "--layout", "packed", "--seq-len", "16", "-q")
    assert r.exit_code == 0, r.stderr
    short = tmp_path / "short.txt"
    short.write_text("".join(f"line {i}\n" for i in range(400)))
    r = lovecraft("verify", out, str(short), "--against", "-q")
    assert r.exit_code == 1
    tokens = [sum(len(f"line {i}") for i in range(n)) for n in (400, 500)]  # the bytes tokenizer: a token a byte
    assert f"{short}: packs into {tokens[0] // 16} rows of 16 tokens, the dataset holds {tokens[1] // 16}\n" in r.stdout


def test_a_shuffled_packed_dataset_is_compared_by_its_tokens(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_text("".join(f"line {i} {'w' * (i % 37)}\n" for i in range(800)))
    out = str(tmp_path / "out")
    r = lovecraft("bucket", str(src), "-o", out, "--to", "parquet", "--layout", "packed", "--seq-len", "16",
                  "--shuffle", "--seed", "3", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    report = lc.verify(out, against=[str(src)])
    assert report.lines() == [] and report.against["mode"] == "tokens"
    other = tmp_path / "other.txt"
    other.write_text(src.read_text().replace("line 7 ", "lime 7 "))
    r = lovecraft("verify", out, str(other), "--against", "-q")
    assert r.exit_code == 1 and r.stdout.count("\n") == 1, r.stdout


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_a_tokenizer_file_given_relative_is_found_from_anywhere(tmp_path, monkeypatch, layout):
    """bucket --tokenizer tokenizer.json (relative) records the file's absolute path in its
    bucketing (or packing) section; verify --against looked for it only in a top-level tokenizer
    section, so it read the relative name and failed from another directory ("--tokenizer
    tokenizer.json: no such file"). Found by an outside trial of the docs."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    work = tmp_path / "bk"
    work.mkdir()
    words = [f"w{i}" for i in range(50)]
    tok = tokenizers.Tokenizer(models.WordLevel({"<EOT>": 0, **{w: i + 1 for i, w in enumerate(words)}}, "<EOT>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(work / "tokenizer.json"))
    (work / "corpus.txt").write_text("".join(" ".join(words[: 1 + i % 40]) + "\n" for i in range(300)))
    monkeypatch.chdir(work)
    opts = ["--num-buckets", "3"] if layout == "padded" else ["--layout", "packed", "--seq-len", "32"]
    r = lovecraft("bucket", "corpus.txt", "-o", "out", "--to", "parquet", "--tokenizer", "tokenizer.json",
                  "--eos", "<EOT>", "-q", *opts)  # fmt: skip
    assert r.exit_code == 0, r.stderr
    monkeypatch.chdir(tmp_path)
    r = lovecraft("verify", "bk/out", "--against", "bk/corpus.txt")
    assert r.exit_code == 0, (r.stdout, r.stderr)
