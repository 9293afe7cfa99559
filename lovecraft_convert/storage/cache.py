"""A node-local cache of object-store pieces: bounded, verified, shared safely by processes.

Loaders that read a dataset on an object store bring its bytes here a little ahead of the reader
and drop them once read, so a dataset many times larger than the local disk trains from a cache of
a few GiB. A *piece* is a whole object or a byte range of one (:class:`Piece`). The cache is a
directory every process of a node may share (DataLoader workers, the ranks of one machine):

* ``objects/<key>``: complete pieces only. A whole object is there only after its size and its
  digest (the manifest's) were checked; a range after its length was. The key is the object's
  digest (plus the range), so equal content is stored once whichever dataset names it.
* ``partial/<key>.<pid>.<random>``: a download under way, written in place (its full size
  reserved first with ``posix_fallocate``: a full disk fails before a byte is fetched, never under
  a reader) and renamed into ``objects/`` once checked. Its writer holds an exclusive ``flock`` on
  it; a partial file no one holds is a dead process's, removed (never trusted) by the next sweep.
* ``locks/<key>``: one lock per piece. A shared ``flock`` is a *pin* (the piece is in use and is
  never evicted); an exclusive one is held while it is evicted. ``locks/<key>.dl`` is held
  exclusively while the piece is downloaded, so a node downloads it once: everyone else waits for
  that download. A process that dies drops its locks with it.
* ``.lock``: held briefly while space is counted, reserved and freed; ``.boot`` holds the boot id
  of the machine the pieces were written on (a piece renamed into place just before a crash may
  hold unwritten pages, so after a reboot the cache starts empty rather than trust it).

Eviction makes room for a new piece when the cache would go over its limit: pieces marked *done*
(read, :meth:`Held.release`) first, oldest first, then the least recently used, and headers and
footers (small ranges at the ends of objects, which every process opening a file reads) last;
never a pinned one.
A fetch the reader waits for (``demand``) that still does not fit goes over the limit (the rest of
the cache is in use: refusing would stall the readers that hold it); a prefetch never does.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import threading
import time
from dataclasses import dataclass

from ..errors import DatasetError, LovecraftError

DIR_ENV = "LOVECRAFT_CACHE"
LIMIT_ENV = "LOVECRAFT_CACHE_LIMIT"
DEFAULT_LIMIT = 4 << 30
PART = 8 << 20  # a large piece is fetched in ranged parts of this size, several at once
CHUNK = 1 << 20  # bytes read from a response body at a time
FETCH_THREADS = 4
DOWNLOADING = ".dl"  # locks/<key>.dl: held exclusively by the process downloading the piece
META_MAX = 256 << 10  # a range at an end of an object no larger than this is its header or footer
DONE_SHIFT = 10 * 365 * 86400  # a piece marked done sorts this many seconds before its time (evicted first)
RETRIES = 3  # attempts at a response body that breaks mid-way, each going on where it stopped


class CacheError(LovecraftError):
    """The local cache cannot hold what is asked (a full disk, a limit smaller than a file)."""

    kind = "cache"


def parse_size(value: int | str | None, what: str = "cache_limit") -> int | None:
    """Bytes of ``value``: an int, or a string such as ``"4GiB"``, ``"500MB"``, ``"2g"``."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        if isinstance(value, int) and value < 1:
            raise CacheError(f"{what} must be a positive size, not {value!r}")
        return value
    if not isinstance(value, str):
        raise CacheError(f"{what} must be a size in bytes or a string such as '4GiB', not {value!r}")
    text = value.strip().lower().replace(" ", "")
    units = {"": 1, "b": 1, "k": 1 << 10, "kb": 10**3, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6, "mib": 1 << 20}
    units.update({"g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12, "tib": 1 << 40})
    i = len(text)
    while i and not (text[i - 1].isdigit() or text[i - 1] == "."):
        i -= 1
    try:
        n = float(text[:i]) * units[text[i:]]
    except (KeyError, ValueError):
        raise CacheError(f"{what}={value!r} is not a size", hint="give bytes or e.g. '4GiB', '500MB'") from None
    if n < 1:
        raise CacheError(f"{what} must be a positive size, not {value!r}")
    return int(n)


def default_dir() -> str:
    """``LOVECRAFT_CACHE``, or ``~/.cache/lovecraft``."""
    return os.environ.get(DIR_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "lovecraft")


def default_limit() -> int:
    """``LOVECRAFT_CACHE_LIMIT`` (e.g. ``8GiB``), or 4 GiB."""
    env = os.environ.get(LIMIT_ENV)
    return parse_size(env, LIMIT_ENV) if env else DEFAULT_LIMIT


@dataclass(frozen=True)
class Piece:
    """A whole object (``end`` None) or bytes ``[start, end)`` of it. ``size`` is the object's
    size and ``digest`` its ``(algorithm, hex)`` as the manifest records them: a whole piece is
    checked against both before it is used."""

    uri: str
    size: int
    digest: tuple[str, str] | None = None
    start: int = 0
    end: int | None = None

    @property
    def whole(self) -> bool:
        return self.end is None

    @property
    def stop(self) -> int:
        return self.size if self.end is None else self.end

    @property
    def nbytes(self) -> int:
        return self.stop - self.start

    @property
    def key(self) -> str:
        if self.digest and self.digest[0] and self.digest[1]:
            base = f"{self.digest[0]}-{self.digest[1]}"
        else:  # no digest: named by the object and its size (a changed object of another size is another piece)
            base = "uri-" + hashlib.sha256(f"{self.uri}\0{self.size}".encode()).hexdigest()[:40]
        return base if self.whole else f"{base}.{self.start}-{self.stop}"

    @property
    def meta(self) -> bool:
        """A small range at either end of the object: its header or footer, which every process
        opening it reads (evicted after everything else)."""
        return not self.whole and self.nbytes <= META_MAX and (self.start == 0 or self.stop == self.size)

    def covers(self, start: int, stop: int) -> bool:
        return self.start <= start and stop <= self.stop


def _lock(path: str, how: int) -> int | None:
    """An fd of the lock file ``path`` holding ``flock(how)``; None when ``LOCK_NB`` and it is
    held. A lock file can be removed by whoever holds it exclusively: a lock taken on a removed
    (or replaced) file is dropped and taken again on the file now at ``path``."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, how)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _unlock(fd: int, lock: str, piece: str | None = None) -> None:
    """Release and close the lock ``fd`` taken on ``lock``, removing the lock file when no one
    else holds it (an exclusive lock taken without waiting) and, with ``piece``, the piece is
    not in the cache: lock files come and go with their pieces, not one left per piece ever
    seen. Whoever waits on the removed file takes its lock again on a new one (:func:`_lock`)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return
    try:
        if piece is None or not os.path.exists(piece):
            with contextlib.suppress(FileNotFoundError):
                if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                    os.unlink(lock)
    finally:
        os.close(fd)


def _touch(path: str, piece: Piece) -> None:
    """Mark a piece used now (a header or footer: far in the future, the last to be evicted)."""
    now = time.time()
    with contextlib.suppress(OSError):
        os.utime(path, (now, now + DONE_SHIFT if piece.meta else now))


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


class Held:
    """A pinned piece: its bytes stay at ``path`` until :meth:`release` (no process evicts a
    pinned piece). ``pread`` reads from it."""

    __slots__ = ("cache", "piece", "path", "_lock_fd", "_fd", "_mu")

    def __init__(self, cache: Cache, piece: Piece, path: str, lock_fd: int) -> None:
        self.cache, self.piece, self.path = cache, piece, path
        self._lock_fd: int | None = lock_fd
        self._fd: int | None = None
        self._mu = threading.Lock()

    def fileno(self) -> int:
        with self._mu:
            if self._fd is None:
                if self._lock_fd is None:
                    raise ValueError("the piece was released")
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            return self._fd

    def pread(self, n: int, offset: int) -> bytes:
        """``n`` bytes at ``offset`` of the object (not of the piece): the piece must cover them."""
        return os.pread(self.fileno(), n, offset - self.piece.start)

    def readinto(self, buf, offset: int) -> int:
        """Fill ``buf`` from byte ``offset`` of the object; bytes read."""
        return os.preadv(self.fileno(), [buf], offset - self.piece.start)

    def release(self, done: bool = True) -> None:
        """Unpin; ``done``: the reader has read it (evicted before pieces not yet read)."""
        with self._mu:
            fd, self._fd = self._fd, None
            lock, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)
        if lock is None:
            return
        if done and not self.piece.meta:
            now = time.time()
            with contextlib.suppress(OSError):
                os.utime(self.path, (now, now - DONE_SHIFT))
        os.close(lock)  # the shared flock goes with it

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        try:  # (no module-level name: at interpreter exit the modules may be gone before this runs)
            self.release(done=False)
        except Exception:  # noqa: BLE001, S110 - a finalizer has no one to tell
            pass


class Cache:
    """The cache in ``root`` (default :func:`default_dir`) holding at most ``limit`` bytes
    (default :func:`default_limit`). One object per process and directory is enough (:func:`cache_at`);
    several are safe."""

    def __init__(self, root: str | None = None, limit: int | str | None = None, *, threads: int = FETCH_THREADS):
        self.root = os.path.abspath(os.path.expanduser(root or default_dir()))
        self.limit = parse_size(limit) if limit is not None else default_limit()
        self.threads = max(1, int(threads))
        self.objects = os.path.join(self.root, "objects")
        self.partial = os.path.join(self.root, "partial")
        self.locks = os.path.join(self.root, "locks")
        self.fetched = 0  # bytes this object downloaded (for reports and tests)
        self.gets = 0  # pieces it downloaded
        self._count = threading.Lock()
        try:
            for d in (self.objects, self.partial, self.locks):
                os.makedirs(d, exist_ok=True)
        except OSError as e:
            raise CacheError(
                f"{self.root}: cannot make the cache directory ({e.strerror})",
                hint="choose another cache directory (cache_dir= or LOVECRAFT_CACHE)",
            ) from None
        with self._global():
            self._check_boot()
            self._sweep()

    def __repr__(self) -> str:
        return f"Cache({self.root!r}, limit={self.limit})"

    def __reduce__(self):
        return cache_at, (self.root, self.limit)  # in another process: that process's cache of the directory

    # -- the whole cache ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _global(self):
        fd = os.open(os.path.join(self.root, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _check_boot(self) -> None:
        path = os.path.join(self.root, ".boot")
        now = _boot_id()
        try:
            with open(path, encoding="ascii") as f:
                then = f.read().strip()
        except OSError:
            then = None
        if then == now:
            return
        if then is not None:  # written before a reboot: what was renamed last may not be on disk
            for name in os.listdir(self.objects):
                self._evict(name, force=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(now)
        os.replace(tmp, path)

    def _sweep(self) -> int:
        """Remove the partial downloads of dead processes and lock files of absent pieces no one
        holds (under the global lock); how many files went."""
        n = 0
        for name in os.listdir(self.partial):
            path = os.path.join(self.partial, name)
            fd = _lock(path, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if fd is None:
                continue  # a live download
            try:
                os.unlink(path)
                n += 1
            finally:
                os.close(fd)
        for name in os.listdir(self.locks):
            piece = name.removesuffix(DOWNLOADING)
            if os.path.exists(os.path.join(self.objects, piece)):
                continue
            path = os.path.join(self.locks, name)
            fd = _lock(path, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if fd is None:
                continue
            try:
                if not os.path.exists(os.path.join(self.objects, piece)):
                    os.unlink(path)
                    n += 1
            finally:
                os.close(fd)
        return n

    def sweep(self) -> int:
        """:meth:`_sweep` under the global lock."""
        with self._global():
            return self._sweep()

    def _entries(self) -> tuple[list[tuple[float, str, int]], int]:
        """(mtime, name, bytes) of every complete piece, and the bytes of every partial one."""
        out = []
        for e in os.scandir(self.objects):
            with contextlib.suppress(FileNotFoundError):
                st = e.stat()
                out.append((st.st_mtime, e.name, st.st_size))
        partial = 0
        for e in os.scandir(self.partial):
            with contextlib.suppress(FileNotFoundError):
                partial += e.stat().st_size
        return out, partial

    def usage(self) -> int:
        """Bytes the cache holds now: complete pieces and downloads under way (their full size)."""
        entries, partial = self._entries()
        return sum(s for _, _, s in entries) + partial

    def _evict(self, name: str, force: bool = False) -> bool:
        """Remove the piece ``name`` unless someone pins it (or downloads it); True when removed."""
        lock = os.path.join(self.locks, name)
        fd = _lock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if fd is None:
            if not force:
                return False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.objects, name))
            return True
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.objects, name))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
        finally:
            os.close(fd)
        return True

    def clear(self) -> int:
        """Evict every piece no one pins; how many went."""
        with self._global():
            return sum(self._evict(name) for name in os.listdir(self.objects))

    # -- pieces -------------------------------------------------------------------------------

    def path_of(self, piece: Piece) -> str:
        return os.path.join(self.objects, piece.key)

    def peek(self, piece: Piece) -> Held | None:
        """The piece pinned when the cache holds it, else None (a download under way is not waited for)."""
        key = piece.key
        lock = os.path.join(self.locks, key)
        fd = _lock(lock, fcntl.LOCK_SH)  # waits only for an eviction, which is brief
        path = os.path.join(self.objects, key)
        if os.path.exists(path):
            _touch(path, piece)
            return Held(self, piece, path, fd)
        _unlock(fd, lock, path)
        return None

    def get(self, piece: Piece, *, demand: bool = True) -> Held | None:
        """The piece pinned, downloaded (and checked) first when the cache does not hold it. If
        another process is downloading it, wait for that download rather than make another.
        ``demand=False`` (a prefetch): None instead of going over the limit."""
        if piece.nbytes > self.limit:
            raise CacheError(
                f"{piece.nbytes} bytes do not fit the cache limit of {self.limit} bytes",
                where=piece.uri,
                hint=f"raise the cache limit (cache_limit= or LOVECRAFT_CACHE_LIMIT) to {piece.nbytes} bytes or more"
                + (" (a whole file is read: with ranged=False, every file must fit)" if piece.whole else ""),
            )
        key = piece.key
        path = os.path.join(self.objects, key)
        # the pin is taken first and held throughout: once the piece is there nothing can evict it
        lock = os.path.join(self.locks, key)
        pin = _lock(lock, fcntl.LOCK_SH)
        try:
            if not os.path.exists(path):
                # the download lock (apart from the pin, which other readers hold for long): one
                # process downloads, the others wait for it here and then find the piece
                dl_lock = lock + DOWNLOADING
                dl = _lock(dl_lock, fcntl.LOCK_EX)
                try:
                    if not os.path.exists(path) and not self._download(piece, path, demand):
                        _unlock(pin, lock, path)
                        return None
                finally:
                    _unlock(dl, dl_lock)
            else:
                _touch(path, piece)
        except BaseException:
            _unlock(pin, lock, path)
            raise
        return Held(self, piece, path, pin)

    # -- downloading --------------------------------------------------------------------------

    def _reserve(self, piece: Piece, demand: bool) -> tuple[int, str] | None:
        """Room for ``piece``, made by evicting, and its partial file (created, its size allocated,
        locked); None when a prefetch finds no room. Under the global lock, so the count is exact
        across processes."""
        need = piece.nbytes
        with self._global():
            entries, partial = self._entries()
            used = sum(s for _, _, s in entries) + partial
            if used + need > self.limit:
                for _mtime, name, size in sorted(entries):
                    if used + need <= self.limit:
                        break
                    if self._evict(name):
                        used -= size
                if used + need > self.limit:
                    self._sweep()
                    entries, partial = self._entries()
                    used = sum(s for _, _, s in entries) + partial
                if used + need > self.limit and not demand:
                    return None
            tmp = os.path.join(self.partial, f"{piece.key}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                self._allocate(fd, need, piece)
            except BaseException:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            return fd, tmp

    def _allocate(self, fd: int, need: int, piece: Piece) -> None:
        if need == 0:
            return
        for attempt in range(2):
            try:
                os.posix_fallocate(fd, 0, need)
                return
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise self._disk_error(e, piece) from None
                if attempt == 0:  # the limit may be above what the disk has: make room and try once more
                    for name in os.listdir(self.objects):
                        self._evict(name)
                    continue
                raise self._disk_error(e, piece) from None

    def _disk_error(self, e: OSError, piece: Piece) -> CacheError:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return CacheError(
                f"no space left on device in the cache directory {self.root} ({piece.nbytes} bytes needed)",
                where=piece.uri,
                hint="free space, lower the cache limit (cache_limit= or LOVECRAFT_CACHE_LIMIT) "
                "or choose another cache directory (cache_dir= or LOVECRAFT_CACHE)",
            )
        return CacheError(
            f"cannot write to the cache directory {self.root} ({e.strerror})",
            where=piece.uri,
            hint="check the directory, or choose another (cache_dir= or LOVECRAFT_CACHE)",
        )

    def _download(self, piece: Piece, path: str, demand: bool) -> bool:
        """Fetch ``piece`` into ``path`` (its lock held exclusively by the caller): reserve room,
        download into a partial file, check it, rename it into place. A whole piece whose digest
        does not match is fetched once more; a second mismatch is an error naming the object."""
        for attempt in range(2):
            got = self._reserve(piece, demand)
            if got is None:
                return False
            fd, tmp = got
            try:
                self._fetch_into(fd, piece)
                bad = self._check(fd, piece)
                if bad is None:
                    try:
                        os.rename(tmp, path)
                    except OSError as e:
                        raise self._disk_error(e, piece) from None
                    if piece.meta:
                        _touch(path, piece)
                    with self._count:
                        self.gets += 1
                        self.fetched += piece.nbytes
                    return True
            finally:
                os.close(fd)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            if attempt:
                raise DatasetError(
                    f"fetched twice, and both times its {bad}",
                    where=piece.uri,
                    hint="the object was changed or damaged on the store; run `lovecraft verify` on the dataset "
                    "or re-create it",
                    kind="digest",
                )
        return False  # pragma: no cover - the loop returns or raises

    def _check(self, fd: int, piece: Piece) -> str | None:
        """What is wrong with the downloaded bytes (None: nothing): a whole piece's digest."""
        if not piece.whole or not piece.digest or not piece.digest[0]:
            return None
        from ..runtime.hashing import new_hash

        alg, want = piece.digest
        h = new_hash(alg)
        at = 0
        while at < piece.size:
            data = os.pread(fd, min(PART, piece.size - at), at)
            if not data:
                break
            h.update(data)
            at += len(data)
        got = h.hexdigest()
        return None if got == want else f"{alg} is {got}; the manifest says {want}"

    def _fetch_into(self, fd: int, piece: Piece) -> None:
        """Write the piece's bytes into ``fd`` (at offset 0): ranged GETs of at most :data:`PART`
        bytes, several at once for a large piece."""
        start, stop = piece.start, piece.stop
        parts = [(a, min(stop, a + PART)) for a in range(start, stop, PART)]
        from ..runtime.interrupts import run_each

        run_each(lambda ab: self._fetch_part(fd, piece, *ab), parts, self.threads, "lovecraft-fetch")

    def _fetch_part(self, fd: int, piece: Piece, a: int, b: int) -> None:
        from .base import StorageError
        from .stores import get_store
        from .uri import split

        store = get_store(piece.uri)
        key = split(piece.uri)[2]
        at = a
        for attempt in range(RETRIES):
            body = store.open_body(key, at, b)  # a StorageError naming the object when the store fails
            try:
                while at < b:
                    try:
                        chunk = body.read(min(CHUNK, b - at))
                    except Exception:  # noqa: BLE001 - the connection broke mid-body: go on where it stopped
                        if attempt == RETRIES - 1:
                            raise StorageError(
                                f"the connection broke {RETRIES} times while reading bytes {at}-{b}",
                                where=piece.uri,
                                hint="check the network, then run again",
                            ) from None
                        break
                    if not chunk:
                        raise DatasetError(
                            f"the object ended at byte {at}, the manifest says it holds {piece.size}",
                            where=piece.uri,
                            hint="the object was changed or cut on the store; run `lovecraft verify` on the "
                            "dataset or re-create it",
                            kind="rows",
                        )
                    try:
                        os.pwrite(fd, chunk, at - piece.start)
                    except OSError as e:
                        raise self._disk_error(e, piece) from None
                    at += len(chunk)
            finally:
                with contextlib.suppress(Exception):
                    body.close()
            if at >= b:
                return
        raise StorageError(  # pragma: no cover - every attempt either returns or raises
            f"could not read bytes {at}-{b}", where=piece.uri, hint="check the network, then run again"
        )


_CACHES: dict[tuple[int, str, int], Cache] = {}
_CACHES_LOCK = threading.Lock()


def cache_at(root: str | None = None, limit: int | str | None = None) -> Cache:
    """The process's :class:`Cache` of ``root`` and ``limit`` (made on first use, per process)."""
    r = os.path.abspath(os.path.expanduser(root or default_dir()))
    n = parse_size(limit) if limit is not None else default_limit()
    k = (os.getpid(), r, n)
    with _CACHES_LOCK:
        c = _CACHES.get(k)
        if c is None or not os.path.isdir(c.locks):  # (removed since: made again, not blamed on the data)
            c = _CACHES[k] = Cache(r, n)
        return c
