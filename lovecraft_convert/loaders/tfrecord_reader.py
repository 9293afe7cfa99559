"""Reading TFRecord shards into NumPy without TensorFlow.

Used by ``Dataset.batches()`` and the PyTorch loader (so neither needs TensorFlow, and nothing
TensorFlow-shaped crosses a fork). ``to_tf_dataset`` uses tf.data's own reader instead.

Records are framed ``uint64 length | masked CRC32C(length) | data | masked CRC32C(data)``; both
CRCs are checked on every record that is decoded, as TensorFlow's reader does.

Fast path: fixed-shape numeric datasets have records of one length whose ``tf.train.Example``
bytes differ only inside the packed value lists (our writer gives every integer of a column the
same varint width within a run). A run of equal-length records is viewed as a 2-D ``uint8`` array;
the layout of its first record is parsed once, every other record is checked against it (same
bytes outside the values, valid varint continuation bits) with vectorised comparisons, and the
values are sliced out column by column. Anything else (text, bytes, sequences, foreign files whose
records differ in layout) goes through a per-record protobuf decoder.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np

from ..errors import DatasetError
from ..schema import BINARY, FIXED, STRING, Batch, Schema
from .readers import PartReader

BLOCK = 8 << 20
MAX_RECORD = 2 << 30
MASK_DELTA = 0xA282EAD8


def _mask(c):
    return (((c >> 15) | (c << 17)) + MASK_DELTA) & 0xFFFFFFFF


def _mask_np(c: np.ndarray) -> np.ndarray:
    c = c.astype(np.uint64)
    m = ((c >> np.uint64(15)) | (c << np.uint64(17))) + np.uint64(MASK_DELTA)
    return (m & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _read_varint(buf, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("bad varint")


class _Layout:
    """Where each feature's packed values sit in a record of one length, and how to check the rest."""

    def __init__(self, features: list[tuple], segments: list[tuple[int, int]], ref: bytes) -> None:
        self.features = features  # (name, kind, offset, nbytes, count, width)
        self.segments = segments  # [a, b) byte ranges that must equal the reference record's
        self.ref = np.frombuffer(ref, dtype=np.uint8)


