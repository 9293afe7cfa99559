"""JSON input: a file holding one JSON array (``[{...}, {...}]``, pretty-printed or not), whose
elements are read as JSON Lines records are: objects become rows (nested keys dotted columns),
scalars or lists one column ``value``. A ``.json`` file that is JSON Lines after all (its first
byte ``{``) is read as JSON Lines.

The file is never loaded whole: :class:`ArrayLines` turns the bytes of the array into JSON Lines
as they stream in (each top-level element on a line of its own: the separating commas become line
ends, line breaks between tokens spaces), and the JSON Lines reader does the rest, in bounded
pieces, naming elements where it names lines. The scan is vectorised and looks only at the bytes that can
matter (quotes, backslashes, brackets, braces, commas, line breaks: found with ``bytes.translate``):
quotes that are not escaped (an odd run of backslashes before them) toggle strings, brackets and
braces outside strings set the depth, so a chunk costs a few passes whatever it holds. What is not one array (data after
it, an unclosed array, an empty element between commas) is refused in one line; an element longer
than the reader's longest line is refused as its bytes arrive, as a long line is.
"""

from __future__ import annotations

import io

import numpy as np

from ..errors import InputError
from .base import Part
from .jsonl import BOM, JsonlReader
from .streams import open_stream

STEP = 1 << 20  # bytes converted at once (a copy and a few flags of its length)
# bytes.translate tables (a C loop over the bytes, several times faster than a NumPy gather):
# 1 for the bytes that can matter, for those that are not white space
_SPECIAL = bytes(1 if chr(i) in '"\\[]{},\n\r' else 0 for i in range(256))
_PLAIN = bytes(0 if chr(i) in " \t\r\n" else 1 for i in range(256))
WS = b" \t\r\n"
MANY = 64  # elements without a special byte (numbers, true, null) in a chunk, above which they are counted at once
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


