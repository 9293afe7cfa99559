"""NPY input: any dtype NumPy stores without pickles, any rank, C or Fortran order, either byte order.
Structured dtypes (record arrays) are refused: save each field as its own .npy file.

The header is parsed by us (never ``allow_pickle``) and its claimed shape is checked against the
file's size before anything is allocated. Axis 0 is the record axis; several .npy inputs of equal
length become the columns of one dataset, named after their file stems.
"""

from __future__ import annotations

import ast
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..schema import FIXED, UNITS, Batch, Field, Logical, Schema, field_for_array
from .base import Part, Reader, ReadOptions
from .spec import InputSpec
from .streams import open_stream

MAGIC = b"\x93NUMPY"
MAX_HEADER = 1 << 16


@dataclass
class NpyHeader:
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    offset: int  # bytes before the data

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def data_bytes(self) -> int:
        n = self.dtype.itemsize
        for s in self.shape:
            n *= s
        return n


def read_header(f, name: str) -> NpyHeader:
    """Parse and validate an NPY header from a binary stream positioned at its start."""
    head = f.read(8)
    if not head:
        raise InputError(where=name, message="empty input (0 bytes, not a .npy file)", hint="check the file")
    if len(head) < 8 or not head.startswith(MAGIC):
        raise InputError(
            where=name, message="not a .npy file (bad magic bytes)", hint="check the file or pass --input-format"
        )
    major, minor = head[6], head[7]
    if major == 1:
        raw = f.read(2)
        if len(raw) < 2:
            raise InputError(where=name, message="truncated .npy header", hint="re-create the file")
        hlen = struct.unpack("<H", raw)[0]
        pre = 10
    elif major in (2, 3):
        raw = f.read(4)
        if len(raw) < 4:
            raise InputError(where=name, message="truncated .npy header", hint="re-create the file")
        hlen = struct.unpack("<I", raw)[0]
        pre = 12
    else:
        raise InputError(where=name, message=f"unsupported .npy version {major}.{minor}", hint="re-save it with numpy")
    if hlen > MAX_HEADER:
        raise InputError(
            where=name,
            message=f".npy header claims {hlen} bytes (over {MAX_HEADER})",
            hint="the file is corrupt or hostile",
        )
    text = f.read(hlen)
    if len(text) < hlen:
        raise InputError(where=name, message="truncated .npy header", hint="re-create the file")
    try:
        d = ast.literal_eval(text.decode("utf-8" if major == 3 else "latin1"))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        raise InputError(where=name, message="malformed .npy header", hint="re-create the file") from None
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise InputError(where=name, message="malformed .npy header (keys)", hint="re-create the file")
    shape = d["shape"]
    if (
        not isinstance(shape, tuple)
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
        or not isinstance(d["fortran_order"], bool)
    ):
        raise InputError(where=name, message="malformed .npy header (shape or order)", hint="re-create the file")
    try:
        dtype = np.lib.format.descr_to_dtype(d["descr"])
    except (ValueError, TypeError, SyntaxError, RecursionError):  # numpy parses some descrs with literal_eval
        raise InputError(
            where=name, message=f".npy header has an invalid dtype {d['descr']!r}", hint="re-create the file"
        ) from None
    if dtype.hasobject:
        raise InputError(
            where=name,
            message=f"holds Python objects (dtype {dtype}); refusing to unpickle",
            hint="save it with a numeric or fixed-width string dtype",
        )
    if dtype.names is not None:
        raise InputError(
            where=name,
            message=f"holds a structured dtype (fields {', '.join(dtype.names)}), which is not supported",
            hint="save each field as its own .npy file (several .npy inputs become the columns of one dataset)",
        )
    if dtype.itemsize == 0:
        raise InputError(where=name, message=f"dtype {dtype} has no size", hint="save it with a sized dtype")
    if dtype.kind == "c":
        raise InputError(
            where=name,
            message=f"holds complex numbers ({dtype}), which no output format holds",
            hint="save the real and imaginary parts as two .npy files (a.real, a.imag)",
        )
    if dtype.kind in "mM":
        unit, count = np.datetime_data(dtype)
        ok = count == 1 and (unit in UNITS or (dtype.kind == "M" and unit == "D"))
        if not ok or len(shape) > 1:
            kind = "datetime64" if dtype.kind == "M" else "timedelta64"
            raise InputError(
                where=name,
                message=f"holds {dtype} {'rows of shape ' + str(tuple(shape[1:])) if ok else 'values'}, which the "
                f"formats' times do not hold (one {kind} per row, in s, ms, us or ns"
                f"{', or days' if dtype.kind == 'M' else ''})",
                hint=f"save it as a 1-d array in one of those units (a.astype('{kind}[s]'))",
            )
    if not shape:
        raise InputError(
            where=name, message="a 0-d array has no record axis", hint="save it with at least one dimension"
        )
    if dtype.itemsize * math.prod(s for s in shape if s) > np.iinfo(np.intp).max:  # (NumPy's own limit)
        axis = max(range(len(shape)), key=lambda i: shape[i])
        raise InputError(
            where=name,
            message=f".npy header declares shape {shape} of {dtype}: axis {axis} ({shape[axis]}) is beyond what "
            "NumPy can address",
            hint="the file is corrupt or hostile; re-create it",
        )
    return NpyHeader(dtype, shape, d["fortran_order"], pre + hlen)


