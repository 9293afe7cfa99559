"""The pages of a Parquet column chunk as their headers describe them, read without decompressing
anything: each page's decoded (uncompressed) size.

pyarrow decompresses a page whole before decoding any of its rows, so a single page is the smallest
unit a read can be bounded by: 96 KB of zstd can be one page of 1.5 GiB. The footer's
``total_uncompressed_size`` of a column chunk is the writer's word; each page's own header is what
the reader acts on. Headers are Thrift compact protocol structs (``PageHeader`` of
``parquet.thrift``): fields 1-3 are the page type, its uncompressed and its compressed size; the
rest (statistics, encodings) is skipped by a small reader of the protocol written here. The page's
bytes follow its header, so the next header is found without reading them.
"""

from __future__ import annotations

from collections.abc import Iterator

HEADER_STEP = 1 << 10  # bytes read for a header at first (more when its statistics are long)
MAX_HEADER = 16 << 20  # a page header beyond this is damaged


class BadPage(Exception):
    """A page header that does not parse (the reader of the file reports what is wrong)."""


class _Short(Exception):
    pass


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise _Short
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = out = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 70:
                raise BadPage("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, n: int) -> None:
        if n < 0:
            raise BadPage("negative length")
        self.pos += n
        if self.pos > len(self.data):
            raise _Short

    def value(self, kind: int, depth: int = 0) -> None:
        """Skip a value of compact type ``kind``."""
        if depth > 32:
            raise BadPage("nested too deeply")
        if kind in (1, 2):  # booleans in a field: the type is the value
            return
        if kind == 3:
            self.skip(1)
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.skip(8)
        elif kind == 8:
            self.skip(self.varint())
        elif kind in (9, 10):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            for _ in range(size):
                if elem in (1, 2):
                    self.skip(1)  # (booleans in a list take a byte each)
                else:
                    self.value(elem, depth + 1)
        elif kind == 11:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.value(types >> 4, depth + 1)
                    self.value(types & 0x0F, depth + 1)
        elif kind == 12:
            self.struct(depth + 1)
        else:
            raise BadPage(f"unknown type {kind}")

    def struct(self, depth: int = 0, want: tuple[int, ...] = ()) -> dict[int, int]:
        """Skip a struct; the i32 fields ``want`` are returned."""
        out: dict[int, int] = {}
        field = 0
        while True:
            head = self.byte()
            if head == 0:
                return out
            delta, kind = head >> 4, head & 0x0F
            field = field + delta if delta else self.zigzag()
            if field in want and kind == 5:
                out[field] = self.zigzag()
            else:
                self.value(kind, depth)


def _header(read, offset: int) -> tuple[int, int, int, int]:
    """(header length, page type, uncompressed size, compressed size) of the page at ``offset``."""
    n = HEADER_STEP
    while True:
        data = read(offset, n)
        r = _Reader(data)
        try:
            got = r.struct(want=(1, 2, 3))
        except _Short:
            if len(data) < n or n >= MAX_HEADER:
                raise BadPage("truncated page header") from None
            n *= 4
            continue
        if 1 not in got or 2 not in got or 3 not in got:
            raise BadPage("page header without its sizes")
        return r.pos, got[1], got[2], got[3]


def pages(read, start: int, length: int) -> Iterator[tuple[int, int, int]]:
    """(offset, page type, uncompressed size) of each page of the column chunk of ``length``
    bytes at ``start``; ``read(offset, n)`` returns up to ``n`` bytes of the file there."""
    pos, end = start, start + length
    while pos < end:
        size, kind, uncompressed, compressed = _header(read, pos)
        if uncompressed < 0 or compressed < 0:
            raise BadPage("negative page size")
        yield pos, kind, uncompressed
        pos += size + compressed
