"""Each user mistake: its exact one-line message, its exit code, and nothing left at the output."""

from __future__ import annotations

import gzip
import io
import os

import numpy as np
import pytest
import zstandard

from tests.conftest import leftovers, lovecraft


def _npy(a, **kw) -> bytes:
    b = io.BytesIO()
    np.save(b, a, **kw)
    return b.getvalue()


GZ = gzip.compress(b"a,b\n" + b"1,2\n" * 1000, mtime=0)
ZST = zstandard.ZstdCompressor().compress(b"hello\n" * 10000)

CASES = {
    "missing file": (None, "nope.csv", [], "Error: {d}/nope.csv: no such file; check the path"),
    "unknown input format": (b"a,b\n", "data.weird", [], "Error: {d}/data.weird: cannot tell the input format from its name or content; pass --input-format text, csv, jsonl, json, npy, npz, hdf5, parquet, arrow, hf, dataset, files or webdataset"),
    "ragged csv row": (b"a,b\n1,2\n3\n5,6\n", "r.csv", [], "Error: {d}/r.csv, row 2 (line 3): expected 2 fields, found 1; fix the row (is a quote unbalanced or a delimiter missing?)"),
    "non-numeric value in a numeric column": (b"a,b\n1,2\n3,abc\n", "n.csv", ["--column-type", "b=float32"], "Error: {d}/n.csv, row 2 (line 3), column 'b': 'abc' is not a valid float32; fix the value or choose another --column-type"),
    "empty csv": (b"", "e.csv", [], "Error: {d}/e.csv: empty input (no header, no rows); check the file"),
    "empty text": (b"", "e.txt", [], "Error: {d}/e.txt: empty input (no lines); check the file"),
    "header only": (b"a,b\n", "h.csv", [], "Error: {d}/h.csv: no data rows (header only); check the file"),
    "truncated npy": (_npy(np.arange(100.0))[:-10], "t.npy", [], "Error: {d}/t.npy: truncated: header declares shape (100,) float64 (800 data bytes) but the file holds 790; re-create the file"),
    "npy with trailing garbage": (_npy(np.arange(100.0)) + b"xx", "g.npy", [], "Error: {d}/g.npy: 2 bytes of trailing garbage after the declared data; re-create the file"),
    "npy holding python objects": (_npy(np.array([{"a": 1}, None], dtype=object), allow_pickle=True), "o.npy", [], "Error: {d}/o.npy: holds Python objects (dtype object); refusing to unpickle; save it with a numeric or fixed-width string dtype"),
    "invalid utf-8": (b"ok\nbad \xff here\n", "b.txt", [], "Error: {d}/b.txt, line 2: invalid UTF-8 (invalid start byte at byte 5 of the line); fix the file or pass --errors replace"),
    "corrupt gzip": (GZ[:20] + bytes([GZ[20] ^ 0xFF]) + GZ[21:], "c.csv.gz", [], "Error: {d}/c.csv.gz: corrupt gzip stream after 48 compressed bytes (Error -3 while decompressing data: invalid bit length repeat); re-create or re-download the file"),
    "truncated gzip": (GZ[: len(GZ) // 2], "t.csv.gz", [], "Error: {d}/t.csv.gz: truncated gzip stream after 24 compressed bytes (Compressed file ended before the end-of-stream marker was reached); re-create or re-download the file"),
    "truncated zstd": (ZST[: len(ZST) // 2], "t.txt.zst", [], "Error: {d}/t.txt.zst: truncated zstd stream (ends inside a frame); re-create or re-download the file"),
    "--skip-rows past the end": (b"meta\na,b\n", "s.csv", ["--skip-rows", "3"], "Error: {d}/s.csv: --skip-rows 3 skips past the end of the input (it has 2 lines); check --skip-rows"),
    "empty directory as input": ("dir", "adir", [], "Error: {d}/adir: holds no files; check the path"),
    "float16 overflow": (_npy(np.array([1.0, 7e4], dtype=np.float32)), "big.npy", ["--dtype", "float16"], "Error: {d}/big.npy, row 2, column 'big': value 70000.0 overflows float16 (max 65504.0); scale the data, keep a wider type, or pass --on-overflow clip"),
    "npy files of unequal length": ("two", "x.npy", [], "Error: inputs have different numbers of rows ({d}/x.npy: 3, {d}/y.npy: 2); give .npy files of equal length"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_error(tmp_path, case):
    content, name, extra, expected = CASES[case]
    d = str(tmp_path)
    src = os.path.join(d, name)
    inputs = [src]
    if content == "dir":
        os.mkdir(src)
    elif content == "two":
        np.save(src, np.arange(3))
        np.save(os.path.join(d, "y.npy"), np.arange(2))
        inputs.append(os.path.join(d, "y.npy"))
    elif content is not None:
        with open(src, "wb") as f:
            f.write(content)
    out = os.path.join(d, "out")
    to = [] if "--to" in extra else ["--to", "parquet"]
    r = lovecraft("convert", *inputs, "-o", out, *to, *extra, "-q")
    assert (r.exit_code, r.stderr) == (1, expected.format(d=d) + "\n")
    assert r.stdout == ""
    assert not os.path.exists(out)
    assert leftovers(d) == []


def test_existing_output(tmp_path):
    src = tmp_path / "a.csv"
    src.write_text("a\n1\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {out}: output already exists; pass --overwrite to replace it or choose another path\n",
    )
    assert os.listdir(out) == ["keep.txt"]
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "parquet", "-q", "--overwrite")
    assert r.exit_code == 0
    assert sorted(os.listdir(out)) == ["_manifest.json", "data.parquet"]
    assert leftovers(tmp_path) == []


def test_output_would_replace_input(tmp_path):
    src = tmp_path / "a.csv"
    src.write_text("a\n1\n")
    r = lovecraft("convert", str(src), "-o", str(tmp_path), "--to", "parquet", "-q", "--overwrite")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {tmp_path}: the output would replace the input {src}; choose another output directory\n",
    )
    assert src.read_text() == "a\n1\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--to", "feather"], "Invalid value for '--to'"),
        (["--to", "parquet", "--dtype", "int8"], "Invalid value for '--dtype'"),
        (["--to", "parquet", "--column-type", "a"], "'a' is not NAME=TYPE"),
        (["--to", "parquet", "--column-type", "a=decimal"], "unknown type 'decimal'"),
        (["--to", "parquet", "--max-memory", "lots"], "not a size: 'lots'"),
        (["--to", "parquet", "--delimiter", "ab"], "'ab' must be one character"),
        (["--to", "parquet"], "Missing option '-o'"),
    ],
)
def test_bad_flags_exit_2(tmp_path, args, message):
    src = tmp_path / "a.csv"
    src.write_text("a\n1\n")
    out = [] if args == ["--to", "parquet"] else ["-o", str(tmp_path / "out")]
    r = lovecraft("convert", str(src), *out, *args)
    assert r.exit_code == 2
    assert message in r.stderr
    assert not (tmp_path / "out").exists()


def test_compression_not_offered_for_format(tmp_path):
    src = tmp_path / "a.csv"
    src.write_text("a\n1\n")
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "out"), "--to", "hdf5", "--compression", "zstd")
    assert (r.exit_code, r.stderr) == (
        2,  # an options error, like a bad flag
        "Error: --compression zstd is not offered for hdf5; choose gzip, lzf or none\n",
    )
