"""apache/parquet-testing (../shared/vectors/parquet-testing, read in place): every file of data/
either converts, to parquet and to memmap, with the values pyarrow reads (and those of its
``*_expect.csv``), or is refused with one line naming the file (and the column, for types no
output holds); every file of bad_data/ is refused with one line. Each file runs in its own
process with a timeout: a crash or a hang of the reader fails the test instead of the suite.

The expected values are built here from ``pyarrow.parquet.read_table`` by lovecraft's documented
rules (structs dotted; a null: NaN in floats, int and bool columns with nulls as float64, "" for
strings, [] for lists; timestamps as int64 of their unit, null = -2**63; Parquet output keeps the
Arrow time type, compared as the same integers).

bad_data/ARROW-GH-43605.parquet is the one file there that converts: its dictionary has one entry,
so index bit-width 0 is enough; it crashed the Go reader, and pyarrow, polars and DuckDB all read
21,186 zeros from it. It is checked against pyarrow's values like the files of data/.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import VECTORS
from tests.inputs.columnar import NAN, NAT, plain, same
from tests.readback import read_memmap

ROOT = os.path.join(VECTORS, "parquet-testing")
DATA = sorted(glob.glob(os.path.join(ROOT, "data", "*.parquet")))
BAD = sorted(glob.glob(os.path.join(ROOT, "bad_data", "*.parquet")))
TIMEOUT = 180

# Files refused as they are, with what the one line must say.
REFUSED = {
    "byte_array_decimal.parquet": "column 'value': holds decimal128(4, 2)",
    "byte_stream_split_extended.gzip.parquet": "column 'decimal_plain': holds decimal128(7, 3)",
    "column_chunk_key_value_metadata.parquet": "empty input (no records)",
    "fixed_length_decimal.parquet": "column 'value': holds decimal128(25, 2)",
    "fixed_length_decimal_legacy.parquet": "column 'value': holds decimal128(13, 2)",
    "incorrect_map_schema.parquet": "cannot be read (Map keys must be annotated as required.)",
    "int32_decimal.parquet": "column 'value': holds decimal128(4, 2)",
    "int64_decimal.parquet": "column 'value': holds decimal128(10, 2)",
    "large_string_map.brotli.parquet": "column 'arr': holds map<string, int32 ('arr')>",
    "map_no_value.parquet": "column 'my_map': holds map<int32, int32 ('my_map')>",
    "nested_maps.snappy.parquet": "column 'a': holds map<string, map<int32, bool ('value')> ('a')>",
    "null_list.parquet": "column 'emptylist': holds list<item: null>",
    "nullable.impala.parquet": "column 'int_array_Array': holds list<element: list<element: int32>> (lists of lists)",
    "old_list_structure.parquet": "column 'a': holds list<array: list<array: int32 not null> not null> (lists of lists)",
    "rle-dict-uncompressed-corrupt-checksum.parquet": "row group 0: cannot be read (could not verify page integrity, CRC checksum verification failed",
    # bad_data
    "ARROW-GH-41317.parquet": "column 'null': holds only nulls (type null)",
    "ARROW-GH-41321.parquet": "column 'null': holds only nulls (type null)",
    "ARROW-GH-45185.parquet": "row group 0: cannot be read (The repetition level at the start of a record must be 0 but got 1)",
    "ARROW-GH-47662.parquet": "row group 0: cannot be read (Unexpected end of stream)",
    "ARROW-RS-GH-6229-DICTHEADER.parquet": "row group 0: cannot be read (Invalid column metadata (corrupt file?))",
    "ARROW-RS-GH-6229-LEVELS.parquet": "column 'outer': holds list<item: struct<c: null>> (lists of struct<c: null>)",
    "PARQUET-1481.parquet": "cannot be read (Invalid physical column type: UNKNOWN)",
}

# Files with lists of strings: Parquet holds them (the values checked), memmap refuses in one line.
PARQUET_ONLY = {
    "list_columns.parquet": "column 'utf8_list': memmap cannot hold list<string> columns",
    "repeated_primitive_no_list.parquet": "column 'String_list': memmap cannot hold list<string> columns",
}

# What a user does next, and what it must give: the options, then a substring of the refusal
# (None: it converts, checked against pyarrow's values for the columns it reads).
RETRIES = {
    "byte_array_decimal.parquet": (["--column-type", "value=float64"], None),
    "int32_decimal.parquet": (["--column-type", "value=string"], None),
    "int64_decimal.parquet": (["--column-type", "value=float64"], None),
    "fixed_length_decimal.parquet": (["--column-type", "value=string"], None),
    "byte_stream_split_extended.gzip.parquet": (
        ["--column-type", "decimal_plain=float64", "--column-type", "decimal_byte_stream_split=float64"],
        None,
    ),
    "list_columns.parquet": (["--columns", "int64_list"], None),
    "map_no_value.parquet": (["--columns", "my_map_no_v,my_list"], None),
    "nested_maps.snappy.parquet": (["--columns", "b,c"], None),
    "nullable.impala.parquet": (["--columns", "id,int_array"], None),
    "repeated_primitive_no_list.parquet": (["--columns", "Int32_list"], None),
    # damaged beyond the column no output holds: reading the damaged columns reaches the damage
    "ARROW-GH-41317.parquet": (
        ["--columns", "boolean,timestamp_us_no_tz"],
        "row group 0: holds 0 rows, its metadata says 3",
    ),
    "ARROW-GH-41321.parquet": (
        ["--columns", "int64"],
        "row group 0: cannot be read (Invalid or corrupted bit_width 254.",
    ),
}

# The fast suite runs these (every kind of outcome); the slow suite runs every file.
FAST = {
    "alltypes_plain.parquet",
    "delta_encoding_optional_column.parquet",
    "int96_from_spark.parquet",
    "list_columns.parquet",
    "byte_array_decimal.parquet",
    "rle-dict-uncompressed-corrupt-checksum.parquet",
}

DRIVER = r"""
import json, sys
from click.testing import CliRunner
from lovecraft_convert.cli import cli
src, out, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
results = []
for to in ("parquet", "memmap"):
    r = CliRunner().invoke(cli, ["convert", src, "-o", f"{out}/{to}", "--to", to, "-q", *extra], catch_exceptions=True)
    crash = None if r.exception is None or isinstance(r.exception, SystemExit) else repr(r.exception)
    results.append({"to": to, "code": r.exit_code, "stderr": r.stderr, "stdout": r.stdout, "crash": crash})
