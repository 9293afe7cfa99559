"""Files of items behind an offset table, the layout of MosaicML Streaming's MDS shards and of
litdata's chunks: uint32 item count ``n``, uint32 ``offsets[n + 1]`` counted from the start of the
file, a preamble (MDS: the shard's configuration as JSON; litdata: none), then the items back to
back, ``offsets[i]`` to ``offsets[i + 1]`` being item ``i``; little-endian. The last offset is the
file's size, so a file holds at most 4 GiB - 1 bytes.

:class:`TableWriter` writes such files from packed items (:mod:`.items`) with bounded memory: the
table comes first but is known only at the end, so the items are held in memory up to the writer's
share of the budget and in an unnamed scratch file beyond it (in the unit's directory), with their
lengths; the finished file is then written in one pass through the hashing writer (header, table,
preamble, items), which streams it to the object store when the run writes to one. A unit whose
items outgrow one file goes on in the next (``<stem>-00000.<ext>``, ``<stem>-00001.<ext>``, ...;
one file keeps the plain ``<stem>.<ext>``).

:class:`TableFile` maps such a file for reading and checks its table against its size.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import numpy as np

from ..errors import SchemaError
from ..runtime.durable import HashingWriter, durable_files
from ..storage.stream import open_stream, streams
from .writing import FileRecord, WriteOptions

LIMIT = (1 << 32) - 1  # the largest file a uint32 offset table can end
PIECE = 8 << 20  # bytes read back from a scratch file at a time
IOV_MAX = 1024


class Spool:
    """Buffers kept in memory up to ``hold`` bytes, then all of them (and what follows) in an
    unnamed scratch file in ``directory``; read back in order with :meth:`pieces`."""

    def __init__(self, directory: str, hold: int) -> None:
        self.directory = directory
        self.hold = hold
        self.parts: list[np.ndarray] = []
        self.size = 0
        self.file = None

    def write(self, buf: np.ndarray | bytes) -> None:
        """Keep ``buf`` (the spool owns it from now on: the caller must not change it)."""
        if isinstance(buf, bytes):
            buf = np.frombuffer(buf, dtype=np.uint8)
        n = buf.nbytes
        if not n:
            return
        if self.file is None and self.size + n > self.hold:
            self.file = tempfile.TemporaryFile(dir=self.directory)  # noqa: SIM115 - closed in close()
            for p in self.parts:
                self.file.write(memoryview(p).cast("B"))
            self.parts = []
        if self.file is None:
            self.parts.append(buf)
        else:
            self.file.write(memoryview(np.ascontiguousarray(buf)).cast("B"))
        self.size += n

    def pieces(self) -> Iterator[np.ndarray | bytes]:
        if self.file is None:
            yield from self.parts
            return
        self.file.flush()
        self.file.seek(0)
        while chunk := self.file.read(PIECE):
            yield chunk

    def close(self) -> None:
        self.parts = []
        if self.file is not None:
            self.file.close()
            self.file = None


class Direct:
    """The items of a file whose item count is known before they come (a unit of ``shard``),
    written straight into it after a header of zeros sized for that count; the table is written
    over the zeros at the end and the file then hashed from the page cache while it is fsynced:
    the items are written once, not held and copied. Until then the file has a temporary name.

    Every :data:`SYNC_EVERY` bytes what was written is flushed to disk in the background
    (:class:`~..runtime.durable.BackgroundSync`), so the disk writes while the unit reads its
    next items, and the final fsync has only the last piece and the table left to wait for."""

    SYNC_EVERY = 16 << 20

    def __init__(self, path: str, head: bytes) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
        self.size = 0
        self.unsynced = 0
        self.sync = None
        self.durable = durable_files()  # False: a trial shard, measured and deleted (no flushes)
        self.write([head])

    def write(self, bufs: list) -> None:
        """Append ``bufs`` (arrays or bytes), with as few system calls as they allow (``writev``)."""
        from ..runtime.durable import named

        views = [memoryview(b if isinstance(b, bytes) else np.ascontiguousarray(b)).cast("B") for b in bufs]
        views = [v for v in views if len(v)]
        try:
            while views:
                k = os.writev(self.fd, views[:IOV_MAX])
                self.size += k
                self.unsynced += k
                while views and k >= len(views[0]):
                    k -= len(views[0])
                    views.pop(0)
                if k:
                    views[0] = views[0][k:]
        except OSError as e:
            raise named(e, self.path) from None
        if self.unsynced >= self.SYNC_EVERY and self.durable:
            from ..runtime.durable import BackgroundSync

            if self.sync is None:
                self.sync = BackgroundSync(self.path)
            self.sync.kick()
            self.unsynced = 0

    def close(self) -> None:
        """Close the file, after the background flushes (raising the first error they met: the
        caller's fsync would report it too, but named by the flush that met it)."""
        from ..runtime.durable import named

        try:
            if self.sync is not None:
                s, self.sync = self.sync, None
                s.close()
        except OSError as e:
            raise named(e, self.path) from None
        finally:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


class TableWriter:
    """The item files of one unit: ``<stem><ext>``, or numbered ones when the items outgrow
    :data:`LIMIT`. ``preamble`` goes between the table and the items of every file.

    When the unit's rows are known (``options.expected_rows``) and its files are local, the items
    go straight into the file (:class:`Direct`); otherwise (rows unknown, or a run writing to an
    object store, whose files are written in one pass as they go up) they are spooled and the file
    is written whole at the end."""

    def __init__(self, directory: str, stem: str, ext: str, preamble: bytes, options: WriteOptions, what: str) -> None:
        self.directory = directory
        self.stem = stem
        self.ext = ext
        self.preamble = preamble
        self.options = options
        self.what = what  # "an MDS shard", for messages
        self.hold = max(1 << 20, options.memory // 2)
        self.done: list[FileRecord] = []
        self.rows = 0  # items added to the unit
        self.direct: Direct | None = None
        self.remote = streams(os.path.join(directory, f"{stem}{ext}"))
        self._new()

    def _new(self) -> None:
        self.body = Spool(self.directory, self.hold)
        self.lens = Spool(self.directory, max(1 << 16, self.hold // 8))
        self.count = 0
        self.expect = None
        known = self.options.expected_rows
        if known is not None and known > self.rows and not self.remote:
            self.expect = known - self.rows
            head = bytes(4 + 4 * (self.expect + 1)) + self.preamble
            tmp = os.path.join(self.directory, f".{self.stem}-{len(self.done):05d}{self.ext}.tmp")
            self.direct = Direct(tmp, head)

    def _size(self) -> int:
        if self.direct is not None:
            body = self.direct.size - 4 * (self.expect + 1) - 4 - len(self.preamble)
        else:
            body = self.body.size
        return 4 + 4 * (self.count + 1) + len(self.preamble) + body

    def add(self, bufs: list, lens: np.ndarray) -> None:
        """Items back to back in the buffers ``bufs`` (not changed by anyone afterwards), of
        lengths ``lens``."""
        n = len(lens)
        if n == 0:
            return
        ends = np.cumsum(lens, dtype=np.int64)
        base = self._size()
        # bytes of the file with the first k items: base + 4 k + ends[k - 1]
        fits = base + 4 * np.arange(1, n + 1, dtype=np.int64) + ends <= LIMIT
        k = n if fits[-1] else int(np.argmin(fits))
        if k == 0:
            if self.count == 0:
                big = int(lens[0])
                raise SchemaError(
                    f"{self.stem}: row {self.rows + 1} is {big} bytes; {self.what} holds at most {LIMIT} bytes "
                    "(its offsets are uint32)",
                    hint="leave the large column out with --columns, or write another format",
                )
            self._finish(last=False)
            self._new()
            self.add(bufs, lens)
            return
        if k < n:  # the file is full after k items (a rare case: joined, then cut)
            whole = np.concatenate([np.frombuffer(memoryview(b).cast("B"), dtype=np.uint8) for b in bufs])
            cut = int(ends[k - 1])
            bufs, rest = [whole[:cut]], [whole[cut:]]
        if self.direct is not None:
            self.direct.write(bufs)
        else:
            for b in bufs:  # owned copies: the spool keeps them, a view would keep its whole batch
                self.body.write(b if isinstance(b, bytes) or b.base is None else np.array(b, copy=True))
        self.lens.write(np.asarray(lens[:k], dtype="<u4"))
        self.count += k
        self.rows += k
        if k < n:
            self._finish(last=False)
            self._new()
            self.add(rest, lens[k:])

    def _name(self, last: bool) -> str:
        if last and not self.done:
            return f"{self.stem}{self.ext}"
        return f"{self.stem}-{len(self.done):05d}{self.ext}"

    def _table(self, head: int) -> Iterator[np.ndarray]:
        """The table's pieces (uint32 arrays): the item count, then where each item starts, and
        where the last one ends."""
        yield np.array([self.count, head], dtype="<u4")
        pos = head
        for piece in self.lens.pieces():
            ends = pos + np.cumsum(np.frombuffer(piece, dtype="<u4"), dtype=np.int64)
            yield ends.astype("<u4")
            pos = int(ends[-1])

    def _finish(self, last: bool) -> None:
        if self.direct is not None and self.count == self.expect:
            self._finish_direct(last)
            return
        if self.direct is not None:  # fewer items than counted on (the file rolled over): the
            self._respool()  # header was sized for more; the items are copied into a new file
        n = self.count
        path = os.path.join(self.directory, self._name(last))
        head = 4 + 4 * (n + 1) + len(self.preamble)
        size = head + self.body.size
        out = HashingWriter(path, preallocate=size, hash=self.options.hash, sink=open_stream(path))
        try:
            pos = head
            for piece in self._table(head):
                out.write(piece)
                pos = int(piece[-1])
            out.write(self.preamble)
            for piece in self.body.pieces():
                out.write(piece)
            nbytes, digest = out.close()
        except BaseException:
            out.abort()
            raise
        finally:
            self.body.close()
            self.lens.close()
        if nbytes != size or pos != size:
            raise RuntimeError(f"{path}: wrote {nbytes} bytes, its table ends at {pos}, expected {size}")
        self.done.append(FileRecord(os.path.basename(path), n, nbytes, digest, self.options.hash))

    def _respool(self) -> None:
        d, self.direct = self.direct, None
        d.close()
        start = 4 + 4 * (self.expect + 1) + len(self.preamble)
        with open(d.path, "rb") as f:
            f.seek(start)
            while chunk := f.read(PIECE):
                self.body.write(np.frombuffer(chunk, dtype=np.uint8))
        os.unlink(d.path)

    def _finish_direct(self, last: bool) -> None:
        from ..runtime.durable import hash_fsynced

        d, self.direct = self.direct, None
        head = 4 + 4 * (self.count + 1) + len(self.preamble)
        try:
            at = end = 0
            for piece in self._table(head):
                data = memoryview(piece).cast("B")
                while len(data):
                    k = os.pwrite(d.fd, data, at)
                    at += k
                    data = data[k:]
                end = int(piece[-1])
        finally:
            d.close()
            self.lens.close()
            self.body.close()
        if end != d.size:
            raise RuntimeError(f"{d.path}: its table ends at {end}, the file has {d.size} bytes")
        path = os.path.join(self.directory, self._name(last))
        digest = hash_fsynced(d.path, self.options.hash)
        os.rename(d.path, path)
        self.done.append(FileRecord(os.path.basename(path), self.count, d.size, digest, self.options.hash))

    def close(self) -> list[FileRecord]:
        if self.count or not self.done:
            self._finish(last=True)
        return self.done

    def abort(self) -> None:
        self.body.close()
        self.lens.close()
        if self.direct is not None:
            try:
                self.direct.close()
            except OSError:  # a background flush that failed: the file is removed anyway
                pass
            try:
                os.unlink(self.direct.path)
            except OSError:
                pass


class TableProblem(Exception):
    """A file's table does not describe it (count, offsets, size)."""


REMOTE_TABLE_BYTES = 8 << 20  # a remote item file's table up to this size is held in memory (2M items)


class TableFile:
    """An item file, mapped: ``count``, ``offsets`` (the table, uint32[count + 1], mapped) and the
    bytes (``buf``); its table checked against its size, in bounded pieces. A file of a remote
    dataset (``rf``: its :class:`~lovecraft_convert.storage.remote.RemoteFile`) is read through the
    node's cache as asked, its table and its bytes each a
    :class:`~lovecraft_convert.storage.remote_array.RemoteArray` (readers take their items' bytes
    with :func:`.items.compact`, not from ``buf``)."""

    def __init__(self, path: str, preamble: int | None = None) -> None:
        """``preamble``: its exact length when known (the first item must start right after it)."""
        from ..storage import is_remote

        self.path = path
        self.rf = None
        if is_remote(path):
            from ..storage.remote import registered
            from ..storage.remote_array import RemoteArray

            self.rf = registered(path)
            if self.rf is None:
                raise ValueError("not a file of a dataset opened here (open it with open_dataset)")
            size = self.rf.size
        else:
            size = os.path.getsize(path)
        if size < 8:
            raise TableProblem(f"{size} bytes: too short to hold an item count and table")
        self.buf = (
            np.memmap(path, dtype=np.uint8, mode="r") if self.rf is None else RemoteArray(self.rf, np.uint8, (size,), 0)
        )
        count = int(self.buf[:4].view("<u4")[0])
        if 4 + 4 * (count + 1) > size:
            raise TableProblem(f"claims {count} items, whose table alone would not fit in its {size} bytes")
        self.count = count
        if self.rf is None or 4 * (count + 1) <= REMOTE_TABLE_BYTES:  # a remote table small enough: read once, kept
            self.offsets = self.buf[4 : 8 + 4 * count].view("<u4")
        else:  # a table too large to hold: its entries read as asked, through the cache
            self.offsets = RemoteArray(self.rf, "<u4", (count + 1,), 4)
        head = 8 + 4 * count
        first, last = int(self.offsets[0]), int(self.offsets[-1])
        if first < head or (preamble is not None and first != head + preamble):
            raise TableProblem(f"its first item starts at byte {first}, not where its header ends")
        if last != size:
            raise TableProblem(f"its table ends at byte {last}, the file has {size}")
        for a in range(0, count, 1 << 20):
            step = np.diff(self.offsets[a : min(count, a + (1 << 20)) + 1].astype(np.int64))
            if len(step) and int(step.min()) < 0:
                i = a + int(np.argmin(step))
                raise TableProblem(f"item {i} ends at byte {int(self.offsets[i + 1])}, before it starts")
        self.head = head

    def bytes_of(self, lo: int, hi: int) -> np.ndarray:
        """Bytes ``[lo, hi)`` of the file (a view of the mapping, or read through the cache)."""
        return self.buf[lo:hi]

    def span(self, a: int, b: int) -> np.ndarray:
        """``offsets[a:b + 1]`` as int64 (where items ``a`` to ``b - 1`` start, and where the last ends)."""
        return self.offsets[a : b + 1].astype(np.int64)

    def preamble(self) -> bytes:
        return bytes(self.bytes_of(self.head, int(self.offsets[0])))

    def close(self) -> None:
        self.buf = self.offsets = None  # the mapping goes with its last reference
