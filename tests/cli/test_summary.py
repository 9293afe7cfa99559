"""The summary lines for people: counts with thousands separated and singular or plural nouns
("wrote 1 row ... 1 file", "12,345 rows", "4 files"), in convert, bucket and verify."""

from __future__ import annotations

import re

from tests.conftest import lovecraft


def test_counts_read_as_people_write_them(tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("hello\n")
    r = lovecraft("convert", str(one), "-o", str(tmp_path / "a"), "--to", "parquet")
    assert r.exit_code == 0, r.stderr
    assert re.fullmatch(rf"wrote 1 row to {tmp_path}/a \(parquet, 1 file, [0-9.]+ (B|KiB)\) in [0-9.]+s\n", r.stderr)
    many = tmp_path / "many.txt"
    many.write_text("".join(f"line {i} {'x' * (i % 300)}\n" for i in range(12345)))
    r = lovecraft("bucket", str(many), "-o", str(tmp_path / "b"), "--to", "memmap", "--num-buckets", "4")
    assert r.exit_code == 0, r.stderr
    first, second = r.stderr.splitlines()
    assert first.startswith(f"wrote 12,345 rows to {tmp_path}/b (memmap, 8 files, ")
    saved = int(re.search(r"([0-9,]+) padded tokens saved", second).group(1).replace(",", ""))
    assert saved > 1000 and f"{saved:,} padded tokens saved" in second
    r = lovecraft("verify", str(tmp_path / "a"))
    assert r.stdout.startswith(f"ok: {tmp_path}/a: parquet, 1 row, 1 file, ")


def test_json_reports_failures_on_stdout_too(tmp_path):
    """A script that reads --json from stdout gets an object however the run ends: the summary
    with ok true, or ok false and the error (its line still on stderr, the exit code unchanged)."""
    import json

    src = tmp_path / "a.csv"
    src.write_text("x,y\n1,2\n3,oops\n")
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "a"), "--to", "parquet", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["ok"] is True and json.loads(r.stdout)["rows"] == 2
    missing = tmp_path / "missing.csv"
    for args in (
        ("convert", str(missing), "-o", str(tmp_path / "b"), "--to", "parquet", "--json"),
        ("shard", str(missing), "-o", str(tmp_path / "b"), "--to", "parquet", "--num-shards", "2", "--json"),
        ("inspect", str(missing), "--json"),
    ):
        r = lovecraft(*args)
        line = f"{missing}: no such file; check the path"
        assert (r.exit_code, r.stderr) == (1, f"Error: {line}\n")
        assert json.loads(r.stdout) == {"ok": False, "error": {"message": line, "kind": "input", "exit_code": 1}}
    r = lovecraft("verify", str(tmp_path / "nothing"), "--json")
    assert r.exit_code == 1
    assert json.loads(r.stdout)["error"]["kind"] == "dataset" and r.stderr.startswith("Error: ")
    # a flag without the one it goes with exits 2, and an unknown flag, as JSON too; without --json
    # stdout stays empty
    args = ("convert", str(src), "-o", str(tmp_path / "c"), "--to", "parquet", "--dedup-columns", "x")
    r = lovecraft(*args, "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["exit_code"] == 2, r.stdout
    r = lovecraft(*args)
    assert r.exit_code == 2 and r.stdout == ""
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "c"), "--to", "parquet", "--no-such-flag", "--json")
    assert r.exit_code == 2 and "No such option" in r.stderr
    error = json.loads(r.stdout)["error"]
    assert (error["kind"], error["exit_code"]) == ("usage", 2) and f"Error: {error['message']}" in r.stderr
