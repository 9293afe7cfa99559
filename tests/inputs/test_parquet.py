"""Parquet input: what each Arrow type becomes, nulls, --columns (only those column chunks are read),
page checksums, bounded batches from large row groups, row groups as parts (same bytes for any
--workers), bucket, inspect, verify --against; read back with independent readers against values
built here."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lovecraft_convert import convert, shard
from lovecraft_convert.inputs import open_reader
from tests.conftest import leftovers, lovecraft
from tests.inputs.columnar import NAN, NAT, assert_columns, digest
from tests.readback import manifest, read_back

FORMATS = ["memmap", "hdf5", "parquet", "tfrecord"]


def _table() -> tuple[pa.Table, dict]:
    """Every kind of column, with nulls, and what each must become (written out by hand)."""
    t = pa.table(
        {
            "i": pa.array([1, None, 3, 4], pa.int64()),
            "j": pa.array([10, 20, 30, 40], pa.int32()),
            "h": pa.array([0.5, None, 1.5, 2.0], pa.float16()),
            "b": pa.array([True, False, None, True]),
            "b2": pa.array([True, False, True, False]),
            "s": pa.array(["a", None, "ccc", "é"]),
            "bin": pa.array([b"\x00\x01", None, b"", b"z"], pa.binary()),
            "meta": pa.array(
                [{"lang": "en", "n": 1}, None, {"lang": None, "n": 3}, {"lang": "fr", "n": 4}],
                pa.struct([("lang", pa.string()), ("n", pa.int16())]),
            ),
            "seq": pa.array([[1, 2], None, [], [3]], pa.list_(pa.int32())),
            "fx": pa.array([[1, 2], [3, 4], None, [5, 6]], pa.list_(pa.float32(), 2)),
            "ts": pa.array([0, 1000, None, 5], pa.timestamp("ms", tz="UTC")),
            "d": pa.array(["x", "y", "x", None]).dictionary_encode(),
        }
    )
    want = {
        "i": [1.0, NAN, 3.0, 4.0],
        "j": [10, 20, 30, 40],
        "h": [0.5, NAN, 1.5, 2.0],
        "b": [1.0, 0.0, NAN, 1.0],
        "b2": [True, False, True, False],
        "s": ["a", "", "ccc", "é"],
        "bin": [b"\x00\x01", b"", b"", b"z"],
        "meta.lang": ["en", "", "", "fr"],
        "meta.n": [1.0, NAN, 3.0, 4.0],
        "seq": [[1, 2], [], [], [3]],
        "fx": [[1.0, 2.0], [3.0, 4.0], [NAN, NAN], [5.0, 6.0]],
        "ts": [0, 1000, NAT, 5],
        "d": ["x", "y", "x", ""],
    }
    return t, want


def _write(tmp_path, table: pa.Table, name: str = "in.parquet", **kw) -> str:
    p = str(tmp_path / name)
    pq.write_table(table, p, write_page_checksum=True, **kw)
    return p


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_type_to_every_format(tmp_path, fmt):
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    table, want = _table()
    src = _write(tmp_path, table, row_group_size=2)
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", fmt, "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    got = read_back(out, fmt)
    if fmt == "parquet":  # the timestamp stays a timestamp (issue 39): pyarrow and polars read datetimes
        assert str(pq.read_schema(os.path.join(out, "data.parquet")).field("ts").type) == "timestamp[ms, tz=UTC]"
        got["ts"] = np.asarray(got["ts"]).astype("datetime64[ms]").view(np.int64)
    assert_columns(got, want, f32=fmt == "tfrecord")
    if fmt == "parquet":  # and polars, another Parquet reader
        from tests.readback import read_polars

        pl_cols = read_polars(out)
        assert str(pl_cols["ts"].dtype) == "Datetime(time_unit='ms', time_zone='UTC')"
        pl_cols["ts"] = pl_cols["ts"].dt.epoch("ms").fill_null(NAT)
        assert_columns(pl_cols, want)
    assert manifest(out)["schema"][-2]["logical"] == {"type": "timestamp", "unit": "ms", "tz": "UTC"}
    schema = {f["name"]: (f["kind"], f["dtype"], f["shape"]) for f in manifest(out)["schema"]}
    assert schema == {
        "i": ("fixed", "<f8", []),
        "j": ("fixed", "<i4", []),
        "h": ("fixed", "<f2", []),
        "b": ("fixed", "<f8", []),
        "b2": ("fixed", "|b1", []),
        "s": ("string", "|u1", []),
        "bin": ("binary", "|u1", []),
        "meta.lang": ("string", "|u1", []),
        "meta.n": ("fixed", "<f8", []),
        "seq": ("sequence", "<i4", []),
        "fx": ("fixed", "<f4", [2]),
        "ts": ("fixed", "<i8", []),
        "d": ("string", "|u1", []),
    }


def test_numpy_and_h5py_read_the_values(tmp_path):
    """The memmap and HDF5 files themselves, opened by np.load and h5py."""
    import h5py

    table, want = _table()
    src = _write(tmp_path, table.select(["i", "fx", "ts", "seq"]))
    convert(src, str(tmp_path / "m"), to="memmap", progress=False)
    assert np.load(tmp_path / "m" / "fx.npy").tolist()[3] == [5.0, 6.0]
    np.testing.assert_array_equal(np.load(tmp_path / "m" / "ts.npy"), np.array(want["ts"], dtype=np.int64))
    assert (
        np.load(tmp_path / "m" / "ts.npy").astype("datetime64[ms]")[2]
        != np.load(tmp_path / "m" / "ts.npy").astype("datetime64[ms]")[2]
    )  # NaT
    np.testing.assert_array_equal(np.load(tmp_path / "m" / "seq.offsets.npy"), [0, 2, 2, 2, 3])
    convert(src, str(tmp_path / "h"), to="hdf5", progress=False)
    with h5py.File(tmp_path / "h" / "data.h5") as f:
        assert np.isnan(f["i"][1]) and f["i"][3] == 4.0
        assert [list(x) for x in f["seq"][:]] == [[1, 2], [], [], [3]]


def test_manifest_records_the_type_decisions(tmp_path):
    table, _ = _table()
    src = _write(tmp_path, table)
    m = convert(src, str(tmp_path / "out"), to="parquet", progress=False)
    cols = m["sources"][0]["columns"]
    assert cols["ts"] == {
        "input_type": "timestamp[ms, tz=UTC]",
        "stored_as": "int64",
        "unit": "ms",
        "null": NAT,
        "timezone": "UTC",
    }
    assert cols["d"]["decoded"] == "dictionary"


def test_int_nulls_beyond_2_53_are_refused(tmp_path):
    src = _write(tmp_path, pa.table({"i": pa.array([5, 2**53 + 1, None], pa.int64())}))
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q")
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == (
        f"Error: {src}, row 2, column 'i': 9007199254740993 is beyond +-2**53, so the column cannot be float64 "
        "(which holds its nulls as NaN) without changing it; read it as text with --column-type i=string, "
        "or leave it out with --columns\n"
    )
    assert not os.path.exists(out) and leftovers(tmp_path) == []
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q", "--column-type", "i=string")
    assert r.exit_code == 0, r.stderr
    assert read_back(out, "parquet")["i"] == ["5", "9007199254740993", ""]


@pytest.mark.parametrize("workers", [1, 2])
def test_nulls_met_late_without_statistics_restart_as_float64(tmp_path, workers):
    """No statistics say the column holds nulls: a null in the last row group widens it, the run
    starts over, and the result is the same whatever the workers."""
    n = 40_000
    vals = list(range(n))
    vals[-3] = None
    src = _write(tmp_path, pa.table({"i": pa.array(vals, pa.int64())}), row_group_size=5_000, write_statistics=False)
    out = str(tmp_path / f"w{workers}")
    m = shard(src, out, to="parquet", rows_per_shard=15_000, workers=workers, progress=False, part_bytes=1)
    assert m["schema"][0]["dtype"] == "<f8"
    got = pq.read_table(out).column("i").to_numpy()
    assert np.isnan(got[-3]) and got[0] == 0 and got[-1] == n - 1 and len(got) == n


def test_columns_reads_only_their_column_chunks(tmp_path):
    """A damaged column chunk (its page checksum fails) is an error, unless --columns leaves it out:
    then it is never read. Columns no output can hold are also fine when left out."""
    n = 20_000
    text = [f"row {i} " * (i % 7) for i in range(n)]
    table = pa.table(
        {
            "text": pa.array(text),
            "other": pa.array(np.arange(n, dtype=np.int64) * 3),
            "m": pa.array([{"k": i} for i in range(n)], pa.map_(pa.string(), pa.int64())),
        }
    )
    src = _write(tmp_path, table, compression="none", use_dictionary=False)
    col = pq.ParquetFile(src).metadata.row_group(0).column(1)
    assert col.path_in_schema == "other"
    with open(src, "r+b") as f:  # flip a byte inside the data of 'other'
        at = col.data_page_offset + col.total_compressed_size // 2
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q", "--columns", "text,other")
    assert r.exit_code == 1 and r.stdout == "" and "\n" not in r.stderr.rstrip("\n")
    assert r.stderr.startswith(f"Error: {src}, row group 0: cannot be read (")
    assert "CRC checksum verification failed" in r.stderr
    assert not os.path.exists(out)
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q")
    assert r.stderr == (
        f"Error: {src}, column 'm': holds map<string, int64 ('m')>, which lovecraft does not convert yet; "
        "leave it out with --columns, e.g. --columns text,other\n"
    )
    r = lovecraft("convert", src, "-o", out, "--to", "memmap", "-q", "--columns", "text")
    assert (r.exit_code, r.stderr) == (0, "")
    assert read_back(out, "memmap")["text"] == text


def test_lists_of_strings_and_decimals(tmp_path):
    from decimal import Decimal

    table = pa.table(
        {
            "tags": pa.array([["a"], [], None]),
            "price": pa.array([Decimal("1.25"), None, Decimal("-3.50")], pa.decimal128(6, 2)),
            "n": pa.array([1, 2, 3]),
        }
    )
    src = _write(tmp_path, table)
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "hdf5", "-q", "--columns", "tags,n")
    assert r.stderr == (
        f"Error: {src}, column 'tags': hdf5 cannot hold list<string> columns; leave the column out with --columns, "
        "or write a format that holds it\n"
    )
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q", "--columns", "price,n")
    assert r.stderr == (
        f"Error: {src}, column 'price': holds decimal128(6, 2) (a decimal is read as a number or as text, as you choose); read it as "
        "--column-type price=float64 (the nearest double) or --column-type price=string, or leave it out with --columns, e.g. --columns tags,n\n"
    )
    for typ, want in (("float64", [1.25, NAN, -3.5]), ("string", ["1.25", "", "-3.50"])):
        r = lovecraft(
            "convert",
            src,
            "-o",
            out,
            "--to",
            "hdf5",
            "-q",
            "--columns",
            "price,n",
            "--column-type",
            f"price={typ}",
            "--overwrite",
        )
        assert (r.exit_code, r.stderr) == (0, "")
        assert_columns(read_back(out, "hdf5"), {"price": want, "n": [1, 2, 3]})
    r = lovecraft("convert", src, "-o", out, "--to", "hdf5", "-q", "--column-type", "nope=string", "--overwrite")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: --column-type nope=...: no column 'nope' in {src}; columns are tags, price, n\n",
    )


def test_a_row_group_larger_than_the_budget_is_read_in_bounded_batches(tmp_path):
    """One 30 MB row group under --max-memory 16MiB (a batch is 1 MiB): plain strings and
    dictionary-encoded ones (whose pages are tiny beside the strings they stand for)."""
    n = 60_000
    plain_text = pa.array([f"{i:06d}" + "x" * 500 for i in range(n)])
    repeated = pa.array(["y" * 500 + str(i % 3) for i in range(n)])
    src = _write(tmp_path, pa.table({"a": plain_text, "b": repeated}), row_group_size=n, use_dictionary=["b"])
    assert pq.ParquetFile(src).metadata.num_row_groups == 1
    reader = open_reader([src], budget=16 << 20)
    sizes, rows = [], 0
    for batch in reader.batches():
        sizes.append(batch.nbytes)
        rows += batch.num_rows
    assert rows == n and len(sizes) > 10
    assert max(sizes) <= 2 * reader.options.batch_bytes, (max(sizes), reader.options.batch_bytes)


def test_parts_are_row_groups_or_groups_of_small_ones(tmp_path):
    table = pa.table({"x": pa.array(np.arange(100_000, dtype=np.int64))})
    src = _write(tmp_path, table, row_group_size=10_000)
    reader = open_reader([src], budget=64 << 20)
    one = reader.partitions(64 << 20)
    assert [(p.rows, p.blocks) for p in one] == [((0, 100_000), (0, 0, 10))]
    each = reader.partitions(1)
    assert [p.rows for p in each] == [(k * 10_000, (k + 1) * 10_000) for k in range(10)]
    per_group = reader.files[0].blocks[0].memory  # the decoded size of a row group, from its metadata
    assert 80_000 <= per_group < 100_000
    pairs = reader.partitions(2 * per_group + 1)  # two fit in a part, not three
    assert [p.blocks for p in pairs] == [(0, k, k + 2) for k in range(0, 10, 2)]
    assert sum(b.num_rows for p in pairs for b in reader.part_batches(p)) == 100_000


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    d = tmp_path_factory.mktemp("pq_wide")
    rng = np.random.default_rng(5)
    n = 30_000
    table = pa.table(
        {
            "id": pa.array(np.arange(n)),
            "text": pa.array([" ".join(["w"] * int(k)) for k in rng.integers(0, 40, n)]),
            "x": pa.array(rng.normal(size=(n, 4)).astype(np.float32).tolist(), pa.list_(pa.float32(), 4)),
            "meta": pa.array([{"lang": ["en", "fr", None][i % 3]} for i in range(n)]),
        }
    )
    p = str(d / "wide.parquet")
    pq.write_table(table, p, row_group_size=2_000, write_page_checksum=True)
    return p, table


def test_shard_shuffle_is_byte_identical_for_any_workers(tmp_path, wide):
    src, table = wide
    outs = []
    for w in (1, 2):
        out = str(tmp_path / f"w{w}")
        shard(src, out, to="parquet", num_shards=3, shuffle=True, seed=11, workers=w, progress=False, part_bytes=1)
        outs.append(digest(out))
    assert outs[0] == outs[1]
    ids = pq.read_table(str(tmp_path / "w1")).column("id").to_numpy()
    assert sorted(ids.tolist()) == list(range(table.num_rows)) and ids.tolist() != list(range(table.num_rows))
    r = lovecraft("verify", str(tmp_path / "w2"), "--against", src)
    assert r.exit_code == 0, r.stdout + r.stderr


def test_bucket_a_text_column(tmp_path, wide):
    src, table = wide
    out = str(tmp_path / "b")
    r = lovecraft("bucket", src, "-o", out, "--to", "memmap", "--column", "text", "--num-buckets", "4", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    m = manifest(out)
    lengths = []
    for b in m["buckets"]:
        for s in b["shards"]:
            lengths += np.load(os.path.join(out, next(f for f in s["files"] if f.endswith("length.npy")))).tolist()
    want = [len(t.encode()) for t in table.column("text").to_pylist()]
    assert sorted(lengths) == sorted(want)
    r = lovecraft("bucket", src, "-o", str(tmp_path / "c"), "--to", "memmap", "--num-buckets", "4", "-q")
    assert r.stderr == (
        f"Error: {src}: say which column holds the text or sequences (variable-length columns: text, meta.lang); "
        "pass --column NAME\n"
    )


@pytest.mark.parametrize("layout", [["--num-buckets", "1"], ["--layout", "packed", "--seq-len", "4", "--pad-last"]])
def test_bucket_a_text_column_with_markers(tmp_path, layout):
    """bucket of a Parquet text column read it through the bare tokenizer: --eos and --bos were
    dropped without a word (['ab', 'c'] gave [97, 98] and [99], where JSON Lines gives the EOS too);
    verify --against agreed, re-reading it the same way. Found while fixing another trial's case."""
    src = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"text": ["ab", "c"], "n": [1, 2]}), src)
    jl = tmp_path / "t.jsonl"
    jl.write_text('{"text": "ab"}\n{"text": "c"}\n')
    got = {}
    for name, path in (("parquet", src), ("jsonl", str(jl))):
        out = str(tmp_path / name)
        r = lovecraft("bucket", path, "-o", out, "--to", "parquet", "--column", "text", "--eos", "0", "--bos", "1",
                      "-q", *layout)  # fmt: skip
        assert r.exit_code == 0, r.stderr
        t = pq.read_table(out)
        got[name] = t.to_pylist()
        assert lovecraft("verify", out, "--against", path).exit_code == 0
    assert got["parquet"] == got["jsonl"]
    if layout[0] == "--num-buckets":
        assert sorted((r["tokens"][: r["length"]] for r in got["parquet"]), key=len) == [[1, 99, 0], [1, 97, 98, 0]]