def check_claimed_rows(source: str, arrays: list[tuple[str, NpyHeader]], size: int) -> None:
    """Refuse what headers of arrays of one length (``arrays``: where each is, its header; all of
    them ``source``) may claim at no cost, before any writer sees it. No rows: an empty input, whatever the shape of its
    rows (``(0, 2**60)`` of uint8 would otherwise reach the writers' chunk shapes). Rows that hold
    no bytes (an axis after the first of length 0) when no array's rows hold any: a header may
    declare 2**60 of them in 128 bytes, and every writer spends time (TFRecord: a record) on each,
    so they are read at most one per byte of the input (``size``), which bounds the work by the
    input's size as for any other input; more are refused."""
    name, h = arrays[0]
    if h.rows == 0:
        raise InputError(f"{source}: empty input (no records)", hint="check the file")
    if any(a.data_bytes for _, a in arrays) or h.rows <= size:
        return
    axis = next(i for i, n in enumerate(h.shape) if i and not n)
    raise InputError(
        f"{name}: the header declares {h.rows} rows of shape {h.shape[1:]} (axis {axis} has "
        f"length 0: rows of no bytes), more rows than the input has bytes ({size})",
        hint="re-create the file; rows that hold no values are read up to one per byte of the input",
    )


def check_unicode(arr: np.ndarray, name: str, row0: int) -> None:
    """A fixed-width Unicode column (``<U``) holds UTF-32 code units; any above U+10FFFF or a
    surrogate is not a character, and no writer can encode it: refuse it, naming the row."""
    if arr.dtype.kind != "U" or not arr.size:
        return
    cp = np.ascontiguousarray(arr).view(np.uint32).reshape(len(arr), -1)
    bad = (cp > 0x10FFFF) | ((cp >= 0xD800) & (cp <= 0xDFFF))
    rows = np.flatnonzero(bad.any(axis=1))
    if rows.size:
        r = int(rows[0])
        code = int(cp[r][bad[r]][0])
        raise InputError(
            f"{name}, row {row0 + r + 1}: holds 0x{code:X}, which is not a Unicode character",
            hint="re-create the file with valid strings",
        )


def native(arr: np.ndarray) -> np.ndarray:
    """C-contiguous, native byte order (fields of structured dtypes included); datetime64 and
    timedelta64 as their int64 counts (what :func:`array_field` says the column holds)."""
    dt = arr.dtype
    if dt.byteorder not in ("=", "|") or (dt.fields and not dt.isnative):
        arr = arr.astype(dt.newbyteorder("="))
    arr = np.ascontiguousarray(arr)
    return arr.view(np.int64) if arr.dtype.kind in "mM" else arr