class ArrayLines(io.RawIOBase):
    """The bytes of a stream holding one JSON array, as JSON Lines (one element per line)."""

    def __init__(self, inner, name: str) -> None:
        self.inner = inner
        self.name = name
        self.depth = 0  # brackets open before the next byte (the array's own: 1)
        self.in_string = False
        self.backslashes = 0  # the backslashes ending the bytes seen (inside a string)
        self.started = False  # the array's "[" seen
        self.ended = False  # its "]" seen
        self.content = False  # the element being read has a byte that is not white space
        self.elements = 0  # elements ended so far (for messages)
        self.first = True  # a BOM may lead
        self.offset = 0  # bytes converted before this chunk (after a BOM)
        self._out = b""  # converted bytes not read yet, from _pos
        self._pos = 0

    def readable(self) -> bool:
        return True

    def raw_count(self) -> int:
        return self.inner.raw_count()

    def readinto(self, b) -> int:
        while self._pos >= len(self._out):
            data = self.inner.read(STEP)  # converted a step at a time: its temporaries stay small
            if not data:
                self._finish()
                return 0
            if self.first:
                self.first = False
                if data.startswith(BOM):
                    data = data[3:]
            self._out, self._pos = self._convert(data), 0
        n = min(len(b), len(self._out) - self._pos)
        b[:n] = self._out[self._pos : self._pos + n]
        self._pos += n
        return n

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            super().close()

    def _finish(self) -> None:
        if not self.started:
            raise InputError(f"{self.name}: not a JSON array (no '[')", hint="pass --input-format jsonl or csv")
        if not self.ended:
            raise InputError(
                f"{self.name}: the JSON array is not closed (it ends inside element {self.elements + 1})",
                hint="the file is truncated; re-create it",
            )

    def _convert(self, data: bytes) -> bytearray:
        a = np.frombuffer(data, dtype=np.uint8)
        n = len(a)
        out = bytearray(data)
        if not n:
            return out
        # Only the bytes that can matter are looked at: quotes, backslashes, brackets, braces,
        # commas and line breaks (a few percent of most JSON); the rest is copied as it is
        sp = np.flatnonzero(np.frombuffer(data.translate(_SPECIAL), dtype=np.bool_))
        c = a[sp]
        # 1. quotes that are not escaped: an odd run of backslashes just before them (every
        #    backslash is among the special bytes, so a run is consecutive there and in the bytes)
        bs = c == 0x5C
        quote = c == 0x22
        run = None
        if bs.any() or self.backslashes:
            k = np.arange(len(sp))
            chained = np.zeros(len(sp), dtype=bool)  # a backslash right after a backslash
            chained[1:] = bs[1:] & bs[:-1] & (sp[1:] == sp[:-1] + 1)
            run_start = np.maximum.accumulate(np.where(chained, 0, k))
            run = np.where(bs, k - run_start + 1, 0)  # the backslashes ending at each one
            run += np.where(bs & (sp[run_start] == 0), self.backslashes, 0)  # a run the last chunk began
            q = np.flatnonzero(quote)
            prev = np.maximum(q - 1, 0)
            before = np.where((q > 0) & bs[prev] & (sp[prev] == sp[q] - 1), run[prev], 0)
            before = np.where(sp[q] == 0, self.backslashes, before)
            quote[q[before % 2 == 1]] = False
        # 2. inside a string: an odd number of quotes before the byte (its own not counted)
        seen = np.cumsum(quote)
        inside = ((seen - quote) % 2 == 1) != self.in_string
        structural = ~inside & ~quote
        # 3. depth before and after each special byte
        steps = np.where(structural, _OPEN[c], 0).astype(np.int64)
        after = self.depth + np.cumsum(steps)
        depth = after - steps
        top_open = (steps == 1) & (depth == 0)
        top_close = (steps == -1) & (after == 0)
        sep = structural & (c == 0x2C) & (depth == 1)
        breaks = (c == 0x0A) | (c == 0x0D)
        # 4. nothing but white space outside the one array
        opens = np.flatnonzero(top_open)
        first_open = int(sp[opens[0]]) if opens.size and not self.started and not self.ended else None
        stray = (depth == 0) & ~(structural & breaks) & ~top_open
        if first_open is not None:
            stray[opens[1:]] = True
        else:
            stray |= top_open
        bad = int(sp[np.argmax(stray)]) if stray.any() else n
        for lo, hi in self._outside(n, first_open, int(sp[np.flatnonzero(top_close)[0]]) if top_close.any() else None):
            text = data[lo:hi]
            if text.strip(WS):
                bad = min(bad, lo + len(text) - len(text.lstrip(WS)))
        if bad < n:
            self._refuse(a, bad, self.started or (first_open is not None and first_open < bad))
        broken = inside & breaks
        if broken.any():
            j = int(np.argmax(broken))
            raise InputError(
                f"{self.name}, element {self.elements + int(np.count_nonzero(sep[:j])) + 1}: "
                "a line break inside a string (not valid JSON)",
                hint="write it as \\n",
            )
        # 5. every element holds something ("[,", ",,", ",]" are refused; "[]" is an empty array):
        #    the bytes between the ends of elements that are not white space (nor the array's "[")
        # (a special byte inside the array that is not one of these marks says so; an element
        # without one, a number or a literal, is looked at)
        end_at = np.flatnonzero(sep | top_close)
        marks = np.cumsum((depth >= 1) & ~(structural & breaks) & ~sep & ~top_close)
        lo0 = first_open + 1 if first_open is not None else 0
        if end_at.size:
            ends = sp[end_at]
            has = np.diff(marks[end_at], prepend=0) > 0
            starts = np.concatenate([[lo0], ends[:-1] + 1])
            plain = np.flatnonzero(~has)
            if plain.size > MANY:  # many short values: count what is not white space, at once
                nonws = np.frombuffer(data.translate(_PLAIN), dtype=np.bool_)
                cuts = np.empty(2 * len(ends), dtype=np.int64)
                cuts[0::2], cuts[1::2] = starts, ends
                got = np.add.reduceat(nonws, cuts, dtype=np.int64)[0::2]  # over [start, end) of each
                has |= (ends > starts) & (got > 0)
            else:
                for k in plain.tolist():
                    has[k] = bool(data[int(starts[k]) : int(ends[k])].strip(WS))
            has[0] |= self.content
            ok = has.copy()
            if self.elements == 0 and a[ends[0]] == ord("]"):
                ok[0] = True  # "[]": an empty array
            if not ok.all():
                k = int(np.argmin(ok))
                raise InputError(
                    f"{self.name}, element {self.elements + k + 1}: empty (a comma with no value before it)",
                    hint="remove the stray comma",
                )
            self.elements += int(np.count_nonzero(has))
            after_last = int(ends[-1]) + 1
            self.content = bool(marks[-1] - marks[end_at[-1]]) or bool(data[after_last:].strip(WS))
        elif self.started or first_open is not None:
            self.content = self.content or bool(len(marks) and marks[-1]) or bool(data[lo0:].strip(WS))
        # 6. one element per line
        o = np.frombuffer(out, dtype=np.uint8)
        o[sp[structural & breaks]] = 0x20
        o[sp[sep | top_close]] = 0x0A
        o[sp[top_open]] = 0x20
        self.started = self.started or first_open is not None
        self.ended = self.ended or bool(top_close.any())
        self.offset += n
        if len(sp):
            self.depth = int(after[-1])
            self.in_string = bool(inside[-1] != quote[-1])
        trailing = int(run[-1]) if run is not None and len(sp) and bs[-1] and sp[-1] == n - 1 else 0
        self.backslashes = trailing if self.in_string else 0
        return out

    def _outside(self, n: int, first_open: int | None, close: int | None) -> list[tuple[int, int]]:
        """The byte ranges of this chunk outside the array (before its "[", after its "]")."""
        if self.ended:
            return [(0, n)]
        out = []
        if not self.started:
            out.append((0, first_open if first_open is not None else n))
        if close is not None:
            out.append((close + 1, n))
        return out

    def _refuse(self, a: np.ndarray, i: int, opened: bool) -> None:
        if not opened:
            shown = bytes(a[i : i + 20]).decode("utf-8", "replace")
            raise InputError(
                f"{self.name}: not a JSON array (it starts with {shown!r})",
                hint="a JSON array starts with '['; for one value per line pass --input-format jsonl",
            )
        raise InputError(
            f"{self.name}, byte {self.offset + i + 1}: data after the end of the JSON array",
            hint="a .json input holds one array; for one value per line pass --input-format jsonl",
        )


