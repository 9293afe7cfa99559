"""Cutting plain input files into parts at record boundaries, for parallel workers."""

from __future__ import annotations

import numpy as np


def count_block(path: str, start: int, end: int, quoted: bool) -> tuple[int, int]:
    """Quote characters (CSV) or newlines (text) in bytes ``[start, end)`` of a file."""
    n = 0
    needle = b'"' if quoted else b"\n"
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        pos = start
        while pos < end:
            chunk = f.read(min(8 << 20, end - pos))
            if not chunk:
                break
            n += chunk.count(needle)
            pos += len(chunk)
    return n, start


def split_points(path: str, size: int, target: int, quoted: bool, mapper=None) -> list[tuple[int, int]]:
    """Offsets where records start, about ``target`` bytes apart, with the lines before each.

    Records end at a newline; with ``quoted`` (CSV), only at a newline outside quotes, i.e. where
    the number of quote characters since the start of the file is even. The counting pass over
    the whole file runs block by block through ``mapper`` (e.g. a process pool's ordered map);
    only short windows after each nominal split are read here. Returns
    ``[(offset, lines_before), ...]`` starting with ``(0, 0)`` (lines are counted for text only).
    """
    points = [(0, 0)]
    if size <= target:
        return points
    blocks = [(path, k * target, min(size, (k + 1) * target), quoted) for k in range(-(-size // target))]
    counts = [c for c, _ in (mapper or (lambda fn, calls: [fn(*c) for c in calls]))(count_block, blocks)]
    prefix = [0]
    for c in counts:
        prefix.append(prefix[-1] + c)
    k = 1
    with open(path, "rb", buffering=0) as f:
        while k * target < size:
            nominal = k * target
            quotes = prefix[k] if quoted else 0
            lines = 0 if quoted else prefix[k]
            f.seek(nominal)
            pos = nominal
            found = None
            while found is None:
                window = f.read(1 << 20)
                if not window:
                    break
                if quoted and b'"' in window:
                    arr = np.frombuffer(window, dtype=np.uint8)
                    par = (np.cumsum(arr == 34, dtype=np.uint8) + (quotes & 1)) & 1
                    nl = np.flatnonzero((arr == 10) & (par == 0))
                    i = int(nl[0]) if len(nl) else -1
                else:
                    i = window.find(b"\n") if not (quoted and quotes & 1) else -1
                if i >= 0:
                    found = pos + i + 1
                    if not quoted:
                        lines += window[: i + 1].count(b"\n")
                else:
                    if quoted:
                        quotes += window.count(b'"')
                    else:
                        lines += window.count(b"\n")
                    pos += len(window)
            if found is None or found >= size:
                break
            points.append((found, lines))
            k = max(k + 1, found // target + 1)
    return points
