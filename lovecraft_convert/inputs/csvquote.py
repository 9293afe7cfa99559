"""Where CSV records end: the quote state of CSV bytes, vectorised with NumPy.

The rule is the one pyarrow's parser follows (and Python's ``csv`` module): a quote character opens
a quoted field only at the start of a field (after the delimiter, a line end, or at the start of
the input); inside a quoted field a quote closes it unless it is doubled; anywhere else (``5'10"``,
``y"z``, after a closing quote) it is a literal character. For a maximal run of L consecutive
quotes this means:

- L even: the state does not change (literal pairs, or an empty quoted field ``""``);
- L odd, inside quotes: the run closes the field (with L // 2 literal quotes);
- L odd, outside quotes at a field start: the run opens a field;
- L odd, outside quotes elsewhere: a stray run, literal.

So each run is one of three maps of the state (0 outside, 1 inside): identity, negate (odd, at a
field start) or set-to-outside (odd, elsewhere), and the state everywhere is a prefix composition
of maps, computed with ``cumsum`` and ``maximum.accumulate`` rather than a loop over quotes. A
newline outside quotes ends a record.

Comment lines (``--comment``) are lines that start with the comment character at a record start;
what they hold (quotes included) is ignored. A line that starts with it inside a quoted field is
part of the value. Each such candidate line becomes one map: outside at its start it is a comment
(outside after it), inside its runs apply as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ..storage import open_input

QUOTE, NL, CR = 0x22, 0x0A, 0x0D
BOM = b"\xef\xbb\xbf"
# maps of the state: identity, negate, set to 0 (outside), set to 1 (inside)
ID, NEG, SET0, SET1 = 0, 1, 2, 3
LONG_LINE = 64 << 20  # the part split gives up on lines longer than this (the reader refuses them too)
SCAN_WINDOW = 8 << 20  # bytes read at a time by the part split
LOCAL_LIMIT = 1 << 20  # QuoteScan looks this far back for an anchor before computing every map


@dataclass(frozen=True)
class Syntax:
    """The bytes that matter to the quote state: the delimiter and the comment character."""

    delimiter: int = ord(",")
    comment: int | None = None

    @classmethod
    def of(cls, delimiter: str, comment: str | None = None) -> Syntax:
        return cls(ord(delimiter), None if comment is None else ord(comment))


class UnclosedQuote(Exception):
    """The input ends inside a quoted field; ``offset``: the stream offset of its opening quote."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


class RecordTooLong(Exception):
    """No record end within ``limit`` bytes after stream offset ``offset``."""

    def __init__(self, offset: int, limit: int) -> None:
        super().__init__(offset, limit)
        self.offset = offset
        self.limit = limit


class SkippedPastEnd(Exception):
    """``--skip-rows`` asks for more lines than the input has (``lines``)."""

    def __init__(self, lines: int) -> None:
        super().__init__(lines)
        self.lines = lines


def compose(first: int, then: int) -> int:
    """The map ``then(first(s))``."""
    if then in (SET0, SET1):
        return then
    if then == ID:
        return first
    return {ID: NEG, NEG: ID, SET0: SET1, SET1: SET0}[first]


def apply(kind: int, state: int) -> int:
    return (state, 1 - state, 0, 1)[kind]


def _states(kinds: np.ndarray, state0: int) -> np.ndarray:
    """The state after each of a sequence of maps, starting from ``state0``."""
    n = len(kinds)
    negs = np.cumsum(kinds == NEG, dtype=np.int64)
    last = np.maximum.accumulate(np.where(kinds >= SET0, np.arange(n), -1))
    has = last >= 0
    at = np.maximum(last, 0)
    base = np.where(has, kinds[at].astype(np.int64) - SET0, state0)
    since = negs - np.where(has, negs[at], 0)
    return ((base + since) & 1).astype(np.uint8)


def _odd_runs(arr: np.ndarray, lo: int, hi: int, delimiter: int) -> tuple[np.ndarray, np.ndarray]:
    """Starts of the odd runs of quotes in ``arr[lo:hi]`` and whether each is at a field start. A
    run that may begin before ``lo`` (a quote at ``lo - 1``) is left out: it cannot be measured."""
    q = np.flatnonzero(arr[lo:hi] == QUOTE)
    if not len(q):
        return q, np.empty(0, dtype=bool)
    q += lo
    first = np.flatnonzero(np.r_[True, np.diff(q) != 1])
    lens = np.diff(np.r_[first, len(q)])
    starts = q[first]
    if lo > 0 and starts[0] == lo and arr[lo - 1] == QUOTE:
        starts, lens = starts[1:], lens[1:]
    starts = starts[(lens & 1) == 1]  # even runs change nothing
    prev = arr[np.maximum(starts - 1, 0)]
    return starts, (starts == 0) | (prev == delimiter) | (prev == NL) | (prev == CR)


