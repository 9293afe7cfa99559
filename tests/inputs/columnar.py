"""Helpers of the Parquet / Arrow / Hugging Face input tests: read-back columns as plain Python
values, NaN-aware comparison, file digests."""

from __future__ import annotations

import glob
import hashlib
import math
import os

import numpy as np

NAT = -(2**63)
NAN = float("nan")


def plain(col) -> list:
    """A column read back by any client (numpy array, list of arrays, list of str) as Python values."""
    if isinstance(col, np.ndarray):
        return col.tolist()
    if hasattr(col, "to_list"):  # polars
        return col.to_list()
    return [r.tolist() if isinstance(r, np.ndarray) else (list(r) if isinstance(r, tuple) else r) for r in col]


def same(a, b, f32: bool = False) -> bool:
    """Equal, NaN equal to NaN (``f32``: floats compared after rounding to float32, as TFRecord stores
    them); bytes equal to the list of their values (memmap reads binary rows as uint8 arrays)."""
    if isinstance(b, bytes) and isinstance(a, (list, np.ndarray)):
        a = bytes(a)
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (
            isinstance(a, (list, tuple))
            and isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(same(x, y, f32) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, float) or isinstance(b, float):
        try:
            x, y = float(a), float(b)
        except (TypeError, ValueError):
            return False
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        if f32:
            return np.float32(x) == np.float32(y)
        return x == y
    return a == b


def assert_columns(got: dict, want: dict, f32: bool = False) -> None:
    for name, values in want.items():
        g = plain(got[name])
        assert same(g, values, f32), (name, g, values)


def digest(out: str) -> dict[str, str]:
    """Every data file's sha256 (the manifest records times, so it is left out)."""
    return {
        os.path.relpath(p, out): hashlib.sha256(open(p, "rb").read()).hexdigest()
        for p in sorted(glob.glob(os.path.join(out, "**", "*"), recursive=True))
        if os.path.isfile(p) and not p.endswith("_manifest.json")
    }
