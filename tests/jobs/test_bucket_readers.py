"""A bucketed Parquet dataset opens with the readers the README and ``inspect`` name.

Each padded bucket has its own width; written as fixed-size lists, the files of one directory
disagreed on their schema (``ArrowTypeError: Size of FixedSizeList is not the same``, polars
``Array(UInt8, 134) != Array(UInt8, 61)``). Padded rows are now ``list<T>`` of the bucket's width
(the same bytes in Parquet), so ``pq.read_table(dir)``, ``pd.read_parquet(dir)`` and
``pl.read_parquet(dir/*.parquet)`` open the directory, and our loaders still get dense
``[batch, width]`` arrays."""

from __future__ import annotations

import collections
import os
import re

import numpy as np
import pyarrow as pa
import pytest

from lovecraft_convert import open_dataset
from lovecraft_convert.arrowconv import column_from_arrow
from lovecraft_convert.errors import SchemaError
from lovecraft_convert.schema import FIXED, Field
from tests.conftest import lovecraft


@pytest.fixture(scope="module")
def bucketed(tmp_path_factory):
    rng = np.random.default_rng(3)
    base = tmp_path_factory.mktemp("bucketed")
    lines = ["".join(rng.choice(list("abcdefgh"), size=int(n))) for n in rng.integers(1, 120, size=900)]
    src = base / "lines.txt"
    src.write_text("\n".join(lines) + "\n")
    out = str(base / "b")
    r = lovecraft("bucket", str(src), "-o", out, "--to", "parquet", "--num-buckets", "4", "--num-shards", "2", "-q")
    assert r.exit_code == 0, r.stderr
    return out, lines


def _rows(values, lengths) -> collections.Counter:
    return collections.Counter(bytes(np.asarray(v, dtype=np.uint8)[:n]) for v, n in zip(values, lengths, strict=True))


def test_directory_readers_open_a_bucketed_parquet_dataset(bucketed):
    import pandas as pd
    import polars as pl
    import pyarrow.parquet as pq

    out, lines = bucketed
    want = collections.Counter(s.encode() for s in lines)
    t = pq.read_table(out)
    assert t.schema.field("tokens").type == pa.list_(pa.uint8())
    assert _rows(t.column("tokens").to_pylist(), t.column("length").to_pylist()) == want
    df = pd.read_parquet(out)
    assert _rows(df["tokens"], df["length"]) == want
    pdf = pl.read_parquet(os.path.join(out, "*.parquet"))
    assert _rows(pdf["tokens"].to_list(), pdf["length"].to_list()) == want
    # every row of a bucket's file holds the bucket's width (the padding stays)
    m = open_dataset(out).manifest
    for b in m["buckets"]:
        for path in b["files"]:
            widths = {len(r) for r in pq.read_table(os.path.join(out, path)).column("tokens").to_pylist()}
            assert widths == {b["max_length"]}


def test_the_code_inspect_prints_runs(bucketed):
    out, lines = bucketed
    r = lovecraft("inspect", out)
    assert r.exit_code == 0, r.stderr
    snippets = dict(re.findall(r"load with (\w+):\n((?:    .*\n|\n)+)", r.stdout))
    assert set(snippets) >= {"pyarrow", "pandas", "polars", "lovecraft"}
    sizes = {}
    for name, code in snippets.items():
        body = "\n".join(line[4:] for line in code.splitlines()).replace("...", "pass")
        scope: dict = {}
        exec(body, scope)  # the code as printed, against the dataset
        got = scope.get("table", scope.get("df"))
        sizes[name] = len(got) if got is not None else None
    assert sizes["pyarrow"] == sizes["pandas"] == sizes["polars"] == len(lines)


def test_loaders_get_dense_buckets_and_verify_passes(bucketed):
    out, lines = bucketed
    ds = open_dataset(out)
    seen = collections.Counter()
    for batch in ds.batches(64):
        tokens, lengths = batch["tokens"], batch["length"]
        assert tokens.ndim == 2 and tokens.dtype == np.uint8
        assert tokens.shape[1] in {b["max_length"] for b in ds.manifest["buckets"]}
        seen += _rows(tokens, lengths)
    assert seen == collections.Counter(s.encode() for s in lines)
    r = lovecraft("verify", out)
    assert r.exit_code == 0, r.stdout + r.stderr


def test_both_encodings_of_fixed_rows_read_alike():
    """Datasets written before (fixed-size lists) and after (lists of one width) read the same;
    a list row of another width is refused, naming the row."""
    values = np.arange(12, dtype=np.uint16)
    f = Field("tokens", FIXED, "<u2", (4,))
    old = pa.FixedSizeListArray.from_arrays(pa.array(values), 4)
    new = pa.ListArray.from_arrays(pa.array([0, 4, 8, 12], pa.int32()), pa.array(values))
    np.testing.assert_array_equal(column_from_arrow(old, f), column_from_arrow(new, f))
    assert column_from_arrow(new.slice(1), f).tolist() == [[4, 5, 6, 7], [8, 9, 10, 11]]
    bad = pa.ListArray.from_arrays(pa.array([0, 4, 7, 12], pa.int32()), pa.array(values))
    with pytest.raises(SchemaError) as e:
        column_from_arrow(bad, f)
    assert str(e.value) == "column 'tokens': row 2 of the batch holds 3 values, the schema says (4,)"