class QuoteScan:
    """The quote state through ``buf``, which starts at the start of a line in state ``state0``.

    A trailing run of quotes or a trailing comment line cut off by the end of ``buf`` affects
    nothing before it, so offsets up to the last newline are exact whatever follows.

    Most queries need the state at one place only, and an odd run that does not start a field
    sets the state to outside whatever came before (it closes a quoted field or is a stray
    literal). Such anchors are a few bytes apart in quoted data, so the state at an offset is found
    from the runs after the last anchor before it (:meth:`_tail`), in a window grown backwards.
    The whole sequence of maps (:meth:`_full`) is computed only when comment lines need it, to
    list the record ends inside a long quoted field, or on errors.
    """

    def __init__(self, buf: bytes, syntax: Syntax, state0: int = 0) -> None:
        self.buf = buf
        self.state0 = state0
        self.syntax = syntax
        self.quoted = b'"' in buf
        c = syntax.comment
        self.commented = c is not None and bytes((c,)) in buf
        self.arr = np.frombuffer(buf, dtype=np.uint8) if self.quoted or self.commented else None
        self.pos: np.ndarray | None = None  # offsets of the maps that change something (_full)
        self.after = np.empty(0, dtype=np.uint8)  # the state after each
        self.kinds = np.empty(0, dtype=np.uint8)
        self.cstart = self.cend = np.empty(0, dtype=np.int64)  # candidate comment lines [start, end)

    def _full(self) -> None:
        """Every map of the buffer, in order, and the state after each."""
        if self.pos is not None:
            return
        arr, syntax = self.arr, self.syntax
        self.pos = np.empty(0, dtype=np.int64)
        if arr is None:
            return
        starts, at_field = _odd_runs(arr, 0, len(arr), syntax.delimiter)
        kinds = np.where(at_field, NEG, SET0).astype(np.uint8)
        if self.commented:
            cpos = np.flatnonzero(arr == syntax.comment)
            cs = cpos[(cpos == 0) | (arr[np.maximum(cpos - 1, 0)] == NL)]
            if len(cs):
                nl = np.flatnonzero(arr == NL)
                ce = np.concatenate((nl, [len(arr)]))[np.searchsorted(nl, cs)]
                self.cstart, self.cend = cs, ce
                starts, kinds = self._fold_comments(starts, kinds, cs, ce)
        self.pos = starts
        self.kinds = kinds
        self.after = _states(kinds, self.state0) if len(kinds) else np.empty(0, dtype=np.uint8)

    @staticmethod
    def _fold_comments(starts, kinds, cs, ce):
        """Replace the runs of each candidate comment line by one map at its start: set-to-outside
        if, started inside quotes, the line ends outside; identity otherwise."""
        j = np.searchsorted(cs, starts, side="right") - 1
        inside = (j >= 0) & (starts < ce[np.maximum(j, 0)])
        keep_pos, keep_kinds = starts[~inside], kinds[~inside]
        g1 = np.ones(len(cs), dtype=np.uint8)  # the state after each candidate line, started inside
        if inside.any():
            sub_j, sub_k = j[inside], kinds[inside]
            # each group of runs, preceded by a set-to-inside at its line's start
            heads = np.flatnonzero(np.r_[True, sub_j[1:] != sub_j[:-1]])
            seq = np.insert(sub_k, heads, SET1)
            st = _states(seq, 1)
            ends = np.r_[heads[1:] + np.arange(1, len(heads)), len(seq)] - 1
            g1[sub_j[heads]] = st[ends]
        resets = cs[g1 == 0]
        if len(resets):
            at = np.searchsorted(keep_pos, resets)
            keep_pos = np.insert(keep_pos, at, resets)
            keep_kinds = np.insert(keep_kinds, at, np.uint8(SET0))
        return keep_pos, keep_kinds

    def _tail(self, p: int) -> tuple[bool, int]:
        """(an anchor lies before ``p``, the parity of the field-opening runs after the last one, or
        after the start of the buffer if none); ``buf`` has no comment lines, ``p`` ends no run.
        Past LOCAL_LIMIT bytes without an anchor, the whole sequence is computed once instead."""
        width = 1 << 12
        while self.pos is None and width <= LOCAL_LIMIT:
            lo = max(0, p - width)
            starts, at_field = _odd_runs(self.arr, lo, p, self.syntax.delimiter)
            anchors = np.flatnonzero(~at_field)
            if len(anchors):
                return True, int(np.count_nonzero(at_field[anchors[-1] + 1 :])) & 1
            if lo == 0:
                return False, int(np.count_nonzero(at_field)) & 1
            width *= 8
        self._full()
        kinds = self.kinds[: np.searchsorted(self.pos, p)]
        anchors = np.flatnonzero(kinds == SET0)
        if len(anchors):
            return True, int(np.count_nonzero(kinds[anchors[-1] + 1 :] == NEG)) & 1
        return False, int(np.count_nonzero(kinds == NEG)) & 1

    # -- queries ----------------------------------------------------------------------------------
    def state_at(self, p: int) -> int:
        """The state just before byte ``p`` (not inside a run of quotes)."""
        if not self.quoted and not self.commented:
            return self.state0
        if self.commented:
            return int(self.state_before(p))
        anchored, negs = self._tail(p)
        return negs if anchored else self.state0 ^ negs

    def state_before(self, offsets):
        """The state just before byte ``offsets`` (an int or an array), from the whole sequence."""
        self._full()
        k = np.searchsorted(self.pos, offsets)
        if np.ndim(k) == 0:
            return int(self.after[k - 1]) if k else self.state0
        if not len(self.after):
            return np.full(np.shape(k), self.state0, dtype=np.uint8)
        return np.where(k > 0, self.after[np.maximum(k - 1, 0)], self.state0)

    @property
    def final(self) -> int:
        """The state at the end of the buffer (which must not end inside a run of quotes)."""
        return self.state_at(len(self.buf))

    def map(self) -> int:
        """The map of the whole buffer (from the state at its start to the state at its end)."""
        if not self.quoted and not self.commented:
            return ID
        if self.commented:
            self._full()
            if not len(self.kinds):
                return ID
            f0 = int(_states(self.kinds, 0)[-1])
            f1 = int(_states(self.kinds, 1)[-1])
            return {(0, 1): ID, (1, 0): NEG, (0, 0): SET0, (1, 1): SET1}[(f0, f1)]
        anchored, negs = self._tail(len(self.buf))
        return (SET1 if negs else SET0) if anchored else (NEG if negs else ID)

    def record_end(self, count: int | None = None) -> int:
        """Offset just past the last (or the ``count``-th) newline outside quotes; 0 if none."""
        buf = self.buf
        if not self.quoted and not self.commented:
            if self.state0:
                return 0
            if count is None:
                return buf.rfind(b"\n") + 1
            i = -1
            for _ in range(count):
                i = buf.find(b"\n", i + 1)
                if i < 0:
                    return 0
            return i + 1
        if not self.commented and count in (None, 1):
            # the last (first) newline is usually outside quotes: try a few, each from its anchor
            i = len(buf) if count is None else -1
            for _ in range(8):
                i = buf.rfind(b"\n", 0, i) if count is None else buf.find(b"\n", i + 1)
                if i < 0:
                    return 0
                if self.state_at(i) == 0:
                    return i + 1
        nl = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == NL)
        outside = nl[self.state_before(nl) == 0]
        if count is None:
            return int(outside[-1]) + 1 if len(outside) else 0
        return int(outside[count - 1]) + 1 if len(outside) >= count else 0

    def opened(self) -> int | None:
        """Offset of the quote that opened the field still open at the end, or None."""
        if not self.final:
            return None
        self._full()
        if not len(self.after):
            return None
        before = np.r_[np.uint8(self.state0), self.after[:-1]]
        opens = np.flatnonzero((self.after == 1) & (before == 0))
        found = int(self.pos[opens[-1]]) if len(opens) else -1
        # a line starting with the comment character inside quotes is data: its runs are folded
        # into one map, which hides a field closed and opened again within it (errors only: a loop)
        data = self.cstart[(self.cstart > found) & (self.state_before(self.cstart) == 1)]
        for cs in data[::-1].tolist():
            line = self.buf[cs : int(self.cend[np.searchsorted(self.cstart, cs)])]
            inner = QuoteScan(line, Syntax(self.syntax.delimiter), 1).opened()
            if inner is not None:
                return cs + inner
        return found if found >= 0 else None

    def comments(self, end: int) -> tuple[np.ndarray, np.ndarray]:
        """``[start, stop)`` of the comment lines (newline included) that start before ``end``."""
        if not self.commented:
            return self.cstart, self.cend
        self._full()
        cs = self.cstart[self.cstart < end]
        if not len(cs):
            return cs, cs
        real = self.state_before(cs) == 0
        return cs[real], np.minimum(self.cend[: len(cs)][real] + 1, len(self.buf))

    def without_comments(self, end: int) -> bytes:
        """``buf[:end]`` without its comment lines (``end`` is a record end or the end of ``buf``)."""
        cs, ce = self.comments(end)
        if not len(cs):
            return self.buf[:end]
        if len(cs) < 64:
            keep = [self.buf[a:b] for a, b in zip(np.r_[0, ce], np.r_[cs, end], strict=True) if b > a]
            return b"".join(keep)
        marks = np.zeros(end + 1, dtype=np.int8)
        marks[cs] = 1
        marks[np.minimum(ce, end)] -= 1
        mask = np.cumsum(marks[:end], dtype=np.int8) == 0
        return np.frombuffer(self.buf, dtype=np.uint8, count=end)[mask].tobytes()


