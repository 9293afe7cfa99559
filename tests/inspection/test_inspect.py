"""lovecraft inspect: every figure of ``--json`` equals one computed here, independently, with the
csv module and NumPy; dataset inspection gives code that loads the dataset."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest

import lovecraft_convert as lc
from lovecraft_convert.inspection import inspect as inspect_fn
from tests.conftest import lovecraft


def _pct(lengths: np.ndarray, q: int) -> int:
    return int(np.percentile(lengths, q, method="inverted_cdf"))


def _f16_figures(v: np.ndarray) -> dict:
    """What casting to float16 costs, computed directly."""
    v = v[~np.isnan(v)].astype(np.float64)
    with np.errstate(over="ignore"):
        h = v.astype(np.float16)
    finite = np.isfinite(v)
    over = np.isinf(h) & finite
    ok = finite & ~over
    err = np.abs(h[ok].astype(np.float64) - v[ok])
    rel = np.divide(err, np.abs(v[ok]), out=np.zeros_like(err), where=v[ok] != 0)
    return {
        "overflow": int(over.sum()),
        "flushed_to_zero": int(((h == 0) & (v != 0)).sum()),
        "max_abs_error": float(err.max()),
        "max_rel_error": float(rel.max()),
    }


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    d = tmp_path_factory.mktemp("inspect_csv")
    rng = np.random.default_rng(3)
    n = 5000
    value = rng.normal(scale=50, size=n)
    value[::97] = 1e-9  # flushes to zero in float16
    value[5] = 1e5  # overflows float16
    value[6] = -7e4
    names = ["".join("é" if c % 5 == 0 else "x" for c in range(int(k))) for k in rng.integers(0, 60, size=n)]
    p = d / "table.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "value", "name"])
        for i in range(n):
            w.writerow([i * 3 - 100, "" if i % 11 == 0 else repr(float(value[i])), names[i]])
    return str(p)


def _parse(path: str) -> dict[str, np.ndarray]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    return {
        "id": np.array([int(r[0]) for r in rows], dtype=np.int64),
        "value": np.array([float(r[1]) if r[1] else np.nan for r in rows]),
        "name_len": np.array([len(r[2].encode("utf-8")) for r in rows], dtype=np.int64),
    }


def test_csv_figures_equal_independent_ones(table):
    r = lovecraft("inspect", table, "--json")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    want = _parse(table)
    n = len(want["id"])
    assert rep["rows"] == n and rep["rows_exact"] is True
    assert rep["format"] == "csv" and rep["inputs"][0]["compression"] is None
    assert rep["size"] == os.path.getsize(table)
    cols = {c["name"]: c for c in rep["columns"]}
    assert [c["name"] for c in rep["columns"]] == ["id", "value", "name"]

    i = cols["id"]
    assert (i["dtype"], i["count"], i["nan"]) == ("int64", n, 0)
    assert i["min"] == int(want["id"].min()) and i["max"] == int(want["id"].max())
    assert i["mean"] == pytest.approx(float(want["id"].mean()), rel=1e-12)
    assert "float16" not in i

    v = cols["value"]
    vals = want["value"]
    assert v["dtype"] == "float64" and v["nan"] == int(np.isnan(vals).sum())
    assert v["min"] == float(np.nanmin(vals)) and v["max"] == float(np.nanmax(vals))
    assert v["mean"] == pytest.approx(float(np.nanmean(vals)), rel=1e-9)
    f16 = _f16_figures(vals)
    assert v["float16"]["overflow"] == f16["overflow"] == 2
    assert v["float16"]["flushed_to_zero"] == f16["flushed_to_zero"] > 0
    assert v["float16"]["max_abs_error"] == pytest.approx(f16["max_abs_error"], rel=1e-12)
    assert v["float16"]["max_rel_error"] == pytest.approx(f16["max_rel_error"], rel=1e-12)

    s = cols["name"]
    lens = want["name_len"]
    assert s["kind"] == "string" and s["count"] == n and s["empty"] == int((lens == 0).sum())
    ln = s["lengths"]
    assert (ln["min"], ln["max"]) == (int(lens.min()), int(lens.max()))
    assert ln["mean"] == pytest.approx(float(lens.mean()), rel=1e-12)
    assert (ln["p50"], ln["p90"], ln["p99"]) == (_pct(lens, 50), _pct(lens, 90), _pct(lens, 99))
    assert sum(b["rows"] for b in ln["histogram"]) == n
    for b in ln["histogram"]:
        assert b["rows"] == int(((lens >= b["lo"]) & (lens <= b["hi"])).sum())
    # the suggested boundaries and their efficiency, recomputed from the lengths
    bounds = ln["buckets"]["boundaries"]
    assert len(bounds) == 8 and bounds[-1] == int(lens.max())
    padded = np.array(bounds)[np.searchsorted(bounds, lens)]
    assert ln["buckets"]["padded"] == int(padded.sum())
    assert ln["buckets"]["tokens"] == int(lens.sum())
    assert ln["buckets"]["efficiency"] == pytest.approx(lens.sum() / padded.sum())
    assert ln["efficiency_unbucketed"] == pytest.approx(lens.sum() / (lens.max() * n))


def test_npy_figures(tmp_path):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(20_000, 3)).astype(np.float32)
    x[3, 2] = np.nan
    y = rng.integers(0, 7, size=20_000).astype(np.uint8)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    rep = lc.inspect([str(tmp_path / "x.npy"), str(tmp_path / "y.npy")])
    cx, cy = rep["columns"]
    assert (cx["dtype"], cx["shape"], cx["count"], cx["values"], cx["nan"]) == ("float32", [3], 20_000, 60_000, 1)
    assert cx["min"] == float(np.nanmin(x)) and cx["max"] == float(np.nanmax(x))
    assert cx["mean"] == pytest.approx(float(np.nanmean(x.astype(np.float64))), rel=1e-9)
    f16 = _f16_figures(x.reshape(-1))
    assert cx["float16"]["max_abs_error"] == pytest.approx(f16["max_abs_error"], rel=1e-6)
    assert cx["float16"]["flushed_to_zero"] == f16["flushed_to_zero"]
    assert (cy["dtype"], cy["min"], cy["max"]) == ("uint8", int(y.min()), int(y.max()))
    assert cy["mean"] == pytest.approx(float(y.mean()))


def test_text_lengths_in_bytes_crlf_excluded(tmp_path):
    lines = ["", "héllo", "a" * 300, "xyz"] * 250
    (tmp_path / "t.txt").write_bytes("".join(line + "\r\n" for line in lines).encode())
    rep = lc.inspect(str(tmp_path / "t.txt"))
    (c,) = rep["columns"]
    lens = np.array([len(s.encode()) for s in lines])
    ln = c["lengths"]
    assert (ln["min"], ln["p50"], ln["p90"], ln["max"]) == (0, _pct(lens, 50), _pct(lens, 90), 300)
    assert c["empty"] == 250 and rep["rows"] == 1000


def test_sample_estimates_and_says_so(tmp_path):
    rng = np.random.default_rng(8)
    p = tmp_path / "t.txt"
    p.write_text("".join("w" * int(k) + "\n" for k in rng.integers(0, 100, size=300_000)))
    rep = lc.inspect(str(p), sample=20_000)
    assert rep["rows_exact"] is False and rep["sample_rows"] == 20_000
    assert rep["rows"] == pytest.approx(300_000, rel=0.1)
    assert rep["columns"][0]["count"] == 20_000
    full = lc.inspect(str(p), sample=10**9)  # a sample larger than the input is the whole input, exact
    assert full["rows_exact"] is True and full["rows"] == 300_000


def test_estimated_sizes_are_close_to_the_real_ones(tmp_path):
    rng = np.random.default_rng(2)
    np.save(tmp_path / "x.npy", rng.normal(size=(300_000, 8)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 1000, size=300_000))
    src = [str(tmp_path / "x.npy"), str(tmp_path / "y.npy")]
    rep = lc.inspect(src)
    for fmt, tol in (("memmap", 0.01), ("hdf5", 0.1), ("tfrecord", 0.02), ("parquet", 0.2)):
        out = str(tmp_path / fmt)
        m = lc.convert(src, out, to=fmt, progress=False)
        real = sum(f["bytes"] for f in m["files"])
        assert rep["estimated_bytes"][fmt] == pytest.approx(real, rel=tol), fmt
    out = str(tmp_path / "f16")
    m = lc.convert(src, out, to="memmap", dtype="float16", progress=False)
    assert rep["estimated_bytes_float16"]["memmap"] == pytest.approx(sum(f["bytes"] for f in m["files"]), rel=0.01)


def test_csv_with_strings_can_be_memmap(table):
    rep = lc.inspect(table)
    assert rep["estimated_bytes"]["memmap"] > 0  # strings as values + offsets
    assert rep["estimated_bytes"]["parquet"] > 0


def test_callable_twice(tmp_path):
    """``lovecraft_convert.inspect`` (the lazy public attribute) and ``lovecraft_convert.inspection.inspect``
    are the same function: both spellings, with the same arguments, give the same report (checked
    here against figures computed directly)."""
    assert lc.inspect is inspect_fn
    lines = ["a", "bb", "", "héllo"] * 50
    p = tmp_path / "t.txt"
    p.write_bytes("".join(line + "\n" for line in lines).encode())
    lens = np.array([len(s.encode()) for s in lines])
    reports = [lc.inspect(str(p), sample=20), inspect_fn(str(p), sample=20), lc.inspect([str(p)], sample=20)]
    assert reports[0] == reports[1] == reports[2]
    rep = reports[0]
    assert (rep["rows_exact"], rep["sample_rows"], rep["columns"][0]["count"]) == (False, 20, 20)  # sample= reached
    whole = lc.inspect(str(p))
    assert whole == inspect_fn(str(p))
    assert (whole["rows"], whole["rows_exact"]) == (len(lines), True)
    ln = whole["columns"][0]["lengths"]
    assert (ln["min"], ln["max"], whole["columns"][0]["empty"]) == (0, int(lens.max()), 50)


def test_dataset_inspection_and_its_loading_code(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(500, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    lines = [f"row {i}" for i in range(500)]
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n")
    cases = {
        "memmap": ([str(tmp_path / "x.npy")], "numpy"),
        "text_memmap": ([str(tmp_path / "t.txt")], "numpy"),
        "hdf5": ([str(tmp_path / "x.npy")], "h5py"),
        "parquet": ([str(tmp_path / "x.npy")], "pyarrow"),
    }
    for name, (src, lib) in cases.items():
        out = str(tmp_path / name)
        m = lc.convert(src, out, to=name.split("_")[-1], dtype="float16" if name == "hdf5" else None, progress=False)
        rep = lc.inspect(out)
        assert rep["kind"] == "dataset" and rep["rows"] == 500 and rep["format"] == m["output_format"]
        assert rep["bytes"] == sum(f["bytes"] for f in m["files"])
        assert rep["argv"] == m["argv"] and rep["options"] == m["options"]
        assert rep["float16"] == m["float16"]
        ns: dict = {}
        exec(rep["load"][lib], ns)
        if name == "memmap" or name == "hdf5":
            np.testing.assert_array_equal(np.asarray(ns["x"]), x.astype(np.float16) if name == "hdf5" else x)
        elif name == "text_memmap":
            v, o = ns["text_values"], ns["text_offsets"]
            assert bytes(v[o[7] : o[8]]).decode() == "row 7"
        else:
            np.testing.assert_array_equal(np.stack(ns["table"].column("x").to_pylist()), x)
    tf = lc.convert([str(tmp_path / "x.npy")], str(tmp_path / "tfr"), to="tfrecord", progress=False)
    rep = lc.inspect(str(tmp_path / "tfr"))
    code = rep["load"]["tf.data"]
    assert '"x": tf.io.FixedLenFeature([4], tf.float32),' in code
    assert "tf.data.TFRecordDataset(" in code and tf["tfrecord"]["feature_spec"]["x"]["shape"] == [4]


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    p = tmp_path / "t.txt"
    p.write_text("".join("a" * (i % 40) + "\n" for i in range(2000)))
    png = tmp_path / "lengths.png"
    r = lovecraft("inspect", str(p), "--plot", str(png), "--num-buckets", "3")
    assert r.exit_code == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {png}" in r.stdout
    np.save(tmp_path / "x.npy", np.zeros((3, 2)))  # numeric columns: value histograms (tests/inspection/test_plot.py)
    r = lovecraft("inspect", str(tmp_path / "x.npy"), "--plot", str(tmp_path / "x.png"))
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "x.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