class JsonArrayReader(JsonlReader):
    """A JSON array's elements as JSON Lines records (see the module); JSON Lines as they are."""

    unit, a_unit = "element", "an element"

    def __init__(self, specs, options) -> None:
        self.array = {s.name: _is_array(s, options.max_ratio) for s in specs}
        super().__init__(specs, options)

    def open_spec(self, spec, stream=None):
        if not self.array.get(spec.name):
            return super().open_spec(spec, stream)
        inner = open_stream(spec, max_ratio=self.options.max_ratio)
        self._stream = io.BufferedReader(ArrayLines(inner, spec.name), buffer_size=1 << 20)
        self._stream.raw_count = inner.raw_count  # type: ignore[attr-defined]
        return self._stream

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        """An array is read whole (its commas say where elements end only to a reader from its start)."""
        if not any(self.array.values()):
            return super().partitions(target_bytes, mapper)
        self._check_pending()
        return [Part(i, i) for i in range(len(self.specs))]


def _is_array(spec, max_ratio: float) -> bool:
    """Does the input's first byte that is not white space (after a BOM) open an array?"""
    if spec.is_stdin:
        return True  # stdin is JSON only when said so (--input-format json)
    with open_stream(spec, max_ratio=max_ratio) as f:
        head = f.read(4096)
        while head.strip(b" \t\r\n") in (b"", BOM) and len(head) < (1 << 20):
            more = f.read(4096)
            if not more:
                break
            head += more
    head = head.removeprefix(BOM).lstrip(b" \t\r\n")
    return not head.startswith(b"{")
