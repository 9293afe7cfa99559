"""The scatter half of the external shuffle: a seeded hash of (part, row) chooses each record's
hash bucket. Depends only on the seed, the part's index and the row, never on the workers."""

from __future__ import annotations

import numpy as np


def hash_bucket(seed: int, part: int, rows: np.ndarray, buckets: int) -> np.ndarray:
    """A seeded hash (splitmix64) of (part, row) modulo the bucket count."""
    x = rows.astype(np.uint64) + np.uint64((part * 0x9E3779B97F4A7C15 + seed * 0xBF58476D1CE4E5B9) % (1 << 64))
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(buckets)).astype(np.int64)