# -- reading a stream in pieces ----------------------------------------------------------------


def skip_lines(read: Callable[[int], bytes], data: bytes, lines: int, chunk: int) -> tuple[bytes, int]:
    """Drop the first ``lines`` lines of the stream that continues ``data`` (no quoting: a preamble
    is any text). Returns what follows them and how many bytes were dropped."""
    dropped = 0
    left = lines
    partial = False
    while left:
        if not data:
            data = read(chunk)
            if not data:
                raise SkippedPastEnd(lines - left + partial)
        n = data.count(b"\n")
        if n < left:
            left -= n
            dropped += len(data)
            partial = not data.endswith(b"\n")
            data = b""
            continue
        i = -1
        for _ in range(left):
            i = data.find(b"\n", i + 1)
        left = 0
        dropped += i + 1
        data = data[i + 1 :]
    return data, dropped


def record_pieces(
    read: Callable[[int], bytes],
    chunk: int,
    syntax: Syntax,
    *,
    strip_bom: bool = True,
    skip_rows: int = 0,
    max_record: int = 64 << 20,
    first: int | None = None,
) -> Iterator[bytes]:
    """The stream ``read`` returns, cut into pieces that end at a record end (the last one gets a
    newline), without comment lines, after a BOM and ``skip_rows`` lines are dropped. ``first``:
    the size of the first read, when it should be smaller than ``chunk`` (so that the work after
    reading starts sooner).

    Raises :class:`UnclosedQuote`, :class:`RecordTooLong`, :class:`SkippedPastEnd` with stream
    offsets (BOM included) for the caller to turn into a line number.
    """
    data = read(min(chunk, first or chunk))
    base = 0  # stream offset of carry[0]
    if strip_bom and data.startswith(BOM):
        data, base = data[3:], 3
    if skip_rows:
        data, dropped = skip_lines(read, data, skip_rows, chunk)
        base += dropped
    pending, carry = data, b""
    while True:
        if pending:
            data, pending = pending, b""
        else:
            data = read(chunk)
        buf = carry + data if carry else data
        if not data:
            if buf:
                scan = QuoteScan(buf, syntax)
                if scan.final:
                    raise UnclosedQuote(base + (scan.opened() or 0))
                piece = scan.without_comments(len(buf))
                if piece:
                    yield piece if piece.endswith(b"\n") else piece + b"\n"
            return
        scan = QuoteScan(buf, syntax)
        cut = scan.record_end()
        if cut == 0:
            if len(buf) > max_record:
                raise RecordTooLong(base, max_record)
            carry = buf
            continue
        piece = scan.without_comments(cut)
        carry = buf[cut:]
        base += cut
        if piece:
            yield piece


