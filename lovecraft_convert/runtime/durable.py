"""Durable writes: the hashing writer (every data file is hashed as it is written, with direct I/O
where the file system takes it, and fsynced before it counts as written), fsyncs of many files at
once and of a whole file system in the background, and preallocation; :func:`throwaway` for files
written only to be measured and deleted (a trial shard), which none of that makes durable. The
hashes themselves are :mod:`.hashing`'s."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import mmap
import os
import sys
import threading
from collections.abc import Iterator

from ..util import fsync_path
from .hashing import DEFAULT_HASH, hash_file, new_hash
from .interrupts import join, put_while, result

_THROWAWAY: contextvars.ContextVar[bool] = contextvars.ContextVar("lovecraft_throwaway", default=False)


@contextlib.contextmanager
def throwaway() -> Iterator[None]:
    """Files written in the block (by this thread) are measured and deleted, never kept: the trial
    shard that turns ``--shard-size`` into rows. The writers here then write them through the page
    cache and never flush them (no direct I/O, no fsync), so the disk need not write them at all;
    their bytes and digests are those of a durable write."""
    token = _THROWAWAY.set(True)
    try:
        yield
    finally:
        _THROWAWAY.reset(token)


def durable_files() -> bool:
    """Are files written now to be made durable (False inside :func:`throwaway`)?"""
    return not _THROWAWAY.get()


def hash_fsynced(path: str, name: str = DEFAULT_HASH) -> str:
    """The digest of a file just written, computed while another thread fsyncs it: one waits on
    the disk, the other hashes the page cache, so together they take the longer of the two."""
    if not durable_files():
        return hash_file(path, name, mapped=True)
    errors: list[OSError] = []

    def sync() -> None:
        try:
            fsync_path(path)
        except OSError as e:
            errors.append(e)

    t = threading.Thread(target=sync, name="lovecraft-fsync", daemon=True)
    t.start()
    try:
        digest = hash_file(path, name, mapped=True)
    finally:
        join(t)
    if errors:
        raise errors[0]
    return digest


class BackgroundSync:
    """Flushes a file that something else writes (HDF5, through its own handle) to disk from a
    thread, whenever :meth:`kick` is called after enough new bytes: the disk works while the
    caller computes, instead of all at the final fsync. Errors are kept for :meth:`close`.
    ``sync``: what a kick runs on the descriptor (default ``os.fdatasync``)."""

    def __init__(self, path: str, sync=os.fdatasync) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.sync = sync
        self.wake = threading.Event()
        self.done = False
        self.errors: list[OSError] = []
        self.t = threading.Thread(target=self._run, name="lovecraft-sync", daemon=True)
        self.t.start()

    def _run(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            if self.done:
                return
            try:
                self.sync(self.fd)
            except OSError as e:
                self.errors.append(e)
                return

    def kick(self) -> None:
        self.wake.set()

    def close(self) -> None:
        """Stop (without a last flush: the caller fsyncs) and raise the first error seen."""
        self.done = True
        self.wake.set()
        join(self.t)
        os.close(self.fd)
        if self.errors:
            raise self.errors[0]


@functools.cache
def _syncfs_call():
    """libc's ``syncfs`` where it reports write-back errors (Linux 5.8 and later: before, it
    returned success whatever failed), else None."""
    try:
        release = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
        if sys.platform != "linux" or release < (5, 8) or os.environ.get("LOVECRAFT_SYNCFS", "1") == "0":
            return None
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).syncfs  # releases the GIL while it runs
    except (ValueError, OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return fn


def dirty_bytes() -> int | None:
    """Bytes of the page cache waiting to be written to disk, the whole system's (``Dirty`` and
    ``Writeback`` of /proc/meminfo); None where that is not known."""
    try:
        with open("/proc/meminfo", "rb") as f:
            text = f.read()
    except OSError:
        return None
    total, seen = 0, 0
    for line in text.splitlines():
        if line.startswith((b"Dirty:", b"Writeback:")):
            total += int(line.split()[1]) * 1024
            seen += 1
    return total if seen == 2 else None


class FileSystemSync:
    """Makes a writer's many files durable with the file system's own ``syncfs`` instead of an
    fsync per file, where that is safe and cheaper.

    An fsync of a new file writes its inode and its directory's block and flushes the disk's
    cache, so 2,000 column files cost 2,000 of each (~0.45 s here with 8 threads), where one
    ``syncfs`` writes each inode-table and directory block once and flushes once (~0.03 s after
    the background flushes below). ``syncfs`` writes back everything dirty on the file system,
    though, other programs' files too: it is used only while what is dirty on the whole system is
    about what this writer wrote (:data:`SLACK` more at most); otherwise every file is fsynced
    as before. While the files are written, :meth:`wrote` starts a background ``syncfs`` every
    :data:`KICK` bytes, so that the disk writes them while the input is read instead of all at
    the end. The directory is opened before anything is written: ``syncfs`` then reports any
    write-back error since, and a failed one is followed by an fsync of every file, which names
    the file (each descriptor reports its own file's error)."""

    KICK = 48 << 20
    SLACK = 128 << 20

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.call = _syncfs_call()
        self.fd = os.open(directory, os.O_RDONLY) if self.call is not None else None
        self.unsynced = 0
        self.since_kick = 0
        self.background: BackgroundSync | None = None

    def _syncfs(self, fd: int) -> None:
        if self.call(fd) != 0:
            import ctypes

            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), self.directory)

    def _alone(self, ours: int) -> bool:
        """Whether what is dirty on the system is about ``ours``: a ``syncfs`` would wait for
        little else."""
        dirty = dirty_bytes()
        return dirty is not None and dirty <= ours + self.SLACK

    def wrote(self, n: int) -> None:
        """``n`` more bytes written to the files (through the page cache)."""
        if self.fd is None:
            return
        self.unsynced += n
        self.since_kick += n
        if self.since_kick >= self.KICK:
            self.since_kick = 0
            if self._alone(self.unsynced):
                if self.background is None:
                    self.background = BackgroundSync(self.directory, self._syncfs)
                self.background.kick()
                self.unsynced = 0

    def usable(self) -> bool:
        """Whether :meth:`sync_all` will use ``syncfs`` now."""
        return self.fd is not None and self._alone(self.unsynced)

    def sync_all(self, files: list[tuple[str, object]]) -> None:
        """Make ``files`` (``(path, open file)``, all written and finished) durable: one
        ``syncfs``; if it fails, an fsync of each file (8 threads) to name the one that failed,
        else the ``syncfs`` error, naming the directory."""
        try:
            self.stop()
            self._syncfs(self.fd)
        except OSError as e:
            fsync_each(files)
            raise named(e, self.directory) from None

    def stop(self) -> None:
        """End the background flushes; raise the first error they met."""
        if self.background is not None:
            b, self.background = self.background, None
            b.close()

    def close(self) -> None:
        try:
            self.stop()
        finally:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None


