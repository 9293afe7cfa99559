"""Every input kind (text, CSV, NPY; plain and each compression) to every output format, read back
with the independent client and compared with values parsed from the source by the test itself."""

from __future__ import annotations

import csv
import gzip
import io
import os

import numpy as np
import pytest

from tests.conftest import lovecraft, write
from tests.readback import manifest, read_back, read_polars

FORMATS = ["memmap", "hdf5", "parquet", "tfrecord"]
COMPRESSIONS = [None, "gz", "bz2", "xz", "zst"]

ROWS = [
    (1, 0.5, "plain"),
    (2, -1.25e-3, "with, comma"),
    (3, 3.0e10, 'a "quoted" word'),
    (-4, 7.0, "two\nlines"),
    (5, float("nan"), "ünïcödé ✓"),
    (6, 1.0, ""),
] * 50


def _csv_bytes() -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "x", "name"])
    for r in ROWS:
        w.writerow(r)
    return buf.getvalue().encode()


def _parsed_csv(data: bytes) -> dict[str, list]:
    """The source parsed by Python's csv module: the independent reference."""
    rows = list(csv.reader(io.StringIO(data.decode(), newline="")))[1:]
    return {"id": [int(r[0]) for r in rows], "x": [float(r[1]) for r in rows], "name": [r[2] for r in rows]}


def _assert_float(got, want, dtype=np.float64):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=dtype).astype(np.float64)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("comp", COMPRESSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_csv(tmp_path, fmt, comp):
    data = _csv_bytes()
    src = write(tmp_path / "data.csv", data, comp)
    out = str(tmp_path / "out")
    args = ["convert", src, "-o", out, "--to", fmt, "--quiet"]
    if fmt == "memmap":
        args += ["--columns", "id,x"]  # memmap holds numbers only
    r = lovecraft(*args)
    assert r.exit_code == 0, r.stderr
    want = _parsed_csv(data)
    tf_cols = {"id": ("fixed", np.int64, ()), "x": ("fixed", np.float64, ()), "name": ("string", None, ())}
    got = read_back(out, fmt, tf_cols)
    m = manifest(out)
    assert m["rows"] == len(ROWS)
    types = {f["name"]: (f["kind"], f["dtype"]) for f in m["schema"]}
    assert types["id"] == ("fixed", "<i8") and types["x"] == ("fixed", "<f8")
    assert list(np.asarray(got["id"])) == want["id"]
    _assert_float(got["x"], want["x"], np.float64)  # exact in every format (TFRecord: as bytes)
    if fmt != "memmap":
        assert list(got["name"]) == want["name"]
    if fmt == "parquet":
        df = read_polars(out)
        assert df["id"].to_list() == want["id"]
        assert df["name"].to_list() == want["name"]


def _npy_inputs(tmp_path, comp):
    rng = np.random.default_rng(7)
    x = np.asfortranarray(rng.normal(size=(300, 3, 2)).astype(np.float32))  # Fortran order
    y = rng.integers(-(2**40), 2**40, size=300).astype(">i8")  # big-endian
    z = rng.integers(0, 255, size=(300, 4)).astype(np.uint8)
    paths = []
    for name, a in (("x", x), ("y", y), ("z", z)):
        if comp is not None and a.flags.f_contiguous and not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)  # a Fortran array cannot be streamed from a compressed file
        buf = io.BytesIO()
        np.save(buf, a)
        paths.append(write(tmp_path / f"{name}.npy", buf.getvalue(), comp))
    return paths, {"x": np.asarray(x), "y": np.asarray(y), "z": z}