print(json.dumps(results))
"""


def _run(src: str, out: str, extra: list[str]) -> list[dict]:
    try:
        p = subprocess.run(
            [sys.executable, "-c", DRIVER, src, out, json.dumps(extra)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{src}: no answer within {TIMEOUT}s (a hang)")
    assert p.returncode == 0, f"{src}: the process died ({p.returncode}): {p.stderr[-2000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------
# what pyarrow reads, by lovecraft's rules
# --------------------------------------------------------------------------------------------


def _values(arr) -> list:
    import pyarrow as pa

    t = arr.type
    if pa.types.is_dictionary(t):
        arr, t = arr.dictionary_decode(), t.value_type
    if isinstance(t, pa.BaseExtensionType):
        arr, t = arr.storage, t.storage_type
    if _is_temporal(t):
        ints = arr.cast(pa.int64()) if t.bit_width == 64 else arr.cast(pa.int32()).cast(pa.int64())
        return [NAT if v is None else v for v in ints.to_pylist()]
    vals = arr.to_pylist()
    if pa.types.is_floating(t):
        return [NAN if v is None else float(v) for v in vals]
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return [NAN if v is None else float(v) for v in vals] if None in vals else vals
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ["" if v is None else v for v in vals]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return [b"" if v is None else v for v in vals]
    if pa.types.is_fixed_size_list(t):
        k = t.list_size
        widen = any(v is None or None in v for v in vals) and not pa.types.is_floating(t.value_type)
        return [[NAN] * k if v is None else [NAN if x is None else (float(x) if widen else x) for x in v] for v in vals]
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_string(t.value_type):
        return [[] if v is None else ["" if x is None else x for x in v] for v in vals]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        widen = any(v is not None and None in v for v in vals) and not pa.types.is_floating(t.value_type)
        return [[] if v is None else [NAN if x is None else (float(x) if widen else x) for x in v] for v in vals]
    raise AssertionError(f"no rule for {t}")


def _is_temporal(t) -> bool:
    import pyarrow as pa

    return pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_duration(t)


def _expected(src: str, extra: list[str]) -> dict[str, list]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = extra[extra.index("--columns") + 1].split(",") if "--columns" in extra else None
    casts = dict(extra[i + 1].split("=") for i, a in enumerate(extra) if a == "--column-type")
    t = pq.read_table(src, coerce_int96_timestamp_unit="us")
    while any(pa.types.is_struct(f.type) for f in t.schema):
        t = t.flatten()
    out = {}
    for name in columns or t.column_names:
        arr = t.column(name).combine_chunks()
        if name in casts and casts[name] == "float64" and pa.types.is_decimal(arr.type):
            # the nearest double of each decimal (Python's float of its Decimal; Arrow's own cast is not)
            arr = pa.array([None if v is None else float(v) for v in arr.to_pylist()], pa.float64())
        elif name in casts:
            arr = arr.cast(pa.float64() if casts[name] == "float64" else pa.string())
        out[name] = _values(arr)
    return out


def _check_values(src: str, out: str, extra: list[str], memmap: bool = True) -> None:
    import pyarrow.parquet as pq

    want = _expected(src, extra)
    got_pq = pq.read_table(os.path.join(out, "parquet"))
    got_mm = read_memmap(os.path.join(out, "memmap")) if memmap else dict.fromkeys(want)
    assert got_pq.column_names == list(want) == list(got_mm), (src, got_pq.column_names, list(want))
    for name, values in want.items():
        col = got_pq.column(name).combine_chunks()
        temporal = _values(col) if _is_temporal(col.type) else None  # Parquet output keeps Arrow's time types
        assert same(plain(col.to_pylist()) if temporal is None else temporal, values), (src, "parquet", name)
        if memmap:
            assert same(plain(got_mm[name]), values), (src, "memmap", name)
    base = os.path.join(os.path.dirname(src), os.path.basename(src).removesuffix(".parquet") + "_expect.csv")
    if os.path.exists(base):
        _check_expect_csv(base, got_pq)


def _check_expect_csv(path: str, got) -> None:
    """The values the Parquet implementations agreed on, as text: an empty field is a null."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    assert got.num_rows == len(rows) and got.num_columns == len(header)
    for j, name in enumerate(header):  # by position: the files' names differ from the headers' (' x', 'x:')
        col = got.column(j).to_pylist()
        for i, row in enumerate(rows):
            v, g = row[j], col[i]
            if v == "":
                assert g == "" or (isinstance(g, float) and math.isnan(g)), (path, name, i, g)
            elif isinstance(g, str):
                assert g == v, (path, name, i, g, v)
            else:
                assert g == (float(v) if isinstance(g, float) else int(v)), (path, name, i, g, v)


