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
