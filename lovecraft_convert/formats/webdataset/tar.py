"""POSIX tar (ustar, with pax records where a name or size does not fit), written and read with
fixed metadata so that the same members give the same bytes: mode 0444, owner and group 0 without
names, modification time 0. A member is a 512-byte header, its data, zeros to the next multiple of
512; an archive ends with two zero blocks, padded to a multiple of 10240 bytes (20 blocks, the
record size of tar and of Python's tarfile).

A name longer than the header's 100 bytes, or not ASCII, and a size of 8 GiB or more are given in a
pax extended header (typeflag ``x``, ``path=``/``size=`` records) just before the member, as POSIX
says and GNU tar, bsdtar and Python's tarfile read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

BLOCK = 512
RECORD = 20 * BLOCK
MTIME = 0
MODE = 0o444
MAX_OCTAL = (1 << 33) - 1  # 11 octal digits
PAX_NAME = b"././@PaxHeader"
ZERO_BLOCK = bytes(BLOCK)


def _header(name: bytes, size: int, typeflag: bytes) -> bytes:
    buf = bytearray(BLOCK)
    buf[0 : len(name)] = name
    buf[100:108] = b"%07o\0" % MODE
    buf[108:116] = b"0000000\0"
    buf[116:124] = b"0000000\0"
    buf[124:136] = b"%011o\0" % size
    buf[136:148] = b"%011o\0" % MTIME
    buf[148:156] = b" " * 8
    buf[156:157] = typeflag
    buf[257:263] = b"ustar\0"
    buf[263:265] = b"00"
    buf[329:337] = b"0000000\0"
    buf[337:345] = b"0000000\0"
    buf[148:156] = b"%06o\0 " % sum(buf)
    return bytes(buf)


def _pax_record(key: str, value: bytes) -> bytes:
    body = key.encode("ascii") + b"=" + value + b"\n"
    n = len(body) + 1
    while len(b"%d " % n) + len(body) != n:  # the length counts its own digits
        n = len(b"%d " % n) + len(body)
    return b"%d " % n + body


def padding(size: int) -> int:
    """Zeros after ``size`` bytes of data, to the next block."""
    return -size % BLOCK


def member_header(name: str, size: int) -> bytes:
    """The header(s) of a regular file ``name`` of ``size`` bytes (a pax header first when needed)."""
    raw = name.encode("utf-8")
    records = b""
    if len(raw) > 100 or not name.isascii():
        records += _pax_record("path", raw)
        raw = name.encode("ascii", "replace")[:100]  # readers take the pax path instead
    if size > MAX_OCTAL:
        records += _pax_record("size", b"%d" % size)
    if not records:
        return _header(raw, size, b"0")
    pax = _header(PAX_NAME, len(records), b"x") + records + bytes(padding(len(records)))
    return pax + _header(raw, min(size, MAX_OCTAL), b"0")


_DIGITS = np.arange(32, dtype=np.int64)


def headers(keys: np.ndarray, width: int, ext: str, sizes: np.ndarray) -> np.ndarray | None:
    """The headers of members ``<key>.<ext>`` (keys as ``width`` decimal digits) of ``sizes``
    bytes, one per row of a ``uint8[n, 512]`` array, the same bytes :func:`member_header` makes;
    None when one needs a pax header (a long or non-ASCII name, a size of 8 GiB or more)."""
    n = len(keys)
    name = ext.encode("utf-8")
    if width + 1 + len(name) > 100 or not ext.isascii() or (n and int(sizes.max()) > MAX_OCTAL):
        return None
    if n and int(keys.max()) >= 10**width:
        return None
    h = np.tile(np.frombuffer(_header(b"", 0, b"0"), dtype=np.uint8), (n, 1))
    h[:, 148:156] = 32
    h[:, 0:width] = (keys[:, None] // 10 ** _DIGITS[width - 1 :: -1] % 10 + 48).astype(np.uint8)
    h[:, width] = ord(".")
    h[:, width + 1 : width + 1 + len(name)] = np.frombuffer(name, dtype=np.uint8)
    h[:, 124:135] = ((sizes[:, None] >> (3 * _DIGITS[10::-1])) & 7) + 48
    h[:, 135] = 0
    chk = h.sum(axis=1, dtype=np.int64)
    h[:, 148:154] = ((chk[:, None] >> (3 * _DIGITS[5::-1])) & 7) + 48
    h[:, 154] = 0
    h[:, 155] = 32
    return h


def end_of_archive(written: int) -> bytes:
    """The two zero blocks that end an archive of ``written`` bytes so far, and the record padding."""
    total = written + 2 * BLOCK
    return bytes(2 * BLOCK + (-total % RECORD))


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------


class TarProblem(Exception):
    """What makes a tar file unreadable: a bad header, a member past its end."""


@dataclass
class Member:
    name: str
    offset: int  # of its data in the file
    size: int


def _octal(field: bytes, what: str, at: int) -> int:
    text = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise TarProblem(f"the header at byte {at} has a {what} that is not an octal number") from None


def _parse_pax(data: bytes, at: int) -> dict[str, bytes]:
    out, pos = {}, 0
    while pos < len(data):
        sp = data.find(b" ", pos)
        try:
            n = int(data[pos:sp])
        except ValueError:
            raise TarProblem(f"the pax header at byte {at} is malformed") from None
        rec = data[sp + 1 : pos + n]
        if n <= 0 or not rec.endswith(b"\n") or b"=" not in rec:
            raise TarProblem(f"the pax header at byte {at} is malformed")
        key, value = rec[:-1].split(b"=", 1)
        out[key.decode("ascii", "replace")] = value
        pos += n
    return out


class Scan:
    """The regular members of the tar mapped as ``buf`` (uint8), one at a time, as the headers are
    read (each member's data skipped); once iterated, ``end`` is where the end-of-archive blocks
    start. ``strict``: the metadata must be what :func:`member_header` writes (verify)."""

    def __init__(self, buf: np.ndarray, strict: bool = False) -> None:
        self.buf = buf
        self.strict = strict
        self.end = -1

    def __iter__(self) -> Iterator[Member]:
        buf, strict = self.buf, self.strict
        size = len(buf)
        pos = 0
        pax: dict[str, bytes] = {}
        while True:
            if pos + BLOCK > size:
                raise TarProblem(f"ends at byte {size} without the two zero blocks that end a tar archive")
            head = bytes(buf[pos : pos + BLOCK])
            if head == ZERO_BLOCK:
                break
            if head[257:263] not in (b"ustar\0", b"ustar ") or head[263:265] not in (b"00", b" \0"):
                raise TarProblem(f"the block at byte {pos} is not a tar header")
            want = _octal(head[148:156], "checksum", pos)
            got = sum(head[:148]) + 8 * 32 + sum(head[156:])
            if want != got:
                raise TarProblem(f"the header at byte {pos} has checksum {want:o}, its bytes add up to {got:o}")
            n = _octal(head[124:136], "size", pos)
            typeflag = head[156:157]
            data = pos + BLOCK
            if data + n > size:
                raise TarProblem(f"the member at byte {pos} claims {n} bytes, past the end of the file")
            if typeflag == b"x":
                pax = _parse_pax(bytes(buf[data : data + n]), pos)
            elif typeflag in (b"0", b"\0"):
                name = head[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
                if "path" in pax:
                    name = pax["path"].decode("utf-8", "replace")
                if "size" in pax:
                    try:
                        n = int(pax["size"])
                    except ValueError:
                        raise TarProblem(f"the pax header before byte {pos} has a size that is not a number") from None
                    if data + n > size:
                        raise TarProblem(f"the member at byte {pos} claims {n} bytes, past the end of the file")
                if strict and (
                    head[100:108] != b"%07o\0" % MODE
                    or head[136:148] != b"%011o\0" % MTIME
                    or head[108:124] != b"0000000\x000000000\x00"
                ):
                    raise TarProblem(f"the header of {name} has another mode, owner or time than lovecraft writes")
                yield Member(name, data, n)
                pax = {}
            elif strict:
                raise TarProblem(f"the member at byte {pos} is of type {typeflag!r}, not a regular file")
            pos = data + n + padding(n)
        self.end = pos
        if strict:
            rest = buf[pos:]
            if len(rest) < 2 * BLOCK or np.count_nonzero(rest) or len(buf) % RECORD:
                raise TarProblem(f"does not end with zero blocks up to a multiple of {RECORD} bytes after byte {pos}")
