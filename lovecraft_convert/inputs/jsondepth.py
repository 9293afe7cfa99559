"""How deep the objects and arrays of JSON lines nest, measured before any parser sees them.

Parsers recurse into nested values: Python's ``json`` raises RecursionError somewhere below a
thousand levels (its limit less the caller's stack), and pyarrow's JSON reader, inferring the type
of a new key nested 20,000 levels deep, overflows its stack and kills the process (SIGSEGV) before
anything can be reported. So every piece of a JSON Lines input is scanned first, and a line nesting
deeper than :data:`MAX_DEPTH` is refused, naming the line and the keys that lead down.

:data:`MAX_DEPTH` is 64 levels: a column is a path of keys to a scalar or a list of scalars, and no
real record needs a path of 64 keys; it is far below where either parser fails, and it is the
depth Arrow itself allows nested types by default (``kMaxNestingDepth`` of its IPC options).

The scan is vectorised (NumPy over windows of about 1 MiB, so its memory does not grow with the
piece or the line): quotes not escaped by an odd run of backslashes open and close strings (a
string ends at its line's end at the latest, as a raw newline cannot be inside one); the brackets
outside strings give the depth, which starts at 0 on every line. A line longer than a window is
scanned in windows that carry its depth, whether a string is open, and the parity of a trailing
run of backslashes.
"""

from __future__ import annotations

import re

import numpy as np

MAX_DEPTH = 64
WINDOW = 1 << 20
_QUOTE, _BACKSLASH, _NL = 34, 92, 10
_OPEN, _CLOSE = 0x7B, 0x7D  # "{" and "}"; "[" and "]" are these without bit 0x20


def first_too_deep(data, limit: int = MAX_DEPTH, newlines: np.ndarray | None = None) -> tuple[int, int] | None:
    """(0-based line of ``data``, offset in ``data`` of the bracket that went past ``limit``) of
    the first line nesting deeper than ``limit``; None when none does. ``data``: whole lines;
    ``newlines``: the offsets of its newlines, when the caller has them.

    Only lines holding more than ``limit`` opening brackets can go past it: they are found first
    (a count per line), and only they are scanned in full."""
    arr = np.frombuffer(data, dtype=np.uint8)
    n = len(arr)
    pos = 0
    lines = 0
    while pos < n:
        end = min(n, pos + WINDOW)
        if newlines is None:
            nl = np.flatnonzero(arr[pos:end] == _NL)
        else:
            nl = newlines[np.searchsorted(newlines, pos) : np.searchsorted(newlines, end)] - pos
        if not len(nl):  # a line longer than a window
            stop = _line_end(arr, end)
            found = _long_line(arr, pos, stop, limit)
            if found is not None:
                return lines, found
            lines += 1
            pos = stop
            continue
        end = pos + int(nl[-1]) + 1
        found = _lines(arr[pos:end], nl, limit)
        if found is not None:
            return lines + found[0], pos + found[1]
        lines += len(nl)
        pos = end
    return None


def _line_end(arr: np.ndarray, pos: int) -> int:
    """The offset after the newline at or after ``pos`` (the end of ``arr`` when none)."""
    while pos < len(arr):
        nl = np.flatnonzero(arr[pos : pos + WINDOW] == _NL)
        if len(nl):
            return pos + int(nl[0]) + 1
        pos += WINDOW
    return len(arr)


def _lines(w: np.ndarray, nl: np.ndarray, limit: int) -> tuple[int, int] | None:
    """The first line of ``w`` (whole lines, ``nl`` its newlines) going past ``limit``."""
    opens = np.flatnonzero((w | 0x20) == _OPEN)
    if len(opens) <= limit:
        return None
    starts = np.concatenate([[0], nl[:-1] + 1])
    counts = np.diff(np.searchsorted(opens, nl), prepend=0)  # opening brackets per line
    cand = np.flatnonzero(counts > limit)
    if not len(cand):
        return None
    if len(cand) == 1:
        seg = w[starts[cand[0]] : nl[cand[0]] + 1]
    else:
        seg = np.concatenate([w[starts[c] : nl[c] + 1] for c in cand.tolist()])
    seg_nl = np.flatnonzero(seg == _NL)
    found, _ = _window(seg, seg_nl, (0, False, 0), limit)
    if found is None:
        return None
    k, off = found
    seg_start = int(seg_nl[k - 1]) + 1 if k else 0
    line = int(cand[k])
    return line, int(starts[line]) + off - seg_start


