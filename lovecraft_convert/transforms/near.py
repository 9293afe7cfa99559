"""``--dedup near``: MinHash signatures of text rows and their LSH band keys, computed per batch with
NumPy (no loop per shingle).

A row's text is cut into *tokens*: whitespace-separated words (``--ngram-unit word``: runs of bytes
other than ASCII whitespace) or characters (``char``: UTF-8 code points). Its *shingles* are the
runs of ``--ngram`` consecutive tokens (a row with fewer tokens has one shingle: all of them; an
empty row has one empty shingle). MinHash keeps, for each of ``bands * band_rows`` hash functions,
the least hash of the row's shingles; two rows agree on one such value with probability equal to
the Jaccard similarity of their shingle sets, so the fraction of equal values estimates it.

Hashing, all from the seed (:class:`Hasher`):

- a token's bytes: the sum (mod 2^64) of a random table's entries for (offset in the token mod 256,
  byte), then mixed with its length (splitmix64's finaliser): a sum per token, by
  ``np.add.reduceat`` over all the batch's bytes at once;
- a shingle: the sum of its tokens' hashes times random odd multipliers (one per place), mixed,
  its top 32 bits kept;
- the ``bands * band_rows`` MinHash functions: ``(a * x + b) mod 2^64 >> 32`` (multiply-add-shift,
  strongly universal for 32-bit ``x``), applied to blocks of shingles as one outer product and
  reduced per row with ``np.minimum.reduceat``;
- a band's key: 128 bits, two chains of the mixer over the band's values (paired into 64-bit
  words) starting from two seeds per band, so equal keys mean equal band values (a false match
  needs a 128-bit collision) and bands never match each other.

A pair of rows with Jaccard similarity ``s`` shares at least one band key (becomes a *candidate*)
with probability ``1 - (1 - s**band_rows)**bands`` (:func:`candidate_probability`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import OptionsError

UNITS = ("word", "char")
SHINGLE_BLOCK = 4096  # shingles hashed at once: [hashes, 4096] uint64, 3.5 MiB at 112 hashes (cache-sized)
WS = np.zeros(256, dtype=bool)
WS[[9, 10, 11, 12, 13, 32]] = True  # ASCII whitespace: what splits words
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)


@dataclass(frozen=True)
class NearParams:
    """The parameters of ``--dedup near`` (the CLI's flags): the Jaccard ``threshold``, shingles of
    ``ngram`` tokens of ``unit`` (word or char), ``bands`` bands of ``band_rows`` hashes, ``seed``."""

    threshold: float = 0.8
    ngram: int = 5
    unit: str = "word"
    bands: int = 14
    band_rows: int = 8
    seed: int = 0

    @property
    def hashes(self) -> int:
        return self.bands * self.band_rows

    def check(self) -> NearParams:
        """Refuse values out of range (usage errors)."""
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (0 < t <= 1):
            raise OptionsError(f"--threshold {t}: give a Jaccard similarity in (0, 1], e.g. 0.8")
        for flag, v, lo, hi in (
            ("--ngram", self.ngram, 1, 1 << 10),
            ("--bands", self.bands, 1, 1 << 10),
            ("--band-rows", self.band_rows, 1, 1 << 10),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or not (lo <= v <= hi):
                raise OptionsError(f"{flag} {v}: give a whole number from {lo} to {hi}")
        if self.unit not in UNITS:
            raise OptionsError(f"--ngram-unit {self.unit}: use word or char")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise OptionsError(f"--dedup-seed {self.seed}: give a whole number, 0 or more")
        return self

    def need(self) -> int:
        """Equal MinHash values two signatures must share to pass the threshold."""
        return max(1, math.ceil(self.threshold * self.hashes - 1e-9))

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "ngram": self.ngram,
            "ngram_unit": self.unit,
            "bands": self.bands,
            "band_rows": self.band_rows,
            "seed": self.seed,
        }

    @classmethod
    def given(cls, options: Mapping[str, Any]) -> NearParams:
        """The parameters a run with these ``options`` (the jobs' fields: ``threshold``, ``ngram``,
        ``ngram_unit``, ``bands``, ``band_rows``, ``dedup_seed``) uses: the defaults where one is
        None (not given)."""
        d = cls()

        def get(key: str, default):
            v = options.get(key)
            return default if v is None else v

        return cls(
            get("threshold", d.threshold),
            get("ngram", d.ngram),
            get("ngram_unit", d.unit),
            get("bands", d.bands),
            get("band_rows", d.band_rows),
            get("dedup_seed", d.seed),
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NearParams:
        return cls(d["threshold"], d["ngram"], d["ngram_unit"], d["bands"], d["band_rows"], d["seed"])


def candidate_probability(s: float, bands: int, band_rows: int) -> float:
    """The probability that two rows of Jaccard similarity ``s`` share a band key (the S-curve)."""
    return 1.0 - (1.0 - s**band_rows) ** bands


def mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on a uint64 array (a bijection that spreads every bit)."""
    z ^= z >> _S30
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


class Hasher:
    """The random constants of one seed and the steps text -> tokens -> shingles -> signatures -> band
    keys. ``chunk``: the bytes of text hashed at once (the step's temporaries are ~40 bytes per byte)."""

    def __init__(self, p: NearParams, chunk: int = 1 << 20) -> None:
        self.p = p
        self.chunk = max(1 << 12, int(chunk))
        rng = np.random.default_rng([p.seed, 0x6E656172])
        u64 = np.iinfo(np.uint64).max
        self.table = rng.integers(0, u64, size=256 * 256, dtype=np.uint64, endpoint=True)
        self.len_mult = rng.integers(0, u64, dtype=np.uint64, endpoint=True) | np.uint64(1)
        self.place = rng.integers(0, u64, size=p.ngram + 1, dtype=np.uint64, endpoint=True) | np.uint64(1)
        self.a = rng.integers(0, u64, size=p.hashes, dtype=np.uint64, endpoint=True)
        self.b = rng.integers(0, u64, size=p.hashes, dtype=np.uint64, endpoint=True)
        self.band_seeds = rng.integers(0, u64, size=(p.bands, 2), dtype=np.uint64, endpoint=True)

    # -- tokens ------------------------------------------------------------------------------------

    def tokens(self, v: np.ndarray, offs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The hashes of the tokens of rows ``offs`` (n + 1 offsets into the bytes ``v``, from 0), in
        order, and each row's number of tokens."""
        n = len(offs) - 1
        if len(v) == 0:
            return np.zeros(0, dtype=np.uint64), np.zeros(n, dtype=np.int64)
        row_starts = offs[:-1][offs[:-1] < len(v)]
        if self.p.unit == "word":
            inside = ~WS[v]
            start = inside.copy()
            start[1:] &= ~inside[:-1]
            start[row_starts] = inside[row_starts]
            sel = np.flatnonzero(inside)
            st = start[sel]
            vb = v[sel]
        else:
            start = (v & 0xC0) != 0x80  # the first byte of a UTF-8 character
            start[row_starts] = True
            sel = None
            st = start
            vb = v
        del start
        first = np.flatnonzero(st)  # each token's first byte, as an index into the selected bytes
        if len(first) == 0:
            return np.zeros(0, dtype=np.uint64), np.zeros(n, dtype=np.int64)
        tid = np.cumsum(st, dtype=np.int64)
        tid -= 1
        off = np.arange(len(st), dtype=np.int64)
        off -= first[tid]
        del tid
        off &= 255
        off <<= 8
        off += vb
        terms = self.table[off]
        del off
        h = np.add.reduceat(terms, first)
        del terms
        lens = np.diff(np.append(first, len(st))).astype(np.uint64)
        h ^= lens * self.len_mult
        mix(h)
        where = sel[first] if sel is not None else first  # each token's first byte in ``v``
        counts = np.diff(np.searchsorted(where, offs))
        return h, counts.astype(np.int64)

    # -- shingles and signatures -------------------------------------------------------------------

    def signatures(self, v: np.ndarray, offs: np.ndarray) -> np.ndarray:
        """The MinHash signature (``[rows, bands * band_rows]`` uint32) of each row of ``offs``
        (offsets into ``v``), hashed ``chunk`` bytes of rows at a time."""
        n = len(offs) - 1
        out = np.empty((n, self.p.hashes), dtype=np.uint32)
        a = 0
        while a < n:
            # the rows from a whose bytes fit the chunk (one row at least)
            b = int(np.searchsorted(offs, offs[a] + self.chunk, side="right")) - 1
            b = min(n, max(b, a + 1))
            lo, hi = int(offs[a]), int(offs[b])
            if hi - lo > self.chunk:  # one row longer than the chunk: a piece at a time
                out[a] = self._long_row(v[lo:hi])
            else:
                toks, counts = self.tokens(v[lo:hi], offs[a : b + 1] - lo)
                out[a:b] = self._minhash(toks, counts)
            a = b
        return out

    def _long_row(self, v: np.ndarray) -> np.ndarray:
        """The signature of one row longer than the chunk, hashed a piece of about ``chunk`` bytes at
        a time (cut where a token ends: at whitespace for words, at a character's first byte), the
        last ``ngram - 1`` tokens of each piece carried to the next so that every shingle is met once.
        A word longer than the chunk, which has no whitespace to be cut at, is cut anyway."""
        k = self.p.ngram
        sig = np.full(self.p.hashes, np.iinfo(np.uint32).max, dtype=np.uint32)
        carry = np.zeros(0, dtype=np.uint64)
        seen = 0
        at = 0
        while at < len(v):
            end = min(len(v), at + self.chunk)
            if end < len(v):
                look = v[end : end + min(self.chunk, len(v) - end)]
                ok = WS[look] if self.p.unit == "word" else (look & 0xC0) != 0x80
                hit = np.flatnonzero(ok)
                end += int(hit[0]) if len(hit) else 0
            toks, _ = self.tokens(v[at:end], np.array([0, end - at], dtype=np.int64))
            at = end
            seq = np.concatenate([carry, toks])
            seen += len(toks)
            if len(seq) >= k:
                sig = np.minimum(sig, self._minhash(seq, np.array([len(seq)], dtype=np.int64))[0])
                carry = seq[len(seq) - (k - 1) :] if k > 1 else carry[:0]
            else:
                carry = seq
        if seen < k:  # fewer tokens than a shingle: one shingle of them all
            return self._minhash(carry, np.array([len(carry)], dtype=np.int64))[0]
        return sig

    def shingles(self, toks: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The 32-bit hashes of the rows' shingles (as uint64), in row order, and each row's number."""
        k = self.p.ngram
        per = np.maximum(counts - k + 1, 1)  # shingles per row: one (all its tokens) for a short row
        total = int(per.sum())
        rid = np.repeat(np.arange(len(counts), dtype=np.int64), per)
        tstart = np.zeros(len(counts), dtype=np.int64)
        np.cumsum(counts[:-1], out=tstart[1:])
        pstart = np.zeros(len(counts), dtype=np.int64)
        np.cumsum(per[:-1], out=pstart[1:])
        at = np.arange(total, dtype=np.int64) - pstart[rid] + tstart[rid]  # the shingle's first token
        length = np.minimum(counts, k)[rid]
        del rid
        padded = np.concatenate([toks, np.zeros(k, dtype=np.uint64)])
        s = length.astype(np.uint64) * self.place[k]
        for j in range(k):
            t = padded[at + j] * self.place[j]
            t[length <= j] = 0
            s += t
        mix(s)
        s >>= _S32
        return s, per

    def _minhash(self, toks: np.ndarray, counts: np.ndarray) -> np.ndarray:
        s, per = self.shingles(toks, counts)
        n = len(counts)
        # the least (a * x + b) mod 2^64 of each row: its top 32 bits are the least of the shifted values
        sig = np.full((n, self.p.hashes), np.iinfo(np.uint64).max, dtype=np.uint64)
        ends = np.cumsum(per)
        starts = ends - per
        b = self.b[:, None]
        for x in range(0, len(s), SHINGLE_BLOCK):
            y = min(len(s), x + SHINGLE_BLOCK)
            rows = np.flatnonzero((starts < y) & (ends > x))  # the rows with shingles in [x, y)
            seg = np.maximum(starts[rows], x) - x
            h = np.multiply.outer(self.a, s[x:y])  # [hashes, shingles]: each hash's values contiguous
            h += b
            m = np.minimum.reduceat(h, seg, axis=1).T
            sig[rows] = np.minimum(sig[rows], m)
        sig >>= _S32
        return sig.astype(np.uint32)

    # -- bands -------------------------------------------------------------------------------------

    def band_keys(self, sig: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The 128-bit key (hi, lo: ``[rows, bands]`` uint64 each) of each row's bands."""
        r = self.p.band_rows
        n = len(sig)
        hi = np.empty((n, self.p.bands), dtype=np.uint64)
        lo = np.empty((n, self.p.bands), dtype=np.uint64)
        words = sig.astype(np.uint64)
        for band in range(self.p.bands):
            part = words[:, band * r : (band + 1) * r]
            for out, seed in ((hi, self.band_seeds[band, 0]), (lo, self.band_seeds[band, 1])):
                h = np.full(n, seed, dtype=np.uint64)
                for j in range(0, r, 2):
                    w = part[:, j] << _S32
                    if j + 1 < r:
                        w |= part[:, j + 1]
                    h ^= w
                    mix(h)
                out[:, band] = h
        return hi, lo


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The fraction of equal values of signatures ``a`` and ``b`` (rows paired)."""
    return (a == b).mean(axis=1)
