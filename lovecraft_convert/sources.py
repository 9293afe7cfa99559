"""Inputs: resolving paths/globs/stdin, detecting compression and format, opening decompressed streams.

Compressed inputs are decompressed as streams, never whole. Every stream counts the *raw* bytes it
has consumed so progress can be shown in input bytes, and bounds how much it will inflate so a
decompression bomb is stopped with a clear error.
"""

from __future__ import annotations

import glob
import io
import os
import stat
import sys
from dataclasses import dataclass
from typing import BinaryIO

from .errors import InputError

COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd", ".zstd": "zstd"}
MAGIC = [(b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd")]
FORMAT_EXT = {".csv": "csv", ".tsv": "csv", ".txt": "text", ".text": "text", ".jsonl": "text", ".npy": "npy"}
INPUT_FORMATS = ("text", "csv", "npy")
# A stream may inflate at most this many times its compressed size (after the first 64 MiB).
DEFAULT_MAX_RATIO = 1000


@dataclass
class InputSpec:
    """One input: a path (or ``-``), its compression and format, and what the manifest records."""

    path: str
    name: str
    compression: str | None = None
    format: str | None = None
    size: int | None = None
    mtime: float | None = None
    stdin_spool: str | None = None  # stdin is spooled to this file when it must be read twice

    @property
    def is_stdin(self) -> bool:
        return self.path == "-"

    @property
    def base_ext(self) -> str:
        """The extension before any compression extension (``.csv`` of ``a.csv.gz``)."""
        base = self.path.lower()
        for ext in COMPRESSIONS:
            if base.endswith(ext):
                base = base[: -len(ext)]
        return os.path.splitext(base)[1]

    @property
    def stem(self) -> str:
        base = os.path.basename(self.path if not self.is_stdin else "stdin")
        for ext in COMPRESSIONS:
            if base.endswith(ext):
                base = base[: -len(ext)]
        return os.path.splitext(base)[0]

    def describe(self) -> dict:
        return {
            "name": self.name,
            "path": None if self.is_stdin else os.path.abspath(self.path),
            "size": self.size,
            "mtime": self.mtime,
            "format": self.format,
            "compression": self.compression,
        }


def resolve_inputs(specs: list[str], input_format: str | None = None) -> list[InputSpec]:
    """Expand globs, check every path is a readable file, detect compression and format."""
    if not specs:
        raise InputError("no input given", hint="pass one or more files, globs, or - for stdin")
    out: list[InputSpec] = []
    for spec in specs:
        if spec == "-":
            out.append(InputSpec("-", "<stdin>"))
            continue
        if glob.has_magic(spec) and not os.path.exists(spec):
            matches = sorted(glob.glob(spec))
            if not matches:
                raise InputError(f"{spec}: no file matches this pattern", hint="check the glob")
            paths = matches
        else:
            paths = [spec]
        for p in paths:
            out.append(_check_file(p))
    if sum(1 for s in out if s.is_stdin) > 1:
        raise InputError("stdin (-) given more than once")
    for s in out:
        s.compression = detect_compression(s)
        s.format = input_format or detect_format(s)
    return out


def _check_file(p: str) -> InputSpec:
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{p}: no such file", hint="check the path") from None
    except PermissionError:
        raise InputError(f"{p}: permission denied", hint="check the file's permissions") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(
            f"{p}: is a directory, not a file", hint="pass the files inside it, e.g. a glob like dir/*.csv"
        )
    if not os.access(p, os.R_OK):
        raise InputError(f"{p}: permission denied", hint="check the file's permissions")
    return InputSpec(p, p, size=st.st_size if stat.S_ISREG(st.st_mode) else None, mtime=st.st_mtime)


_STDIN: list = []


def stdin_buffer() -> BinaryIO:
    """stdin as a buffered stream that can ``peek`` (for magic-byte detection)."""
    cur = sys.stdin.buffer
    if _STDIN and _STDIN[0][0] is cur:
        return _STDIN[0][1]
    buf = cur if hasattr(cur, "peek") else io.BufferedReader(cur, 1 << 16)
    _STDIN[:] = [(cur, buf)]
    return buf


def _peek(spec: InputSpec, n: int = 8) -> bytes:
    if spec.is_stdin:
        return stdin_buffer().peek(n)[:n]
    with open(spec.path, "rb") as f:
        return f.read(n)


def detect_compression(spec: InputSpec) -> str | None:
    head = _peek(spec)
    for magic, name in MAGIC:
        if head.startswith(magic):
            return name
    lower = spec.path.lower()
    for ext, name in COMPRESSIONS.items():
        if lower.endswith(ext):
            if spec.size == 0:
                return None
            raise InputError(f"{spec.name}: named {ext} but is not {name}-compressed", hint="rename it or re-create it")
    return None


def detect_format(spec: InputSpec) -> str:
    ext = spec.base_ext
    if ext in FORMAT_EXT:
        return FORMAT_EXT[ext]
    if not spec.is_stdin:
        with open_stream(spec) as f:
            head = f.read(6)
        if head == b"\x93NUMPY":
            return "npy"
    raise InputError(
        f"{spec.name}: cannot tell the input format from its name or content",
        hint="pass --input-format text, csv or npy",
    )


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
                    import numpy as np

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
