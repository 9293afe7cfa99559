"""TFRecord framing: ``uint64 length | masked CRC32C(length) | data | masked CRC32C(data)``.

One place for the masked CRC (scalar and vectorised) and both ways of reading records, with both
CRCs of every record checked:

* :func:`iter_records`: record by record from any stream (``inspect`` of foreign files, ``verify``
  of variable-length datasets), exact messages for every way a file can be cut or damaged;
* :class:`RecordRuns`: large blocks (gzip decompressed in bounded pieces) as :class:`Records`, many
  records at a time (the loaders, and ``verify`` of fixed-shape datasets). Runs of records of one
  length (fixed-shape rows) are found with vectorised comparisons and their CRCs checked in one
  pass (:mod:`.crcspan`); records of varying lengths (text, bytes, sequences) cost one short loop
  over their headers, and their CRCs are checked with one C call each, compared all at once.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import numpy as np

from ...errors import DatasetError, InputError
from ...storage import open_input
from .crcspan import length_crcs, run_crcs_ok

MASK_DELTA = 0xA282EAD8
MAX_RECORD = 2 << 30
BLOCK = 8 << 20
RUN_CHECK_MIN = 16  # records of one length checked together with one CRC pass (crcspan), from this many
SPAN_RECORDS = 1 << 16  # records of varying lengths framed (and decoded) together, at most
SLACK = 64  # zero bytes after the records of a concatenated buffer


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
    """The records of one file, read in large blocks: :meth:`runs` yields ``("fixed", Records)`` (a
    run of records of one length, with its 2-D view) or ``("span", Records)`` (any lengths). Errors
    are DatasetErrors naming the file (``where``), the record and its offset."""

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
        self,
        start: int,
        stop: int,
        origin: tuple[int, int, int | None] | None = None,
        span_records: int = SPAN_RECORDS,
    ) -> Iterator[tuple[str, Records]]:
        """Records ``[start, stop)`` as ``(kind, Records)``: ``"fixed"`` for a run of records of one
        length (with its 2-D view), ``"span"`` for records of any lengths (at most
        ``span_records`` of them); records before ``start`` are skipped (framing checked only).

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
            if k >= RUN_CHECK_MIN and self._equal_lengths(buf, pos, RUN_CHECK_MIN, L, S) == RUN_CHECK_MIN:
                k = self._equal_lengths(buf, pos, k, L, S)
                arr = np.frombuffer(buf, dtype=np.uint8, count=k * S, offset=pos).reshape(k, S)
                wrong = np.flatnonzero((arr[:, 8:12] != arr[0, 8:12]).any(axis=1))
                if wrong.size:
                    i = int(wrong[0])
                    raise self._err(
                        f"record {index + i + 1} at byte {offset + pos + i * S}: length CRC mismatch (file is corrupt)"
                    )
                skip = max(0, min(k, start - index))
                if skip < k:
                    live = arr[skip:]
                    self._check_crcs(buf, pos + skip * S, live, L, S, index + skip, crc)
                    starts = pos + 12 + np.arange(skip, k, dtype=np.int64) * S
                    recs = Records(np.frombuffer(buf, dtype=np.uint8), starts, np.full(k - skip, L, np.int64))
                    recs.first, recs.matrix = index + skip, live[:, 12 : 12 + L]
                    yield "fixed", recs
                pos += k * S
                index += k
                continue
            # records of varying lengths: their headers walked in one loop, their CRCs checked together
            heads, lens, words = _walk(buf, pos, min(stop - index, max(1, span_records)))
            k = self._check_span(buf, offset, heads, lens, words, index, max(0, start - index), crc)
            skip = max(0, min(k, start - index))
            if skip < k:
                recs = Records(np.frombuffer(buf, dtype=np.uint8), heads[skip:] + 12, lens[skip:])
                recs.first = index + skip
                yield "span", recs
            pos = int(heads[-1] + lens[-1]) + 16
            index += k
        if self.rows is not None and index < min(stop, self.rows):
            raise self._err(
                f"holds {index} records, the manifest says {self.rows}", "the file is cut short; re-create it", "rows"
            )

    @staticmethod
    def _equal_lengths(buf: bytes, pos: int, k: int, L: int, S: int) -> int:
        """How many of the ``k`` records of ``S`` bytes from ``pos`` on have the length ``L``, in a row."""
        lens = np.ndarray((k,), dtype="<u8", buffer=buf, offset=pos, strides=(S,))
        bad = np.flatnonzero(lens != L)
        return int(bad[0]) if bad.size else k

    def _check_span(self, buf: bytes, offset: int, heads, lens, words, index: int, skip: int, crc) -> int:
        """Both CRCs of walked records (the data CRCs from record ``skip`` on); how many records there
        are, or the error naming the first damaged one (the walk may have gone on past a damaged
        length: nothing after it is used)."""
        bad = np.flatnonzero(mask_array(length_crcs(lens)) != words)
        k = int(bad[0]) if bad.size else len(lens)
        a = heads[skip:k] + 12
        b = a + lens[skip:k]
        mv = memoryview(buf)
        got = np.fromiter(map(crc, map(mv.__getitem__, map(slice, a.tolist(), b.tolist()))), np.uint64, count=len(a))
        stored = np.frombuffer(buf, dtype=np.uint8)[b[:, None] + np.arange(4)].view("<u4").ravel()
        wrong = np.flatnonzero(mask_array(got) != stored)
        if wrong.size:
            i = skip + int(wrong[0])
            raise self._err(
                f"record {index + i + 1} at byte {offset + int(heads[i])}: data CRC mismatch (file is corrupt)"
            )
        if k < len(lens):
            raise self._err(
                f"record {index + k + 1} at byte {offset + int(heads[k])}: length CRC mismatch (file is corrupt)"
            )
        return k

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
    return sum(len(recs) for _, recs in runs.runs(0, 1 << 62))


