"""A wide table of one numeric type travels as one matrix (the CSV reader parses it so, batches
are gathered as one, statistics and the memmap and HDF5 writers take it whole): what each format's
own reader gets back must be the source's values, whatever the batch and chunk boundaries, with
the row count known up front (a Parquet input) or not (a CSV)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import lovecraft

ROWS, WIDTH = 12_321, 96  # past WIDE_COLUMNS (64), the width from which the matrix path is taken


def _source(tmp_path, kind: str) -> tuple[str, np.ndarray]:
    rng = np.random.default_rng(11)
    values = np.round(rng.normal(size=(ROWS, WIDTH)), 5)
    values[7, 3] = np.nan  # a NaN: counted by the statistics, written as it is
    names = [f"c{i}" for i in range(WIDTH)]
    if kind == "csv":
        path = tmp_path / "wide.csv"
        body = "\n".join(",".join("" if np.isnan(x) else repr(float(x)) for x in row) for row in values)
        path.write_text(",".join(names) + "\n" + body + "\n")
    else:
        path = tmp_path / "wide.parquet"
        pq.write_table(pa.table({n: values[:, i] for i, n in enumerate(names)}), path, row_group_size=1000)
    return str(path), values


def _read(fmt: str, out) -> np.ndarray:
    cols = []
    if fmt == "hdf5":
        import h5py

        with h5py.File(out / "data.h5", "r") as f:  # fletcher32 checked on every chunk read
            for i in range(WIDTH):
                d = f[f"c{i}"]
                assert d.shape == (ROWS,) and d.fletcher32
                cols.append(d[:])
    elif fmt == "memmap":
        cols = [np.load(out / f"c{i}.npy", mmap_mode="r") for i in range(WIDTH)]
    else:
        t = pq.read_table(out)
        cols = [t.column(f"c{i}").to_numpy() for i in range(WIDTH)]
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
@pytest.mark.parametrize("fmt", ["hdf5", "memmap", "parquet"])
def test_a_wide_table_of_one_type_reads_back_exactly(tmp_path, kind, fmt):
    import json

    src, values = _source(tmp_path, kind)
    out = tmp_path / "out"
    r = lovecraft("convert", src, "-o", str(out), "--to", fmt, "--max-memory", "16MiB", "-q")
    assert r.exit_code == 0, r.stderr
    got = _read(fmt, out)
    assert got.shape == values.shape and np.array_equal(got, values, equal_nan=True)
    m = json.loads((out / "_manifest.json").read_text())
    st = m["stats"]
    assert st["c3"]["nan"] == 1 and st["c3"]["min"] == np.nanmin(values[:, 3])
    assert [st[f"c{i}"]["max"] for i in range(WIDTH)] == np.nanmax(values, axis=0).tolist()
    v = lovecraft("verify", str(out), "--against", src, "-q")
    assert v.exit_code == 0, v.stderr


def test_the_csv_reader_and_the_gathering_keep_the_matrix(tmp_path):
    """What the tests above rely on: the batches of such a CSV are one matrix each, and so are
    they once gathered (so HDF5 and memmap copy them whole and HDF5 writes chunks of several blocks)."""
    from lovecraft_convert.engine.pipeline import coalesce
    from lovecraft_convert.inputs import open_reader

    src, values = _source(tmp_path, "csv")
    reader = open_reader([src], budget=16 << 20)
    names = list(reader.schema.names)
    batches = list(coalesce(reader.batches(), 1 << 20))
    assert len(batches) > 3 and all(b.matrix_of(names) is not None for b in batches)
    got = np.concatenate([b.matrix_of(names) for b in batches], axis=1).T
    assert np.array_equal(got, values, equal_nan=True)


def test_arrow_batches_take_a_matrix_as_slices_of_one_buffer():
    """Parquet's writer turns a matrix batch into columns that are slices of the matrix's buffer
    (no copy, no per-column conversion); the values and schema are those of the column path."""
    from lovecraft_convert.arrowconv import ArrowBatches, arrow_schema
    from lovecraft_convert.schema import Batch, Field, Schema

    names = [f"c{i}" for i in range(70)]
    schema = Schema(tuple(Field(n, "fixed", "<f4", ()) for n in names))
    m = np.arange(70 * 33, dtype=np.float32).reshape(70, 33)
    conv = ArrowBatches(schema)
    fast = conv(Batch.from_matrix(names, m))
    slow = conv(Batch({n: m[i].copy() for i, n in enumerate(names)}))  # no matrix: column by column
    assert fast.schema == slow.schema == arrow_schema(schema) and fast.num_rows == 33
    assert fast.equals(slow)
    assert fast.column(5).buffers()[1].address == m[5].ctypes.data  # a slice of the matrix
    assert fast.column(69).to_numpy().tolist() == m[69].tolist()
