"""The record batches of an Arrow IPC file or stream as its metadata describes them, read without
decompressing anything: rows, body bytes, and the bytes the body's buffers decode to.

A compressed body (LZ4 or ZSTD buffers) is decompressed whole by pyarrow when a batch is read: 50 KB
of zstd can be a batch of 1.5 GiB of strings. Each compressed buffer starts with its decoded
length (an int64, -1 when the buffer was left uncompressed), so the decoded size of every batch is
known from the message headers and those 8-byte prefixes before pyarrow touches it.

The metadata is FlatBuffers (Arrow's ``format/Message.fbs`` and ``File.fbs``), read here by hand for
the few fields needed: the footer's blocks (offset, metadata length, body length) of an IPC file;
the message header's type, the record batch's length, its buffers (offset, length in the body) and
whether the body is compressed. Anything that does not parse is None: pyarrow then reads the file
as before and reports what is wrong with it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

CONTINUATION = 0xFFFFFFFF
RECORD_BATCH, DICTIONARY_BATCH = 3, 2  # MessageHeader union types


@dataclass
class BatchInfo:
    rows: int
    body: int  # bytes of its body in the file
    decoded: int  # bytes its buffers take decoded (the body's size when not compressed)
    compressed: str  # the body's codec ("lz4", "zstd"), "" when not compressed


class _Bad(Exception):
    pass


class _Table:
    """A FlatBuffers table in ``buf`` at ``pos``."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos
        vt = pos - _i32(buf, pos)
        self.vt, self.vt_size = vt, _u16(buf, vt)

    def _field(self, i: int) -> int | None:
        at = 4 + 2 * i
        if at + 2 > self.vt_size:
            return None
        off = _u16(self.buf, self.vt + at)
        return self.pos + off if off else None

    def scalar(self, i: int, fmt: str, default=0):
        p = self._field(i)
        return default if p is None else _unpack(fmt, self.buf, p)

    def table(self, i: int) -> _Table | None:
        p = self._field(i)
        return None if p is None else _Table(self.buf, p + _u32(self.buf, p))

    def structs(self, i: int, size: int) -> list[int]:
        """Positions of the structs of vector field ``i`` (each ``size`` bytes)."""
        p = self._field(i)
        if p is None:
            return []
        v = p + _u32(self.buf, p)
        n = _u32(self.buf, v)
        if v + 4 + n * size > len(self.buf):
            raise _Bad
        return [v + 4 + k * size for k in range(n)]


def _unpack(fmt: str, buf: bytes, pos: int):
    if pos < 0 or pos + struct.calcsize(fmt) > len(buf):
        raise _Bad
    return struct.unpack_from(fmt, buf, pos)[0]


def _i32(buf, pos):
    return _unpack("<i", buf, pos)


def _u32(buf, pos):
    return _unpack("<I", buf, pos)


def _u16(buf, pos):
    return _unpack("<H", buf, pos)


def _message(meta: bytes) -> tuple[int, _Table | None, int]:
    """(header type, record batch table (a dictionary batch's own), body length) of a Message."""
    msg = _Table(meta, _u32(meta, 0))
    kind = msg.scalar(1, "<B")
    header = msg.table(2)
    if kind == DICTIONARY_BATCH and header is not None:
        header = header.table(1)
    return kind, header, msg.scalar(3, "<q")


CODECS = {0: "lz4", 1: "zstd"}  # BodyCompression's CompressionType


def _decoded(rb: _Table, read_body) -> tuple[int, int, str]:
    """(rows, decoded bytes, codec or "") of a RecordBatch table; ``read_body(offset, n)`` reads
    bytes of its body."""
    rows = rb.scalar(0, "<q")
    buffers = [(_unpack("<q", rb.buf, p), _unpack("<q", rb.buf, p + 8)) for p in rb.structs(2, 16)]
    body = rb.table(3)
    if body is None:
        return rows, sum(max(0, n) for _, n in buffers), ""
    codec = CODECS.get(body.scalar(0, "<b"), "compressed")
    total = 0
    for off, n in buffers:
        if n < 8:
            continue
        size = struct.unpack("<q", read_body(off, 8))[0]
        total += n - 8 if size == -1 else max(0, size)
    return rows, total, codec


def _read(f, offset: int, n: int) -> bytes:
    f.seek(offset)
    data = f.read(n)
    if len(data) != n:
        raise _Bad
    return data


def _message_at(f, offset: int) -> tuple[bytes, int] | None:
    """(metadata, offset of the body) of the message at ``offset``; None at the end of a stream."""
    head = _read(f, offset, 4)
    (n,) = struct.unpack("<I", head)
    start = offset + 4
    if n == CONTINUATION:
        (n,) = struct.unpack("<I", _read(f, start, 4))
        start += 4
    if n == 0:
        return None
    if n > 1 << 28:
        raise _Bad
    return _read(f, start, n), start + n


def file_batches(f, size: int) -> tuple[list[BatchInfo], list[BatchInfo]] | None:
    """(record batches, dictionary batches) of an IPC file (``f``: binary, seekable; ``size`` its
    length), from its footer; None when the metadata does not parse."""
    try:
        tail = _read(f, size - 10, 10)
        if tail[4:] != b"ARROW1":
            return None
        (flen,) = struct.unpack("<i", tail[:4])
        if flen <= 0 or flen > size - 10:
            return None
        footer = _read(f, size - 10 - flen, flen)
        root = _Table(footer, _u32(footer, 0))

        def blocks(i: int) -> list[BatchInfo]:
            out = []
            for p in root.structs(i, 24):
                offset, meta_len, body_len = struct.unpack_from("<qi4xq", footer, p)
                got = _message_at(f, offset)
                if got is None:
                    raise _Bad
                meta, _ = got
                kind, rb, _ = _message(meta)
                if rb is None or kind not in (RECORD_BATCH, DICTIONARY_BATCH):
                    raise _Bad
                body = offset + meta_len
                rows, decoded, comp = _decoded(rb, lambda o, n, body=body: _read(f, body + o, n))
                out.append(BatchInfo(rows, body_len, decoded, comp))
            return out

        return blocks(3), blocks(2)
    except (_Bad, struct.error, OSError, ValueError):
        return None


def stream_batches(f, size: int) -> tuple[list[BatchInfo], list[BatchInfo]] | None:
    """(record batches, dictionary batches) of an IPC stream, message by message (bodies
    skipped); None when the metadata does not parse."""
    batches: list[BatchInfo] = []
    dictionaries: list[BatchInfo] = []
    offset = 0
    try:
        while offset < size:
            got = _message_at(f, offset)
            if got is None:
                break
            meta, body = got
            kind, rb, body_len = _message(meta)
            if body_len < 0 or body + body_len > size:
                return None
            if kind in (RECORD_BATCH, DICTIONARY_BATCH):
                if rb is None:
                    return None
                rows, decoded, comp = _decoded(rb, lambda o, n, body=body: _read(f, body + o, n))
                (batches if kind == RECORD_BATCH else dictionaries).append(BatchInfo(rows, body_len, decoded, comp))
            offset = body + body_len
        return batches, dictionaries
    except (_Bad, struct.error, OSError, ValueError):
        return None
