"""JSON input: a file holding one JSON array (``[{...}, {...}]``, pretty-printed or not), whose
elements are read as JSON Lines records are: objects become rows (nested keys dotted columns),
scalars or lists one column ``value``. A ``.json`` file that is JSON Lines after all (its first
byte ``{``) is read as JSON Lines.

The file is never loaded whole: :class:`ArrayLines` turns the bytes of the array into JSON Lines
as they stream in (each top-level element on a line of its own: the separating commas become line
ends, line breaks between tokens spaces), and the JSON Lines reader does the rest, in bounded
pieces, naming elements where it names lines. The scan is vectorised: quotes that are not escaped
(an odd run of backslashes before them) toggle strings, brackets and braces outside strings set the
depth, so a chunk costs a few NumPy passes whatever it holds. What is not one array (data after
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

STEP = 1 << 18  # bytes converted at once (each costs a few int64 temporaries of its length)
_WS = np.zeros(256, dtype=bool)
_WS[[0x20, 0x09, 0x0A, 0x0D]] = True
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

    def _convert(self, data: bytes) -> bytes:
        a = np.frombuffer(data, dtype=np.uint8)
        n = len(a)
        # 1. quotes that are not escaped (escaped: an odd run of backslashes just before them)
        bs = a == 0x5C
        last_other = np.maximum.accumulate(np.where(bs, -1, np.arange(n)))  # last non-backslash at or before i
        quote = a == 0x22
        q = np.flatnonzero(quote)
        if q.size:
            before = np.where(q > 0, last_other[np.maximum(q - 1, 0)], -1)
            run = q - 1 - before + np.where(before < 0, self.backslashes, 0)
            quote[q[run % 2 == 1]] = False
        # 2. inside a string: an odd number of quotes before the byte (its own not counted)
        seen = np.cumsum(quote, dtype=np.int64)
        inside = ((seen - quote) % 2 == 1) != self.in_string
        structural = ~inside & ~quote
        # 3. depth before and after each byte
        steps = np.where(structural, _OPEN[a], 0).astype(np.int64)
        after = self.depth + np.cumsum(steps)
        depth = after - steps
        ws = structural & _WS[a]
        top_open = (steps == 1) & (depth == 0)
        top_close = (steps == -1) & (after == 0)
        sep = structural & (a == 0x2C) & (depth == 1)
        # 4. nothing but white space outside the one array
        stray = (depth == 0) & ~ws
        opens = np.flatnonzero(top_open)
        if opens.size and not self.started and not self.ended:
            stray[opens[0]] = False
        if stray.any():
            i = int(np.argmax(stray))
            self._refuse(a, i, self.started or bool(opens.size and opens[0] < i))
        broken = inside & (a == 0x0A)
        if broken.any():
            raise InputError(
                f"{self.name}, element {self.elements + int(np.count_nonzero(sep[: int(np.argmax(broken))])) + 1}: "
                "a line break inside a string (not valid JSON)",
                hint="write it as \\n",
            )
        # 5. every element holds something ("[,", ",,", ",]" are refused; "[]" is an empty array)
        content = (depth >= 1) & ~ws & ~sep & ~top_close
        cum = np.cumsum(content, dtype=np.int64)
        ends = np.flatnonzero(sep | top_close)
        if ends.size:
            counts = np.diff(cum[ends], prepend=0)
            has = counts > 0
            has[0] |= self.content
            ok = has.copy()
            if self.elements == 0 and top_close[ends[0]]:
                ok[0] = True
            if not ok.all():
                k = int(np.argmin(ok))
                raise InputError(
                    f"{self.name}, element {self.elements + k + 1}: empty (a comma with no value before it)",
                    hint="remove the stray comma",
                )
            self.elements += int(np.count_nonzero(has))
            self.content = bool(cum[-1] - cum[ends[-1]])
        elif n:
            self.content = self.content or bool(cum[-1])
        # 6. one element per line
        out = a.copy()
        out[ws & ((a == 0x0A) | (a == 0x0D))] = 0x20
        out[sep | top_close] = 0x0A
        out[top_open] = 0x20
        self.started = self.started or bool(opens.size)
        self.ended = self.ended or bool(top_close.any())
        self.offset += n
        if n:
            self.depth = int(after[-1])
            self.in_string = bool(inside[-1] != quote[-1])
            self.backslashes = (
                (n - 1 - int(last_other[-1]) + (self.backslashes if last_other[-1] < 0 else 0)) if self.in_string else 0
            )
        return out.tobytes()

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
