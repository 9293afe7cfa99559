"""Broken (and awkward) Parquet, Arrow, Hugging Face and dataset-directory inputs, made here: the
exact one-line message and exit code of ``convert`` and ``inspect``, or the rows read back; nothing
left behind (the corpus runner of :mod:`tests.corpus.test_broken_inputs`)."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from tests.corpus.test_broken_inputs import Case, _run_case

DAMAGED = "the file is damaged or not what its name says; re-create or re-download it"
NO_MAGIC = "cannot be read (Parquet magic bytes not found in footer. Either the file is corrupted or this is not a parquet file.)"


def _pq(table: pa.Table, **kw) -> bytes:
    b = io.BytesIO()
    pq.write_table(table, b, write_page_checksum=True, **kw)
    return b.getvalue()


def _file(name: str, data: bytes) -> Callable[[str], list[str]]:
    def make(d: str) -> list[str]:
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(data)
        return [p]

    return make


def _files(**named: bytes) -> Callable[[str], list[str]]:
    def make(d: str) -> list[str]:
        out = []
        for name, data in named.items():
            p = os.path.join(d, name.replace("_", ".", 1))
            with open(p, "wb") as f:
                f.write(data)
            out.append(p)
        return out

    return make


def _corrupt_page() -> bytes:
    """A checksummed, uncompressed file with one byte of the data page of column 'b' flipped."""
    data = bytearray(
        _pq(pa.table({"a": list(range(1000)), "b": list(range(1000))}), compression="none", use_dictionary=False)
    )
    col = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(0).column(1)
    at = col.data_page_offset + col.total_compressed_size - 100
    data[at] ^= 0xFF
    return bytes(data)


def _stream(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema) as w:
        w.write_table(table, max_chunksize=100)
    return sink.getvalue()


def _hf_state(files: list) -> Callable[[str], list[str]]:
    def make(d: str) -> list[str]:
        p = os.path.join(d, "hfds")
        os.mkdir(p)
        with open(os.path.join(p, "state.json"), "w") as f:
            json.dump({"_data_files": [{"filename": n} for n in files]}, f)
        with open(os.path.join(p, "dataset_info.json"), "w") as f:
            f.write("{}")
        return [p]

    return make


def _not_read(name: str, why: str) -> Callable[[dict], None]:
    """inspect describes the other columns (if any: a file none of whose columns it can read is
    described too) and lists this one as not read, with why."""

    def check(report: dict) -> None:
        left = {c["name"]: c for c in report["columns_not_read"]}
        assert why in left[name]["refused"], left
        assert name not in [c["name"] for c in report["columns"]]

    return check


def _check_nulls(out: str, cols: dict) -> None:
    assert list(np.asarray(cols["n"])[[0, 2]]) == [1.0, 3.0] and np.isnan(np.asarray(cols["n"])[1])
    assert list(cols["s"]) == ["x", "", "z"]


TABLE = pa.table({"n": pa.array([1, None, 3]), "s": pa.array(["x", None, "z"])})
CUT = _pq(TABLE)[:40]
MAP = _pq(pa.table({"m": pa.array([{"k": 1}], pa.map_(pa.string(), pa.int64())), "x": [1]}))
NESTED = _pq(pa.table({"ll": pa.array([[[1]]], pa.list_(pa.list_(pa.int32()))), "x": [1]}))
UNION = pa.table(
    {"u": pa.UnionArray.from_sparse(pa.array([0, 1], pa.int8()), [pa.array([1, 2]), pa.array(["a", "b"])])}
)
BIG = _pq(pa.table({"i": pa.array([None, -(2**60)], pa.int64())}))
STREAM = _stream(pa.table({"x": pa.array(range(1000))}))

CASES: dict[str, Case] = {
    "parquet empty": Case(_file("e.parquet", b""), "parquet", "Error: {d}/e.parquet: empty input (0 bytes, not a Parquet file); check the file"),
    "parquet truncated footer": Case(_file("t.parquet", CUT), "memmap", f"Error: {{d}}/t.parquet: {NO_MAGIC}; {DAMAGED}"),
    "parquet named so but text": Case(_file("x.parquet", b"id,name\n1,a\n" * 20), "hdf5", f"Error: {{d}}/x.parquet: {NO_MAGIC}; {DAMAGED}"),
    "parquet page checksum mismatch": Case(_file("c.parquet", _corrupt_page()), "tfrecord", f"Error: {{d}}/c.parquet, row group 0: cannot be read (could not verify page integrity, CRC checksum verification failed for page_ordinal 0); {DAMAGED}"),
    "parquet map column": Case(_file("m.parquet", MAP), "parquet", "Error: {d}/m.parquet, column 'm': holds map<string, int64 ('m')>, which lovecraft does not convert yet; leave it out with --columns, e.g. --columns x", inspect=_not_read("m", "holds map<string, int64")),
    "parquet map column left out": Case(_file("m.parquet", MAP), "hdf5", None, input_opts=["--columns", "x"]),
    "parquet list of lists": Case(_file("l.parquet", NESTED), "memmap", "Error: {d}/l.parquet, column 'll': holds list<element: list<element: int32>> (lists of lists), which lovecraft does not convert yet; leave it out with --columns, e.g. --columns x", inspect=_not_read("ll", "lists of lists")),
    "parquet nulls by the rules": Case(_file("n.parquet", _pq(TABLE)), "hdf5", None, check=_check_nulls),
    # inspect lists such a column and reads the others: of this file's one column, it says why none is read
    "parquet int with nulls beyond 2**53": Case(_file("b.parquet", BIG), "parquet", "Error: {d}/b.parquet, row 2, column 'i': -1152921504606846976 is beyond +-2**53, so the column cannot be float64 (which holds its nulls as NaN) without changing it; read it as text with --column-type i=string, or leave it out with --columns",
        inspect=_not_read("i", "holds integers beyond +-2**53 and nulls, which float64 (nulls as NaN) would change: read it as text with --column-type i=string")),
    "parquet --column-type of a column that is not there": Case(_file("n.parquet", _pq(TABLE)), "parquet", "Error: --column-type q=...: no column 'q' in {d}/n.parquet; columns are n, s", input_opts=["--column-type", "q=string"]),
    "parquet files of different columns": Case(_files(a_parquet=_pq(TABLE), b_parquet=_pq(pa.table({"n": [1]}))), "parquet", "Error: {d}/b.parquet: columns ['n'] differ from the first input's ({d}/a.parquet) ['n', 's']; give inputs with the same columns, or convert them separately"),
    "parquet and csv mixed": Case(_files(a_parquet=_pq(TABLE), b_csv=b"n,s\n1,x\n"), "parquet", "Error: inputs mix formats (csv, parquet); convert them separately"),
    "arrow union column": Case(lambda d: _ipc_file(d, "u.arrow", UNION), "parquet", "Error: {d}/u.arrow, column 'u': holds sparse_union<0: int64=0, 1: string=1>, which lovecraft does not convert yet; leave it out with --columns",
        inspect=_not_read("u", "holds sparse_union<0: int64=0, 1: string=1>, which lovecraft does not convert yet")),
    "arrow stream cut inside a batch": Case(_file("s.arrows", STREAM[: len(STREAM) // 2]), "memmap", f"Error: {{d}}/s.arrows: cannot be read (Expected to be able to read 800 bytes for message body, got 740); {DAMAGED}"),
    "arrow empty": Case(_file("e.arrow", b""), "hdf5", "Error: {d}/e.arrow: empty input (0 bytes, not an Arrow file); check the file"),
    "hf state.json names a missing file": Case(_hf_state(["data-00000-of-00001.arrow"]), "parquet", "Error: {d}/hfds/data-00000-of-00001.arrow: listed in state.json but missing; the dataset is incomplete; re-save it"),
    "hf state.json names a file outside": Case(_hf_state(["../x.arrow"]), "parquet", "Error: {d}/hfds/state.json: lists a data file '../x.arrow' outside the directory; re-save the dataset"),
}  # fmt: skip


def _ipc_file(d: str, name: str, table: pa.Table) -> list[str]:
    p = os.path.join(d, name)
    with ipc.new_file(p, table.schema) as w:
        w.write_table(table)
    return [p]


@pytest.mark.parametrize("case", list(CASES))
def test_columnar_input(tmp_path, case):
    _run_case(tmp_path, CASES[case], case)
