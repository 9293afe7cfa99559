"""Parquet input, streamed by row group with bounded batches.

A file is opened by its footer; row groups are its blocks: the parts of parallel workers (see
:class:`~.columnar.ColumnarReader`) and the unit read with ``ParquetFile.iter_batches(row_groups=)``.
The rows of a batch come from the memory budget and the row group's decoded size, estimated from
its metadata (the uncompressed size of the columns read, the width of fixed-width values) and,
for dictionary-encoded strings (whose uncompressed pages say little of the strings they stand
for), from reading the first rows of the row group: a row group larger than the budget is read
in several batches. Column chunks are read through a bounded buffer (``buffer_size``), never
whole; data page checksums (CRC32) are verified wherever the writer stored them; INT96 timestamps
are read as microseconds (nanoseconds overflow for dates Spark writes). ``--columns`` reads only
the column chunks of those columns.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import InputError
from .columnar import DAMAGED, Block, ColumnarReader, SourceFile, guarded, reading

PROBE_ROWS = 1024
FIXED_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 8, "FLOAT": 4, "DOUBLE": 8}
MARGIN = 1.25  # conversion copies (nulls filled, ints to float64) beside the decoded batch


class ParquetReader(ColumnarReader):
    title = "Parquet"

    def _open(self, path: str):
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
        )

    def open_files(self) -> list[SourceFile]:
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
        """The decoded size of the columns read; dictionary-encoded strings measured on the first
        rows of each file's first row group (see :meth:`_estimate`)."""
        total = 0
        for f in self.files:
            with reading(f.name):
                pf = self._open(f.path)
            rows = [b.rows for b in f.blocks]
            first = next((g for g, n in enumerate(rows) if n), None)
            if first is not None:
                total += int(self._estimate(pf, f, first) / rows[first] * sum(rows))
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
        for j in range(rg.num_columns):
            col = rg.column(j)
            path = col.path_in_schema
            if wanted is not None and not any(path == w or path.startswith(w + ".") for w in wanted):
                continue
            kind = col.physical_type
            width = FIXED_WIDTH.get(kind, 0)
            dictionary = kind == "BYTE_ARRAY" and any("DICTIONARY" in e for e in col.encodings)
            yield path, col.total_uncompressed_size, width, dictionary

    def _estimate(self, pf, f: SourceFile, g: int) -> int:
        """Decoded bytes of the columns read in row group ``g``: from its metadata, and for
        dictionary-encoded strings from decoding its first rows."""
        rg = pf.metadata.row_group(g)
        rows = rg.num_rows
        est = 0
        probe: list[str] = []
        for path, size, width, dictionary in self._chunks(rg):
            est += self._chunk_bytes(size, width, rows)
            if dictionary:
                probe.append(path)
        if probe and rows:
            where = f"row group {g}"
            with reading(f.name, where):
                it = pf.iter_batches(batch_size=min(rows, PROBE_ROWS), row_groups=[g], columns=probe, use_threads=False)
            first = next(iter(guarded(it, f.name, where)), None)
            if first is not None and first.num_rows:
                est += int(first.nbytes / first.num_rows * rows)
        return est

    def _batch_rows(self, pf, f: SourceFile, g: int) -> int:
        """Rows per batch of row group ``g``: its estimated decoded bytes per row into the budget's batch."""
        rows = f.blocks[g].rows
        per_row = max(1.0, self._estimate(pf, f, g) * MARGIN / max(1, rows))
        return max(1, min(rows, int(self.options.batch_bytes / per_row)))

    def read_file(self, f: SourceFile, blocks: tuple[int, int] | None, row0: int = 0) -> Iterator[tuple[object, int]]:
        with reading(f.name):
            pf = self._open(f.path)
        b0, b1 = blocks or (0, len(f.blocks))
        columns = self._projection()
        row = row0
        for g in range(b0, b1):
            want = f.blocks[g].rows
            where = f"row group {g}"
            got = 0
            if want:
                n = self._batch_rows(pf, f, g)
                with reading(f.name, where):
                    it = pf.iter_batches(
                        batch_size=n, row_groups=[g], columns=columns, use_threads=self.options.threads
                    )
                for rb in guarded(it, f.name, where):
                    yield rb, row + got
                    got += rb.num_rows
            if got != want:
                raise InputError(f"{f.name}, {where}: holds {got} rows, its metadata says {want}", hint=DAMAGED)
            row += got
            self._done += f.blocks[g].bytes
