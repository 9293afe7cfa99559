"""Value histograms of numeric columns for ``inspect --plot``, in bounded memory and exact.

Two views are kept while the input streams by, each of a fixed size whatever the input:

* a linear histogram of at most ``BINS`` bins whose width is a power of two (at least 1 for
  integer columns), aligned to multiples of the width: when a value falls outside the bins, the
  width doubles and neighbouring bins merge, so every count stays exact;
* a magnitude histogram: the rows per binade ``[2**(e-1), 2**e)`` of ``|x|``, positive and
  negative apart, zeros apart. It shows a column spread over many orders of magnitude, and where
  it stands against float16 (largest finite 65504, smallest normal ``2**-14``, smallest
  subnormal ``2**-24``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

BINS = 64
EXP_MIN, EXP_MAX = -1100, 1100  # frexp exponents of float64 (subnormals included) fit in this range
SQUASHED = 0.9  # the linear view is squashed when this share of the values sits in ...
SQUASHED_BINS = 3  # ... at most this many of its bins, of ...
WIDE = 16  # ... at least this many (the rest of the axis shows a thin tail)


class ValueHistogram:
    """Both views of one column, updated a block of values at a time."""

    def __init__(self, integer: bool) -> None:
        self.integer = integer
        self.width: float | None = None  # bin width (a power of two); None until a finite value
        self.first = 0  # bin index (value // width) of counts[0]
        self.counts = np.zeros(0, dtype=np.int64)
        self.pos = np.zeros(EXP_MAX - EXP_MIN, dtype=np.int64)
        self.neg = np.zeros(EXP_MAX - EXP_MIN, dtype=np.int64)
        self.zeros = 0
        self.infinite = 0

    def update(self, x: np.ndarray) -> None:
        """Add a block of values (any numeric dtype; NaN are skipped)."""
        if x.size == 0:
            return
        x = x.astype(np.float64, copy=False).reshape(-1)
        finite = np.isfinite(x)
        if not finite.all():
            self.infinite += int(np.count_nonzero(np.isinf(x)))
            x = x[finite]
            if x.size == 0:
                return
        self._linear(x)
        self._magnitude(x)

    def _linear(self, x: np.ndarray) -> None:
        lo, hi = float(x.min()), float(x.max())
        if self.width is None:
            self.width = _first_width(lo, hi, self.integer)
        # bins finer than the values' own spacing (2**-52 of their magnitude) say nothing, and
        # the bin indices then fit an int64
        floor = max(abs(lo), abs(hi)) * 2.0**-52
        while True:
            if self.width < floor:
                self._merge()
                continue
            ilo, ihi = _bin(lo, self.width), _bin(hi, self.width)
            start = min(ilo, self.first) if len(self.counts) else ilo
            stop = max(ihi, self.first + len(self.counts) - 1) if len(self.counts) else ihi
            if stop - start < BINS:
                break
            self._merge()
        if start < self.first or stop >= self.first + len(self.counts):
            grown = np.zeros(stop - start + 1, dtype=np.int64)
            grown[self.first - start : self.first - start + len(self.counts)] = self.counts
            self.counts, self.first = grown, start
        idx = np.floor(x / self.width)
        idx[(x < 0) & (idx == 0)] = -1  # a negative value so small that x / width underflowed to -0.0
        idx = idx.astype(np.int64) - self.first
        self.counts += np.bincount(idx, minlength=len(self.counts))

    def _merge(self) -> None:
        """Double the bin width: bin i goes to i // 2 (floor division, so negative bins too)."""
        self.width *= 2
        if not len(self.counts):
            return
        idx = np.arange(self.first, self.first + len(self.counts)) // 2
        first = int(idx[0])
        self.counts = np.bincount(idx - first, weights=self.counts).astype(np.int64)
        self.first = first

    def _magnitude(self, x: np.ndarray) -> None:
        nz = x != 0
        self.zeros += int(x.size - np.count_nonzero(nz))
        x = x[nz]
        _, e = np.frexp(x)
        e = e.astype(np.int64) - EXP_MIN
        self.pos += np.bincount(e[x > 0], minlength=len(self.pos))
        self.neg += np.bincount(e[x < 0], minlength=len(self.neg))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the linear bins (edges and counts), the binades that hold values and the
        view the plot draws (``linear``, or ``magnitude`` when the linear one is squashed)."""
        if self.width is None:
            return {"values": 0, "infinite": self.infinite}
        nz = np.flatnonzero(self.counts)
        counts = self.counts[nz[0] : nz[-1] + 1] if len(nz) else self.counts
        first = self.first + (int(nz[0]) if len(nz) else 0)
        edges = [(first + i) * self.width for i in range(len(counts) + 1)]
        used = np.flatnonzero(self.pos + self.neg)
        exps = list(range(int(used[0]), int(used[-1]) + 1)) if len(used) else []
        total = int(counts.sum())
        top = np.sort(counts)[::-1]
        squashed = len(counts) >= WIDE and top[:SQUASHED_BINS].sum() >= SQUASHED * total
        return {
            "values": total,
            "infinite": self.infinite,
            "edges": edges,
            "rows": counts.tolist(),
            # binade e holds |x| in [2**(e-1), 2**e)
            "exponents": [e + EXP_MIN for e in exps],
            "positive": [int(self.pos[e]) for e in exps],
            "negative": [int(self.neg[e]) for e in exps],
            "zeros": self.zeros,
            "view": "magnitude" if squashed and len(exps) > 1 else "linear",
        }


def _first_width(lo: float, hi: float, integer: bool) -> float:
    """The smallest power of two that puts ``[lo, hi]`` in ``BINS`` bins (at least 1 for integers)."""
    span = hi - lo
    if span > 0 and math.isfinite(span):
        width = 2.0 ** math.ceil(math.log2(span / (BINS - 1)))
    elif span > 0:  # the span overflows float64
        width = 2.0**1020
    else:  # one value so far: bins a little finer than its magnitude
        width = 2.0 ** (math.frexp(abs(lo))[1] - 6) if lo else 1.0
    return max(width, 1.0) if integer else max(width, 2.0**-1074)


def _bin(v: float, width: float) -> int:
    """The bin of ``v``: ``floor(v / width)``, exact for a power-of-two width (a negative ``v``
    whose quotient underflows to -0.0 is in bin -1)."""
    q = math.floor(v / width)
    return -1 if v < 0 and q == 0 else q
