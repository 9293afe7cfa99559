"""A seekable, read-only raw file over an object's bytes, read with ranged GETs.

Sequential reads share one streaming GET from the current position (one request per stretch, not
per read); a seek elsewhere drops it and the next read opens another at the new offset. A stream
that breaks mid-way is reopened where it stopped (botocore retries the requests themselves). What
the caller reads at a time bounds the memory: wrap it in ``io.BufferedReader`` with a buffer sized
from the budget.
"""

from __future__ import annotations

import io
from typing import Any


class RangeFile(io.RawIOBase):
    FIRST = 256 << 10  # the first GET after a seek; each one continuing where the last ended doubles

    def __init__(
        self,
        uri: str,
        *,
        start: int = 0,
        end: int | None = None,
        readahead: int = 8 << 20,
        size: int | None = None,
        first: int | None = None,
        kind: str = "read",
    ) -> None:
        """``size``: the object's size when it is known (no request to ask it); ``first``: the
        span of the first GET after a seek (default :data:`FIRST`); ``kind``: what the seconds
        spent waiting count as in the unit's time split (:mod:`~lovecraft_convert.runtime.clock`)."""
        from .stores import get_store as store_for
        from .uri import split

        self.uri = uri
        self.name = uri
        self.store = store_for(uri)
        self.key = split(uri)[2]
        if size is None:
            size = self.store.size(self.key)
        if size is None:
            from .base import StorageError

            raise StorageError(f"{uri}: no such object", hint="check the path")
        self.size = size
        self.start = start
        self.end = size if end is None else min(end, size)
        self.length = self.end - self.start  # what a reader of the range sees as its file's size
        self.pos = start
        self.readahead = readahead
        self.first = self.FIRST if first is None else first
        self.kind = kind
        self._span = min(readahead, self.first)
        self._body: Any = None
        self._body_pos = -1
        self._body_end = -1

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos - self.start

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            pos = self.start + offset
        elif whence == 1:
            pos = self.pos + offset
        else:
            pos = self.end + offset
        self.pos = max(self.start, pos)
        return self.pos - self.start

    def _drop(self) -> None:
        if self._body is not None:
            try:
                self._body.close()
            except Exception:  # noqa: BLE001 - a broken stream is dropped anyway
                pass
        self._body = None

    def readinto(self, b) -> int:
        from ..runtime.clock import timed

        with timed(self.kind):
            return self._readinto(b)

    def _readinto(self, b) -> int:
        mv = memoryview(b).cast("B")
        want = min(len(mv), self.end - self.pos)
        if want <= 0:
            return 0
        for attempt in range(3):
            if self._body is None or self._body_pos != self.pos:
                sequential = self.pos == self._body_end
                self._drop()
                # A GET covers what is read next, not the rest of the object: small after a seek (a
                # reader that seeks about, cutting parts or reading footers, opens short requests),
                # doubling while reading goes on where the last one ended, up to the read-ahead.
                self._span = min(self.readahead, self._span * 2) if sequential else min(self.readahead, self.first)
                stop = min(self.end, self.pos + max(want, self._span))
                self._body = self.store.open_body(self.key, self.pos, stop)
                self._body_pos = self.pos
                self._body_end = stop
            try:
                data = self._body.read(min(want, self._body_end - self.pos))
            except Exception:  # noqa: BLE001 - the connection dropped mid-stream: reopen here
                self._drop()
                if attempt == 2:
                    raise
                continue
            if not data:
                self._drop()
                if attempt == 2:
                    from .base import StorageError

                    raise StorageError(f"{self.uri}: the object ended early", hint="was it replaced while read?")
                continue
            n = len(data)
            mv[:n] = data
            self.pos += n
            self._body_pos = self.pos
            if self.pos >= self._body_end:
                end = self._body_end
                self._drop()
                self._body_end = end  # the next read here continues this stretch
            return n
        return 0

    def readall(self) -> bytes:
        out = bytearray()
        buf = bytearray(1 << 20)
        while n := self.readinto(buf):
            out += buf[:n]
        return bytes(out)

    def close(self) -> None:
        self._drop()
        super().close()


def read_range(uri: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of an object, in one request."""
    from .stores import get_store as store_for
    from .uri import split

    body = store_for(uri).open_body(split(uri)[2], start, end)
    try:
        return body.read()
    finally:
        body.close()
