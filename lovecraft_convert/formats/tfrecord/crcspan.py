"""The data CRCs of a run of TFRecord records of one length, checked with one CRC32C pass.

Checking each record's CRC with its own call costs ~0.5 us of Python per record (a slice, a call,
a generator step), about half the time of reading a fixed-shape TFRecord dataset of small rows.
CRC32C is linear over GF(2), so the CRC register after a whole run of records is a fixed linear
function of the CRCs its records should have. The records' stored CRCs give that expected
register, computed with vectorised table look-ups, and one call of the (hardware) CRC32C over
the run's bytes gives the actual one; they agree exactly when every record's CRC is right, up to
the 2^-32 chance of any 32-bit CRC (a single damaged record always shows: the maps involved are
invertible). A run that disagrees is checked record by record, which names the damaged record.

Notation: ``R(s, m)`` is the register after bytes ``m`` from state ``s`` (reflected CRC32C,
before the final inversion), so ``crc32c(m, value=v) == ~R(~v, m)``; ``R(s, m) = A^|m| s ^ R(0, m)``
where ``A^n`` is the (linear) effect of ``n`` zero bytes. A record is ``H | d | w``: the 12-byte
header (the same for every record of the run, checked by the caller), the data ``d`` (``L``
bytes) and the stored masked CRC ``w`` (little-endian). With ``u = unmask(w)`` the data's CRC,
``R(0, d) = u ^ F ^ A^L F`` (F = 0xFFFFFFFF), and the 4 bytes of ``w`` fed to a zero register give
``A^4 w``, so ``R(0, record) = K ^ A^4 (u ^ w)`` with ``K = A^(L+4) R(0, H) ^ A^4 (F ^ A^L F)``;
the run of ``n`` records of ``S = L + 16`` bytes gives ``R(0, run) = XOR_i A^(S (n-1-i)) R(0, record_i)``.
"""

from __future__ import annotations

import functools

import crc32c
import numpy as np

F = 0xFFFFFFFF
_BITS = np.arange(8, dtype=np.uint32)


def _zeros_image(n: int, state: int) -> int:
    """``A^n state``, with the library: n zero bytes from register ``state``."""
    return ~crc32c.crc32c(bytes(n), (~state) & F) & F


class _Linear:
    """A linear map of 32-bit registers as four byte tables."""

    __slots__ = ("images", "tables")

    def __init__(self, images: np.ndarray) -> None:
        self.images = images.astype(np.uint32)  # the images of 1 << 0 .. 1 << 31
        bits = (np.arange(256, dtype=np.uint32)[:, None] >> _BITS) & 1  # [256, 8]
        self.tables = []
        for k in range(4):
            img = self.images[8 * k : 8 * k + 8]
            t = np.zeros(256, dtype=np.uint32)
            for j in range(8):
                t ^= np.where(bits[:, j] == 1, img[j], np.uint32(0))
            self.tables.append(t)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        t0, t1, t2, t3 = self.tables
        return t0[x & 0xFF] ^ t1[(x >> 8) & 0xFF] ^ t2[(x >> 16) & 0xFF] ^ t3[x >> 24]

    def then(self, other: _Linear) -> _Linear:
        """``other`` after ``self``."""
        return _Linear(other(self.images))


@functools.lru_cache(maxsize=64)
def _zeros(n: int) -> _Linear:
    """``A^n``."""
    return _Linear(np.array([_zeros_image(n, 1 << b) for b in range(32)], dtype=np.uint32))


@functools.lru_cache(maxsize=256)
def _level(S: int, level: int) -> _Linear:
    """``A^(S * 2^level)``, by squaring."""
    if level == 0:
        return _zeros(S)
    half = _level(S, level - 1)
    return half.then(half)


def _fold(x: np.ndarray, S: int) -> int:
    """``XOR_i A^(S (n-1-i)) x_i``, pairwise: each level combines neighbours with ``A^(S 2^level)``."""
    level = 0
    while len(x) > 1:
        if len(x) % 2:  # a zero in front changes nothing
            x = np.concatenate([np.zeros(1, dtype=np.uint32), x])
        x = _level(S, level)(x[0::2]) ^ x[1::2]
        level += 1
    return int(x[0]) if len(x) else 0


def run_crcs_ok(run: memoryview, n: int, L: int, stored: np.ndarray, unmasked: np.ndarray) -> bool:
    """Whether every record of ``run`` (``n`` records of ``L`` data bytes, back to back, one
    header for all) has the data CRC stored in it (``stored``: the records' masked CRC words,
    ``unmasked``: the CRCs they stand for, both uint32)."""
    S = L + 16
    k = _constant(bytes(run[:12]), L)
    expected = _fold(np.uint32(k) ^ _zeros(4)(unmasked.astype(np.uint32) ^ stored.astype(np.uint32)), S)
    actual = ~crc32c.crc32c(run[: n * S], F) & F
    return expected == actual


@functools.lru_cache(maxsize=64)
def _constant(header: bytes, L: int) -> int:
    """``K = A^(L+4) R(0, H) ^ A^4 (F ^ A^L F)``: the same for every run of records of ``L`` bytes
    (whose header ``H`` is their length and its CRC)."""
    tail = int(_zeros(4)(np.array([F ^ _zeros_image(L, F)], dtype=np.uint32))[0])
    return _zeros_image(L + 4, ~crc32c.crc32c(header, F) & F) ^ tail


@functools.lru_cache(maxsize=1)
def _length_tables() -> tuple[int, np.ndarray]:
    """The CRC32C of eight zero bytes, and for each byte position ``k`` of an 8-byte message the
    table ``T[k][b]``: what byte ``b`` there adds to it (XOR)."""
    zero = crc32c.crc32c(bytes(8))
    tables = np.zeros((8, 256), dtype=np.uint32)
    for k in range(8):
        for b in range(256):
            tables[k, b] = crc32c.crc32c(bytes(k) + bytes([b]) + bytes(7 - k)) ^ zero
    return zero, tables


def length_crcs(lens: np.ndarray) -> np.ndarray:
    """The CRC32C of each value's eight little-endian bytes (a record header's length), uint32,
    vectorised: over messages of one size the CRC is affine in their bits (``crc(m) = crc(0) ^
    R(0, m)``, ``R(0, .)`` linear), so eight table look-ups XORed together give it."""
    zero, t = _length_tables()
    b = np.ascontiguousarray(lens, dtype="<u8").view(np.uint8).reshape(-1, 8)
    out = np.full(len(b), zero, dtype=np.uint32)
    for k in range(8):
        out ^= t[k][b[:, k]]
    return out
