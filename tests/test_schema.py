"""``VarColumn.take``: the rows asked for, in the order asked, for every value dtype and any
index (repeats, negatives, a column sliced out of a larger one), against a row-by-row gather."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lovecraft_convert.schema import VarColumn

DTYPES = ["|u1", "<i4", ">f8", "<u2", "|b1"]


@st.composite
def columns_and_indices(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    lens = draw(st.lists(st.integers(0, 40), min_size=1, max_size=60))
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    extra = draw(st.integers(0, 5))  # values past the last row (a column cut from a larger buffer)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = rng.integers(0, 200, size=int(offsets[-1]) + extra).astype(dtype)
    col = VarColumn(values, offsets)
    if draw(st.booleans()) and len(lens) > 1:  # a slice: offsets rebased, values cut
        a = draw(st.integers(0, len(lens) - 1))
        b = draw(st.integers(a + 1, len(lens)))
        col = col.slice(a, b)
    n = len(col)
    idx = draw(st.lists(st.integers(-n, n - 1), max_size=80))
    return col, np.array(idx, dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(columns_and_indices())
def test_take_equals_a_row_by_row_gather(case):
    col, idx = case
    got = col.take(idx)
    assert len(got) == len(idx)
    assert got.values.dtype == col.values.dtype
    for k, i in enumerate((idx % max(1, len(col))).tolist()):
        want = col.values[col.offsets[i] : col.offsets[i + 1]]
        np.testing.assert_array_equal(got.values[got.offsets[k] : got.offsets[k + 1]], want)
    assert int(got.offsets[-1]) == len(got.values)


def test_take_gives_a_writable_array_of_its_own():
    col = VarColumn(np.arange(10, dtype=np.uint8), np.array([0, 3, 10]))
    got = col.take(np.array([1, 0]))
    got.values[0] = 99  # a later step may write into a batch's values
    assert col.values[3] == 3 and got.values.flags.owndata is False and got.values.flags.writeable


def test_offsets_past_the_values_raise_as_numpy_does():
    """A damaged column (offsets beyond its values, or decreasing: an edited manifest's) is never
    handed to Arrow, which would read past the buffer: the gather raises IndexError or ValueError."""
    col = VarColumn(np.arange(10, dtype=np.uint8), np.array([0, 3, 50]))
    with pytest.raises(IndexError):
        col.take(np.array([1]))
    back = VarColumn(np.arange(10, dtype=np.uint8), np.array([0, 6, 2, 10]))
    with pytest.raises(ValueError):
        back.take(np.array([1]))
    assert bytes(col.take(np.array([0])).values) == bytes([0, 1, 2])
