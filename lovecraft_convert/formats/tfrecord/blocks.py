"""Block index of a TFRecord file: where every ``N``-th record starts, so that a reader can go to any
block of records without decoding what comes before it (resuming mid-epoch, shuffling blocks).

The writer starts a new block every ``N`` records (``block_records``, chosen from the schema for
about :data:`TARGET_BLOCK_BYTES` of records). In a gzip file every block is a gzip member of its
own, so decompression can start at any block (a file of several members is an ordinary gzip file:
gzip, zlib and tf.data read it whole).

The manifest's ``tfrecord`` section records the blocks of every file: ``"blocks": {"<file>":
{"records": N, "bytes": [[bytes, count], ...]}}``, the bytes of each block run-length encoded
(files of fixed-size records take one or two runs; gzip ones about one run per block, some 8 bytes
of JSON per MiB of data; the buckets of a bucketed dataset have rows of other sizes, so other N). The data files stay plain TFRecord files, one per shard, as before.
``verify`` recomputes the blocks from the file (:func:`scan_index`) and compares.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np

from ...errors import DatasetError

TARGET_BLOCK_BYTES = 1 << 20
MIN_BLOCK_RECORDS = 16
MAX_BLOCK_RECORDS = 1 << 16
SCAN_READ = 8 << 20


def block_records_for(record_bytes: float) -> int:
    """Records per block for records of about ``record_bytes``: a power of two near 1 MiB of them."""
    n = TARGET_BLOCK_BYTES / max(1.0, float(record_bytes))
    p = 1 << max(0, round(np.log2(max(1.0, n))))
    return int(min(MAX_BLOCK_RECORDS, max(MIN_BLOCK_RECORDS, p)))


def encode_blocks(block_records: int, offsets: list[int] | np.ndarray) -> dict:
    """A file's manifest entry: ``{"records": N, "bytes": [[bytes, count], ...]}`` from its block
    offsets (``k + 1``, its size last)."""
    sizes = np.diff(np.asarray(offsets, dtype=np.int64))
    runs: list[list[int]] = []
    for s in sizes.tolist():
        if runs and runs[-1][0] == s:
            runs[-1][1] += 1
        else:
            runs.append([s, 1])
    return {"records": int(block_records), "bytes": runs}


def blocks_problem(entry, rows: int, size: int) -> str | None:
    """Why a file's manifest entry of blocks does not fit a file of ``rows`` records in ``size``
    bytes, judged from its numbers alone (nothing is allocated for them), or None."""
    block_records = entry.get("records") if isinstance(entry, dict) else None
    runs = entry.get("bytes") if isinstance(entry, dict) else None
    ok = isinstance(block_records, int) and not isinstance(block_records, bool) and block_records > 0
    ok = ok and isinstance(runs, list)
    ok = ok and all(isinstance(r, list) and len(r) == 2 and all(isinstance(v, int) and v >= 0 for v in r) for r in runs)
    if not ok:
        return "the manifest's block index of the file is not {records: N, bytes: [[bytes, count], ...]}"
    listed = sum(r[1] for r in runs)
    listed_bytes = sum(r[0] * r[1] for r in runs)
    blocks = -(-rows // block_records)
    if listed != blocks or listed_bytes != size:
        return (
            f"the manifest lists {listed} blocks in {listed_bytes} bytes; "
            f"the file has {rows} records ({blocks} blocks of {block_records}) in {size} bytes"
        )
    return None


def decode_blocks(entry, rows: int, size: int, where: str) -> tuple[int, np.ndarray]:
    """``(N, offsets)`` (``k + 1`` offsets, the file size last) from a file's manifest entry, checked
    against the file's ``rows`` and ``size``; DatasetError naming the file when they do not fit."""
    why = blocks_problem(entry, rows, size)
    if why is not None:
        raise DatasetError(
            why,
            where=where,
            hint="the dataset is damaged; run `lovecraft verify` or re-create it",
            kind="manifest",
        )
    block_records, runs = entry["records"], entry["bytes"]
    sizes = np.repeat(np.array([r[0] for r in runs], dtype=np.int64), [r[1] for r in runs])
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return block_records, offsets


# --------------------------------------------------------------------------------------------
# computing the index from a file (verify, and datasets written without one)
# --------------------------------------------------------------------------------------------


class _Marks:
    """Walks record headers in a stream of (decompressed) bytes and notes where records ``0, N,
    2N, ...`` start. Runs of records of one length are stepped over with one vectorised check."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.marks: list[int] = []
        self.records = 0
        self.buf = b""
        self.base = 0  # stream offset of buf[0]

    def feed(self, chunk: bytes) -> None:
        buf = self.buf + chunk if self.buf else chunk
        p, end, n = 0, len(buf), self.n
        while end - p >= 8:
            size = int.from_bytes(buf[p : p + 8], "little") + 16
            if end - p < size:
                break
            kmax = (end - p) // size
            k = 1
            if kmax >= 8 and int.from_bytes(buf[p + size : p + size + 8], "little") == size - 16:
                # a run of records of one length: stepped over in growing vectorised checks (8, 64,
                # 512, ... records), which a record of another length ends; one check of all the
                # rest per record cost a file of varying lengths a pass over its chunk per record
                step = 8
                while k < kmax:
                    m = min(kmax - k, step)
                    lens = np.ndarray((m,), dtype="<u8", buffer=buf, offset=p + k * size, strides=(size,))
                    bad = np.flatnonzero(lens != size - 16)
                    if bad.size:
                        k += int(bad[0])
                        break
                    k += m
                    step *= 8
            first = -(-self.records // n) * n
            self.marks.extend(self.base + p + (j - self.records) * size for j in range(first, self.records + k, n))
            p += k * size
            self.records += k
        self.base += p
        self.buf = buf[p:]

    @property
    def boundary(self) -> bool:
        """Is the stream at a record boundary (nothing of a record pending)?"""
        return not self.buf


def _read_chunks(path: str, size: int = SCAN_READ) -> Iterator[bytes]:
    from ...storage import open_input

    with open_input(path, buffering=0) as f:
        while blk := f.read(size):
            yield blk


def scan_index(path: str, gzip: bool, block_records: int) -> np.ndarray | None:
    """The block offsets (``k + 1`` entries, the file size last) a file of records has for blocks of
    ``block_records``, computed from its bytes. For gzip, None when its members are not those
    blocks (a file written without an index, as one gzip stream: it cannot be entered mid-way)."""
    m = _Marks(block_records)
    if not gzip:
        for blk in _read_chunks(path):
            m.feed(blk)
        return np.array([*m.marks, m.base + len(m.buf)], dtype=np.int64)
    members: list[tuple[int, int]] = []  # (file offset, stream offset) where each member starts
    consumed = 0
    d = None
    for raw in _read_chunks(path, SCAN_READ // 4):
        while raw:
            if d is None:
                d = zlib.decompressobj(31)
                members.append((consumed, m.base + len(m.buf)))
            try:
                out = d.decompress(raw, SCAN_READ)
            except zlib.error:
                return None
            consumed += len(raw) - len(d.unconsumed_tail) - len(d.unused_data)
            if out:
                m.feed(out)
            if d.eof:
                raw, d = d.unused_data, None
            else:
                raw = d.unconsumed_tail
    if d is not None or not m.boundary:
        return None  # cut short (verify's decoding reports it)
    if not m.records:
        return np.array([consumed], dtype=np.int64)
    if [b for _, b in members] != m.marks:
        return None
    return np.array([*(a for a, _ in members), consumed], dtype=np.int64)
