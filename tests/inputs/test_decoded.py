"""Record batches of Parquet and Arrow inputs bounded by what they decode to, as they are decoded
(issue 38, point 10). A 511-byte Parquet file (one row group of 5,048 rows, a dictionary of ``"a"``
and one 512 KiB string, the first 2,048 rows ``"a"``) was SIGKILLed under a 512 MiB cap in
``convert`` and ``inspect``: batches were sized from the first 1,024 rows. An 866-byte Arrow IPC
file with zstd buffers likewise. Now rows are cut by their decoded bytes (dictionary value lengths
and indices), pages and compressed buffers are sized from their headers before anything is
decompressed, and what cannot fit is refused in one line."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from lovecraft_convert.inputs.ipcmeta import file_batches, stream_batches
from lovecraft_convert.inputs.parquetpages import pages
from tests.conftest import SHARED, SUBPROCESS_ENV, leftovers, lovecraft, memcapped

MEMCAP = os.path.join(SHARED, "tools", "memcap")
BIG = "x" * (512 << 10)


def _dictionary_bomb(rows: int = 5048, first: int = 2048):
    idx = np.zeros(rows, dtype=np.int32)
    idx[first:] = 1
    return pa.table({"s": pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(["a", BIG]))})


def _bombs(d) -> dict[str, str]:
    t = _dictionary_bomb()
    kept, dense, arrow = str(d / "kept.parquet"), str(d / "dense.parquet"), str(d / "bomb.arrow")
    pq.write_table(t, kept, compression="zstd", row_group_size=5048, data_page_size=1 << 30)
    pq.write_table(t, dense, compression="zstd", row_group_size=5048, data_page_size=1 << 30, store_schema=False)
    with ipc.new_file(arrow, t.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(t)
    assert (os.path.getsize(kept), os.path.getsize(arrow)) == (511, 866)  # the issue's files
    return {"parquet kept dictionary": kept, "parquet read dense": dense, "arrow zstd": arrow}


# -- the metadata readers, against pyarrow ------------------------------------------------------


@pytest.mark.parametrize("kind", ["file", "stream"])
@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_ipc_metadata_gives_each_batch_rows_and_decoded_bytes(tmp_path, kind, compression):
    t = pa.table({
        "a": np.arange(10_000),
        "s": [f"x{i}" * 3 for i in range(10_000)],
        "d": pa.array(["p", "q"] * 5_000).dictionary_encode(),
        "l": [[1.0, 2.0]] * 10_000,
    })  # fmt: skip
    p = str(tmp_path / "t.arrow")
    new = ipc.new_file if kind == "file" else ipc.new_stream
    with new(p, t.schema, options=ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_table(t, max_chunksize=3000)
    with open(p, "rb") as f:
        got = (file_batches if kind == "file" else stream_batches)(f, os.path.getsize(p))
    batches, dictionaries = got
    assert [b.rows for b in batches] == [3000, 3000, 3000, 1000]
    assert len(dictionaries) == 1 and all(b.compressed == (compression or "") for b in batches)  # the codec
    reader = ipc.open_file(p) if kind == "file" else ipc.open_stream(p)
    read = [reader.get_batch(i) for i in range(reader.num_record_batches)] if kind == "file" else list(reader)
    for b, rb in zip(batches, read, strict=True):
        assert abs(b.decoded - rb.nbytes) <= 0.01 * rb.nbytes  # (buffer lengths against pyarrow's count)


def test_ipc_metadata_sees_through_zstd(tmp_path):
    p = str(tmp_path / "dense.arrow")
    rb = pa.record_batch([pa.array([BIG] * 64, pa.large_string())], names=["s"])
    with ipc.new_file(p, rb.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_batch(rb)
    assert os.path.getsize(p) < 64 << 10
    with open(p, "rb") as f:
        (b,), _ = file_batches(f, os.path.getsize(p))
    assert b.decoded >= 64 * len(BIG)


def test_parquet_page_headers_are_walked_to_the_chunks_end(tmp_path):
    p = str(tmp_path / "t.parquet")
    rng = np.random.default_rng(0)
    t = pa.table({"x": rng.normal(size=200_000), "s": [f"value {i}" for i in range(200_000)]})
    pq.write_table(t, p, data_page_size=64 << 10, compression="zstd")
    col = pq.ParquetFile(p).metadata.row_group(0).column(1)
    with open(p, "rb") as f:

        def read(offset, n):
            f.seek(offset)
            return f.read(n)

        start = col.dictionary_page_offset or col.data_page_offset
        found = list(pages(read, start, col.total_compressed_size))
    assert len(found) > 4 and found[0][1] == 2  # a dictionary page, then data pages
    assert sum(size for _, _, size in found) <= col.total_uncompressed_size


# -- refusals, in one line, before anything is decompressed --------------------------------------


def test_a_parquet_page_larger_than_the_budget_allows_is_refused_by_its_header(tmp_path):
    src = str(tmp_path / "page.parquet")
    pq.write_table(pa.table({"s": [BIG] * 10}), src, compression="zstd", use_dictionary=False, data_page_size=1 << 30)
    assert os.path.getsize(src) < 16 << 10
    message = re.compile(
        re.escape(f"Error: {src}, row group 0, column 's': a page decodes to ")
        + r"52429\d\d"  # (10 strings of 512 KiB, their lengths and the page's levels)
        + re.escape(
            " bytes, more than a batch may take under this memory budget (4194304); raise --max-memory (a page must "
            "fit in 4/16 of it), or re-write the file with smaller pages (pyarrow: write_table(..., "
            "data_page_size=BYTES))\n"
        )
    )
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "memmap", "--max-memory", "16MiB")
    assert r.exit_code == 1 and message.fullmatch(r.stderr), r.stderr
    r = lovecraft("inspect", src, "--max-memory", "16MiB")
    assert r.exit_code == 1 and message.fullmatch(r.stderr), r.stderr
    assert leftovers(tmp_path) == []


def test_a_compressed_arrow_batch_larger_than_the_budget_allows_is_refused_by_its_metadata(tmp_path):
    src = str(tmp_path / "dense.arrow")
    rb = pa.record_batch([pa.array([BIG] * 10, pa.large_string())], names=["s"])
    with ipc.new_file(src, rb.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_batch(rb)
    message = (
        f"Error: {src}, record batch 0: its compressed buffers decode to 5242968 bytes, more than a batch may take "
        "under this memory budget (4194304); raise --max-memory (a record batch must fit in 4/16 of it), or "
        "re-write the file in smaller record batches (pyarrow: write_table(..., max_chunksize=ROWS))\n"
    )
    for args in (["convert", src, "-o", str(tmp_path / "out"), "--to", "parquet"], ["inspect", src]):
        r = lovecraft(*args, "--max-memory", "16MiB")
        assert (r.exit_code, r.stderr) == (1, message)


def test_a_row_decoding_to_more_than_the_budget_allows_is_refused_naming_it(tmp_path):
    """A dictionary of a memory-mapped (uncompressed) file costs nothing until decoded: the row
    that would decode to 5 MiB under a 16 MiB budget is named, with its column."""
    src = str(tmp_path / "row.arrow")
    big = "y" * (5 << 20)
    t = pa.table(
        {
            "n": np.arange(4),
            "s": pa.DictionaryArray.from_arrays(pa.array([0, 0, 1, 0], pa.int32()), pa.array(["a", big])),
        }
    )
    with ipc.new_file(src, t.schema) as w:
        w.write_table(t)
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet", "--max-memory", "16MiB")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, record batch 0, row 3, column 's': decodes to 5242888 bytes, more than a row may take under "
        "this memory budget (4194304); raise --max-memory (a row must fit in 4/16 of it), or leave the column out "
        "with --columns\n",
    )


# -- the issue's files, under the cap -------------------------------------------------------------


def _check_output(out: str) -> None:
    """5,048 rows: 2,048 ``"a"``, then the 512 KiB string (read back a few rows at a time)."""
    got = []
    for rb in pq.ParquetFile(os.path.join(out, "data.parquet")).iter_batches(batch_size=64):
        s = rb.column("s")
        got += [len(v) for v in s.cast(pa.large_binary()).to_pylist()] if len(s) else []
        assert set(s.slice(0, 1).to_pylist()) <= {"a", BIG}
    assert got == [1] * 2048 + [len(BIG)] * 3000


@pytest.mark.slow
@pytest.mark.parametrize("command", ["convert", "inspect"])
def test_the_issues_dictionary_bombs_under_a_512_mib_cap(tmp_path, command):
    if not os.access(MEMCAP, os.X_OK):
        pytest.skip(f"{MEMCAP} not found")
    lovecraft_bin = os.path.join(os.path.dirname(sys.executable), "lovecraft")
    for what, src in _bombs(tmp_path).items():
        out = str(tmp_path / f"out-{what.replace(' ', '-')}")
        args = ["-o", out, "--to", "parquet", "-q"] if command == "convert" else []
        r, peak = memcapped(
            MEMCAP, 512, [lovecraft_bin, command, src, "--max-memory", "256MiB", *args], env=SUBPROCESS_ENV, timeout=900
        )
        if r.returncode == 3:
            pytest.skip("memcap cannot make a memory cgroup here")
        print(f"\n{command} {what} ({os.path.getsize(src)} bytes): rc {r.returncode}, peak {peak} MiB (cap 512)")
        assert r.returncode == 0, f"{what}: rc {r.returncode} (137: killed for memory): {r.stderr[-2000:]}"
        if command == "convert":
            _check_output(out)
        else:
            assert "rows: 5,048" in r.stdout
