"""NPZ input (``np.savez``/``np.savez_compressed``): a zip of ``.npy`` members, each array a column
named after its member (``x.npy`` -> ``x``; ``arr_0`` for ``np.savez(a)``), axis 0 the record axis.

Every member's header is parsed by us (never ``allow_pickle``: object arrays are refused, as are
structured dtypes) and its claimed size checked against the member's size in the zip directory
before anything is allocated. Stored members (``np.savez``) are memory-mapped at their offset in the
zip, so they split into row ranges for workers; deflated ones (``np.savez_compressed``) are
streamed a batch of rows at a time through the zip's own decompressor, which never inflates past
the member's declared size, and are one part. A member that inflates more than ``--max-expansion``
times its compressed size is refused before it is read.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, OptionsError
from ..schema import Batch, Schema
from .base import Part, Reader, ReadOptions
from .npy import NpyHeader, array_field, check_claimed_rows, check_unicode, native, read_header
from .spec import InputSpec

LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # a zip member's local header (before its data)


@dataclass
class Member:
    spec: int  # the input it is in
    info: zipfile.ZipInfo
    header: NpyHeader
    column: str
    data_offset: int | None  # of its array data in the file, when stored (memory-mappable)

    @property
    def where(self) -> str:
        return self.info.filename


class NpzReader(Reader):
    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        super().__init__(specs, options)
        self.members: list[Member] = []
        for i, spec in enumerate(specs):
            self.members.extend(self._members(i, spec))
        names = [m.column for m in self.members]
        if options.columns:
            missing = [c for c in options.columns if c not in names]
            if missing:
                raise OptionsError(
                    f"--columns: no array '{missing[0]}' in {self._names()}", hint=f"arrays are {', '.join(names)}"
                )
            by_name = {m.column: m for m in self.members}
            self.members = [by_name[c] for c in dict.fromkeys(options.columns)]
        if not self.members:
            raise InputError(f"{self._names()}: holds no arrays", hint="check the file")
        rows = {m.header.rows for m in self.members}
        if len(rows) > 1:
            detail = ", ".join(f"{m.column}: {m.header.rows}" for m in self.members)
            raise InputError(
                f"{self._names()}: arrays have different numbers of rows ({detail})",
                hint="convert arrays of one length together (--columns a,b)",
            )
        # (the archive's size bounds rows of no bytes: each member's bytes are in it)
        arrays = [(f"{self.specs[m.spec].name}, member {m.info.filename}", m.header) for m in self.members]
        check_claimed_rows(self._names(), arrays, sum(s.size or 0 for s in specs))
        self.rows = rows.pop()
        fields = []
        for m in self.members:
            dt = m.header.dtype.newbyteorder("=") if not m.header.dtype.isnative else m.header.dtype
            fields.append(array_field(m.column, dt, m.header.shape[1:]))
        self.schema = Schema(tuple(fields))
        self._done = 0

    def _names(self) -> str:
        return ", ".join(s.name for s in self.specs)

    def _members(self, i: int, spec: InputSpec) -> list[Member]:
        if spec.is_stdin or spec.compression is not None or "://" in spec.path:
            raise InputError(
                f"{spec.name}: an .npz input must be a local, uncompressed file (a zip is read by its directory)",
                hint="copy or decompress it first",
            )
        try:
            zf = zipfile.ZipFile(spec.path)
        except (zipfile.BadZipFile, OSError) as e:
            raise InputError(f"{spec.name}: not a readable .npz (zip) file ({e})", hint="check the file") from None
        out: list[Member] = []
        seen: set[str] = set()
        with zf, open(spec.path, "rb") as raw:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                where = f"{spec.name}, member {info.filename}"
                if not info.filename.endswith(".npy"):
                    raise InputError(f"{where}: not a .npy array", hint="an .npz holds only .npy members")
                if info.flag_bits & 0x1:
                    raise InputError(f"{where}: encrypted", hint="decrypt the archive first")
                if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                    raise InputError(
                        f"{where}: compressed with zip method {info.compress_type}",
                        hint="save it with np.savez_compressed",
                    )
                ratio = self.options.max_ratio
                if ratio and info.file_size > (64 << 20) and info.file_size > ratio * max(1, info.compress_size):
                    raise InputError(
                        f"{where}: inflates more than {ratio:.0f}x its compressed size (decompression bomb?)",
                        hint="if the file is genuine, raise the limit with --max-expansion",
                    )
                try:
                    with zf.open(info) as f:
                        h = read_header(f, where)
                except (zipfile.BadZipFile, OSError, EOFError) as e:
                    raise InputError(f"{where}: cannot be read ({e})", hint="re-create the file") from None
                expect = h.offset + h.data_bytes
                if info.file_size != expect:
                    raise InputError(
                        f"{where}: the header declares shape {h.shape} {h.dtype} ({h.data_bytes} data bytes), "
                        f"the member holds {info.file_size - h.offset}",
                        hint="re-create the file",
                    )
                offset = None
                if info.compress_type == zipfile.ZIP_STORED:
                    raw.seek(info.header_offset)
                    lh = LOCAL_HEADER.unpack(raw.read(LOCAL_HEADER.size))
                    if lh[0] != b"PK\x03\x04":
                        raise InputError(f"{where}: damaged zip (bad local header)", hint="re-create the file")
                    offset = info.header_offset + LOCAL_HEADER.size + lh[9] + lh[10] + h.offset
                elif h.fortran_order and len(h.shape) > 1 and h.rows > 1:
                    raise InputError(
                        f"{where}: a Fortran-order array inside a compressed member cannot be streamed by rows",
                        hint="save it with np.savez (uncompressed) or in C order",
                    )
                column = info.filename[: -len(".npy")].replace("/", ".")
                if column in seen:
                    raise InputError(f"{where}: a second array named '{column}'", hint="rename one")
                seen.add(column)
                out.append(Member(i, info, h, column, offset))
        return out

    def input_details(self, i: int) -> dict:
        mine = [m for m in self.members if m.spec == i]
        out: dict = {"arrays": len(mine)}
        if any(m.data_offset is None for m in mine):
            out["compression_inside"] = "deflate"
        return out

    # -- reading ------------------------------------------------------------------------------

    @property
    def row_bytes(self) -> int:
        return sum(max(1, f.np_dtype.itemsize * f.row_size) for f in self.schema)

    @property
    def random_rows(self) -> bool:
        return all(m.data_offset is not None for m in self.members)

    def progress_done(self) -> int:
        return self._done

    def batches(self) -> Iterator[Batch]:
        step = max(1, self.options.batch_bytes // self.row_bytes)
        yield from self._mapped(step, 0, self.rows) if self.random_rows else self._streamed(step)

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        if not self.random_rows:
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

    def row_range(self, start: int, stop: int, step_bytes: int, mark: object = None) -> Iterator[Batch]:
        return self._mapped(max(1, step_bytes // self.row_bytes), start, stop)

    def _progress(self, rows: int) -> None:
        total = self.progress_total() or 0
        self._done = int(total * rows / max(1, self.rows))

    def _mapped(self, step: int, first: int, last: int) -> Iterator[Batch]:
        arrays = []
        for m in self.members:
            h = m.header
            if h.data_bytes == 0:
                arrays.append(np.empty(h.shape, dtype=h.dtype))
            else:
                order = "F" if h.fortran_order else "C"
                path = self.specs[m.spec].path
                arrays.append(
                    np.memmap(path, dtype=h.dtype, mode="r", offset=m.data_offset, shape=h.shape, order=order)
                )
        for start in range(first, last, step):
            stop = min(start + step, last)
            cols = {f.name: native(a[start:stop]) for f, a in zip(self.schema, arrays, strict=True)}
            for m, c in zip(self.members, cols.values(), strict=True):
                check_unicode(c, f"{self.specs[m.spec].name}, member {m.where}", start)
            self._progress(stop - first)
            yield Batch(cols, stop - start)

    def _streamed(self, step: int) -> Iterator[Batch]:
        files = [zipfile.ZipFile(s.path) for s in self.specs]
        streams = []
        try:
            for m in self.members:
                f = files[m.spec].open(m.info)
                read_header(f, m.where)
                streams.append(f)
            for start in range(0, self.rows, step):
                n = min(step, self.rows - start)
                cols = {}
                for fld, f, m in zip(self.schema, streams, self.members, strict=True):
                    h = m.header
                    where = f"{self.specs[m.spec].name}, member {m.where}"
                    buf = bytearray(n * h.dtype.itemsize * fld.row_size)
                    try:
                        got = f.readinto(buf)
                        while got < len(buf):
                            more = f.readinto(memoryview(buf)[got:])
                            if not more:
                                raise InputError(f"{where}: truncated at row {start + 1}", hint="re-create the file")
                            got += more
                    except (zipfile.BadZipFile, OSError, EOFError) as e:  # a CRC or inflate error
                        raise InputError(
                            f"{where}: cannot be read near row {start + 1} ({e})", hint="re-create the file"
                        ) from None
                    cols[fld.name] = native(np.frombuffer(buf, dtype=h.dtype).reshape((n, *h.shape[1:])))
                    check_unicode(cols[fld.name], where, start)
                self._progress(start + n)
                yield Batch(cols, n)
            for f, m in zip(streams, self.members, strict=True):
                try:
                    f.read(1)  # the end: the member's CRC is checked
                except (zipfile.BadZipFile, OSError, EOFError) as e:
                    where = f"{self.specs[m.spec].name}, member {m.where}"
                    raise InputError(f"{where}: damaged ({e})", hint="re-create the file") from None
        finally:
            for f in streams:
                f.close()
            for z in files:
                z.close()
