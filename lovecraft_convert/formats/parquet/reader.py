"""Reading a Parquet dataset's part: ``ParquetFile.iter_batches`` in large batches, converted
without copying."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from ...errors import DatasetError
from ...schema import Batch, Schema
from ..reading import CORRUPT, PartReader


def schema_difference(got, schema: Schema) -> str | None:
    """How a Parquet file's Arrow schema ``got`` differs from the columns ``schema`` (or some of
    them) as lovecraft writes them, or None: a column it does not hold, or holds with another type."""
    from ...arrowconv import arrow_schema, same_rows

    want = arrow_schema(schema)
    for field in want:
        i = got.get_field_index(field.name)
        if i < 0:
            return f"holds no column '{field.name}' (it holds {', '.join(got.names)}); the schema lists it"
        t = got.field(i).type
        if not (same_rows(t, field.type) or t.equals(stored_type(field.type))):  # a padded bucket: a list
            return f"column '{field.name}' is {t}, the schema says {field.type}"
    return None


def stored_type(t):
    """The type Parquet gives back for ``t``: it has no seconds, so timestamps and times of seconds
    are written (and read) as milliseconds; our readers cast them back."""
    import pyarrow as pa

    if pa.types.is_timestamp(t) and t.unit == "s":
        return pa.timestamp("ms", t.tz)
    if pa.types.is_time32(t) and t.unit == "s":
        return pa.time32("ms")
    return t


def row_groups_difference(md, listed) -> str | None:
    """How a Parquet file's row groups (``md``: its footer) differ from the rows the manifest lists
    for them (``parquet.blocks``; None: not listed), or None."""
    held = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
    if listed is None or held == list(listed):
        return None

    def show(rows) -> str:
        return "[" + ", ".join(str(n) for n in rows[:6]) + (", ..." if len(rows) > 6 else "") + "]"

    return f"holds row groups of {show(held)} rows, the manifest's parquet.blocks says {show(list(listed))}"


class ParquetReader(PartReader):
    """``pyarrow.parquet.ParquetFile.iter_batches`` in large batches, converted without copying.
    A part may be several files (a wide table's writer starts a new file to bound its footer):
    their row groups are the part's blocks, in order."""

    opens_at = "tail"  # its footer

    def __init__(
        self,
        rows: int,
        schema: Schema,
        paths: list[str],
        file_rows: list[int],
        footers: dict | None = None,
        groups: list[list[int] | None] | None = None,
    ) -> None:
        """``file_rows``: the rows of each of ``paths``, as the manifest lists them; ``footers``:
        path -> parsed footer, shared by the readers of a dataset in a process (a remote file's
        footer is then fetched once, not once per reader and thread); ``groups``: the rows of each
        file's row groups as the manifest lists them (None for a file it does not): with every
        file's, the part's blocks are known without opening a file, and each file is opened when
        one of its row groups is first read (each checked against its footer then)."""
        super().__init__(rows, schema)
        self.paths = list(paths)
        self.file_rows = list(file_rows)
        self.footers = footers if footers is not None else {}
        self.groups = list(groups) if groups is not None else [None] * len(self.paths)
        self._pfs: list | None = None
        self._pid = None
        self._rg_start: np.ndarray | None = None

    def _file(self, fi: int):
        """File ``fi`` opened: its footer read (once per process) and checked against the manifest."""
        if self._pfs is None or self._pid != os.getpid():
            self._pfs, self._pid = [None] * len(self.paths), os.getpid()
        pf = self._pfs[fi]
        if pf is not None:
            return pf
        import pyarrow.parquet as pq

        from ...storage import is_remote, open_input

        path, want = self.paths[fi], self.file_rows[fi]
        try:
            if is_remote(path):  # ranges of it fetched: its pages' checksums are checked as read
                meta = self.footers.get(path)
                f = open_input(path, buffering=0)  # pyarrow reads exact ranges: a buffer would read past them
                pf = pq.ParquetFile(f, metadata=meta, page_checksum_verification=True)
                self.footers[path] = pf.metadata
            else:
                pf = pq.ParquetFile(path)
        except (OSError, ValueError) as e:
            raise DatasetError(f"{path}: cannot open ({e})", hint="the dataset is damaged") from None
        md = pf.metadata
        if md.num_rows != want:
            raise DatasetError(
                f"{path}: holds {md.num_rows} rows, the manifest says {want}",
                hint="the dataset is damaged; re-create it",
            )
        why = schema_difference(pf.schema_arrow, self.schema)
        if why is not None:
            raise DatasetError(f"{path}: {why}", hint="the manifest was edited or damaged; re-create the dataset")
        why = row_groups_difference(md, self.groups[fi])
        if why is not None:
            raise DatasetError(f"{path}: {why}", hint="the manifest was edited or damaged; re-create the dataset")
        self._pfs[fi] = pf
        return pf

    def _layout(self) -> None:
        """The part's blocks (its files' row groups, in order): from the manifest when it lists
        every file's, else from the footers."""
        if self._rg_start is not None:
            return
        starts, loc = [0], []
        for fi, want in enumerate(self.file_rows):
            listed = self.groups[fi]
            if listed is None or sum(listed) != want:  # (its numbers' types: the manifest's spec)
                md = self._file(fi).metadata  # not listed (or listed wrong: the footer says which)
                listed = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
            for g, n in enumerate(listed):
                starts.append(starts[-1] + int(n))
                loc.append((fi, g))
        self._rg_start = np.asarray(starts, dtype=np.int64)
        self._rg_loc = loc

    def block_starts(self) -> np.ndarray:
        self._layout()
        return self._rg_start

    def open_listing(self) -> None:
        """Every file of the part opened: its footer read and checked (the byte ranges of its row
        groups are in it)."""
        for fi in range(len(self.paths)):
            self._file(fi)

    def block_ranges(self, k: int) -> list[tuple[str, int, int]]:
        """(file, first byte, end) of row group ``k``'s column chunks of the selected columns
        (adjacent ones merged): what reading it reads, for a remote dataset's prefetch."""
        self._layout()
        fi, g = self._rg_loc[k]
        rg = self._file(fi).metadata.row_group(g)
        want = set(self.schema.names)
        spans = []
        for c in range(rg.num_columns):
            col = rg.column(c)
            if col.path_in_schema.split(".")[0] not in want:
                continue
            start = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset is not None:
                start = min(start, col.dictionary_page_offset)
            spans.append((start, start + col.total_compressed_size))
        spans.sort()
        out: list[tuple[str, int, int]] = []
        for a, b in spans:
            if out and a - out[-1][2] <= 1 << 20:
                out[-1] = (out[-1][0], out[-1][1], max(out[-1][2], b))
            else:
                out.append((self.paths[fi], a, b))
        return out

    def byte_ranges(self, start: int, stop: int) -> list[tuple[str, int, int]]:
        """What reading rows ``[start, stop)`` reads: the ranges of the row groups holding them."""
        self._layout()
        rs = self._rg_start
        first = int(np.searchsorted(rs, start, side="right")) - 1
        last = int(np.searchsorted(rs, stop, side="left"))
        return [r for k in range(max(0, first), last) for r in self.block_ranges(k)]

    def read_block(self, k: int, rows: np.ndarray | None = None) -> Batch:
        """Row group ``k`` of the part (decoded whole; ``rows`` of it kept when given)."""
        import pyarrow as pa

        from ...arrowconv import batch_from_arrow

        self._layout()
        fi, g = self._rg_loc[k]
        n = int(self._rg_start[k + 1] - self._rg_start[k])
        pf = self._file(fi)
        try:
            rbs = list(pf.iter_batches(batch_size=max(1, n), row_groups=[g], columns=self.schema.names))
        except (OSError, pa.ArrowException) as e:
            raise DatasetError(f"{self.paths[fi]}: row group {g}: cannot read ({e})", hint=CORRUPT) from None
        parts = [batch_from_arrow(rb, self.schema) for rb in rbs]
        batch = parts[0] if len(parts) == 1 else Batch.concat(parts)
        return batch if rows is None else batch.take(np.asarray(rows, dtype=np.int64))

    def chunks(self, start: int, stop: int, chunk_rows: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        import pyarrow as pa

        from ...arrowconv import batch_from_arrow

        if stop <= start:
            return
        self._layout()
        rs = self._rg_start
        first = int(np.searchsorted(rs, start, side="right")) - 1
        last = int(np.searchsorted(rs, stop, side="left"))  # exclusive
        groups = list(range(first, last))
        names = self.schema.names
        # Shuffling reads row groups one at a time in a random order; otherwise each file's in one pass.
        if rng is not None and len(groups) > 1:
            runs = [[g] for g in rng.permutation(groups).tolist()]
        else:
            runs = []
            for g in groups:
                if runs and self._rg_loc[g][0] == self._rg_loc[runs[-1][-1]][0]:
                    runs[-1].append(g)
                else:
                    runs.append([g])
        for run in runs:
            pos = int(rs[run[0]])
            fi = self._rg_loc[run[0]][0]
            local = [self._rg_loc[g][1] for g in run]
            batches = self._file(fi).iter_batches(
                batch_size=chunk_rows, row_groups=local, columns=names, use_threads=True
            )
            while True:
                try:
                    rb = next(batches, None)
                except (OSError, pa.ArrowException) as e:  # a damaged page (checksum, decompression, dictionary)
                    raise DatasetError(
                        f"{self.paths[fi]}: row groups {local[0]}..{local[-1]}: cannot read ({e})",
                        hint=CORRUPT,
                    ) from None
                if rb is None:
                    break
                n = rb.num_rows
                a, b = max(start, pos), min(stop, pos + n)
                pos += n
                if a >= b:
                    continue
                if a - (pos - n) or b - a != n:
                    rb = rb.slice(a - (pos - n), b - a)
                yield batch_from_arrow(rb, self.schema)