def _long_line(arr: np.ndarray, start: int, stop: int, limit: int) -> int | None:
    """The offset where line ``arr[start:stop]`` (longer than a window) goes past ``limit``, if it
    does: scanned window by window, carrying its state, when it holds more openers than that."""
    count = 0
    for a in range(start, stop, WINDOW):
        count += int(np.count_nonzero((arr[a : min(stop, a + WINDOW)] | 0x20) == _OPEN))
    if count <= limit:
        return None
    carry = (0, False, 0)
    for a in range(start, stop, WINDOW):
        w = arr[a : min(stop, a + WINDOW)]
        found, carry = _window(w, np.flatnonzero(w == _NL), carry, limit)
        if found is not None:
            return a + found[1]
    return None


def _window(w: np.ndarray, nl: np.ndarray, carry: tuple[int, bool, int], limit: int):
    """Scan one window: ``((line, offset) | None, carry)``; ``carry`` is the state its first line
    starts in, and the returned one the state its last line ends in (when that line goes on)."""
    d0, s0, b0 = carry
    lines_end = len(nl) and int(nl[-1]) == len(w) - 1  # the window ends at a line's end
    a = w | 0x20
    opens = np.flatnonzero(a == _OPEN)
    if lines_end and len(opens) + max(d0, 0) <= limit:
        return None, (0, False, 0)  # fewer openers than the limit: no line can go past it
    closes = np.flatnonzero(a == _CLOSE)
    quotes = _unescaped_quotes(w, b0)
    n = len(w)
    ends = np.append(nl, n)  # the end of each line of the window (the last may go on)
    # strings: the quotes of a line pair up (the first line's start inside a string when s0)
    qline = np.searchsorted(nl, quotes)
    rank = np.arange(len(quotes)) - np.searchsorted(qline, qline)
    opening = (rank % 2 == 0) ^ ((qline == 0) & s0)
    starts = quotes[opening]
    nxt = np.flatnonzero(opening) + 1
    same = nxt < len(quotes)
    same[same] = qline[nxt[same]] == qline[opening][same]
    stops = np.where(same, quotes[np.minimum(nxt, len(quotes) - 1)], ends[qline[opening]])
    if s0:  # the first line starts inside a string: it ends at its first quote (or the line's end)
        first = quotes[qline == 0]
        starts = np.concatenate([[-1], starts])
        stops = np.concatenate([[first[0] if len(first) else ends[0]], stops])
    brackets = np.concatenate([opens, closes])
    delta = np.concatenate([np.ones(len(opens), np.int64), -np.ones(len(closes), np.int64)])
    order = np.argsort(brackets, kind="stable")  # (two sorted runs: merged in one pass)
    brackets, delta = brackets[order], delta[order]
    if len(starts):
        i = np.searchsorted(starts, brackets, side="right") - 1
        outside = (i < 0) | (brackets >= stops[np.maximum(i, 0)])
        brackets, delta = brackets[outside], delta[outside]
    depth = np.cumsum(delta)
    line = np.searchsorted(nl, brackets)
    first = np.searchsorted(line, line)
    depth -= np.where(first > 0, depth[np.maximum(first - 1, 0)], 0)  # each line from 0
    depth += np.where(line == 0, d0, 0)
    over = np.flatnonzero(depth > limit)
    if len(over):
        k = int(over[0])
        return (int(line[k]), int(brackets[k])), (0, False, 0)
    if lines_end:
        return None, (0, False, 0)
    # the last line goes on into the next window: its state at the window's end
    last = len(nl)
    mine = line == last
    d = int(depth[mine][-1]) if mine.any() else (d0 if last == 0 else 0)
    s = bool(np.count_nonzero(qline == last) % 2) ^ (s0 and last == 0)
    run = n - 1 - int(np.flatnonzero(w != _BACKSLASH)[-1]) if (w != _BACKSLASH).any() else n + b0
    return None, (d, s, run)