# -- splitting a file into parts ---------------------------------------------------------------


def _lines_from(
    f, start: int, stop: int | None, window: int, needles: tuple[bytes, ...] = ()
) -> Iterator[tuple[int, bytes | None]]:
    """Whole lines of file ``f`` from ``start`` (a line start), as (offset, bytes) windows of about
    ``window`` bytes that end at a newline (or the end of the file): the lines that start before
    ``stop`` (the last one read to its end), or all of them. Lines holding none of ``needles`` may
    be left out (they cannot change the quote state). None for a line over LONG_LINE."""
    f.seek(start)
    pos = start  # file offset of carry[0]
    carry = b""
    while stop is None or pos < stop:
        want = window if stop is None else min(window, max(stop - pos - len(carry), 1 << 12))
        data = f.read(want)
        if not data:
            if carry:
                yield pos, carry
            return
        if needles and not any(n in data or n in carry for n in needles):
            i = data.rfind(b"\n")
            if stop is not None and pos + len(carry) + i + 1 > stop:
                i = data.find(b"\n", max(stop - pos - len(carry) - 1, 0))
            if i >= 0:
                pos += len(carry) + i + 1
                carry = data[i + 1 :]
            elif len(carry) + len(data) > LONG_LINE:
                yield pos, None
                return
            else:
                carry += data
            continue
        buf = carry + data if carry else data
        cut = buf.rfind(b"\n") + 1
        if stop is not None and cut > stop - pos:  # end with the line that holds byte stop - 1
            cut = buf.find(b"\n", max(stop - pos - 1, 0)) + 1
        if cut == 0:
            if len(buf) > LONG_LINE:
                yield pos, None
                return
            carry = buf
            continue
        yield pos, buf[:cut]
        pos += cut
        carry = buf[cut:]


