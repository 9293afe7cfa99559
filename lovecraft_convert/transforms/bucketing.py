"""Length buckets: choosing boundaries that minimise padding, and measuring what padding costs.

A batch of sequences is padded to its longest row. Grouping rows by length into K buckets (each
batch drawn from one bucket, padded to the bucket's upper boundary) cuts the padding. Given the
exact length histogram, :func:`optimal_boundaries` chooses the K upper boundaries that minimise the
total padded tokens ``sum over buckets of (upper boundary x rows in the bucket)``: an exact dynamic
programme over the D distinct lengths, O(K * D^2) in vectorised steps. Beyond ``MAX_DISTINCT``
distinct lengths the histogram is first coarsened (lengths merged into ``MAX_DISTINCT`` groups of
about equal rows, each represented by its largest length), which can only overstate the padding.

Boundaries are inclusive upper bounds: bucket ``i`` holds lengths in
``(boundaries[i-1], boundaries[i]]`` (the first from the shortest length), and the last boundary
is the longest length.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

MAX_DISTINCT = 2048


def as_histogram(lengths_hist: Any) -> tuple[np.ndarray, np.ndarray]:
    """``{length: count}`` or ``(values, counts)`` as sorted distinct lengths and their counts (int64)."""
    if isinstance(lengths_hist, Mapping):
        values = np.fromiter((int(k) for k in lengths_hist), dtype=np.int64, count=len(lengths_hist))
        counts = np.fromiter((int(v) for v in lengths_hist.values()), dtype=np.int64, count=len(lengths_hist))
    else:
        values, counts = lengths_hist
        values = np.asarray(values, dtype=np.int64).reshape(-1)
        counts = np.asarray(counts, dtype=np.int64).reshape(-1)
        if values.shape != counts.shape:
            raise ValueError("values and counts differ in length")
    if (counts < 0).any() or (values < 0).any():
        raise ValueError("lengths and counts must be non-negative")
    keep = counts > 0
    values, counts = values[keep], counts[keep]
    order = np.argsort(values, kind="stable")
    values, counts = values[order], counts[order]
    if len(values) > 1 and (np.diff(values) == 0).any():  # repeated lengths: add their counts
        uniq, inv = np.unique(values, return_inverse=True)
        counts = np.bincount(inv, weights=counts).astype(np.int64)
        values = uniq
    return values, counts


def _coarsen(values: np.ndarray, counts: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``limit`` groups of consecutive lengths with about equal rows; a group is represented
    by its largest length (a valid upper boundary for all of its rows)."""
    cum = np.cumsum(counts)
    total = int(cum[-1])
    # group g ends at the last length whose cumulative count reaches (g+1)/limit of the rows
    targets = np.ceil(np.arange(1, limit + 1) * (total / limit))
    ends = np.unique(np.minimum(np.searchsorted(cum, targets, side="left"), len(values) - 1))
    starts = np.concatenate(([0], ends[:-1] + 1))
    group_counts = np.add.reduceat(counts, starts)
    return values[ends], group_counts.astype(np.int64)


def optimal_boundaries(lengths_hist: Any, k: int) -> list[int]:
    """The ``k`` (or fewer, when there are fewer distinct lengths) inclusive upper boundaries that
    minimise the total padded tokens, ascending; the last is the longest length."""
    if k < 1:
        raise ValueError("k must be at least 1")
    values, counts = as_histogram(lengths_hist)
    if len(values) == 0:
        return []
    if len(values) <= k:
        return [int(v) for v in values]
    if len(values) > MAX_DISTINCT:
        values, counts = _coarsen(values, counts, MAX_DISTINCT)
        if len(values) <= k:
            return [int(v) for v in values]
    d = len(values)
    c = np.concatenate(([0], np.cumsum(counts))).astype(np.float64)  # rows before each length
    lv = values.astype(np.float64)
    # cost[a, i]: rows of lengths a..i-1 padded to values[i-1]  (a < i); cumsums stay exact in float64
    # below 2**53 padded tokens.
    i_idx = np.arange(1, d + 1)
    a_idx = np.arange(d)
    cost = lv[i_idx - 1][None, :] * (c[i_idx][None, :] - c[a_idx][:, None])
    invalid = a_idx[:, None] >= i_idx[None, :]
    cost[invalid] = np.inf
    # dp[i]: best cost of the first i lengths with j buckets; choice[j][i]: where the last bucket starts
    dp = cost[0].copy()  # one bucket: lengths 0..i-1
    choices = []
    for _ in range(1, k):
        total = dp[:-1, None] + cost[1:, :]  # previous buckets end at a (1..d-1), the last covers a..i-1
        best = np.argmin(total, axis=0)
        new = total[best, np.arange(d)]
        # keeping fewer buckets is never better, but it is the only option for the first lengths
        better = new < dp
        dp = np.where(better, new, dp)
        choices.append(np.where(better, best + 1, -1))
    # walk back from the last length
    bounds = [int(values[-1])]
    i = d
    for ch in reversed(choices):
        a = int(ch[i - 1])
        if a <= 0:
            continue
        bounds.append(int(values[a - 1]))
        i = a
    return sorted(set(bounds))


def padding_stats(lengths_hist: Any, boundaries: list[int] | None = None) -> dict[str, Any]:
    """Tokens, padded tokens and efficiency (tokens / padded) when each row is padded to the upper
    boundary of its bucket; without ``boundaries``, one bucket padded to the longest length.

    Lengths above the last boundary are counted in ``overflow_rows`` (and padded to their own length).
    """
    values, counts = as_histogram(lengths_hist)
    if boundaries is None or not len(boundaries):
        boundaries = [int(values[-1])] if len(values) else []
    bounds = np.asarray(sorted(int(b) for b in boundaries), dtype=np.int64)
    tokens = int((values * counts).sum())
    rows = int(counts.sum())
    which = np.searchsorted(bounds, values, side="left")  # bucket of each distinct length
    over = which >= len(bounds)
    buckets = []
    padded_total = 0
    lo = 0
    for b, ub in enumerate(bounds.tolist()):
        sel = which == b
        n = int(counts[sel].sum())
        t = int((values[sel] * counts[sel]).sum())
        p = ub * n
        padded_total += p
        buckets.append(
            {
                "index": b,
                "min_length": int(values[sel][0]) if n else lo,
                "max_length": int(ub),
                "rows": n,
                "tokens": t,
                "padded": p,
                "efficiency": (t / p) if p else 1.0,
            }
        )
        lo = ub + 1
    overflow_rows = int(counts[over].sum())
    padded_total += int((values[over] * counts[over]).sum())
    return {
        "rows": rows,
        "tokens": tokens,
        "padded": padded_total,
        "efficiency": (tokens / padded_total) if padded_total else 1.0,
        "overflow_rows": overflow_rows,
        "buckets": buckets,
    }