def test_inspect_shows_nested_paths_types_nulls_row_groups(tmp_path, wide):
    src, table = wide
    r = lovecraft("inspect", src, "--json", "-q")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["inputs"][0]["row_groups"] == 15 and rep["rows"] == table.num_rows and rep["rows_exact"]
    cols = {c["name"]: c for c in rep["columns"]}
    assert list(cols) == ["id", "text", "x", "meta.lang"]
    assert cols["meta.lang"]["input_type"] == "string" and cols["meta.lang"]["nulls"] == 10_000
    assert cols["x"]["type"] == "float32[4]" and cols["x"]["nulls"] == 0
    lens = sorted(len(t.encode()) for t in table.column("text").to_pylist())
    assert cols["text"]["lengths"]["p50"] == lens[(len(lens) + 1) // 2 - 1]
    assert cols["text"]["lengths"]["max"] == lens[-1]
    text = lovecraft("inspect", src, "-q").stdout
    assert f"{src}: parquet, snappy-compressed inside" in text and "15 row groups" in text  # pyarrow's default codec
    assert "input type string; 10,000 nulls" in text


def test_verify_against_finds_a_changed_source(tmp_path, wide):
    src, table = wide
    out = str(tmp_path / "out")
    assert convert(src, out, to="tfrecord", columns=["id", "text"], progress=False)["rows"] == table.num_rows
    r = lovecraft("verify", out, "--against", src)
    assert r.exit_code == 0, r.stdout
    changed = table.set_column(1, "text", pa.array(["changed"] + table.column("text").to_pylist()[1:]))
    pq.write_table(changed, src + ".2.parquet")
    os.replace(src + ".2.parquet", src)
    try:
        r = lovecraft("verify", out, "--against", src)
        assert r.exit_code == 1
        assert f"{src}: row 1, column 'text': 'changed' in the source" in r.stdout
    finally:
        pq.write_table(table, src, row_group_size=2_000, write_page_checksum=True)


def test_several_files_in_order_and_a_mismatch(tmp_path):
    a = _write(tmp_path, pa.table({"x": pa.array([1, 2]), "s": pa.array(["a", "b"])}), "a.parquet")
    _write(tmp_path, pa.table({"x": pa.array([3]), "s": pa.array(["c"])}), "b.parquet")
    out = str(tmp_path / "out")
    r = lovecraft("convert", str(tmp_path / "*.parquet"), "-o", out, "--to", "hdf5", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    assert_columns(read_back(out, "hdf5"), {"x": [1, 2, 3], "s": ["a", "b", "c"]})
    c = _write(tmp_path, pa.table({"x": pa.array([1.5]), "s": pa.array(["z"])}), "c.parquet")
    r = lovecraft("convert", a, c, "-o", str(tmp_path / "o2"), "--to", "hdf5", "-q")
    assert r.stderr == (
        f"Error: {c}, column 'x': double, but int64 in {a}; give inputs with the same column types, "
        "or convert them separately\n"
    )


def test_compressed_file_and_stdin_are_refused(tmp_path):
    import gzip

    src = _write(tmp_path, pa.table({"x": [1]}))
    gz = src + ".gz"
    with open(src, "rb") as f, gzip.open(gz, "wb") as g:
        g.write(f.read())
    r = lovecraft("convert", gz, "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert r.stderr == (
        f"Error: {gz}: a gzip-compressed Parquet file cannot be read in place; decompress it first "
        "(Parquet files compress their contents themselves)\n"
    )
    with open(src, "rb") as f:
        r = lovecraft(
            "convert",
            "-",
            "--input-format",
            "parquet",
            "-o",
            str(tmp_path / "o"),
            "--to",
            "parquet",
            "-q",
            input=f.read(),
        )
    assert (
        r.stderr
        == "Error: <stdin>: Parquet input is read from a file (by its blocks), not a pipe; save it to a file first\n"
    )


def test_detected_by_magic_bytes(tmp_path):
    src = _write(tmp_path, pa.table({"x": [1, 2]}), "noext")
    out = str(tmp_path / "o")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    assert manifest(out)["sources"][0]["format"] == "parquet"


# --------------------------------------------------------------------------------------------
# a round trip of generated tables through every format
# --------------------------------------------------------------------------------------------

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)


@st.composite
def tables(draw):
    n = draw(st.integers(1, 30))
    ints = draw(st.lists(st.one_of(st.none(), st.integers(-(2**40), 2**40)), min_size=n, max_size=n))
    floats = draw(st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6, width=32)), min_size=n, max_size=n))
    strings = draw(st.lists(st.one_of(st.none(), text), min_size=n, max_size=n))
    seqs = draw(st.lists(st.one_of(st.none(), st.lists(st.integers(-100, 100), max_size=5)), min_size=n, max_size=n))
    table = pa.table(
        {
            "i": pa.array(ints, pa.int64()),
            "f": pa.array(floats, pa.float32()),
            "s": pa.array(strings, pa.string()),
            "q": pa.array(seqs, pa.list_(pa.int16())),
        }
    )
    has_null = any(v is None for v in ints)
    want = {
        "i": [NAN if v is None else float(v) for v in ints] if has_null else ints,
        "f": [NAN if v is None else v for v in floats],
        "s": ["" if v is None else v for v in strings],
        "q": [[] if v is None else v for v in seqs],
    }
    return table, want, draw(st.integers(1, 4))


