"""Plain text input: one record per line (LF or CRLF), UTF-8, as one string column ``text``."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import UTF8_HINT, InputError, invalid_utf8
from ..schema import STRING, Batch, Field, Schema, VarColumn
from .base import Part, Reader, ReadOptions
from .streams import open_range

BOM = b"\xef\xbb\xbf"


class TextReader(Reader):
    def __init__(self, specs, options: ReadOptions) -> None:
        super().__init__(specs, options)
        self.schema = Schema((Field("text", STRING, "|u1"),))
        self._done = 0
        self._stream = None
        self._base = 0

    def progress_done(self) -> int:
        return self._base + (self._stream.raw_count() if self._stream is not None else 0)

    def batches(self) -> Iterator[Batch]:
        total_rows = 0
        for spec in self.specs:
            for batch in self._stream_batches(spec, None, 0, True):
                total_rows += batch.num_rows
                yield batch
        if total_rows == 0:
            names = ", ".join(s.name for s in self.specs)
            raise InputError(f"{names}: empty input (no lines)", hint="check the file")

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        return self._byte_partitions(target_bytes, quoted=False, mapper=mapper)

    probe_specs = 1

    def part_batches(self, part: Part) -> Iterator[Batch]:
        for i in part.spec_range:
            spec = self.specs[i]
            stream = None if part.start is None else open_range(spec.path, part.start, part.end)
            yield from self._stream_batches(spec, stream, part.line0, part.start in (None, 0))

    def _stream_batches(self, spec, stream, line_no: int, strip_bom: bool) -> Iterator[Batch]:
        chunk_size = max(1 << 16, self.options.batch_bytes // 2)
        max_line = max(chunk_size * 2, 1 << 20)
        carry = b""
        first = strip_bom
        with self.open_spec(spec, stream) as stream:
            while True:
                data = stream.read(chunk_size)
                eof = not data
                if first:
                    first = False
                    if data.startswith(BOM):
                        data = data[3:]
                buf = carry + data if carry else data
                if eof:
                    if not buf:
                        break
                    if not buf.endswith(b"\n"):
                        buf += b"\n"
                    cut = len(buf)
                else:
                    cut = buf.rfind(b"\n") + 1
                    if cut == 0:
                        if len(buf) > max_line:
                            raise InputError(
                                f"{spec.name}, line {line_no + 1}: line longer than {max_line} bytes",
                                hint="raise --max-memory or split the line",
                            )
                        carry = buf
                        continue
                batch, n = self._lines(buf[:cut], spec.name, line_no)
                line_no += n
                carry = buf[cut:]
                yield batch
                if eof:
                    break
            self._base += stream.raw_count()
            self._stream = None

    def _lines(self, buf: bytes, name: str, line_no: int) -> tuple[Batch, int]:
        try:
            buf.decode("utf-8")
        except UnicodeDecodeError as e:
            if self.options.errors != "replace":
                line = line_no + buf.count(b"\n", 0, e.start) + 1
                col = e.start - (buf.rfind(b"\n", 0, e.start) + 1) + 1
                raise InputError(f"{name}, line {line}: {invalid_utf8(e, col)}", hint=UTF8_HINT) from None
            buf = buf.decode("utf-8", errors="replace").encode("utf-8")
        arr = np.frombuffer(buf, dtype=np.uint8)
        nl = np.flatnonzero(arr == 10)
        starts = np.empty(len(nl), dtype=np.int64)
        starts[0] = 0
        starts[1:] = nl[:-1] + 1
        ends = nl.astype(np.int64)
        cr = np.zeros(len(nl), dtype=bool)
        has = ends > starts
        cr[has] = arr[ends[has] - 1] == 13
        ends -= cr
        keep = np.ones(len(arr), dtype=bool)
        keep[nl] = False
        keep[nl[cr] - 1] = False
        values = arr[keep]
        offsets = np.zeros(len(nl) + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        return Batch({"text": VarColumn(values, offsets)}, len(nl)), len(nl)