def array_field(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> Field:
    """The field of an array's column (``dtype`` native, ``shape`` per row): datetime64 as a
    timestamp (days: a date), timedelta64 as a duration, each int64 counts of its unit with NaT
    missing (:class:`~..schema.Logical`), which Parquet keeps as Arrow's types and the other
    formats as the counts, the manifest saying what they are."""
    if dtype.kind in "mM":
        unit = np.datetime_data(dtype)[0]
        kind = "duration" if dtype.kind == "m" else ("date" if unit == "D" else "timestamp")
        return Field(name, FIXED, np.dtype(np.int64).str, (), Logical(kind, unit))
    return field_for_array(name, np.empty((0, *shape), dtype=dtype))


class RemoteRows:
    """Rows of a C-order array in an object, read with one ranged GET per slice (what
    ``np.memmap`` gives a local file)."""

    def __init__(self, uri: str, h: NpyHeader) -> None:
        self.uri = uri
        self.h = h
        self.row_bytes = h.dtype.itemsize * int(np.prod(h.shape[1:], dtype=np.int64))

    def __getitem__(self, s: slice) -> np.ndarray:
        from ..storage.rangefile import read_range

        start, stop = max(0, s.start or 0), min(self.h.rows, self.h.rows if s.stop is None else s.stop)
        n = max(0, stop - start)
        off = self.h.offset + start * self.row_bytes
        data = read_range(self.uri, off, off + n * self.row_bytes) if n else b""
        return np.frombuffer(data, dtype=self.h.dtype).reshape((n, *self.h.shape[1:]))


class NpyReader(Reader):
    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        super().__init__(specs, options)
        self.headers: list[NpyHeader] = []
        names = set()
        for spec in specs:
            with open_stream(spec, max_ratio=options.max_ratio) if not spec.is_stdin else _nullctx() as f:
                if f is None:
                    raise InputError(
                        "<stdin>: .npy from stdin must be read once; not supported", hint="save it to a file"
                    )
                h = read_header(f, spec.name)
            if spec.compression is None:
                expect = h.offset + h.data_bytes
                if spec.size is not None and spec.size < expect:
                    raise InputError(
                        f"{spec.name}: truncated: header declares shape {h.shape} {h.dtype} "
                        f"({h.data_bytes} data bytes) but the file holds {spec.size - h.offset}",
                        hint="re-create the file",
                    )
                if spec.size is not None and spec.size > expect:
                    raise InputError(
                        f"{spec.name}: {spec.size - expect} bytes of trailing garbage after the declared data",
                        hint="re-create the file",
                    )
            elif h.fortran_order and h.shape[0] > 1 and len(h.shape) > 1:
                raise InputError(
                    f"{spec.name}: a Fortran-order array inside a compressed file cannot be streamed by rows",
                    hint="decompress it first",
                )
            self.headers.append(h)
            stem = spec.stem
            if stem in names:
                raise InputError(
                    f"{spec.name}: two inputs named '{stem}'", hint="rename one; columns are named after file stems"
                )
            names.add(stem)
        rows = {h.rows for h in self.headers}
        if len(rows) > 1:
            detail = ", ".join(f"{s.name}: {h.rows}" for s, h in zip(specs, self.headers, strict=True))
            raise InputError(
                f"inputs have different numbers of rows ({detail})", hint="give .npy files of equal length"
            )
        arrays = [(s.name, h) for s, h in zip(specs, self.headers, strict=True)]
        check_claimed_rows(", ".join(s.name for s in specs), arrays, max(s.size or 0 for s in specs))
        self.rows = self.headers[0].rows
        fields = []
        for spec, h in zip(specs, self.headers, strict=True):
            dt = h.dtype.newbyteorder("=") if not h.dtype.isnative else h.dtype
            fields.append(array_field(spec.stem, dt, h.shape[1:]))
        self.schema = Schema(tuple(fields))
        if self.rows and self.row_bytes > self.options.batch_bytes:  # a batch holds one row at least
            need = -(-self.row_bytes * 16 // (1 << 20))
            raise InputError(
                f"{', '.join(s.name for s in specs)}: a row holds {self.row_bytes} bytes, more than --max-memory "
                "allows (a row must fit in 1/16 of it)",
                hint=f"raise --max-memory to {need}MiB or more",
            )
        self._done = 0
        self._streams: list = []

    def progress_done(self) -> int:
        if self._streams:
            return sum(s.raw_count() for s in self._streams)
        return self._done

    @property
    def row_bytes(self) -> int:
        return sum(max(1, f.np_dtype.itemsize * f.row_size) for f in self.schema)

    @property
    def mapped(self) -> bool:
        return all(
            s.compression is None and not s.is_stdin and not ("://" in s.path and h.fortran_order)
            for s, h in zip(self.specs, self.headers, strict=True)
        )

    def source_of(self, column: str) -> str:
        for s in self.specs:  # several .npy inputs are the columns, named after their stems
            if len(self.specs) > 1 and s.stem == column:
                return s.name
        return super().source_of(column)

    @property
    def random_rows(self) -> bool:
        return self.mapped

    def row_range(self, start: int, stop: int, step_bytes: int, mark: object = None) -> Iterator[Batch]:
        """Rows ``[start, stop)`` read straight from the memory-mapped inputs, ``step_bytes`` at a time."""
        return self._mapped(max(1, step_bytes // max(1, self.row_bytes)), start, stop)

    def batches(self) -> Iterator[Batch]:
        step = max(1, self.options.batch_bytes // self.row_bytes)
        if self.mapped:
            yield from self._mapped(step)
        else:
            yield from self._streamed(step)

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        if not self.mapped:
            return [Part(0, 0)]
        per = max(1, target_bytes // self.row_bytes)
        return [Part(i, 0, rows=(a, min(a + per, self.rows))) for i, a in enumerate(range(0, self.rows, per))] or [
            Part(0, 0, rows=(0, 0))
        ]

    def part_batches(self, part: Part) -> Iterator[Batch]:
        step = max(1, self.options.batch_bytes // self.row_bytes)
        if part.rows is None:
            yield from self._streamed(step)
        else:
            yield from self._mapped(step, *part.rows)

    def _mapped(self, step: int, first: int = 0, last: int | None = None) -> Iterator[Batch]:
        arrays = []
        for spec, h in zip(self.specs, self.headers, strict=True):
            order = "F" if h.fortran_order else "C"
            if h.data_bytes == 0:
                arrays.append(np.empty(h.shape, dtype=h.dtype))
            elif "://" in spec.path:
                arrays.append(RemoteRows(spec.path, h))
            else:
                arrays.append(
                    np.memmap(spec.path, dtype=h.dtype, mode="r", offset=h.offset, shape=h.shape, order=order)
                )
        per_row = [s.size / max(1, h.rows) if s.size else 0 for s, h in zip(self.specs, self.headers, strict=True)]
        last = self.rows if last is None else last
        for start in range(first, last, step):
            stop = min(start + step, last)
            cols = {f.name: native(a[start:stop]) for f, a in zip(self.schema, arrays, strict=True)}
            for spec, c in zip(self.specs, cols.values(), strict=True):
                check_unicode(c, spec.name, start)
            self._done = int(sum(p * (stop - first) for p in per_row))  # of these rows (a part's, in a shard unit)
            yield Batch(cols, stop - start)
        whole = first == 0 and last == self.rows
        self._done = (self.progress_total() or 0) if whole else int(sum(p * (last - first) for p in per_row))

    def _streamed(self, step: int) -> Iterator[Batch]:
        streams = []
        try:
            for spec in self.specs:
                s = open_stream(spec, max_ratio=self.options.max_ratio)
                read_header(s, spec.name)
                streams.append(s)
            self._streams = streams
            for start in range(0, self.rows or 0, step):
                n = min(step, self.rows - start)
                cols = {}
                for f, s, spec, h in zip(self.schema, streams, self.specs, self.headers, strict=True):
                    want = n * h.dtype.itemsize * f.row_size
                    buf = bytearray(want)
                    got = s.readinto(buf)
                    while got < want:
                        more = s.readinto(memoryview(buf)[got:])
                        if not more:
                            raise InputError(
                                f"{spec.name}: truncated: data ends at row {start + got // max(1, h.dtype.itemsize * f.row_size) + 1} "
                                f"of the {h.rows} the header declares",
                                hint="re-create the file",
                            )
                        got += more
                    arr = np.frombuffer(buf, dtype=h.dtype).reshape((n, *h.shape[1:]))
                    cols[f.name] = native(arr)
                    check_unicode(cols[f.name], spec.name, start)
                yield Batch(cols, n)
            for s, spec in zip(streams, self.specs, strict=True):
                if s.read(1):
                    raise InputError(
                        f"{spec.name}: trailing garbage after the declared data", hint="re-create the file"
                    )
        finally:
            self._done = sum(s.raw_count() for s in streams)
            self._streams = []
            for s in streams:
                s.close()


class _nullctx:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False