def first_line_start(f, offset: int, origin: int, limit: int | None = None) -> int:
    """The first line start at or after ``offset`` (``origin`` is one); ``limit`` if there is none
    before it."""
    if offset <= origin:
        return origin
    f.seek(offset - 1)
    pos = offset - 1
    while limit is None or pos < limit:
        window = f.read(1 << 20)
        if not window:
            return pos if limit is None else min(pos, limit)
        i = window.find(b"\n")
        if i >= 0:
            return pos + i + 1 if limit is None else min(pos + i + 1, limit)
        pos += len(window)
    return limit


def block_map(path: str, start: int, end: int, origin: int, delimiter: int, comment: int | None) -> int | None:
    """The map of the lines that start in bytes ``[start, end)`` of a CSV file (from the state at
    the first one to the state after the last, read to its end), for a parallel split. A line
    holds whole runs of quotes, so no run straddles blocks. None: a line too long to scan."""
    syntax = Syntax(delimiter, comment)
    kind = ID
    with open_input(path, buffering=0) as f:
        start = first_line_start(f, start, origin, end)
        if start >= end:
            return ID
        needles = (b'"',) if comment is None else (b'"', bytes((comment,)))
        for _, buf in _lines_from(f, start, end, SCAN_WINDOW, needles):
            if buf is None:
                return None
            kind = compose(kind, QuoteScan(buf, syntax).map())
    return kind


def next_record_start(f, line: int, state: int, syntax: Syntax) -> int | None:
    """The first record start at or after line start ``line``, where the state is ``state``."""
    if state == 0:
        return line
    for pos, buf in _lines_from(f, line, None, min(SCAN_WINDOW, 1 << 20)):
        if buf is None:
            return None
        scan = QuoteScan(buf, syntax, state)
        cut = scan.record_end(1)
        if cut:
            return pos + cut
        state = scan.final
    return None


def data_origin(path: str, syntax: Syntax, skip_rows: int, header: bool) -> int | None:
    """Offset of the first data record: after a BOM, ``skip_rows`` lines, blank and comment lines,
    and the header. Parts are cut after it, so the first part holds all of these. None: not found."""
    with open_input(path) as f:
        pos = 3 if f.read(3) == BOM else 0
        f.seek(pos)
        if skip_rows:
            try:
                pos += skip_lines(f.read, b"", skip_rows, 1 << 20)[1]
            except SkippedPastEnd:
                return None
        state = None  # None: before the header; then the quote state inside it
        for off, buf in _lines_from(f, pos, None, min(SCAN_WINDOW, 1 << 20)):
            if buf is None:
                return None
            i = 0
            if state is None:
                while i < len(buf):
                    j = buf.find(b"\n", i) + 1 or len(buf)
                    if buf[i:j].strip(b"\r\n") and buf[i] != syntax.comment:
                        break
                    i = j
                else:
                    continue
                if not header:
                    return off + i
                state = 0
            scan = QuoteScan(buf[i:], syntax, state)
            cut = scan.record_end(1)
            if cut:
                return off + i + cut
            state = scan.final
    return None
