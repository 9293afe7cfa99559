"""``verify --against`` of a filtered or deduplicated dataset: the source is read with the recorded
``--filter`` and ``--dedup`` (decided again from the source), so the dataset is checked as the exact
subset they leave, row by row (or as a multiset when shuffled), and the rows removed per reason
must be those the manifest records."""

from __future__ import annotations

import json
import shutil

import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft


def _source(path, rows: int = 3_000, extra: list[dict] | None = None) -> str:
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps({"text": f"t{i % 700}", "n": i % 5}) + "\n")
        for r in extra or []:
            f.write(json.dumps(r) + "\n")
    return str(path)


@pytest.mark.parametrize(
    "command",
    [
        ["convert"],
        ["shard", "--num-shards", "3", "--workers", "1"],
        ["shard", "--num-shards", "3", "--shuffle", "--seed", "1", "--workers", "1"],
    ],
    ids=["convert", "shard", "shuffled"],
)
def test_a_kept_subset_verifies(tmp_path, command):
    src = _source(tmp_path / "src.jsonl")
    out = str(tmp_path / "out")
    r = lovecraft(*command, src, "-o", out, "--to", "parquet", "--filter", "n != 3", "--dedup", "exact", "-q",
                  "--dedup-columns", "text")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    report = lc.verify(out, against=[src])
    assert report.lines() == []
    assert report.against["complete"] is True
    assert report.against["rows_compared"] == lc.open_dataset(out).manifest["rows"] < 3_000


def test_a_source_with_one_more_duplicate_is_found(tmp_path):
    """A duplicate appended to the source leaves the same kept rows: the counts tell them apart."""
    src = _source(tmp_path / "src.jsonl")
    out = str(tmp_path / "out")
    assert lovecraft("convert", src, "-o", out, "--to", "parquet", "--dedup", "exact", "-q").exit_code == 0
    more = _source(tmp_path / "more.jsonl", extra=[{"text": "t1", "n": 1}])
    r = lovecraft("verify", out, more, "--against", "-q")
    assert (r.exit_code, r.stdout) == (
        1,
        f"{out}/_manifest.json: records 2300 by --dedup removed, the source gives 2301 by --dedup\n",
    )


def test_a_source_with_one_more_row_is_found(tmp_path):
    src = _source(tmp_path / "src.jsonl")
    out = str(tmp_path / "out")
    assert lovecraft("convert", src, "-o", out, "--to", "parquet", "--filter", "n < 4", "-q").exit_code == 0
    more = _source(tmp_path / "more.jsonl", extra=[{"text": "new", "n": 0}])
    r = lovecraft("verify", out, more, "--against", "-q")
    assert r.exit_code == 1
    assert r.stdout.splitlines()[-1] == f"{more}: holds 2401 rows, the dataset 2400"


def test_the_report_file_is_not_written_again(tmp_path):
    src = _source(tmp_path / "src.jsonl")
    out = str(tmp_path / "out")
    report = tmp_path / "report.jsonl"
    assert lovecraft("convert", src, "-o", out, "--to", "parquet", "--dedup", "exact", "--dedup-report", str(report),
                     "-q").exit_code == 0  # fmt: skip
    shutil.move(report, tmp_path / "kept.jsonl")
    assert lc.verify(out, against=[src]).lines() == []
    assert not report.exists()


@pytest.mark.parametrize(
    "layout", [["--layout", "ragged", "--num-buckets", "2"], ["--layout", "packed", "--seq-len", "8"]]
)
def test_a_bucketed_subset_verifies_and_its_counts_are_checked(tmp_path, layout):
    src = _source(tmp_path / "src.jsonl")
    out = str(tmp_path / "out")
    r = lovecraft("bucket", src, "-o", out, "--to", "parquet", *layout, "--filter", "n != 3", "--dedup", "exact", "-q")
    assert r.exit_code == 0, r.stderr
    assert lc.verify(out, against=[src]).lines() == []
    more = _source(tmp_path / "more.jsonl", extra=[{"text": "t1", "n": 1}])  # one more duplicate: same rows
    r = lovecraft("verify", out, more, "--against", "-q")
    assert r.exit_code == 1
    assert r.stdout.splitlines() == [
        f"{out}/_manifest.json: records 1840 by --dedup, 600 by --filter removed, the source gives 1841 by --dedup, "
        "600 by --filter"
    ]