@pytest.mark.parametrize("fmt", FORMATS)
@SETTINGS
@given(case=tables())
def test_generated_tables_round_trip(tmp_path_factory, fmt, case):
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    table, want, groups = case
    d = tmp_path_factory.mktemp("rt")
    src = str(d / "t.parquet")
    pq.write_table(table, src, row_group_size=max(1, table.num_rows // groups))
    convert(src, str(d / "out"), to=fmt, progress=False)
    got = read_back(str(d / "out"), fmt)
    assert_columns(got, want, f32=fmt == "tfrecord")


@pytest.mark.parametrize("fmt", ["parquet", "mds", "litdata", "webdataset"])
def test_lists_of_strings(tmp_path, fmt):
    """list<string> (and large_list, dictionary strings, a slice of a row group, non-ASCII) was
    refused as a type 'the output formats cannot hold yet', though JSON Lines' lists of strings
    reach Parquet, MDS, litdata and WebDataset: they are read as those, a missing list as [] and
    a missing string as '' (as JSON Lines holds them); read back, deduplicated and filtered."""
    rows = [["a", "β"], [], None, ["", None, "x y"], ["a", "β"], ["日本"] * 3]
    table = pa.table(
        {
            "tags": pa.array(rows, pa.list_(pa.string())),
            "big": pa.array(rows, pa.large_list(pa.string())),
            "cat": pa.array(rows, pa.list_(pa.dictionary(pa.int32(), pa.string()))),
            "n": pa.array(range(len(rows))),
        }
    )
    src = _write(tmp_path, table, row_group_size=4)  # two row groups: the second one's lists start at an offset
    want = [[] if r is None else ["" if x is None else x for x in r] for r in rows]
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", fmt, "-q")
    assert r.exit_code == 0, r.stderr
    got = read_back(out, fmt)
    for name in ("tags", "big", "cat"):
        assert [list(v) for v in got[name]] == want, name
    r = lovecraft("verify", out, "--against", src)
    assert r.exit_code == 0, r.stdout + r.stderr
    out2 = str(tmp_path / "dedup")
    r = lovecraft("convert", src, "-o", out2, "--to", "parquet", "-q", "--dedup", "exact", "--dedup-columns", "tags",
                  "--filter", "len(tags) != 3")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert pq.read_table(out2)["n"].to_pylist() == [0, 1]  # [] twice (None is []), ["a", "β"] twice, two of 3


def test_a_list_of_strings_not_utf8_names_its_row(tmp_path):
    bad = pa.array([b"ok", b"\xff", b"fine"], pa.binary()).cast(pa.string(), safe=False)
    arr = pa.ListArray.from_arrays(pa.array([0, 1, 1, 3], pa.int32()), bad)
    src = _write(tmp_path, pa.table({"tags": arr}))
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {src}, row 3, column 'tags': "), r.stderr


def test_inspect_says_what_a_temporal_columns_integers_count(tmp_path):
    """A timestamp or a date counts from the epoch, a time from midnight, a duration from nothing
    (it said "since the epoch" of a duration too)."""
    import datetime

    src = str(tmp_path / "t.parquet")
    pq.write_table(
        pa.table(
            {
                "ts": pa.array([datetime.datetime(2024, 1, 1)], pa.timestamp("ms")),
                "d": pa.array([datetime.date(2024, 1, 1)], pa.date32()),
                "t": pa.array([datetime.time(12, 0)], pa.time64("us")),
                "dur": pa.array([datetime.timedelta(seconds=3)], pa.duration("us")),
            }
        ),
        src,
    )
    text = lovecraft("inspect", src, "-q").stdout
    lines, name = {}, None
    for ln in text.splitlines():
        if ln.startswith("column '"):
            name = ln.split("'")[1]
        elif "input type" in ln:
            lines[name] = ln
    assert "(ms since the epoch, null = -2**63 as NumPy's NaT)" in lines["ts"], text
    assert "(days since the epoch, null" in lines["d"], text
    assert "(us since midnight, null" in lines["t"], text
    assert "(us, null = -2**63 as NumPy's NaT)" in lines["dur"], text


def test_inspect_lists_a_column_whose_values_no_output_can_hold_and_reads_the_others(tmp_path):
    """An int64 column with a null (read as float64) and 2**62: convert refuses it in one line;
    inspect refused the whole file with that line, where the docs say it lists such columns (and
    why) and reads the rest."""
    src = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"bigi": pa.array([2**62, 1, None], pa.int64()), "a": [1, 2, 3]}), src)
    r = lovecraft("inspect", src, "-q")
    assert r.exit_code == 0, r.stderr
    assert (
        "column 'bigi' not read: it holds integers beyond +-2**53 and nulls, which float64 (nulls as NaN) would "
        "change: read it as text with --column-type bigi=string"
    ) in r.stdout.splitlines()
    assert "column 'a': int64" in r.stdout
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet")
    assert r.exit_code == 1 and "4611686018427387904 is beyond +-2**53" in r.stderr
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "--column-type", "bigi=string", "-q")
    assert r.exit_code == 0, r.stderr