def _parse_layout(rec: bytes, wanted: dict[str, str]) -> _Layout | None:
    """The layout of one Example, or None when it is not a constant-layout candidate."""
    try:
        features = []
        values_at: list[tuple[int, int]] = []
        i, n = 0, len(rec)
        while i < n:
            key, i = _read_varint(rec, i)
            if key & 7 != 2:
                return None
            ln, i = _read_varint(rec, i)
            end = i + ln
            if key >> 3 == 1:  # Features
                j = i
                while j < end:
                    k2, j = _read_varint(rec, j)
                    l2, j = _read_varint(rec, j)
                    if k2 != 0x0A:  # map entry
                        j += l2
                        continue
                    e_end = j + l2
                    name, fb = None, None
                    while j < e_end:
                        k3, j = _read_varint(rec, j)
                        l3, j = _read_varint(rec, j)
                        if k3 == 0x0A:
                            name = rec[j : j + l3].decode("utf-8")
                        elif k3 == 0x12:
                            fb = (j, j + l3)
                        j += l3
                    if name is None or fb is None:
                        return None
                    fa, fe = fb
                    if fa == fe:  # empty Feature
                        return None
                    k4, p = _read_varint(rec, fa)
                    l4, p = _read_varint(rec, p)
                    kind = {0x0A: "bytes", 0x12: "float", 0x1A: "int64"}.get(k4)
                    # bytes values differ in length from record to record: no constant layout
                    if kind is None or kind == "bytes" or p + l4 != fe:
                        return None
                    if name in wanted and kind != wanted[name]:
                        return None
                    if l4 == 0:
                        if name in wanted:
                            features.append((name, kind, p, 0, 0, 1))
                        continue
                    k5, q = _read_varint(rec, p)
                    if k5 != 0x0A:  # packed values
                        return None
                    l5, q = _read_varint(rec, q)
                    if q + l5 != fe:
                        return None
                    if name not in wanted:  # another column's values: skipped, not compared
                        values_at.append((q, q + l5))
                        continue
                    if kind == "float":
                        if l5 % 4:
                            return None
                        features.append((name, kind, q, l5, l5 // 4, 4))
                    else:
                        widths = []
                        r = q
                        while r < fe:
                            s = r
                            _, r = _read_varint(rec, r)
                            widths.append(r - s)
                        if len(set(widths)) != 1:
                            return None
                        features.append((name, kind, q, l5, len(widths), widths[0]))
                    values_at.append((q, q + l5))
            i = end
        if {f[0] for f in features} != set(wanted):
            return None
        segments = []
        pos = 0
        for a, b in sorted(values_at):
            if a > pos:
                segments.append((pos, a))
            pos = b
        if pos < n:
            segments.append((pos, n))
        return _Layout(features, segments, rec)
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


class TfrecordReader(PartReader):
    """One ``.tfrecord`` / ``.tfrecord.gz`` file of ``tf.train.Example`` records."""

    def __init__(self, rows: int, schema: Schema, path: str, compression: str | None) -> None:
        super().__init__(rows, schema)
        self.path = path
        self.gzip = (compression or "").upper() == "GZIP" or path.endswith(".gz")
        self.kinds = {}
        for f in schema:
            if f.kind in (STRING, BINARY):
                self.kinds[f.name] = "bytes"
            elif f.np_dtype.kind == "f":
                self.kinds[f.name] = "float"
            else:
                self.kinds[f.name] = "int64"
        self._layouts: dict[int, _Layout] = {}

    # -- bytes ------------------------------------------------------------------------------

    def _blocks(self) -> Iterator[bytes]:
        try:
            f = open(self.path, "rb", buffering=0)  # noqa: SIM115 - closed below
        except OSError as e:
            raise DatasetError(f"{self.path}: cannot open ({e})", hint="the dataset is damaged") from None
        with f:
            if not self.gzip:
                while blk := f.read(BLOCK):
                    yield blk
                return
            d = zlib.decompressobj(31)
            while True:
                raw = f.read(BLOCK // 4)
                if not raw:
                    break
                while raw:
                    try:
                        out = d.decompress(raw, BLOCK)
                    except zlib.error as e:
                        raise DatasetError(f"{self.path}: corrupt gzip stream ({e})", hint="re-create it") from None
                    if out:
                        yield out
                    if d.eof:  # another gzip member may follow
                        raw = d.unused_data
                        d = zlib.decompressobj(31)
                    else:
                        raw = d.unconsumed_tail
            if not d.eof and (d.unconsumed_tail or d.unused_data or d.flush()):
                raise DatasetError(f"{self.path}: truncated gzip stream", hint="the file is cut short; re-create it")

    def _runs(self, start: int, stop: int) -> Iterator[tuple[str, object]]:
        """("fixed", 2-D uint8 payloads of equal-length records) or ("one", payload bytes), for
        records ``[start, stop)``; records before ``start`` are skipped (framing checked only)."""
        import crc32c

        crc = crc32c.crc32c
        buf = b""
        pos = 0
        index = 0  # record index at ``pos``
        offset = 0  # (decompressed) file offset of ``buf[0]``
        blocks = self._blocks()
        eof = False
        need = 12
        while index < stop:
            if len(buf) - pos < need:
                blk = None if eof else next(blocks, None)
                if blk is None:
                    if len(buf) > pos:
                        raise DatasetError(
                            f"{self.path}: record {index + 1} at byte {offset + pos} is cut short",
                            hint="the file is truncated; re-create it",
                        )
                    break
                offset += pos
                buf = buf[pos:] + blk
                pos = 0
                continue
            L = int.from_bytes(buf[pos : pos + 8], "little")
            if _mask(crc(buf[pos : pos + 8])) != int.from_bytes(buf[pos + 8 : pos + 12], "little"):
                raise DatasetError(
                    f"{self.path}: record {index + 1} at byte {offset + pos}: length CRC mismatch (file is corrupt)",
                    hint="re-create it",
                )
            if L > MAX_RECORD:
                raise DatasetError(
                    f"{self.path}: record {index + 1} at byte {offset + pos}: implausible length {L} (file is corrupt)",
                    hint="re-create it",
                )
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
                        raise DatasetError(
                            f"{self.path}: record {index + int(wrong[0]) + 1}: length CRC mismatch (file is corrupt)",
                            hint="re-create it",
                        )
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
                if _mask(crc(data)) != int.from_bytes(buf[pos + 12 + L : pos + S], "little"):
                    raise DatasetError(
                        f"{self.path}: record {index + 1} at byte {offset + pos}: data CRC mismatch (file is corrupt)",
                        hint="re-create it",
                    )
                yield "one", data
            pos += S
            index += 1
        if index < min(stop, self.rows):
            raise DatasetError(
                f"{self.path}: holds {index} records, the manifest says {self.rows}",
                hint="the file is cut short; re-create it",
            )

    def _check_crcs(self, buf, pos: int, arr: np.ndarray, L: int, S: int, index: int, crc) -> None:
        mv = memoryview(buf)
        n = len(arr)
        raw = np.fromiter((crc(mv[pos + i * S + 12 : pos + i * S + 12 + L]) for i in range(n)), np.uint64, count=n)
        want = np.ascontiguousarray(arr[:, S - 4 :]).view("<u4").ravel()
        bad = np.flatnonzero(_mask_np(raw) != want)
        if bad.size:
            raise DatasetError(
                f"{self.path}: record {index + int(bad[0]) + 1}: data CRC mismatch (file is corrupt)",
                hint="re-create it",
            )

    # -- decoding ---------------------------------------------------------------------------

    def chunks(self, start: int, stop: int, chunk_rows: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        pending: list[bytes] = []
        for kind, run in self._runs(start, stop):
            if kind == "one":
                pending.append(run)
                if len(pending) >= chunk_rows:
                    yield self._decode_slow(pending)
                    pending = []
                continue
            if pending:
                yield self._decode_slow(pending)
                pending = []
            for a in range(0, len(run), chunk_rows):
                yield self._decode_fixed(run[a : a + chunk_rows])
        if pending:
            yield self._decode_slow(pending)

    def _layout_for(self, recs: np.ndarray) -> _Layout | None:
        """The layout every record of ``recs`` follows, or None (then records are parsed one by one)."""
        n, L = recs.shape
        if not all(f.kind == FIXED for f in self.schema):
            return None
        for attempt in (0, 1):
            layout = self._layouts.get(L)
            if layout is None or attempt:
                layout = _parse_layout(recs[0].tobytes(), self.kinds)
                if layout is None:
                    return None
                self._layouts[L] = layout
            ref = layout.ref
            if all(np.array_equal(recs[:, a:b], np.broadcast_to(ref[a:b], (n, b - a))) for a, b in layout.segments):
                return layout
        return None

    def _decode_fixed(self, recs: np.ndarray) -> Batch:
        n = len(recs)
        layout = self._layout_for(recs)
        if layout is None:
            return self._decode_slow([r.tobytes() for r in recs])
        cols = {}
        for name, kind, off, nbytes, count, width in layout.features:
            f = self.schema[name]
            if count != f.row_size:
                raise DatasetError(
                    f"{self.path}: feature '{name}' has {count} values per record, the schema says {f.row_size}",
                    hint="the dataset is damaged; re-create it",
                )
            block = recs[:, off : off + nbytes]
            if kind == "float":
                vals = np.ascontiguousarray(block).view("<f4").reshape((n, *f.shape))
            else:
                v = block.reshape(n, count, width)
                if (width > 1 and not (v[:, :, :-1] >= 0x80).all()) or (v[:, :, -1] >= 0x80).any():
                    return self._decode_slow([r.tobytes() for r in recs])
                acc = np.zeros((n, count), dtype=np.uint64)
                for j in range(width):
                    acc |= (v[:, :, j] & 0x7F).astype(np.uint64) << np.uint64(7 * j)
                vals = acc.view(np.int64).reshape((n, *f.shape))
            cols[name] = vals
        return Batch({f.name: cols[f.name] for f in self.schema}, n)

    def _decode_slow(self, records: list[bytes]) -> Batch:
        from ..formats.tfexample import parse_example

        n = len(records)
        per: dict[str, list] = {f.name: [] for f in self.schema}
        for i, rec in enumerate(records):
            try:
                ex = parse_example(rec)
            except Exception as e:  # noqa: BLE001 - InputError from the decoder
                raise DatasetError(f"{self.path}: record {i + 1} of a run: {e}", hint="the record is corrupt") from None
            for f in self.schema:
                got = ex.get(f.name)
                if got is None:
                    raise DatasetError(
                        f"{self.path}: a record has no feature '{f.name}'", hint="the dataset is damaged"
                    )
                per[f.name].append(got[1])
        cols = {}
        for f in self.schema:
            vals = per[f.name]
            if f.kind == FIXED:
                dt = np.float32 if self.kinds[f.name] == "float" else np.int64
                arr = np.asarray(vals, dtype=dt)
                if arr.size != n * f.row_size:
                    raise DatasetError(
                        f"{self.path}: feature '{f.name}' does not have {f.row_size} values per record",
                        hint="the dataset is damaged",
                    )
                cols[f.name] = arr.reshape((n, *f.shape))
            else:
                out = np.empty(n, dtype=object)
                if f.kind == STRING:
                    out[:] = [v[0].decode("utf-8") if v else "" for v in vals]
                elif f.kind == BINARY:
                    out[:] = [v[0] if v else b"" for v in vals]
                else:
                    dt = np.float32 if self.kinds[f.name] == "float" else np.int64
                    out[:] = [np.asarray(v, dtype=dt) for v in vals]
                cols[f.name] = out
        return Batch(cols, n)


def record_count(path: str, compression: str | None = None) -> int:
    """Records in a TFRecord file (framing only), for tests and checks."""
    r = TfrecordReader(0, Schema(()), path, compression)
    n = 0
    for kind, run in r._runs(0, 1 << 62):
        n += 1 if kind == "one" else len(run)
    return n