_LENGTH = struct.Struct("<Q")


def _walk(buf: bytes, pos: int, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The records that lie whole in ``buf`` from ``pos`` on (at least the first, which the caller
    has checked; at most ``limit``): where each starts, its length and its stored length CRC. The
    one loop a variable-length stream costs per record (a length read and an append); everything
    else is vectorised."""
    heads: list[int] = []
    append = heads.append
    unpack = _LENGTH.unpack_from
    end = len(buf)
    last = end - 12  # a header must fit
    while limit > 0 and pos <= last:
        nxt = pos + unpack(buf, pos)[0] + 16
        if nxt > end:
            break
        append(pos)
        pos = nxt
        limit -= 1
    starts = np.array(heads, dtype=np.int64)
    tail = np.append(starts[1:], pos) if len(starts) else starts
    head = np.frombuffer(buf, dtype=np.uint8)[starts[:, None] + np.arange(8, 12)]
    return starts, tail - starts - 16, head.view("<u4").ravel()


class Records:
    """Framed records (both CRCs checked) in one buffer: record ``i`` is ``buf[starts[i]:
    starts[i] + lens[i]]`` (uint8). ``first``: the file's 0-based index of the first record (for
    messages); ``ids``: the indices of every record, when a selection is not a run; ``matrix``: a
    2-D view of the payloads when they all have one length (a ``fixed`` run)."""

    __slots__ = ("buf", "starts", "lens", "first", "ids", "matrix")

    def __init__(self, buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> None:
        self.buf, self.starts, self.lens = buf, starts, lens
        self.first = 0
        self.ids: np.ndarray | None = None
        self.matrix: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.starts)

    @classmethod
    def from_list(cls, records: list[bytes], first: int = 0) -> Records:
        lens = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
        starts = np.zeros(len(records), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        out = cls(np.frombuffer(b"".join(records), dtype=np.uint8), starts, lens)
        out.first = first
        return out

    @classmethod
    def concat(cls, parts: list[Records]) -> Records:
        """The records of ``parts`` in one buffer (each part's bytes from its first record to its
        last copied once), so that they are decoded together; :data:`SLACK` zero bytes follow the
        last record (a decoder reads a few bytes past a position without copying the buffer)."""
        parts = [r for r in parts if len(r)] or parts[:1]
        if len(parts) == 1:
            return parts[0]
        bounds, starts, base = [], [], 0
        for r in parts:
            a, b = int(r.starts[0]), int(r.starts[-1] + r.lens[-1])
            bounds.append((a, b))
            starts.append(r.starts - a + base)
            base += b - a
        buf = np.empty(base + SLACK, dtype=np.uint8)
        buf[base:] = 0
        at = 0
        for r, (a, b) in zip(parts, bounds, strict=True):
            buf[at : at + b - a] = r.buf[a:b]
            at += b - a
        lens = np.concatenate([r.lens for r in parts])
        out = cls(buf, np.concatenate(starts), lens)
        out.ids = np.concatenate([r.indices() for r in parts])
        out.first = int(out.ids[0])
        return out

    def indices(self) -> np.ndarray:
        """The file's 0-based index of every record."""
        return self.ids if self.ids is not None else np.arange(self.first, self.first + len(self), dtype=np.int64)

    def select(self, idx: np.ndarray) -> Records:
        """Records ``idx`` (positions in this one, increasing)."""
        out = Records(self.buf, self.starts[idx], self.lens[idx])
        out.ids = self.indices()[idx]
        out.first = int(out.ids[0]) if len(out.ids) else self.first
        if self.matrix is not None:
            out.matrix = self.matrix[idx]
        return out

    def slice(self, a: int, b: int) -> Records:
        out = Records(self.buf, self.starts[a:b], self.lens[a:b])
        out.ids = None if self.ids is None else self.ids[a:b]
        out.first = self.first + a if self.ids is None else (int(out.ids[0]) if len(out.ids) else self.first)
        out.matrix = None if self.matrix is None else self.matrix[a:b]
        return out

    def objects(self) -> np.ndarray:
        """The records as an object array of ``bytes``, made by Arrow (the records are the odd
        elements of a binary array over the buffer)."""
        import pyarrow as pa

        n = len(self)
        if not n:
            return np.empty(0, dtype=object)
        bounds = np.empty(2 * n + 2, dtype=np.int64)
        bounds[0] = 0
        bounds[1:-1:2] = self.starts
        bounds[2:-1:2] = self.starts + self.lens
        bounds[-1] = len(self.buf)
        arr = pa.Array.from_buffers(pa.large_binary(), 2 * n + 1, [None, pa.py_buffer(bounds), pa.py_buffer(self.buf)])
        return arr.take(pa.array(np.arange(1, 2 * n, 2, dtype=np.int64))).to_numpy(zero_copy_only=False)

    def payloads(self) -> list[bytes]:
        mv = memoryview(self.buf)
        return [bytes(mv[a : a + n]) for a, n in zip(self.starts.tolist(), self.lens.tolist(), strict=True)]
