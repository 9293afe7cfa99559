"""Parquet input, streamed by row group with bounded batches.

A file is opened by its footer; row groups are its blocks: the parts of parallel workers (see
:class:`~.columnar.ColumnarReader`) and the unit read with ``ParquetFile.iter_batches(row_groups=)``.
The rows of a batch come from the memory budget and the row group's decoded size, estimated from
its metadata (the uncompressed size of the columns read, the width of fixed-width values) and,
for dictionary-encoded strings (whose pages say little of the strings they stand for: 5,048
indices into a dictionary of ``"a"`` and one 512 KiB string are a few hundred bytes on disk and
1.5 GiB decoded), from the dictionary itself, read as one without decoding any row: the mean of
its values' lengths for the estimate, the longest for a bound. pyarrow decodes rows in steps that
the longest value cannot make larger than a batch, and the steps are gathered into batches of the
estimated size; batches that hold dictionaries (a schema that keeps them) are cut by each row's
decoded bytes (:mod:`.decoded`). Column chunks are read through a bounded buffer
(``buffer_size``), never whole; data page checksums (CRC32) are verified wherever the writer
stored them; INT96 timestamps are read as microseconds (nanoseconds overflow for dates Spark
writes). ``--columns`` reads only the column chunks of those columns.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import InputError
from .columnar import DAMAGED, Block, ColumnarReader, SourceFile, guarded, reading
from .decoded import ROW_SHARE, bounded, value_lengths, variable
from .parquetpages import BadPage, pages

FIXED_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 8, "FLOAT": 4, "DOUBLE": 8}
MARGIN = 1.25  # conversion copies (nulls filled, ints to float64) beside the decoded batch


class ParquetReader(ColumnarReader):
    title = "Parquet"

    def _open(self, path: str, read_dictionary: list[str] | None = None):
        import pyarrow.parquet as pq

        ncols = max(1, len(getattr(self, "read_columns", None) or []) or 8)
        buffer = int(min(4 << 20, max(64 << 10, self.options.batch_bytes // (8 * ncols))))
        from ..storage import is_remote

        source = path
        if is_remote(path):  # ranged reads through a Python file (the footer, then each row group)
            import pyarrow as pa

            from ..storage import open_input

            source = pa.PythonFile(open_input(path, buffering=0, readahead=buffer), mode="r")
        return pq.ParquetFile(
            source,
            page_checksum_verification=True,
            pre_buffer=False,
            buffer_size=buffer,
            coerce_int96_timestamp_unit="us",
            read_dictionary=read_dictionary,
        )

    def open_files(self) -> list[SourceFile]:
        self._pages_checked: set[tuple[str, int]] = set()
        files = []
        for i, spec in enumerate(self.specs):
            if spec.size == 0:
                raise InputError(f"{spec.name}: empty input (0 bytes, not a Parquet file)", hint="check the file")
            with reading(spec.name):
                pf = self._open(spec.path)
                md = pf.metadata
                schema = pf.schema_arrow
                blocks, nulls, codecs = [], set(), set()
                for g in range(md.num_row_groups):
                    rg = md.row_group(g)
                    size = 0
                    for j in range(rg.num_columns):
                        col = rg.column(j)
                        size += col.total_compressed_size
                        codecs.add(col.compression)
                        st = col.statistics
                        if st is not None and st.has_null_count and st.null_count:
                            nulls.add(col.path_in_schema)
                    blocks.append(Block(rg.num_rows, size, rg.total_byte_size))
            info = {"rows": md.num_rows, "row_groups": md.num_row_groups}
            inside = sorted(c.lower() for c in codecs if c != "UNCOMPRESSED")
            if inside:  # the pages' codecs (inspect: a snappy file is not "not compressed")
                info["compression_inside"] = "+".join(inside)
            if md.created_by:
                info["created_by"] = md.created_by
            files.append(SourceFile(i, spec.path, spec.name, schema, info, blocks, nulls))
        self.rows = sum(f.rows for f in files)  # exact: a row group that holds fewer is an error
        return files

    def load_blocks(self, mapper=None) -> None:
        """Block sizes in memory of the columns read (parts gather row groups by them)."""
        for f in self.files:
            with reading(f.name):
                md = self._open(f.path).metadata
                for g, b in enumerate(f.blocks):
                    b.memory = sum(self._chunk_bytes(u, w, b.rows) for _p, u, w, _d in self._chunks(md.row_group(g)))

    def memory_bytes(self) -> int | None:
        """The decoded size of the columns read; dictionary-encoded strings measured by the mean
        length of each file's first row group's dictionary values (see :meth:`_sizes`)."""
        total = 0
        for f in self.files:
            with reading(f.name):
                pf = self._open(f.path)
            rows = [b.rows for b in f.blocks]
            first = next((g for g, n in enumerate(rows) if n), None)
            if first is not None:
                total += int(self._sizes(pf, f, first)[0] / rows[first] * sum(rows))
        return total

    @staticmethod
    def _chunk_bytes(size: int, width: int, rows: int) -> int:
        return max(size, width * rows) + rows // 8 + 1 if width else size + 8 * rows

    # -- reading ------------------------------------------------------------------------------

    def _projection(self) -> list[str] | None:
        """The Parquet column paths to read (prefixes of leaf paths), or None for all."""
        if len(self.read_columns) == len(self.columns):
            return None
        out: list[str] = []
        for c in self.read_columns:
            p = ".".join(c.path)
            if p not in out:
                out.append(p)
        return out

    def _chunks(self, rg) -> Iterator[tuple[str, int, int, bool]]:
        """(path, uncompressed bytes, bytes per value when fixed (else 0), dictionary-encoded
        strings) of the column chunks read in row group ``rg``."""
        wanted = self._projection()
        strings = {".".join(c.path) for c in self.read_columns if c.how in ("string", "binary")}
        for j in range(rg.num_columns):
            col = rg.column(j)
            path = col.path_in_schema
            if wanted is not None and not any(path == w or path.startswith(w + ".") for w in wanted):
                continue
            kind = col.physical_type
            width = FIXED_WIDTH.get(kind, 0)
            dictionary = kind == "BYTE_ARRAY" and path in strings and any("DICTIONARY" in e for e in col.encodings)
            yield path, col.total_uncompressed_size, width, dictionary

    def _sizes(self, pf, f: SourceFile, g: int) -> tuple[int, int]:
        """(estimated decoded bytes of the columns read in row group ``g``, an upper bound of
        one row's): from its metadata, and for dictionary-encoded strings from the lengths of
        their dictionary's values (the mean for the estimate, the longest for the bound)."""
        rg = pf.metadata.row_group(g)
        self._check_pages(f, g, rg)
        rows = max(1, rg.num_rows)
        est = widest = 0
        probe: list[str] = []
        for path, size, width, dictionary in self._chunks(rg):
            chunk = self._chunk_bytes(size, width, rows)
            est += chunk
            if dictionary:
                probe.append(path)
            else:
                widest += -(-chunk // rows)
        if probe and rg.num_rows:
            for mean, longest in self._dictionaries(f, g, probe):
                est += int(mean * rows)
                widest += longest + 8
        return est, widest

    def _check_pages(self, f: SourceFile, g: int, rg) -> None:
        """Refuse a page of the columns read in row group ``g`` that decodes to more than a quarter
        of the memory budget, before pyarrow decompresses it (a page is decompressed whole). The
        page headers of a local file are all read (a few bytes each); on an object store only
        those of chunks whose footer says they are that large (each header is a request)."""
        from ..storage import is_remote, open_input

        key = (f.path, g)
        if key in self._pages_checked:
            return
        limit = ROW_SHARE * self.options.batch_bytes
        remote = is_remote(f.path)
        wanted = {path for path, *_ in self._chunks(rg)}
        with open_input(f.path, buffering=0, readahead=64 << 10) as fh:

            def read(offset: int, n: int) -> bytes:
                fh.seek(offset)
                return fh.read(n)

            for j in range(rg.num_columns):
                col = rg.column(j)
                if col.path_in_schema not in wanted or (remote and col.total_uncompressed_size <= limit):
                    continue
                start = col.dictionary_page_offset if col.has_dictionary_page and col.dictionary_page_offset else None
                start = min(x for x in (start, col.data_page_offset) if x is not None)
                try:
                    for _offset, kind, size in pages(read, start, col.total_compressed_size):
                        if size > limit:
                            what = "its dictionary" if kind == 2 else "a page"
                            raise InputError(
                                f"{f.name}, row group {g}, column '{col.path_in_schema}': {what} decodes to {size} "
                                f"bytes, more than a batch may take under this memory budget ({limit})",
                                hint=f"raise --max-memory (a page must fit in {ROW_SHARE}/16 of it), or re-write the "
                                "file with smaller pages (pyarrow: write_table(..., data_page_size=BYTES))",
                            )
                except BadPage:
                    continue  # pyarrow says what is wrong with it when it reads it
        self._pages_checked.add(key)

    def _dictionaries(self, f: SourceFile, g: int, paths: list[str]) -> list[tuple[float, int]]:
        """(mean, longest) length of the values of the dictionary of each column ``paths`` in row
        group ``g``: the first row read with the columns as dictionaries (their dictionary page
        and indices, no value decoded)."""
        import pyarrow as pa

        where = f"row group {g}"
        with reading(f.name, where):
            it = self._open(f.path, read_dictionary=paths).iter_batches(
                batch_size=1, row_groups=[g], columns=paths, use_threads=False
            )
        first = next(iter(guarded(it, f.name, where)), None)
        if first is None:
            return []
        out = []
        with reading(f.name, where):
            table = pa.Table.from_batches([first])
            while any(pa.types.is_struct(t) for t in table.schema.types):
                table = table.flatten()
            for col in table.columns:
                arr = col.chunk(0) if col.num_chunks else None
                if arr is None or not pa.types.is_dictionary(arr.type) or not variable(arr.dictionary.type):
                    continue
                lengths = value_lengths(arr.dictionary)
                if len(lengths):
                    out.append((float(lengths.mean()), int(lengths.max())))
        return out

    def _batch_rows(self, pf, f: SourceFile, g: int) -> tuple[int, int]:
        """(rows per batch, rows per decoding step) of row group ``g``: its estimated decoded bytes
        per row into the budget's batch; steps that even rows of the longest dictionary values
        cannot make larger than a batch."""
        rows = f.blocks[g].rows
        est, widest = self._sizes(pf, f, g)
        per_row = max(1.0, est * MARGIN / max(1, rows))
        n = max(1, min(rows, int(self.options.batch_bytes / per_row)))
        return n, max(1, min(n, int(self.options.batch_bytes / (max(1, widest) * MARGIN))))

    def read_file(self, f: SourceFile, blocks: tuple[int, int] | None, row0: int = 0) -> Iterator[tuple[object, int]]:
        import pyarrow as pa

        with reading(f.name):
            pf = self._open(f.path)
        b0, b1 = blocks or (0, len(f.blocks))
        columns = self._projection()
        # columns the file's Arrow schema keeps as dictionaries come out as indices: their rows are
        # decoded by the converter, slice by slice (see bounded), so pyarrow's steps need no bound
        kept = any(pa.types.is_dictionary(c.atype) for c in self.read_columns)
        row = row0
        for g in range(b0, b1):
            want = f.blocks[g].rows
            where = f"row group {g}"
            got = 0
            if want:
                n, step = self._batch_rows(pf, f, g)
                step = n if kept else step
                with reading(f.name, where):
                    it = pf.iter_batches(
                        batch_size=step, row_groups=[g], columns=columns, use_threads=self.options.threads
                    )
                for rb in _gathered(guarded(it, f.name, where), n, self.options.batch_bytes, f.name, where):
                    yield from bounded(rb, self.options.batch_bytes, f.name, where, row + got)
                    got += rb.num_rows
            if got != want:
                raise InputError(f"{f.name}, {where}: holds {got} rows, its metadata says {want}", hint=DAMAGED)
            row += got
            self._done += f.blocks[g].bytes


def _gathered(batches: Iterator, rows: int, limit: int, name: str, where: str) -> Iterator:
    """Record batches (decoding steps) gathered into batches of about ``rows`` rows and at most
    about ``limit`` bytes (a copy when there are several)."""
    import pyarrow as pa

    held: list = []
    n = size = 0
    for rb in batches:
        if held and (n + rb.num_rows > rows or size + rb.nbytes > limit):
            yield held[0] if len(held) == 1 else _concat(pa, held, name, where)
            held, n, size = [], 0, 0
        held.append(rb)
        n += rb.num_rows
        size += rb.nbytes
    if held:
        yield held[0] if len(held) == 1 else _concat(pa, held, name, where)


def _concat(pa, held: list, name: str, where: str):
    with reading(name, where):
        return pa.concat_batches(held)
