"""TFRecord framing: ``uint64 length | masked CRC32C(length) | data | masked CRC32C(data)``.

One place for the masked CRC (scalar and vectorised) and both ways of reading records, with both
CRCs of every record checked:

* :func:`iter_records`: record by record from any stream (``inspect`` of foreign files, ``verify``
  of variable-length datasets), exact messages for every way a file can be cut or damaged;
* :class:`RecordRuns`: large blocks (gzip decompressed in bounded pieces), where runs of records of
  one length are returned as 2-D arrays and checked with vectorised comparisons (the loaders and
  ``verify`` of fixed-shape datasets, whose records all have one length).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import numpy as np

from ...errors import DatasetError, InputError
from ...storage import open_input
from .crcspan import run_crcs_ok

MASK_DELTA = 0xA282EAD8
MAX_RECORD = 2 << 30
BLOCK = 8 << 20
RUN_CHECK_MIN = 16  # records of one length checked together with one CRC pass (crcspan), from this many


def crc32c_fn():
    import crc32c

    return crc32c.crc32c


def mask_int(c: int) -> int:
    return (((c >> 15) | (c << 17)) + MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data) -> int:
    return mask_int(crc32c_fn()(data))


def mask_array(c: np.ndarray) -> np.ndarray:
    """The mask of many CRCs (uint32, little-endian)."""
    c = c.astype(np.uint64)
    return ((((c >> np.uint64(15)) | (c << np.uint64(17))) + np.uint64(MASK_DELTA)) & np.uint64(0xFFFFFFFF)).astype(
        "<u4"
    )


def unmask_array(m: np.ndarray) -> np.ndarray:
    """The CRCs whose masks are ``m`` (uint32): the inverse of :func:`mask_array`."""
    t = (m.astype(np.uint64) - np.uint64(MASK_DELTA)) & np.uint64(0xFFFFFFFF)
    return (((t << np.uint64(15)) | (t >> np.uint64(17))) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def iter_records(f, name: str, size: int | None = None) -> Iterator[bytes]:
    """Record payloads of a TFRecord stream, both CRCs checked; InputError naming the record and
    its byte offset when the stream is cut or damaged (``size``: the file's, when known)."""
    crc = crc32c_fn()
    pos = 0
    index = 0
    while True:
        head = f.read(12)
        if not head:
            return
        index += 1
        at = f"record {index} at byte {pos}"
        if len(head) < 12:
            raise InputError(f"{at}: truncated record header", where=name, hint="the file is cut short; re-create it")
        (n,) = struct.unpack("<Q", head[:8])
        (lc,) = struct.unpack("<I", head[8:])
        if mask_int(crc(head[:8])) != lc:
            raise InputError(f"{at}: length CRC mismatch (file is corrupt)", where=name, hint="re-create it")
        if n > MAX_RECORD or (size is not None and pos + 16 + n > size):
            raise InputError(
                f"{at}: record length {n} runs past the end of the file",
                where=name,
                hint="the file is cut short; re-create it",
            )
        data = f.read(n)
        tail = f.read(4)
        if len(data) < n or len(tail) < 4:
            raise InputError(f"{at}: truncated record", where=name, hint="the file is cut short; re-create it")
        if mask_int(crc(data)) != struct.unpack("<I", tail)[0]:
            raise InputError(f"{at}: data CRC mismatch (file is corrupt)", where=name, hint="re-create it")
        pos += 16 + n
        yield data


class RecordRuns:
    """The records of one file, read in large blocks: :meth:`runs` yields ``("fixed", 2-D uint8
    payloads of equal-length records)`` or ``("one", payload bytes)``. Errors are DatasetErrors
    naming the file (``where``), the record and its offset."""

    def __init__(self, path: str, gzip: bool, rows: int | None = None) -> None:
        self.path = path
        self.gzip = gzip
        self.rows = rows  # the manifest's record count (None: unknown)

    def _err(self, message: str, hint: str = "re-create it", kind: str = "decode") -> DatasetError:
        return DatasetError(message, where=self.path, hint=hint, kind=kind)

    def _blocks(self, at: int = 0, limit: int | None = None) -> Iterator[bytes]:
        """The file's (decompressed) bytes from byte ``at`` of the file (for gzip, the start of a
        member), reading at most ``limit`` bytes of it."""
        try:
            f = open_input(self.path, buffering=0)  # a local file, or a remote dataset's through the cache
        except OSError as e:
            raise self._err(f"cannot open ({e})", "the dataset is damaged") from None
        left = (1 << 62) if limit is None else limit

        def read(n: int) -> bytes:
            nonlocal left
            blk = f.read(min(n, left)) if left > 0 else b""
            left -= len(blk)
            return blk

        with f:
            if at:
                f.seek(at)
            if not self.gzip:
                while blk := read(BLOCK):
                    yield blk
                return
            d = zlib.decompressobj(31)
            while True:
                raw = read(BLOCK // 4)
                if not raw:
                    break
                while raw:
                    try:
                        out = d.decompress(raw, BLOCK)
                    except zlib.error as e:
                        raise self._err(f"corrupt gzip stream ({e})") from None
                    if out:
                        yield out
                    if d.eof:  # another gzip member may follow
                        raw = d.unused_data
                        d = zlib.decompressobj(31)
                    else:
                        raw = d.unconsumed_tail
            if not d.eof and (d.unconsumed_tail or d.unused_data or d.flush()):
                raise self._err("truncated gzip stream", "the file is cut short; re-create it")

    def runs(
        self, start: int, stop: int, origin: tuple[int, int, int | None] | None = None
    ) -> Iterator[tuple[str, object]]:
        """Records ``[start, stop)``; records before ``start`` are skipped (framing checked only).

        ``origin = (byte, record, limit)`` starts reading at that byte of the file, where record
        ``record`` (0-based) begins (with gzip, at the start of a member), reading at most ``limit``
        bytes (None: to the end); :mod:`.blocks` keeps these offsets.
        """
        crc = crc32c_fn()
        buf = b""
        pos = 0
        at, index, limit = origin if origin is not None else (0, 0, None)  # record index at ``pos``
        offset = 0 if self.gzip else at  # (decompressed) file offset of ``buf[0]``
        blocks = self._blocks(at, limit)
        eof = False
        need = 12
        while index < stop:
            if len(buf) - pos < need:
                blk = None if eof else next(blocks, None)
                if blk is None:
                    if len(buf) > pos:
                        raise self._err(
                            f"record {index + 1} at byte {offset + pos} is cut short",
                            "the file is truncated; re-create it",
                        )
                    break
                offset += pos
                buf = buf[pos:] + blk
                pos = 0
                continue
            L = int.from_bytes(buf[pos : pos + 8], "little")
            if mask_int(crc(buf[pos : pos + 8])) != int.from_bytes(buf[pos + 8 : pos + 12], "little"):
                raise self._err(f"record {index + 1} at byte {offset + pos}: length CRC mismatch (file is corrupt)")
            if L > MAX_RECORD:
                raise self._err(f"record {index + 1} at byte {offset + pos}: implausible length {L} (file is corrupt)")
            S = L + 16
            if len(buf) - pos < S:
                need = S
                continue
            need = 12
            k = min((len(buf) - pos) // S, stop - index)
            if k >= 4:
                arr = np.frombuffer(buf, dtype=np.uint8, count=k * S, offset=pos).reshape(k, S)
                lens = np.ascontiguousarray(arr[:, :8]).view("<u8").ravel()
                bad = np.flatnonzero(lens != L)
                if bad.size:
                    k = int(bad[0])
                    arr = arr[:k]
                if k > 1:
                    wrong = np.flatnonzero((arr[:, 8:12] != arr[0, 8:12]).any(axis=1))
                    if wrong.size:
                        raise self._err(f"record {index + int(wrong[0]) + 1}: length CRC mismatch (file is corrupt)")
                    skip = max(0, min(k, start - index))
                    if skip < k:
                        live = arr[skip:]
                        self._check_crcs(buf, pos + skip * S, live, L, S, index + skip, crc)
                        yield "fixed", live[:, 12 : 12 + L]
                    pos += k * S
                    index += k
                    continue
            if index >= start:
                data = buf[pos + 12 : pos + 12 + L]
                if mask_int(crc(data)) != int.from_bytes(buf[pos + 12 + L : pos + S], "little"):
                    raise self._err(f"record {index + 1} at byte {offset + pos}: data CRC mismatch (file is corrupt)")
                yield "one", data
            pos += S
            index += 1
        if self.rows is not None and index < min(stop, self.rows):
            raise self._err(
                f"holds {index} records, the manifest says {self.rows}", "the file is cut short; re-create it", "rows"
            )

    def _check_crcs(self, buf, pos: int, arr: np.ndarray, L: int, S: int, index: int, crc) -> None:
        mv = memoryview(buf)
        n = len(arr)
        want = np.ascontiguousarray(arr[:, S - 4 :]).view("<u4").ravel()
        # the whole run with one CRC pass (crcspan); a run that fails it is checked record by
        # record, which names the damaged one
        if n >= RUN_CHECK_MIN and run_crcs_ok(mv[pos : pos + n * S], n, L, want, unmask_array(want)):
            return
        raw = np.fromiter((crc(mv[pos + i * S + 12 : pos + i * S + 12 + L]) for i in range(n)), np.uint64, count=n)
        bad = np.flatnonzero(mask_array(raw) != want)
        if bad.size:
            raise self._err(f"record {index + int(bad[0]) + 1}: data CRC mismatch (file is corrupt)")


def record_count(path: str, compression: str | None = None) -> int:
    """Records in a TFRecord file (framing and CRCs checked), for tests and checks."""
    runs = RecordRuns(path, (compression or "").upper() == "GZIP" or path.endswith(".gz"))
    return sum(1 if kind == "one" else len(run) for kind, run in runs.runs(0, 1 << 62))
