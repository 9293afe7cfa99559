"""Timestamps, dates, durations and categories (issue 39, point 8): Parquet input keeps its Arrow
temporal and dictionary types in Parquet output (pandas sees datetime64 and category, polars
Datetime and Categorical); memmap, HDF5 and TFRecord hold the int64 counts with the type in the
manifest's schema, and our loaders give datetime64 back; CSV and JSON Lines take
``--column-type ts=timestamp``, ``day=date``, ``species=category``."""

from __future__ import annotations

import datetime as dt
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.readback import manifest

NAT = np.iinfo(np.int64).min


def _source(tmp_path) -> tuple[str, pa.Table]:
    t = pa.table(
        {
            "ts": pa.array([0, 1_700_000_000_000_000, None, 5], pa.timestamp("us")),
            "tz": pa.array([0, 1_000, 2_000, 3_000], pa.timestamp("ms", tz="UTC")),
            "day": pa.array([0, 19_000, None, 3], pa.date32()),
            "dur": pa.array([1, 2, 3, None], pa.duration("s")),
            "species": pa.array(["Adelie", "Gentoo", "Adelie", "Chinstrap"]).dictionary_encode(),
            "x": [1.0, 2.0, 3.0, 4.0],
        }
    )
    p = str(tmp_path / "in.parquet")
    pq.write_table(t, p)
    return p, t


def _counts(t: pa.Table, name: str) -> np.ndarray:
    """A temporal column's int64 counts, NaT for a null (computed here with pyarrow)."""
    col = t.column(name).combine_chunks()
    ints = col.view(pa.int64() if col.type.bit_width == 64 else pa.int32()).cast(pa.int64())
    return ints.fill_null(NAT).to_numpy()


def test_parquet_keeps_temporal_and_dictionary_types(tmp_path):
    import pandas as pd
    import polars as pl

    src, t = _source(tmp_path)
    out = str(tmp_path / "o")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    got = pq.read_schema(os.path.join(out, "data.parquet"))
    assert {n: str(got.field(n).type) for n in got.names} == {
        "ts": "timestamp[us]",
        "tz": "timestamp[ms, tz=UTC]",
        "day": "date32[day]",
        "dur": "duration[s]",
        "species": "dictionary<values=string, indices=int32, ordered=0>",
        "x": "double",
    }
    back = pq.read_table(out)
    for name in ("ts", "tz", "day", "dur", "species", "x"):  # nulls stay nulls (NaT to pandas)
        assert back.column(name).to_pylist() == t.column(name).to_pylist(), name
    df = pd.read_parquet(out)
    assert str(df["ts"].dtype) == "datetime64[us]" and str(df["tz"].dtype) == "datetime64[ms, UTC]"
    assert str(df["species"].dtype) == "category" and str(df["dur"].dtype) == "timedelta64[s]"
    assert pd.isna(df["ts"][2]) and df["ts"][1] == pd.Timestamp(1_700_000_000, unit="s")
    pdf = pl.read_parquet(os.path.join(out, "*.parquet"))
    assert str(pdf.schema["ts"]) == "Datetime(time_unit='us', time_zone=None)"
    assert str(pdf.schema["species"]) == "Categorical" and str(pdf.schema["day"]) == "Date"
    assert pdf["day"].to_list() == [dt.date(1970, 1, 1), dt.date(2022, 1, 8), None, dt.date(1970, 1, 4)]
    schema = {f["name"]: f.get("logical") for f in manifest(out)["schema"]}
    assert schema["tz"] == {"type": "timestamp", "unit": "ms", "tz": "UTC"} and schema["species"] == {
        "type": "category"
    }
    r = lovecraft("verify", out, "--against", src)
    assert r.exit_code == 0, r.stdout + r.stderr