@pytest.mark.parametrize("comp", COMPRESSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_npy(tmp_path, fmt, comp):
    paths, want = _npy_inputs(tmp_path, comp)
    out = str(tmp_path / "out")
    r = lovecraft("convert", *paths, "-o", out, "--to", fmt, "--quiet")
    assert r.exit_code == 0, r.stderr
    got = read_back(out, fmt, {name: ("fixed", a.dtype, a.shape[1:]) for name, a in want.items()})
    m = manifest(out)
    assert [f["name"] for f in m["schema"]] == ["x", "y", "z"]
    assert [tuple(f["shape"]) for f in m["schema"]] == [(3, 2), (), (4,)]
    for name, a in want.items():
        g = np.asarray(got[name])
        assert g.shape == a.shape, name
        if fmt == "tfrecord":
            np.testing.assert_array_equal(g, a.astype(np.int64 if a.dtype.kind in "iu" else np.float32))
        else:
            assert g.dtype == a.dtype.newbyteorder("="), name
            np.testing.assert_array_equal(g, a)


TEXT_LINES = ["first line", "", "ünïcödé ✓", "tab\there", "last line with no newline"]


@pytest.mark.parametrize("comp", COMPRESSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_text(tmp_path, fmt, comp):
    body = "\r\n".join(TEXT_LINES[:3]) + "\r\n" + "\n".join(TEXT_LINES[3:])  # CRLF and LF, no final newline
    src = write(tmp_path / "corpus.txt", body.encode(), comp)
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", fmt, "--quiet")
    assert r.exit_code == 0, r.stderr
    got = read_back(out, fmt, {"text": ("string", None, ())})
    assert list(got["text"]) == TEXT_LINES


def test_stdin_csv(tmp_path):
    data = _csv_bytes()
    out = str(tmp_path / "out")
    r = lovecraft("convert", "-", "--input-format", "csv", "-o", out, "--to", "parquet", "--quiet", input=data)
    assert r.exit_code == 0, r.stderr
    assert read_back(out, "parquet")["name"] == _parsed_csv(data)["name"]


def test_stdin_gzip_text(tmp_path):
    import gzip

    out = str(tmp_path / "out")
    r = lovecraft(
        "convert", "-", "--input-format", "text", "-o", out, "--to", "memmap", "-q", input=gzip.compress(b"a\nb\n")
    )
    assert r.exit_code == 0, r.stderr
    assert read_back(out, "memmap")["text"] == ["a", "b"]


def test_glob_and_several_csv_inputs(tmp_path):
    for i in range(3):
        (tmp_path / f"part{i}.csv").write_text(f"a,b\n{i},{i}.5\n{i + 10},1\n")
    out = str(tmp_path / "out")
    r = lovecraft("convert", str(tmp_path / "part*.csv"), "-o", out, "--to", "hdf5", "-q")
    assert r.exit_code == 0, r.stderr
    got = read_back(out, "hdf5")
    assert got["a"].tolist() == [0, 10, 1, 11, 2, 12]
    assert got["b"].tolist() == [0.5, 1.0, 1.5, 1.0, 2.5, 1.0]
    assert [s["name"] for s in manifest(out)["sources"]] == [str(tmp_path / f"part{i}.csv") for i in range(3)]


def test_tfrecord_gzip(tmp_path):
    src = write(tmp_path / "x.npy", _npy_bytes(np.arange(12, dtype=np.float32).reshape(4, 3)))
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "tfrecord", "--compression", "gzip", "-q")
    assert r.exit_code == 0, r.stderr
    m = manifest(out)
    assert m["tfrecord"]["compression"] == "GZIP"
    assert sorted(os.listdir(out)) == ["_manifest.json", "data.tfrecord.gz"]
    path = os.path.join(out, "data.tfrecord.gz")
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:3] == b"\x1f\x8b\x08"  # a gzip member (deflate), not a plain TFRecord under a .gz name
    records = _tfrecord_payloads(gzip.decompress(raw))
    assert len(records) == 4
    # tf.data, told GZIP by the test and given a spec written here, reads the same values
    tf = pytest.importorskip("tensorflow")
    spec = {"x": tf.io.FixedLenFeature([3], tf.float32)}
    got = [tf.io.parse_single_example(r, spec)["x"].numpy() for r in tf.data.TFRecordDataset(path, "GZIP")]
    np.testing.assert_array_equal(np.stack(got), np.arange(12, dtype=np.float32).reshape(4, 3))
    assert [r.numpy() for r in tf.data.TFRecordDataset(path, "GZIP")] == records


def _tfrecord_payloads(data: bytes) -> list[bytes]:
    """The records of an uncompressed TFRecord stream, framing walked here: u64 length, u32 CRC, data, u32 CRC."""
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i : i + 8], "little")
        out.append(data[i + 12 : i + 12 + n])
        i += 12 + n + 4
    assert i == len(data)
    return out


def test_hdf5_compression_and_chunks(tmp_path):
    import h5py

    a = np.random.default_rng(0).normal(size=(5000, 64)).astype(np.float32)
    src = write(tmp_path / "x.npy", _npy_bytes(a))
    out = str(tmp_path / "out")
    assert lovecraft("convert", src, "-o", out, "--to", "hdf5", "--compression", "gzip", "-q").exit_code == 0
    with h5py.File(os.path.join(out, "data.h5")) as h:
        ds = h["x"]
        assert ds.compression == "gzip" and ds.fletcher32
        chunk_bytes = np.prod(ds.chunks) * ds.dtype.itemsize
        assert ds.chunks[1:] == (64,) and chunk_bytes <= (1 << 20)
        np.testing.assert_array_equal(ds[:], a)


def test_parquet_settings(tmp_path):
    import pyarrow.parquet as pq

    a = np.random.default_rng(0).normal(size=(1000, 4)).astype(np.float32)
    src = write(tmp_path / "x.npy", _npy_bytes(a))
    out = str(tmp_path / "out")
    assert lovecraft("convert", src, "-o", out, "--to", "parquet", "-q").exit_code == 0
    md = pq.ParquetFile(os.path.join(out, "data.parquet")).metadata
    assert md.row_group(0).column(0).compression == "ZSTD"
    # page checksums are verified when asked for
    t = pq.read_table(os.path.join(out, "data.parquet"), page_checksum_verification=True)
    np.testing.assert_array_equal(np.stack(t.column("x").to_numpy(zero_copy_only=False)), a)


def test_pandas_and_duckdb_read_parquet_directory(tmp_path):
    pd = pytest.importorskip("pandas")
    duckdb = pytest.importorskip("duckdb")
    (tmp_path / "d.csv").write_text("a,b\n1,x\n2,y\n")
    out = str(tmp_path / "out")
    assert lovecraft("convert", str(tmp_path / "d.csv"), "-o", out, "--to", "parquet", "-q").exit_code == 0
    assert pd.read_parquet(out)["a"].tolist() == [1, 2]
    assert duckdb.sql(f"select sum(a) from read_parquet('{out}/*.parquet')").fetchall()[0][0] == 3


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()
