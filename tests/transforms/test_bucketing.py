"""Length-bucket boundaries: the DP is optimal (checked against brute force) and its figures exact."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lovecraft_convert.transforms.bucketing import MAX_DISTINCT, as_histogram, optimal_boundaries, padding_stats


def _padded(values, counts, bounds) -> int:
    b = np.asarray(bounds)
    return int((b[np.searchsorted(b, values)] * counts).sum())


def _brute(values, counts, k) -> int:
    best = None
    d = len(values)
    for r in range(1, min(k, d) + 1):
        for cut in itertools.combinations(range(d - 1), r - 1):
            bounds = [values[c] for c in cut] + [values[-1]]
            p = _padded(values, counts, bounds)
            best = p if best is None else min(best, p)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_optimal_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 10))
    values = np.sort(rng.choice(200, size=d, replace=False)) + int(rng.integers(0, 2))
    counts = rng.integers(1, 50, size=d)
    k = int(rng.integers(1, 6))
    bounds = optimal_boundaries((values, counts), k)
    assert len(bounds) <= k and bounds == sorted(bounds) and bounds[-1] == values[-1]
    assert _padded(values, counts, bounds) == _brute(values, counts, k)
    assert padding_stats((values, counts), bounds)["padded"] == _padded(values, counts, bounds)


def test_dict_and_arrays_agree_and_repeats_are_added():
    assert as_histogram({5: 2, 1: 3})[0].tolist() == [1, 5]
    v, c = as_histogram(([3, 1, 3, 0], [1, 2, 4, 0]))
    assert v.tolist() == [1, 3] and c.tolist() == [2, 5]
    assert optimal_boundaries({1: 10, 2: 10, 100: 1}, 2) == [2, 100]
    assert optimal_boundaries({}, 3) == []
    with pytest.raises(ValueError):
        optimal_boundaries({1: 1}, 0)


def test_padding_stats_figures():
    s = padding_stats({1: 2, 3: 1, 10: 1}, [3, 10])
    assert (s["rows"], s["tokens"], s["padded"]) == (4, 15, 19)
    assert s["efficiency"] == pytest.approx(15 / 19)
    assert [(b["min_length"], b["max_length"], b["rows"], b["tokens"], b["padded"]) for b in s["buckets"]] == [
        (1, 3, 3, 5, 9),
        (10, 10, 1, 10, 10),
    ]
    assert padding_stats({1: 2, 3: 1, 10: 1})["padded"] == 40  # one bucket: everything padded to 10
    s = padding_stats({1: 2, 30: 1}, [3])
    assert s["overflow_rows"] == 1 and s["padded"] == 6 + 30


def test_many_distinct_lengths_are_coarsened():
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 20_000, size=200_000)
    values, counts = np.unique(lens, return_counts=True)
    assert len(values) > MAX_DISTINCT
    bounds = optimal_boundaries((values, counts), 16)
    assert len(bounds) == 16 and bounds[-1] == int(values[-1])
    # never worse than boundaries at equal-row quantiles
    q = [int(np.percentile(lens, 100 * (i + 1) / 16, method="inverted_cdf")) for i in range(16)]
    assert _padded(values, counts, bounds) <= _padded(values, counts, q)
