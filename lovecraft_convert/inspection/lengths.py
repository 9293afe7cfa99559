"""Length figures of a text or sequence column from its exact histogram: percentiles (the
``inverted_cdf`` kind: the smallest length with at least q% of the rows at or below it), a
histogram for the terminal, the length-bucket boundaries that minimise padding, and (for ``--plot``)
finer bins on an axis that shows both the bulk and the tail."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..transforms.bucketing import as_histogram, optimal_boundaries, padding_stats

DEFAULT_BUCKETS = 8
BUCKET_TABLE = (1, 2, 4, 8, 16, 32)
HIST_BINS = 24
PLOT_BINS_LINEAR = 60  # equal-width bins of the plot on a linear axis
PLOT_BINS_PER_DECADE = 24  # geometric bins of the plot on a log axis
HEAVY_TAIL = 8  # a log axis when the longest length is this many times the median (or more)


def length_report(hist: dict[int, int], num_buckets: int | None = None, plot: bool = False) -> dict[str, Any]:
    """Length figures of one column from its exact histogram ``{length: rows}``; with ``plot``,
    also the bins ``--plot`` draws (:func:`plot_bins`)."""

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
    report = {
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
    if plot:
        report["plot_bins"] = plot_bins(values, counts, report["p50"])
    return report


def plot_bins(values: np.ndarray, counts: np.ndarray, p50: int) -> dict[str, Any]:
    """The bins of the plot: on a log axis (``PLOT_BINS_PER_DECADE`` geometric bins of whole
    lengths) when the longest length is ``HEAVY_TAIL`` times the median or more, so that the bulk
    and the tail both show; else up to ``PLOT_BINS_LINEAR`` equal-width bins. Empty rows (length 0)
    have no place on a log axis: they are counted apart in ``zero``."""
    lo, hi = int(values[0]), int(values[-1])
    log = hi >= 64 and hi >= HEAVY_TAIL * max(p50, 1)
    zero = int(counts[values == 0].sum()) if log else 0
    if log:
        start = max(1, lo)
        decades = np.log10((hi + 1) / start)
        edges = np.geomspace(start, hi + 1, max(2, int(np.ceil(decades * PLOT_BINS_PER_DECADE)) + 1))
        edges = np.unique(np.round(edges).astype(np.int64))
        edges[0], edges[-1] = start, hi + 1
    else:
        width = max(1, -(-(hi - lo + 1) // PLOT_BINS_LINEAR))
        edges = np.arange(lo, hi + width + 1, width, dtype=np.int64)
        edges = edges[: int(np.searchsorted(edges, hi + 1)) + 1]
    # bin i holds lengths [edges[i], edges[i+1])
    which = np.searchsorted(edges, values, side="right") - 1
    keep = (which >= 0) & (which < len(edges) - 1)
    rows = np.bincount(which[keep], weights=counts[keep], minlength=len(edges) - 1).astype(np.int64)
    return {
        "scale": "log" if log else "linear",
        "edges": edges.tolist(),
        "rows": rows.tolist(),
        "zero": zero,
    }


def _bins(values, counts) -> list[dict[str, int]]:
    """At most ``HIST_BINS`` equal-width bins of lengths ``[lo, hi]`` with their rows."""
    lo, hi = int(values[0]), int(values[-1])
    width = max(1, -(-(hi - lo + 1) // HIST_BINS))
    idx = (values - lo) // width
    sums = np.bincount(idx, weights=counts).astype(np.int64)
    return [{"lo": lo + i * width, "hi": min(hi, lo + (i + 1) * width - 1), "rows": int(c)} for i, c in enumerate(sums)]
