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

from ..engine.writer import HashingWriter
from ..errors import SchemaError
from ..storage.stream import open_stream
from .base import FileRecord, WriteOptions

LIMIT = (1 << 32) - 1  # the largest file a uint32 offset table can end
PIECE = 8 << 20  # bytes read back from a scratch file at a time


class Spool:
    """Buffers kept in memory up to ``hold`` bytes, then all of them (and what follows) in an
    unnamed scratch file in ``directory``; read back in order with :meth:`pieces`."""

    def __init__(self, directory: str, hold: int) -> None:
        self.directory = directory
        self.hold = hold
        self.parts: list[np.ndarray] = []
        self.size = 0
        self.file = None

    def write(self, buf: np.ndarray) -> None:
        """Keep ``buf`` (the spool owns it from now on: the caller must not change it)."""
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


class TableWriter:
    """The item files of one unit: ``<stem><ext>``, or numbered ones when the items outgrow
    :data:`LIMIT`. ``preamble`` goes between the table and the items of every file."""

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
        self._new()

    def _new(self) -> None:
        self.body = Spool(self.directory, self.hold)
        self.lens = Spool(self.directory, max(1 << 16, self.hold // 8))
        self.count = 0

    def _size(self) -> int:
        return 4 + 4 * (self.count + 1) + len(self.preamble) + self.body.size

    def add(self, buf: np.ndarray, lens: np.ndarray) -> None:
        """Items back to back in ``buf`` (owned by the writer from now on), of lengths ``lens``."""
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
            self.add(buf, lens)
            return
        cut = int(ends[k - 1])
        self.body.write(buf[:cut])
        self.lens.write(np.asarray(lens[:k], dtype="<u4"))
        self.count += k
        self.rows += k
        if k < n:
            self._finish(last=False)
            self._new()
            self.add(buf[cut:], lens[k:])

    def _name(self, last: bool) -> str:
        if last and not self.done:
            return f"{self.stem}{self.ext}"
        return f"{self.stem}-{len(self.done):05d}{self.ext}"

    def _finish(self, last: bool) -> None:
        n = self.count
        path = os.path.join(self.directory, self._name(last))
        head = 4 + 4 * (n + 1) + len(self.preamble)
        size = head + self.body.size
        out = HashingWriter(path, preallocate=size, hash=self.options.hash, sink=open_stream(path))
        try:
            out.write(np.array([n, head], dtype="<u4"))
            pos = head
            for piece in self.lens.pieces():
                ends = pos + np.cumsum(np.frombuffer(piece, dtype="<u4"), dtype=np.int64)
                out.write(ends.astype("<u4"))
                pos = int(ends[-1])
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

    def close(self) -> list[FileRecord]:
        if self.count or not self.done:
            self._finish(last=True)
        return self.done

    def abort(self) -> None:
        self.body.close()
        self.lens.close()


class TableProblem(Exception):
    """A file's table does not describe it (count, offsets, size)."""


class TableFile:
    """An item file, mapped: ``count``, ``offsets`` (the table, uint32[count + 1], mapped) and the
    bytes (``buf``); its table checked against its size, in bounded pieces."""

    def __init__(self, path: str, preamble: int | None = None) -> None:
        """``preamble``: its exact length when known (the first item must start right after it)."""
        self.path = path
        size = os.path.getsize(path)
        if size < 8:
            raise TableProblem(f"{size} bytes: too short to hold an item count and table")
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        count = int(self.buf[:4].view("<u4")[0])
        if 4 + 4 * (count + 1) > size:
            raise TableProblem(f"claims {count} items, whose table alone would not fit in its {size} bytes")
        self.count = count
        self.offsets = self.buf[4 : 8 + 4 * count].view("<u4")
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

    def span(self, a: int, b: int) -> np.ndarray:
        """``offsets[a:b + 1]`` as int64 (where items ``a`` to ``b - 1`` start, and where the last ends)."""
        return self.offsets[a : b + 1].astype(np.int64)

    def preamble(self) -> bytes:
        return bytes(self.buf[self.head : int(self.offsets[0])])

    def close(self) -> None:
        self.buf = self.offsets = None  # the mapping goes with its last reference