def test_inspect_of_a_file_with_no_column_it_can_read_describes_the_file(tmp_path):
    """Every column of the file refused (parquet-testing's null_list.parquet is one list<null>
    column): inspect said "Error: ..., leave it out with --columns" (exit 1) about the only column,
    where with one readable column it lists the others and goes on. It now gives the file's figures
    and each column it cannot read, exit 0; convert still refuses in one line."""
    src = str(tmp_path / "t.parquet")
    table = {"e": pa.array([[], [None]], pa.list_(pa.null())), "d": pa.array([1, 2], pa.decimal128(5, 2))}
    pq.write_table(pa.table(table), src)
    r = lovecraft("inspect", src, "-q")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "rows: 2" in lines
    assert (
        "column 'e' not read: it holds list<element: null> (lists of null), which lovecraft does not convert yet"
        in lines
    )
    assert (
        "column 'd' not read: it holds decimal128(5, 2) (a decimal is read as a number or as text, as you choose)"
        in lines
    )
    assert "output size per format" not in r.stdout
    report = json.loads(lovecraft("inspect", src, "--json").stdout)
    assert report["rows"] == 2 and report["columns"] == []
    assert [c["name"] for c in report["columns_not_read"]] == ["e", "d"]
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"Error: {src}, column 'e': holds list<element: null> (lists of null), which lovecraft does not convert "
        "yet; leave it out with --columns"
    )
    assert not os.path.exists(tmp_path / "o")


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord"])
def test_int_lists_with_a_missing_element(tmp_path, fmt):
    """A list<int64> column with a null element is read as float64 (NaN) like a column of numbers
    with nulls: exact, or refused beyond 2**53 (it rounded 2**53 + 1 silently). verify --against
    re-read the source as int64 and reported the fresh dataset's columns as different."""
    small = tmp_path / "small.parquet"
    pq.write_table(pa.table({"li": pa.array([[1, None], [3], None, [2**53]], pa.list_(pa.int64()))}), small)
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(small), "-o", out, "--to", fmt, "-q")
    assert r.exit_code == 0, r.stderr
    rows = [
        list(np.asarray(x, dtype=np.float64)) for x in read_back(out, fmt, {"li": ("sequence", "float64", ())})["li"]
    ]
    assert [[v if v == v else None for v in row] for row in rows] == [[1.0, None], [3.0], [], [2.0**53]]
    r = lovecraft("verify", out, "--against", str(small))
    assert r.exit_code == 0, r.stdout + r.stderr
    big = tmp_path / "big.parquet"
    pq.write_table(pa.table({"ids": pa.array([[5], [2**53 + 1, None]], pa.list_(pa.int64()))}), big)
    r = lovecraft("convert", str(big), "-o", str(tmp_path / "b"), "--to", fmt, "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {big}, row 2, column 'ids': 9007199254740993 is beyond +-2**53, so the column cannot be float64 "
        "(which holds its nulls as NaN) without changing it; fill its missing elements, or leave it out with --columns\n",
    )
    assert not (tmp_path / "b").exists()


