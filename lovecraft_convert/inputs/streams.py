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
    from .spec import InputSpec

# A stream may inflate at most this many times its compressed size (after the first 64 MiB).
DEFAULT_MAX_RATIO = 1000

_STDIN: list = []
_SPOOLED: list = []  # [(sys.stdin.buffer, the file it was spooled to)]: one spool per stdin


def spooled_stdin() -> str | None:
    """The file this process's stdin was spooled to (:func:`spool_stdin`), if it was: a reader
    opened on ``-`` after it (bucket opens its input twice) reads that, not the drained pipe."""
    import os

    if _SPOOLED and _SPOOLED[0][0] is sys.stdin.buffer and os.path.exists(_SPOOLED[0][1]):
        return _SPOOLED[0][1]
    return None


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


class ZstdFrames(io.RawIOBase):
    """Passes the raw bytes of a zstd stream through, following its frame structure (frame headers,
    block headers, checksums, skippable frames) without decompressing, so that a stream that ends
    inside a frame is known at its end. Only headers are parsed; block payloads are skipped by
    their sizes."""

    MAGIC = 0xFD2FB528

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.in_frame = False
        self._need = 4  # header bytes wanted by the state
        self._state = "magic"
        self._head = b""
        self._skip = 0  # payload bytes to pass before the next header
        self._then = None  # what follows the payload being skipped (the frame may end there)
        self._checksum = False

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.raw.readinto(b)
        if n:
            self._follow(memoryview(b)[:n])
        return n or 0

    def _follow(self, data: memoryview) -> None:
        pos, end = 0, len(data)
        while pos < end:
            if self._skip:
                k = min(self._skip, end - pos)
                self._skip -= k
                pos += k
                if not self._skip and self._then is not None:
                    then, self._then = self._then, None
                    then()
                continue
            k = min(self._need - len(self._head), end - pos)
            self._head += bytes(data[pos : pos + k])
            pos += k
            if len(self._head) == self._need:
                self._header(self._head)

    def _header(self, h: bytes) -> None:
        self._head = b""
        st = self._state
        if st == "magic":
            magic = int.from_bytes(h, "little")
            self.in_frame = True
            if magic == self.MAGIC:
                self._state, self._need = "fhd", 1
            elif magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame: a 4-byte size, then data
                self._state, self._need = "skippable", 4
            else:  # not zstd: the decompressor reports it
                self._state, self._need = "unknown", 1 << 62
        elif st == "skippable":
            self._skip = int.from_bytes(h, "little")
            self._after(self._end_frame)
        elif st == "fhd":
            fhd = h[0]  # frame header descriptor
            single = (fhd >> 5) & 1
            fcs_size = (1 if single else 0, 2, 4, 8)[fhd >> 6]
            self._checksum = bool((fhd >> 2) & 1)
            rest = (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs_size  # window, dictionary id, size
            self._state, self._need = "block", 3
            if rest:
                self._state, self._need = "frame-rest", rest
        elif st == "frame-rest":
            self._state, self._need = "block", 3
        elif st == "block":
            v = int.from_bytes(h, "little")
            last, kind, size = v & 1, (v >> 1) & 3, v >> 3
            self._skip = 1 if kind == 1 else size  # RLE blocks hold one byte
            if last:
                self._after(self._checksum_or_end)
        elif st == "checksum":
            self._end_frame()

    def _after(self, then) -> None:
        """Run ``then`` once the payload being skipped has passed (at once when it is empty)."""
        if self._skip:
            self._state, self._need, self._then = "payload", 1 << 62, then
        else:
            then()

    def _checksum_or_end(self) -> None:
        if self._checksum:
            self._state, self._need = "checksum", 4
        else:
            self._end_frame()

    def _end_frame(self) -> None:
        self._state, self._need, self.in_frame = "magic", 4, False


class _ZstdReader(io.RawIOBase):
    """Decompresses concatenated zstd frames with bounded output per read (a few bytes can inflate
    to gigabytes: never more than asked is produced), refusing a stream that ends inside a frame."""

    def __init__(self, raw: BinaryIO, name: str, max_window: int = 1 << 31) -> None:
        import zstandard

        self.name = name
        self._zstd = zstandard
        self.frames = ZstdFrames(raw)
        dctx = zstandard.ZstdDecompressor(max_window_size=max_window)
        self._reader = dctx.stream_reader(self.frames, read_size=1 << 18, read_across_frames=True, closefd=False)
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._done:
            return 0
        try:
            n = self._reader.readinto(b)
        except self._zstd.ZstdError as e:
            reason = str(e).split(": ", 1)[-1]  # without the library's "zstd decompress error: "
            raise InputError(
                f"{self.name}: corrupt zstd stream ({reason})", hint="re-create or re-download the file"
            ) from None
        if not n:
            self._done = True
            if self.frames.in_frame:
                raise InputError(
                    f"{self.name}: truncated zstd stream (ends inside a frame)",
                    hint="re-create or re-download the file",
                )
        return n or 0

    def close(self) -> None:
        self._reader.close()
        super().close()


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
        from ..storage import open_input

        raw = open_input(spec.path, buffering=0)
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
    from ..storage import is_remote

    if is_remote(path):  # ranged GETs inside [start, end) only
        from ..storage.rangefile import RangeFile

        f = RangeFile(path, start=start, end=end)
    else:
        f = open(path, "rb", buffering=0)  # noqa: SIM115
        f.seek(start)
    counter = CountingReader(_RangeReader(f, end - start))
    stream = io.BufferedReader(counter, buffer_size=1 << 20)
    stream.raw_count = lambda: counter.count  # type: ignore[attr-defined]
    return stream


def spool_stdin(spec: InputSpec) -> None:
    """Copy stdin to a temporary file (removed at exit), in bounded memory, for a reader that may
    read its input again (a widened type starts the job over)."""
    import atexit
    import os
    import shutil
    import tempfile

    path = spooled_stdin()
    if path is None:
        fd, path = tempfile.mkstemp(prefix="lovecraft-stdin-", suffix=".spool")
        atexit.register(lambda: os.path.exists(path) and os.unlink(path))
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(stdin_buffer(), out, 4 << 20)
        _SPOOLED[:] = [(sys.stdin.buffer, path)]
    spec.stdin_spool = path
    spec.size = os.path.getsize(path)