def _fsync_named(path: str, f) -> None:
    try:
        os.fsync(f.fileno())
    except OSError as e:
        raise named(e, path) from None


def fsync_each(files: list[tuple[str, object]], threads: int = 8) -> None:
    """fsync every ``(path, open file)`` by ``threads`` threads; the first error names its file,
    after every sync is done."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(threads, len(files))), thread_name_prefix="lovecraft-fsync") as ex:
        futs = [ex.submit(_fsync_named, path, f) for path, f in files]
        for fut in futs:
            result(fut)


class HashingWriter:
    """A write-only binary file that hashes what it writes and fsyncs on close.

    Hashing and writing run in a background thread, at most two buffers behind (hashlib, the
    staging copy and file writes release the GIL), so they overlap with producing the next buffer.

    Where the file system allows it, data goes to disk with direct I/O (``O_DIRECT``), staged
    through one aligned 1 MiB buffer: we fsync every file anyway and do not read it back, and
    copying into the page cache is the single largest CPU cost of writing (measured: one to two
    and a half seconds of system time per GB on the reference machine, a few hundredths direct),
    besides evicting the caller's input from the cache. Elsewhere (tmpfs on older kernels, or with
    ``LOVECRAFT_DIRECT_IO=0``) writes are buffered and flushed to disk as they go, so the final
    fsync has little left to do. Buffers handed to ``write`` must not be changed afterwards.

    ``sink`` (writers that only append, when the run writes to an object store: see
    :func:`lovecraft_convert.storage.stream.open_stream`): the bytes go to the file's object as
    they come and nothing is written to local scratch, so a run's scratch never holds its output.
    """

    SYNC_EVERY = 256 << 20
    STAGE = 1 << 20  # direct I/O: bytes per write (page-aligned buffer, a multiple of 4 KiB sectors)
    GATHER = 256 << 10  # smaller writes are gathered up to this before they go to the thread

    def __init__(
        self,
        path: str,
        preallocate: int = 0,
        hash: str | None = DEFAULT_HASH,
        threaded: bool = True,
        sink=None,
        readable: bool = False,
    ) -> None:
        """``threaded`` False: hash and write in the caller's thread, buffered (for writers of many
        small files, where a thread and a staging buffer per file cost more than they save).
        ``readable``: the file is opened for reading too (``close(keep_open=True)`` hands it on)."""
        import queue

        self.path = path
        self.threaded = threaded
        self.sink = sink  # write(data), close(nbytes, digest), abort()
        self.durable = durable_files()  # False: a file to be measured and deleted (throwaway())
        self._closed = False
        if self.sink is not None:
            self.f, self.direct, preallocate = None, False, 0
        else:
            self.f, self.direct = _open_write(path, direct=threaded and self.durable, readable=readable)
        self.h = new_hash(hash)
        self.bytes = 0  # written by the writer thread
        self._pos = 0  # accepted by write()
        self._unsynced = 0
        self._stage = None
        self._fill = 0
        self._error: BaseException | None = None
        if preallocate > 0:
            try:
                preallocate_fd(self.f.fileno(), preallocate, path)
            except BaseException:
                self.f.close()
                raise
        self._q: queue.Queue | None = None
        # Small writes (a Parquet writer's pages: 84,000 writes of ~800 bytes for a 2,000-column
        # table) gathered into one hand-over to the thread, which costs tens of microseconds each
        self._gather = bytearray()
        self._t: threading.Thread | None = None
        if threaded:
            self._q = queue.Queue(maxsize=2)
            self._t = threading.Thread(target=self._run, name="lovecraft-writer", daemon=True)
            self._t.start()

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            if self._stage is not None:
                self._stage = None
                _staging(-self.STAGE)

    def _loop(self) -> None:
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
            if self._error is not None:
                if mv is None:
                    return
                continue
            try:
                if mv is None:
                    self._flush_stage()
                    return
                self.h.update(mv)
                self.bytes += len(mv)
                if self.sink is not None:
                    self.sink.write(mv)
                elif self.direct and (self._stage is not None or self._claim_stage()):
                    self._stage_copy(mv)
                else:
                    self._write_all(mv)
                    self._unsynced += len(mv)
                    if self._unsynced >= self.SYNC_EVERY and self.durable:
                        os.fdatasync(self.f.fileno())
                        self._unsynced = 0
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                self._error = named(e, self.path)
                if mv is None:
                    return

    def _stage_copy(self, mv: memoryview) -> None:
        """Copy into the aligned staging buffer, writing it out each time it fills."""
        import numpy as np

        src = np.frombuffer(mv, dtype=np.uint8)
        pos = 0
        while pos < len(src):
            k = min(self.STAGE - self._fill, len(src) - pos)
            self._stage[self._fill : self._fill + k] = src[pos : pos + k]  # releases the GIL
            self._fill += k
            pos += k
            if self._fill == self.STAGE:
                self._write_all(memoryview(self._stage))
                self._fill = 0

    def _claim_stage(self) -> bool:
        """Allocate the staging buffer, if the process's staging budget has room for it (a memmap
        dataset of many columns has a writer per column); otherwise carry on buffered."""
        if not _staging(self.STAGE):
            self._set_direct(False)
            return False

        import numpy as np

        self._stage = np.frombuffer(mmap.mmap(-1, self.STAGE), dtype=np.uint8)  # page-aligned
        return True

    def _flush_stage(self) -> None:
        """Write what is left in the staging buffer: a partial block, so with buffered I/O (a
        padded direct write could need a block beyond a preallocated, exactly sized file)."""
        if self._fill:
            self._set_direct(False)
            self._write_all(memoryview(self._stage)[: self._fill])
            self._fill = 0

    def _set_direct(self, on: bool) -> None:
        import fcntl

        flags = fcntl.fcntl(self.f.fileno(), fcntl.F_GETFL)
        fcntl.fcntl(self.f.fileno(), fcntl.F_SETFL, flags | os.O_DIRECT if on else flags & ~os.O_DIRECT)
        self.direct = on

    def _write_all(self, mv: memoryview) -> None:
        import errno

        n = 0
        while n < len(mv):
            try:
                n += os.write(self.f.fileno(), mv[n:])
            except OSError as e:
                # A file system that takes O_DIRECT at open but not these writes (or a short
                # direct write that left the offset unaligned): carry on buffered.
                if e.errno != errno.EINVAL or not self.direct:
                    raise
                self._set_direct(False)

    def _check(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def write(self, data) -> int:
        self._check()
        mv = memoryview(data).cast("B")
        if len(mv) and not self.threaded:
            try:
                self.h.update(mv)
                if self.sink is not None:
                    self.sink.write(mv)
                else:
                    self._write_all(mv)
            except OSError as e:
                raise named(e, self.path) from None
            self.bytes += len(mv)
            self._pos += len(mv)
        elif len(mv):
            if len(mv) + len(self._gather) <= self.GATHER:
                self._gather += mv
            else:
                self._hand_over()
                if len(mv) < self.GATHER:
                    self._gather += mv
                else:
                    put_while(self._q, mv, self._t.is_alive)  # the writer thread may have stopped
            self._pos += len(mv)
            self._check()
        return len(mv)

    def _hand_over(self) -> None:
        if self._gather:
            put_while(self._q, memoryview(self._gather), self._t.is_alive)
            self._gather = bytearray()

    # enough of a file object for pyarrow to write into (``pa.PythonFile``)
    @property
    def closed(self) -> bool:
        return self._closed

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        self._check()

    def writable(self) -> bool:
        return True

    def _drain(self) -> None:
        if self._t is not None and self._t.is_alive():
            if self._error is None:
                self._hand_over()
            put_while(self._q, None, self._t.is_alive)
            join(self._t)

    def close(self, sync: bool = True, keep_open: bool = False) -> tuple[int, str]:
        """Finish the file: (bytes, hex digest). ``sync`` False leaves the fsync to the caller
        (:func:`finish_and_fsync` of many files at once); ``keep_open`` leaves ``self.f`` open for
        the caller to finish (a header rewritten, an fsync) and close."""
        if self._closed:
            return self.bytes, self.h.hexdigest()
        self._drain()
        self._check()
        if self.sink is not None:
            self.sink.close(self.bytes, self.h.hexdigest())  # an upload that fails is aborted
            self._closed = True
            return self.bytes, self.h.hexdigest()
        try:
            self.f.truncate(self.bytes)
            if keep_open and self.direct:
                self._set_direct(False)  # the caller's header is a small write
            if sync and self.durable:
                os.fsync(self.f.fileno())  # a delayed-allocation full disk shows here
        except OSError as e:
            raise named(e, self.path) from None
        if not keep_open:
            self.f.close()
        self._closed = True
        return self.bytes, self.h.hexdigest()

    def abort(self) -> None:
        if not self._closed:
            self._error = self._error or RuntimeError("aborted")
            self._drain()
            self._closed = True
            if self.sink is not None:
                self.sink.abort()
            else:
                self.f.close()


_STAGING_LIMIT = 16 << 20  # direct-I/O staging buffers of all writers of a process together
_staging_lock = threading.Lock()
_staging_used = 0


def _staging(delta: int) -> bool:
    """Claim (delta > 0) or release staging memory; False when a claim does not fit."""
    global _staging_used
    with _staging_lock:
        if delta > 0 and _staging_used + delta > _STAGING_LIMIT:
            return False
        _staging_used += delta
        return True


def finish_and_fsync(items: list, finish, threads: int = 8, fs: FileSystemSync | None = None) -> list:
    """``finish(x)`` for each item, in the caller's thread (it returns ``(value, path, file)``: a
    file left open, unbuffered), and every file made durable: with ``fs`` usable
    (:meth:`FileSystemSync.usable`), by one ``syncfs`` once all are finished; otherwise each file
    fsynced by one of ``threads`` threads as soon as it is finished, so that finishing the next
    ones overlaps the syncs (2,000 small files here: ~0.4 s of syncs with 8 threads, 5 s one after
    another). Every file finished is closed, even after an error; an error names its file.
    Returns the values."""
    from concurrent.futures import ThreadPoolExecutor

    values, opened, syncs = [], [], []
    try:
        if fs is not None and fs.usable():
            for x in items:
                value, path, f = finish(x)
                values.append(value)
                opened.append((path, f))
            fs.sync_all(opened)
            return values
        with ThreadPoolExecutor(max(1, min(threads, len(items))), thread_name_prefix="lovecraft-fsync") as ex:
            try:
                for x in items:
                    value, path, f = finish(x)
                    values.append(value)
                    opened.append((path, f))
                    syncs.append(ex.submit(_fsync_named, path, f))
            finally:
                for fut in syncs:  # every sync waited for (the first error raised) before any close
                    try:
                        result(fut)
                    except BaseException:
                        for rest in syncs:
                            rest.cancel()
                        raise
        return values
    finally:
        for _, f in opened:
            f.close()


def _open_write(path: str, direct: bool = True, readable: bool = False):
    """``path`` created for writing (unbuffered file object; ``readable``: for reading too), with
    O_DIRECT where the file system takes it, ``direct`` is asked and ``LOVECRAFT_DIRECT_IO`` is
    not ``0``; returns (file, direct)."""
    flags = (os.O_RDWR if readable else os.O_WRONLY) | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    mode = "r+b" if readable else "wb"
    odirect = getattr(os, "O_DIRECT", 0) if direct else 0
    if odirect and os.environ.get("LOVECRAFT_DIRECT_IO", "1") != "0":
        try:
            return open(os.open(path, flags | odirect, 0o666), mode, buffering=0), True  # noqa: SIM115
        except OSError as e:
            import errno

            if e.errno != errno.EINVAL:
                raise
    return open(os.open(path, flags, 0o666), mode, buffering=0), False  # noqa: SIM115


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
