"""Small shared helpers: sizes, hashing, fsync."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_size(text: str | int) -> int:
    """Parse ``256MiB``, ``1.5GB``, ``4096`` into bytes."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 256MiB, 1GB, 4096)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def sha256_file(path: str, bufsize: int = 4 << 20) -> str:
    h = hashlib.sha256()
    buf = bytearray(bufsize)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def fsync_path(path: str) -> None:
    """fsync a file or a directory by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def put_while(q, item, go: Callable[[], bool], poll: float = 0.1) -> bool:
    """Put ``item`` on the bounded queue ``q``, waiting for room only while ``go()`` holds (the
    other side is still there): never blocks for good. False when it gave up."""
    import queue

    while go():
        try:
            q.put(item, timeout=poll)
            return True
        except queue.Full:
            continue
    return False


class HashingWriter:
    """A write-only binary file that hashes what it writes and fsyncs on close.

    Hashing and writing run in a background thread, at most two buffers behind (hashlib and file
    writes release the GIL), so they overlap with producing the next buffer; written data is
    flushed to disk as it goes, so the final fsync has little left to do. Buffers handed to
    ``write`` must not be changed afterwards.
    """

    SYNC_EVERY = 256 << 20

    def __init__(self, path: str, preallocate: int = 0) -> None:
        import queue
        import threading

        self.path = path
        self.f = open(path, "wb", buffering=0)  # noqa: SIM115
        self.h = hashlib.sha256()
        self.bytes = 0
        self._unsynced = 0
        self._error: BaseException | None = None
        if preallocate > 0:
            try:
                preallocate_fd(self.f.fileno(), preallocate, path)
            except BaseException:
                self.f.close()
                raise
        self._q: queue.Queue = queue.Queue(maxsize=2)
        self._t = threading.Thread(target=self._run, name="lovecraft-writer", daemon=True)
        self._t.start()

    def _run(self) -> None:
        import queue

        while True:
            try:
                # Polled, not a plain get(): a Ctrl-C that lands inside the caller's put, between
                # the queue's notify releasing our waiter and forgetting it, leaves that stale
                # waiter to absorb the next notify, and a plain get() would sleep through the
                # final None for good (seen as a rare hang on Ctrl-C).
                mv = self._q.get(timeout=0.2)
            except queue.Empty:
                continue
            if mv is None:
                return
            if self._error is not None:
                continue
            try:
                self.h.update(mv)
                n = 0
                while n < len(mv):
                    n += self.f.write(mv[n:])
                self.bytes += n
                self._unsynced += n
                if self._unsynced >= self.SYNC_EVERY:
                    os.fdatasync(self.f.fileno())
                    self._unsynced = 0
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                self._error = named(e, self.path)

    def _check(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def write(self, data) -> int:
        self._check()
        mv = memoryview(data).cast("B")
        if len(mv):
            put_while(self._q, mv, self._t.is_alive)  # the writer thread may have stopped
            self._check()
        return len(mv)

    def _drain(self) -> None:
        if self._t.is_alive():
            put_while(self._q, None, self._t.is_alive)
            self._t.join()

    def close(self) -> tuple[int, str]:
        if not self.f.closed:
            self._drain()
            self._check()
            try:
                self.f.truncate(self.bytes)
                os.fsync(self.f.fileno())  # a delayed-allocation full disk shows here
            except OSError as e:
                raise named(e, self.path) from None
            self.f.close()
        return self.bytes, self.h.hexdigest()

    def abort(self) -> None:
        if not self.f.closed:
            self._error = self._error or RuntimeError("aborted")
            self._drain()
            self.f.close()


def named(e: BaseException, path: str) -> BaseException:
    """``e``, or for an OSError that names no file, the same error naming ``path`` (so that a full
    disk can be reported with the file being written)."""
    if isinstance(e, OSError) and e.errno is not None and e.filename is None:
        out = OSError(e.errno, e.strerror or os.strerror(e.errno), path)
        out.__dict__.update(e.__dict__)
        return out
    return e


def preallocate_fd(fd: int, nbytes: int, path: str) -> None:
    """Reserve disk blocks up front so a full disk fails now, not in the middle (or as SIGBUS).
    A full disk raises OSError(ENOSPC) naming ``path``, with the bytes asked for as ``.needed``."""
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as e:
        import errno

        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            err = OSError(e.errno, os.strerror(e.errno), path)
            err.needed = nbytes
            raise err from None
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, getattr(errno, "ENOTSUP", 95)):
            raise
