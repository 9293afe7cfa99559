"""``verify --against`` of bucketed datasets: the source re-read as ``bucket`` reads it (ragged CSV
rows, text through the bytes tokenizer, a dataset's text column), the same sequences dropped or
truncated, compared with the rows' first ``length`` values as multisets; a changed source is one
line naming it; a packed dataset is refused in one line (exit 2)."""

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


def test_a_packed_dataset_is_refused_in_one_line(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_text("".join(f"line {i}\n" for i in range(500)))
    out = str(tmp_path / "out")
    r = lovecraft("bucket", str(src), "-o", out, "--to", "memmap", "--layout", "packed", "--seq-len", "16", "-q")
    assert r.exit_code == 0, r.stderr
    r = lovecraft("verify", out, str(src), "--against", "-q")
    assert (r.exit_code, r.stdout, r.stderr) == (
        2,
        "",
        f"Error: {out}: verify --against cannot compare a packed dataset with its source (its rows are cut from "
        "the concatenated token stream, not one per sequence); verify it without --against\n",
    )
