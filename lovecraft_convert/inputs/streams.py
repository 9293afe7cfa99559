"""Opening inputs as streams of their (decompressed) bytes, bounded and counted.

Compressed inputs are decompressed as streams, never whole. Every stream counts the *raw* bytes it
has consumed so progress can be shown in input bytes, and bounds how much it will inflate so a
decompression bomb is stopped with a clear error.
"""

from __future__ import annotations

import io
import sys
from typing import TYPE_CHECKING, BinaryIO

from ..errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from .sources import InputSpec

# A stream may inflate at most this many times its compressed size (after the first 64 MiB).
DEFAULT_MAX_RATIO = 1000

_STDIN: list = []


def stdin_buffer() -> BinaryIO:
    """stdin as a buffered stream that can ``peek`` (for magic-byte detection)."""
    cur = sys.stdin.buffer
    if _STDIN and _STDIN[0][0] is cur:
        return _STDIN[0][1]
    buf = cur if hasattr(cur, "peek") else io.BufferedReader(cur, 1 << 16)
    _STDIN[:] = [(cur, buf)]
    return buf


class CountingReader(io.RawIOBase):
    """Counts the raw bytes read from the underlying file (for progress in input bytes)."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.f.readinto(b)
        self.count += n or 0
        return n or 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.count += len(data)
        return data

    def close(self) -> None:
        if not (_STDIN and self.f is _STDIN[0][1]) and self.f is not sys.stdin.buffer:
            self.f.close()
        super().close()


class _ZstdReader(io.RawIOBase):
    """Decompresses concatenated zstd frames, refusing a stream that ends inside a frame."""

    def __init__(self, raw: BinaryIO, name: str, max_window: int = 1 << 31) -> None:
        import zstandard

        self.raw = raw
        self.name = name
        self._zstd = zstandard
        self._dctx = zstandard.ZstdDecompressor(max_window_size=max_window)
        self._obj = None
        self._pending = b""
        self._eof = False
        self._in_frame = False

    def readable(self) -> bool:
        return True

    def _fill(self, want: int) -> None:
        while len(self._pending) < want and not self._eof:
            chunk = self.raw.read(1 << 20)
            if not chunk:
                self._eof = True
                if self._in_frame:
                    raise InputError(
                        f"{self.name}: truncated zstd stream (ends inside a frame)",
                        hint="re-create or re-download the file",
                    )
                break
            out = []
            while chunk:
                if self._obj is None:
                    self._obj = self._dctx.decompressobj()
                    self._in_frame = True
                try:
                    out.append(self._obj.decompress(chunk))
                except self._zstd.ZstdError as e:
                    raise InputError(
                        f"{self.name}: corrupt zstd stream ({e})", hint="re-create or re-download the file"
                    ) from None
                if self._obj.eof:
                    chunk = self._obj.unused_data
                    self._obj = None
                    self._in_frame = False
                else:
                    chunk = b""
            self._pending += b"".join(out)

    def readinto(self, b) -> int:
        want = len(b)
        self._fill(want)
        n = min(want, len(self._pending))
        b[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


class BoundedReader(io.RawIOBase):
    """Wraps a decompressing stream: maps codec errors to InputError and stops decompression bombs."""

    def __init__(self, inner, counter: CountingReader, name: str, kind: str, max_ratio: float) -> None:
        self.inner = inner
        self.counter = counter
        self.name = name
        self.kind = kind
        self.max_ratio = max_ratio
        self.out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        import lzma
        import zlib

        try:
            n = self.inner.readinto(b)
        except InputError:
            raise
        except (EOFError, OSError, zlib.error, lzma.LZMAError, ValueError) as e:
            what = "truncated" if isinstance(e, EOFError) else "corrupt"
            raise InputError(
                f"{self.name}: {what} {self.kind} stream after {self.counter.count} compressed bytes ({e})",
                hint="re-create or re-download the file",
            ) from None
        n = n or 0
        self.out += n
        if self.max_ratio and self.out > (64 << 20) and self.out > self.max_ratio * max(1, self.counter.count):
            raise InputError(
                f"{self.name}: inflates more than {self.max_ratio:.0f}x its compressed size (decompression bomb?)",
                hint="if the file is genuine, raise the limit with --max-expansion",
            )
        return n

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            self.counter.close()
            super().close()


def open_stream(spec: InputSpec, *, max_ratio: float = DEFAULT_MAX_RATIO) -> io.BufferedReader:
    """Open an input as a buffered binary stream of its decompressed bytes.

    The returned object has ``.raw_count()``: compressed bytes consumed so far.
    """
    if spec.stdin_spool:
        raw = open(spec.stdin_spool, "rb")  # noqa: SIM115
    elif spec.is_stdin:
        raw = stdin_buffer()
    else:
        raw = open(spec.path, "rb")  # noqa: SIM115
    counter = CountingReader(raw)
    if spec.compression is None:
        stream = io.BufferedReader(counter, buffer_size=1 << 20)
    else:
        if spec.compression == "gzip":
            import gzip

            inner = gzip.GzipFile(fileobj=io.BufferedReader(counter, 1 << 20), mode="rb")
        elif spec.compression == "bz2":
            import bz2

            inner = bz2.BZ2File(io.BufferedReader(counter, 1 << 20), mode="rb")
        elif spec.compression == "xz":
            import lzma

            inner = lzma.LZMAFile(io.BufferedReader(counter, 1 << 20), mode="rb")  # noqa: SIM115 - closed with the stream
        else:
            inner = _ZstdReader(counter, spec.name)
        stream = io.BufferedReader(
            BoundedReader(inner, counter, spec.name, spec.compression, max_ratio), buffer_size=1 << 20
        )
    stream.raw_count = lambda: counter.count  # type: ignore[attr-defined]
    return stream


class _RangeReader(io.RawIOBase):
    def __init__(self, f: BinaryIO, length: int) -> None:
        self.f = f
        self.left = length

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.left <= 0:
            return 0
        mv = memoryview(b)[: self.left]
        n = self.f.readinto(mv) or 0
        self.left -= n
        return n

    def close(self) -> None:
        self.f.close()
        super().close()


def open_range(path: str, start: int, end: int) -> io.BufferedReader:
    """Bytes ``[start, end)`` of an uncompressed file as a stream with ``raw_count()``."""
    f = open(path, "rb", buffering=0)  # noqa: SIM115
    f.seek(start)
    counter = CountingReader(_RangeReader(f, end - start))
    stream = io.BufferedReader(counter, buffer_size=1 << 20)
    stream.raw_count = lambda: counter.count  # type: ignore[attr-defined]
    return stream
