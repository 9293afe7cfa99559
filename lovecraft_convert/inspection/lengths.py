"""Length figures of a text or sequence column from its exact histogram: percentiles (the
``inverted_cdf`` kind: the smallest length with at least q% of the rows at or below it), a
histogram for the terminal, and the length-bucket boundaries that minimise padding."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..transforms.bucketing import as_histogram, optimal_boundaries, padding_stats

DEFAULT_BUCKETS = 8
BUCKET_TABLE = (1, 2, 4, 8, 16, 32)
HIST_BINS = 24


def length_report(hist: dict[int, int], num_buckets: int | None = None) -> dict[str, Any]:
    """Length figures of one column from its exact histogram ``{length: rows}``."""

    values, counts = as_histogram(hist)
    n = int(counts.sum())
    if n == 0:
        return {"rows": 0}
    cum = np.cumsum(counts)

    def pct(q: int) -> int:
        target = max(1, -(-q * n // 100))
        return int(values[int(np.searchsorted(cum, target, side="left"))])

    k = num_buckets or DEFAULT_BUCKETS
    bounds = optimal_boundaries((values, counts), k)
    stats = padding_stats((values, counts), bounds)
    table = {}
    for kk in sorted({*BUCKET_TABLE, k}):
        b = bounds if kk == k else optimal_boundaries((values, counts), kk)
        table[str(kk)] = round(padding_stats((values, counts), b)["efficiency"], 6)
    return {
        "rows": n,
        "min": int(values[0]),
        "mean": float((values * counts).sum() / n),
        "p50": pct(50),
        "p90": pct(90),
        "p99": pct(99),
        "max": int(values[-1]),
        "distinct": len(values),
        "histogram": _bins(values, counts),
        "buckets": {
            "k": k,
            "boundaries": bounds,
            "tokens": stats["tokens"],
            "padded": stats["padded"],
            "efficiency": stats["efficiency"],
            "detail": stats["buckets"],
        },
        "efficiency_unbucketed": padding_stats((values, counts))["efficiency"],
        "efficiency_by_k": table,
    }


def _bins(values, counts) -> list[dict[str, int]]:
    """At most ``HIST_BINS`` equal-width bins of lengths ``[lo, hi]`` with their rows."""
    lo, hi = int(values[0]), int(values[-1])
    width = max(1, -(-(hi - lo + 1) // HIST_BINS))
    idx = (values - lo) // width
    sums = np.bincount(idx, weights=counts).astype(np.int64)
    return [{"lo": lo + i * width, "hi": min(hi, lo + (i + 1) * width - 1), "rows": int(c)} for i, c in enumerate(sums)]