def _unescaped_quotes(w: np.ndarray, b0: int) -> np.ndarray:
    """Positions of the quotes of ``w`` not escaped (preceded by an odd run of backslashes;
    ``b0`` backslashes ended the window before)."""
    quotes = np.flatnonzero(w == _QUOTE)
    if not len(quotes):
        return quotes
    after = np.zeros(len(quotes), dtype=bool)
    after[quotes > 0] = w[quotes[quotes > 0] - 1] == _BACKSLASH
    if quotes[0] == 0 and b0 % 2:
        after[0] = True  # escaped by the run that ended the window before
    if not after.any():
        return quotes
    bs = np.flatnonzero(w == _BACKSLASH)
    runs = bs[np.concatenate([[True], np.diff(bs) != 1])] if len(bs) else bs
    cand = quotes[after]
    if len(runs):
        r = np.searchsorted(runs, cand - 1, side="right") - 1
        start = runs[np.maximum(r, 0)]
        length = np.where(cand > 0, cand - start, 0) + np.where(start == 0, b0, 0)
        length = np.where(cand == 0, b0, length)
    else:
        length = np.full(len(cand), b0)
    escaped = np.zeros(len(quotes), dtype=bool)
    escaped[after] = length % 2 == 1
    return quotes[~escaped]


def first_too_many_keys(data, limit: int, newlines: np.ndarray | None = None) -> int | None:
    """The first line (0-based) of ``data`` (whole lines) holding more than ``limit`` keys (colons
    outside strings), None when none does: lines with more colons than that are found by a count
    per line, and only they are read in full."""
    arr = np.frombuffer(data, dtype=np.uint8)
    colons = np.flatnonzero(arr == 58)
    if len(colons) <= limit:
        return None
    nl = np.flatnonzero(arr == _NL) if newlines is None else newlines
    counts = np.diff(np.searchsorted(colons, nl), prepend=0)
    starts = np.concatenate([[0], nl[:-1] + 1])
    for i in np.flatnonzero(counts > limit).tolist():
        line = arr[int(starts[i]) : int(nl[i])]
        quotes = _unescaped_quotes(line, 0)
        inside = np.searchsorted(quotes, np.flatnonzero(line == 58)) % 2 == 1  # after an odd number of quotes
        if int(np.count_nonzero(~inside)) > limit:
            return i
    return None


_TOKEN = re.compile(rb'"(?:[^"\\\n]|\\.)*"|[\[\]{}:,]')


def key_path(line: bytes, offset: int, show: int = 6) -> str:
    """The keys leading to ``offset`` of ``line`` (``a.b.c``; ``[]`` for an array's element): the
    first ``show`` levels, and how many there are when more."""
    import json

    stack: list[tuple[bytes, bytes | None]] = []  # (bracket, the key whose value it opens)
    last = key = None
    for m in _TOKEN.finditer(line, 0, offset):
        t = m.group()
        if t in (b"{", b"["):
            stack.append((t, key))
            last = key = None
        elif t in (b"}", b"]"):
            if stack:
                stack.pop()
            key = None
        elif t == b":":
            key = last
        elif t == b",":
            key = None
        else:
            last = t
    names: list[str | None] = []  # keys; None for an array's element
    for _bracket, k in [*stack[1:], (b"", key)]:  # (the line's own object has no key)
        if k is None:
            names.append(None)
            continue
        try:
            names.append(str(json.loads(k)))
        except ValueError:
            names.append(k[1:-1].decode("utf-8", "replace"))
    text = ""
    for name in names[:show]:
        text += "[]" if name is None else (("." if text else "") + name)
    return text + (f"... ({len(names)} levels)" if len(names) > show else "")
