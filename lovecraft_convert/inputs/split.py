"""Cutting plain input files into parts at record boundaries, for parallel workers."""

from __future__ import annotations

from ..storage import open_input
from .csvquote import Syntax, apply, block_map, data_origin, first_line_start, next_record_start


def count_block(path: str, start: int, end: int) -> int:
    """Newlines in bytes ``[start, end)`` of a file."""
    n = 0
    with open_input(path, buffering=0) as f:
        f.seek(start)
        pos = start
        while pos < end:
            chunk = f.read(min(8 << 20, end - pos))
            if not chunk:
                break
            n += chunk.count(b"\n")
            pos += len(chunk)
    return n


def split_points(
    path: str,
    size: int,
    target: int,
    quoted: bool,
    mapper=None,
    syntax: Syntax | None = None,
    skip_rows: int = 0,
    header: bool = False,
) -> list[tuple[int, int]]:
    """Offsets where records start, about ``target`` bytes apart, with the lines before each.

    Text records end at a newline. With ``quoted`` (CSV), only at a newline outside quotes, found
    with the quote state of :mod:`.csvquote` (``syntax``: delimiter and comment character); cuts
    come after the preamble (``skip_rows`` lines), comment lines and the ``header``. The pass over
    the whole file runs block by block through ``mapper`` (e.g. a process pool's ordered map);
    only short windows after each nominal split are read here. Returns
    ``[(offset, lines_before), ...]`` starting with ``(0, 0)`` (lines are counted for text only).
    """
    points = [(0, 0)]
    if size <= target:
        return points
    run = mapper or (lambda fn, calls: [fn(*c) for c in calls])
    if quoted:
        return _quoted_points(path, size, target, run, syntax or Syntax(), skip_rows, header)
    blocks = [(path, k * target, min(size, (k + 1) * target)) for k in range(-(-size // target))]
    prefix = [0]
    for c in run(count_block, blocks):
        prefix.append(prefix[-1] + c)
    k = 1
    with open_input(path, buffering=0) as f:
        while k * target < size:
            nominal = k * target
            lines = prefix[k]
            f.seek(nominal)
            pos = nominal
            found = None
            while found is None:
                window = f.read(1 << 20)
                if not window:
                    break
                i = window.find(b"\n")
                if i >= 0:
                    found = pos + i + 1
                    lines += window[: i + 1].count(b"\n")
                else:
                    lines += window.count(b"\n")
                    pos += len(window)
            if found is None or found >= size:
                break
            points.append((found, lines))
            k = max(k + 1, found // target + 1)
    return points


def _quoted_points(path: str, size: int, target: int, run, syntax: Syntax, skip_rows: int, header: bool):
    """CSV: each block of ``target`` bytes after the data origin gives the map of the quote state
    over the lines that start in it; composed, they give the state at the first line of every
    block, from which the first record start is found in a short window."""
    points = [(0, 0)]
    origin = data_origin(path, syntax, skip_rows, header)
    if origin is None or origin + target >= size:
        return points
    bounds = list(range(origin, size, target))
    calls = [(path, b, min(b + target, size), origin, syntax.delimiter, syntax.comment) for b in bounds]
    states: list[int | None] = []
    state: int | None = 0
    for m in run(block_map, calls):
        states.append(state)
        state = None if m is None or state is None else apply(m, state)
    k = 1
    with open_input(path, buffering=0) as f:
        while k < len(bounds) and states[k] is not None:
            line = first_line_start(f, bounds[k], origin)
            found = next_record_start(f, line, states[k], syntax) if line < size else None
            if found is None or found >= size:
                break
            points.append((found, 0))
            k = max(k + 1, (found - origin) // target + 1)
    return points