def test_column_types_from_numbers_are_exact(tmp_path):
    """--column-type NAME=bool on numbers takes 0 and 1 only (Arrow's cast made 1.5 and -0.7 true,
    where JSON Lines refuses them); a decimal read as float64 is the nearest double of its text
    (Arrow's decimal cast gives 0.5700000000000001 for 0.57)."""
    import decimal

    src = tmp_path / "n.parquet"
    pq.write_table(pa.table({"f": pa.array([1.0, 0.0, 1.5]), "i": pa.array([0, 1, 1])}), src)
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "a"), "--to", "parquet", "--column-type", "f=bool", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, row 3, column 'f': 1.5 is not a valid bool; fix the value or choose another --column-type\n",
    )
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "b"), "--to", "parquet", "--column-type", "i=bool",
                  "--columns", "i", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert pq.read_table(tmp_path / "b").column("i").to_pylist() == [False, True, True]
    texts = [f"{i // 100}.{i % 100:02d}" for i in range(0, 100_000, 37)]
    dec = tmp_path / "d.parquet"
    pq.write_table(pa.table({"p": pa.array([decimal.Decimal(t) for t in texts], pa.decimal128(10, 2))}), dec)
    out = tmp_path / "c"
    r = lovecraft("convert", str(dec), "-o", str(out), "--to", "memmap", "--column-type", "p=float64", "-q")
    assert r.exit_code == 0, r.stderr
    assert np.load(out / "p.npy").tolist() == [float(t) for t in texts]


def test_a_value_column_type_cannot_hold_is_named_by_its_row(tmp_path):
    """--column-type a=uint8 over a Parquet int64 of -48 said 'a value cannot be read as uint8'
    without its row (found by an outside trial): the first such value is found and named."""
    src = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"a": pa.array([1, 2, 3, -48, 300], pa.int64())}), src, row_group_size=2)
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "--column-type", "a=uint8")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, row 4, column 'a': -48 cannot be read as uint8 (Integer value -48 not in range: 0 to 255); "
        "fix the value or choose another --column-type\n",
    )