@pytest.mark.parametrize("to", ["memmap", "hdf5", "tfrecord"])
def test_other_formats_hold_int64_counts_and_loaders_give_datetime64(tmp_path, to):
    src, t = _source(tmp_path)
    out = str(tmp_path / "o")
    r = lovecraft("convert", src, "-o", out, "--to", to, "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    if to == "memmap":  # np.load: the counts the manifest describes
        np.testing.assert_array_equal(np.load(os.path.join(out, "ts.npy")), _counts(t, "ts"))
        np.testing.assert_array_equal(np.load(os.path.join(out, "day.npy")), _counts(t, "day"))
    elif to == "hdf5":
        import h5py

        with h5py.File(os.path.join(out, "data.h5")) as f:
            np.testing.assert_array_equal(f["tz"][:], _counts(t, "tz"))
            np.testing.assert_array_equal(f["dur"][:], _counts(t, "dur"))
    b = next(iter(lc.open_dataset(out).batches(batch_size=4)))
    assert b["ts"].dtype == np.dtype("datetime64[us]") and b["day"].dtype == np.dtype("datetime64[D]")
    assert b["dur"].dtype == np.dtype("timedelta64[s]")
    np.testing.assert_array_equal(b["ts"], t.column("ts").to_numpy())  # NaT where the source is null
    np.testing.assert_array_equal(b["day"].view(np.int64), _counts(t, "day"))
    assert list(b["species"]) == t.column("species").to_pylist()
    r = lovecraft("verify", out, "--against", src)
    assert r.exit_code == 0, r.stdout + r.stderr


CSV = (
    "ts,day,species,v\n2024-01-31T10:00:00,2024-01-31,Adelie,1\n2024-02-01 11:30:00.5,,Gentoo,2\n,2024-02-02,Adelie,3\n"
)
TYPES = ["--column-type", "ts=timestamp", "--column-type", "day=date", "--column-type", "species=category"]


def _jsonl(text: str) -> str:
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(text)))
    return "".join(json.dumps({k: (v or None) if k != "v" else int(v) for k, v in r.items()}) + "\n" for r in rows)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_column_type_timestamp_date_category(tmp_path, kind):
    import pandas as pd

    src = tmp_path / f"t.{kind}"
    src.write_text(CSV if kind == "csv" else _jsonl(CSV))
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", "parquet", "-q", *TYPES)
    assert (r.exit_code, r.stderr) == (0, "")
    df = pd.read_parquet(out)
    assert str(df["ts"].dtype) == "datetime64[us]" and str(df["species"].dtype) == "category"
    want = pd.to_datetime(pd.Series(["2024-01-31T10:00:00", "2024-02-01 11:30:00.5", None]), format="ISO8601")
    assert df["ts"].tolist()[:2] == want.tolist()[:2] and pd.isna(df["ts"][2])
    assert df["day"].tolist() == [dt.date(2024, 1, 31), None, dt.date(2024, 2, 2)]
    assert list(df["species"]) == ["Adelie", "Gentoo", "Adelie"]
    r = lovecraft("verify", out, "--against", str(src))
    assert r.exit_code == 0, r.stdout + r.stderr
    m = lc.convert(str(src), str(tmp_path / "m"), to="memmap", column_types={"ts": "timestamp[ms]", "day": "date"})
    assert m["schema"][0]["logical"] == {"type": "timestamp", "unit": "ms"} and m["schema"][0]["dtype"] == "<i8"
    ts = np.load(str(tmp_path / "m" / "ts.npy"))
    assert ts.astype("datetime64[ms]")[1] == np.datetime64("2024-02-01T11:30:00.500") and ts[2] == NAT
    rep = lc.inspect(str(src), column_types={"ts": "timestamp", "species": "category"})
    assert [c["type"] for c in rep["columns"]][:3] == ["timestamp[us]", "string", "category"]


def test_timestamp_errors_name_the_fix(tmp_path):
    src = tmp_path / "z.csv"
    src.write_text("ts\n2024-01-31T10:00:00+02:00\n")
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet", "--column-type", "ts=timestamp")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, row 1 (line 2), column 'ts': '2024-01-31T10:00:00+02:00' has a zone offset, the type "
        "timestamp has none; read it as --column-type 'ts=timestamp[us, UTC]'\n",
    )
    r = lovecraft(
        "convert",
        str(src),
        "-o",
        str(tmp_path / "o"),
        "--to",
        "parquet",
        "-q",
        "--column-type",
        "ts=timestamp[ms, UTC]",
    )
    assert r.exit_code == 0, r.stderr
    assert pq.read_table(str(tmp_path / "o")).column("ts").to_pylist() == [
        dt.datetime(2024, 1, 31, 8, 0, tzinfo=dt.UTC)
    ]
    src.write_text("ts\nyesterday\n")
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o2"), "--to", "parquet", "--column-type", "ts=timestamp")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, row 1 (line 2), column 'ts': 'yesterday' is not a valid timestamp; "
        "fix the value or choose another --column-type\n",
    )
    j = tmp_path / "z.jsonl"
    j.write_text('{"ts": 5}\n')
    r = lovecraft("convert", str(j), "-o", str(tmp_path / "o3"), "--to", "parquet", "--column-type", "ts=timestamp")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {j}, line 1, key 'ts': 5 is not a valid timestamp (a string is); fix the value\n",
    )
    r = lovecraft("convert", str(j), "-o", str(tmp_path / "o3"), "--to", "parquet", "--column-type", "ts=datetime")
    assert (
        r.exit_code == 2
        and "unknown type 'datetime'" in r.stderr
        and "timestamp[UNIT[, TZ]], date, time[UNIT], duration[UNIT], category" in r.stderr
    )