# --------------------------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------------------------


def _outcome(src: str, results: list[dict], refusal: str | None) -> bool:
    """Both formats converted (True) or both refused with the expected one line (False)."""
    for r in results:
        assert r["crash"] is None, (src, r["to"], r["crash"])
        assert r["stdout"] == "", (src, r["stdout"])
    if refusal is None:
        for r in results:
            assert (r["code"], r["stderr"]) == (0, ""), (src, r["to"], r["stderr"])
        return True
    for r in results:
        assert r["code"] == 1, (src, r["to"], r["code"], r["stderr"])
        line = r["stderr"]
        assert line.count("\n") == 1 and line.startswith(f"Error: {src}"), (src, line)
        assert refusal in line, (src, line)
    return False


def _case(path: str):
    name = os.path.basename(path)
    marks = [] if name in FAST or "bad_data" in path else [pytest.mark.slow]
    return pytest.param(path, id=name, marks=marks)


@pytest.mark.parametrize("src", [_case(p) for p in DATA + BAD] or [pytest.param(None, id="absent")])
def test_every_file_converts_or_is_refused_in_one_line(tmp_path, src):
    if src is None or not os.path.isdir(ROOT):
        pytest.skip(f"../shared/vectors/parquet-testing not found at {ROOT}")
    name = os.path.basename(src)
    if "bad_data" in src and name != "ARROW-GH-43605.parquet":
        assert name in REFUSED, f"{name}: a malformed file must be refused"
    if name in PARQUET_ONLY:
        by = {r["to"]: r for r in _run(src, str(tmp_path / "a"), [])}
        assert _outcome(src, [by["parquet"]], None) and not _outcome(src, [by["memmap"]], PARQUET_ONLY[name])
        _check_values(src, str(tmp_path / "a"), [], memmap=False)
        assert not os.path.exists(tmp_path / "a" / "memmap")
    elif _outcome(src, _run(src, str(tmp_path / "a"), []), REFUSED.get(name)):
        _check_values(src, str(tmp_path / "a"), [])
    else:
        for r in os.listdir(tmp_path):  # a refusal leaves nothing behind
            assert not os.listdir(tmp_path / r), (name, r)
    if name in RETRIES:
        extra, refusal = RETRIES[name]
        if _outcome(src, _run(src, str(tmp_path / "b"), extra), refusal):
            _check_values(src, str(tmp_path / "b"), extra)


def test_the_vectors_are_all_here():
    if not os.path.isdir(ROOT):
        pytest.skip(f"../shared/vectors/parquet-testing not found at {ROOT}")
    assert len(DATA) >= 55 and len(BAD) >= 8
    known = {os.path.basename(p) for p in DATA + BAD}
    assert set(REFUSED) <= known and set(RETRIES) <= known and known >= FAST and set(PARQUET_ONLY) <= known
