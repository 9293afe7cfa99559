"""Column statistics: a wide batch's plain numeric columns are reduced together as one array; the
figures must be exactly those of the column-by-column path (the manifest may not depend on width)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lovecraft_convert.schema import Batch, Field, Schema
from lovecraft_convert.stats import WIDE, BatchStats

SPECIAL = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e308, -1e-320, 65504.0]


def _by_column(schema: Schema, batches: list[Batch]) -> dict:
    """The reference: every column on its own (the path narrow tables take)."""
    stats = BatchStats(schema)
    for b in batches:
        for name, cs in stats.columns.items():
            cs.update(b.columns[name])
    return stats.to_dict()


def _same_figures(schema: Schema, batches: list[Batch]) -> None:
    """The batches' statistics equal the column-by-column ones; -0.0 and 0.0 compare equal, so
    the signs of float extremes must agree too."""
    stats = BatchStats(schema)
    for b in batches:
        stats.update(b)
    got, want = stats.to_dict(), _by_column(schema, batches)
    assert got == want
    for name in want:
        for k in ("min", "max"):
            if isinstance(want[name].get(k), float):
                assert np.signbit(got[name][k]) == np.signbit(want[name][k]), (name, k)


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(["float64", "float32", "int64", "uint8", "int16", "bool"]),
    width=st.integers(WIDE, WIDE + 9),
    rows=st.lists(st.integers(1, 40), min_size=1, max_size=3),
    seed=st.integers(0, 2**32 - 1),
    special=st.floats(0, 1),
)
def test_wide_batches_give_the_column_by_column_figures(dtype, width, rows, seed, special):
    rng = np.random.default_rng(seed)
    schema = Schema([Field(f"c{i}", "fixed", dtype) for i in range(width)] + [Field("h", "fixed", "float16")])
    batches = []
    for n in rows:
        cols = {}
        for i in range(width):
            if dtype == "bool":
                a = rng.integers(0, 2, n).astype(bool)
            elif dtype.startswith("float"):
                a = rng.normal(size=n).astype(dtype) * 1e3
                mask = rng.random(n) < special
                with np.errstate(over="ignore"):
                    a[mask] = rng.choice(np.array(SPECIAL).astype(dtype), int(mask.sum()))
                if i == 0:
                    a[:] = np.nan  # a column of NaNs only
            else:
                info = np.iinfo(dtype)
                a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
            cols[f"c{i}"] = a
        cols["h"] = rng.normal(size=n).astype(np.float16)
        batches.append(Batch(cols, n))
    _same_figures(schema, batches)


@settings(max_examples=80, deadline=None)
@given(
    dtype=st.sampled_from(["float64", "float32", "int64", "uint8", "bool"]),
    width=st.integers(WIDE, WIDE + 5),
    plan=st.lists(st.tuples(st.integers(1, 30), st.booleans()), min_size=1, max_size=5),
    seed=st.integers(0, 2**32 - 1),
    special=st.floats(0, 1),
)
def test_matrix_batches_folded_give_the_column_by_column_figures(dtype, width, plan, seed, special):
    """A table of one dtype read as ``[columns, rows]`` matrices (a wide CSV's batches) is folded
    into per-column arrays; mixed with batches of separate columns, with NaNs, infinities and
    signed zeros (ties keep the earlier extreme), the figures are those of column by column."""
    rng = np.random.default_rng(seed)
    names = [f"c{i}" for i in range(width)]
    schema = Schema([Field(n, "fixed", dtype) for n in names])
    batches = []
    for n, as_matrix in plan:
        if dtype == "bool":
            m = rng.integers(0, 2, (width, n)).astype(bool)
        elif dtype.startswith("float"):
            m = (rng.normal(size=(width, n)) * 1e3).astype(dtype)
            mask = rng.random((width, n)) < special
            with np.errstate(over="ignore"):
                m[mask] = rng.choice(np.array(SPECIAL).astype(dtype), int(mask.sum()))
            m[0] = np.nan  # a column of NaNs only
        else:
            info = np.iinfo(dtype)
            m = rng.integers(info.min, info.max, (width, n), dtype=dtype, endpoint=True)
        if as_matrix:
            batches.append(Batch.from_matrix(names, np.ascontiguousarray(m)))
        else:
            batches.append(Batch({c: m[i].copy() for i, c in enumerate(names)}, n))
    _same_figures(schema, batches)


def test_folded_ties_keep_the_earlier_zero_as_column_by_column():
    names = [f"c{i}" for i in range(WIDE)]
    schema = Schema([Field(n, "fixed", "float64") for n in names])
    firsts = [np.array([[0.0, 1.0]] * WIDE), np.array([[-0.0, -1.0]] * WIDE)]
    seconds = [np.array([[-0.0, 2.0]] * WIDE), np.array([[0.0, -2.0]] * WIDE)]
    for a, b in zip(firsts, seconds, strict=True):
        _same_figures(schema, [Batch.from_matrix(names, a), Batch.from_matrix(names, b)])
