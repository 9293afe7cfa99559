"""HDF5 input (``.h5``/``.hdf5``): every dataset a column, axis 0 the record axis, read a batch of
rows at a time (``ds[a:b]``) so a file of any size converts in bounded memory.

Datasets in groups are named by their path with dots (``/train/x`` -> ``train.x``), in creation
order when the file tracks it, else by name. Numbers and fixed-width strings of any shape are
fixed-shape columns, variable-length strings text, variable-length arrays of numbers sequences. A
file lovecraft wrote (its ``lovecraft_schema`` attribute) comes back with its columns' order and
kinds. Refused, each in one line naming the dataset: datasets of different lengths, scalars (no
record axis), compound, enum and reference types, and data stored outside the file (external
storage, virtual datasets), which would read other files; ``--columns`` leaves any of them out.
Rows are read by range, so parts of rows go to workers, each opening the file itself.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator

import numpy as np

from ..errors import InputError, OptionsError
from ..schema import BINARY, FIXED, SEQUENCE, STRING, Batch, Field, Schema, VarColumn, row_nbytes
from .base import Part, Reader, ReadOptions
from .npy import check_unicode, native
from .spec import InputSpec

CACHE_BYTES = 4 << 20  # HDF5's chunk cache per dataset while reading


def _open(h5py, path: str):
    return h5py.File(path, "r", rdcc_nbytes=CACHE_BYTES)


class Hdf5Reader(Reader):
    random_rows = True
    columnar = True

    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        super().__init__(specs, options)
        import h5py

        self.columns: list[tuple[int, str]] = []  # (input, dataset path) of each column
        fields: list[Field] = []
        lengths: dict[str, int] = {}
        every: list[str] = []  # every dataset's column name (for messages)
        filters: dict[tuple[int, str], str | None] = {}  # (input, path) -> the dataset's compression filter
        for i, spec in enumerate(specs):
            if spec.is_stdin or spec.compression is not None or "://" in spec.path:
                raise InputError(
                    f"{spec.name}: an HDF5 input must be a local, uncompressed file (it is read by offsets)",
                    hint="copy or decompress it first",
                )
            try:
                f = _open(h5py, spec.path)
            except OSError as e:
                raise InputError(f"{spec.name}: not a readable HDF5 file ({e})", hint="check the file") from None
            with f:
                found, names = _datasets(h5py, f, spec.name, options.columns)
                every.extend(names)
                for path, field, rows in found:
                    if field.name in {x.name for x in fields}:
                        raise InputError(f"{spec.name}: a second column named '{field.name}'", hint="rename one")
                    self.columns.append((i, path))
                    filters[(i, path)] = f[path].compression
                    fields.append(field)
                    lengths[field.name] = rows
        if options.columns:
            missing = [c for c in options.columns if c not in lengths]
            if missing:
                raise OptionsError(
                    f"--columns: no dataset '{missing[0]}' in {self._names()}",
                    hint=f"datasets are {', '.join(every) or 'none'}",
                )
            order = {c: k for k, c in enumerate(dict.fromkeys(options.columns))}
            keep = sorted(range(len(fields)), key=lambda k: order[fields[k].name])
            fields = [fields[k] for k in keep]
            self.columns = [self.columns[k] for k in keep]
        if not fields:
            raise InputError(f"{self._names()}: holds no datasets", hint="check the file")
        if len(set(lengths[f.name] for f in fields)) > 1:
            detail = ", ".join(f"{f.name}: {lengths[f.name]}" for f in fields)
            raise InputError(
                f"{self._names()}: datasets have different numbers of rows ({detail})",
                hint="convert datasets of one length together (--columns a,b)",
            )
        self.rows = lengths[fields[0].name]
        self.schema = Schema(tuple(fields))
        self._done = 0
        self.filters = filters

    def input_details(self, i: int) -> dict:
        mine = [p for k, p in self.columns if k == i]
        out: dict = {"datasets": len(mine)}
        inside = sorted({self.filters[(i, p)] for p in mine if self.filters.get((i, p))})
        if inside:
            out["compression_inside"] = "+".join(inside)
        return out

    def _names(self) -> str:
        return ", ".join(s.name for s in self.specs)

    @property
    def row_bytes(self) -> int:
        return int(sum(row_nbytes(f) for f in self.schema))

    def progress_done(self) -> int:
        return self._done

    def batches(self) -> Iterator[Batch]:
        yield from self._rows(0, self.rows, self.options.batch_bytes)

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        per = max(1, target_bytes // max(1, self.row_bytes))
        return [Part(i, 0, rows=(a, min(a + per, self.rows))) for i, a in enumerate(range(0, self.rows, per))] or [
            Part(0, 0, rows=(0, 0))
        ]

    def part_batches(self, part: Part) -> Iterator[Batch]:
        yield from self._rows(*(part.rows or (0, self.rows)), self.options.batch_bytes)

    def row_range(self, start: int, stop: int, step_bytes: int, mark: object = None) -> Iterator[Batch]:
        return self._rows(start, stop, step_bytes)

    def _rows(self, first: int, last: int, step_bytes: int) -> Iterator[Batch]:
        """Rows ``[first, last)`` in batches of about ``step_bytes`` (the step adapts to what
        variable-length rows turn out to hold)."""
        import h5py

        files = [_open(h5py, s.path) for s in self.specs]
        try:
            dsets = [files[i][path] for i, path in self.columns]
            step = max(1, step_bytes // max(1, self.row_bytes))
            start = first
            total = self.progress_total() or 0
            while start < last:
                stop = min(start + step, last)
                cols = {}
                for f, ds, (i, path) in zip(self.schema, dsets, self.columns, strict=True):
                    where = f"{self.specs[i].name}, dataset {path}"
                    try:
                        raw = ds[start:stop]
                    except (OSError, ValueError) as e:
                        raise InputError(
                            f"{where}: cannot read rows {start + 1}..{stop} ({e})", hint="the file is damaged"
                        ) from None
                    cols[f.name] = _column(raw, f, where, start)
                batch = Batch(cols, stop - start)
                self._done = int(total * (stop - first) / max(1, self.rows))
                yield batch
                got = sum(c.nbytes for c in cols.values())
                if got > 2 * step_bytes and step > 1:
                    step = max(1, int(step * step_bytes / got))
                start = stop
        finally:
            for f in files:
                f.close()


def _datasets(h5py, f, name: str, wanted: list[str] | None) -> tuple[list[tuple[str, Field, int]], list[str]]:
    """(path, field, rows) of every dataset of ``f`` (those of ``wanted`` when given), and the
    column names of all of them."""
    saved = _saved_schema(f)
    paths = _walk(h5py, f)
    if saved is not None and set(saved) <= set(paths):
        paths = list(saved) + [p for p in paths if p not in saved]
    out = []
    for path in paths:
        column = path.replace("/", ".")
        if wanted and column not in wanted:
            continue
        ds = f[path]
        where = f"{name}, dataset {path}"
        out.append(
            (path, _field(h5py, ds, column, where, saved.get(path) if saved else None), ds.shape[0] if ds.shape else 0)
        )
    return out, [p.replace("/", ".") for p in paths]


def _walk(h5py, group, prefix: str = "") -> list[str]:
    """The paths of the datasets under ``group``: each group's links in creation order where it
    tracks it, else by name (h5py's own iteration order), groups depth first. Soft and external
    links are not followed (an external one would read another file)."""
    out: list[str] = []
    for name in group:
        link = group.get(name, getlink=True)
        if not isinstance(link, h5py.HardLink):
            continue
        obj = group[name]
        if isinstance(obj, h5py.Group):
            out.extend(_walk(h5py, obj, prefix + name + "/"))
        elif isinstance(obj, h5py.Dataset):
            out.append(prefix + name)
    return out


def _saved_schema(f) -> dict[str, dict] | None:
    """The columns a lovecraft-written file records (JSON; files of earlier versions: a Python
    literal), by dataset name."""
    text = f.attrs.get("lovecraft_schema")
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        items = json.loads(text)
    except ValueError:
        try:
            items = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    if not isinstance(items, list) or not all(isinstance(d, dict) and "name" in d for d in items):
        return None
    return {str(d["name"]): d for d in items}


def _field(h5py, ds, column: str, where: str, saved: dict | None) -> Field:
    dt = ds.dtype
    if not ds.shape:
        raise InputError(f"{where}: a scalar has no record axis", hint="leave it out with --columns")
    if ds.is_virtual:
        raise InputError(f"{where}: a virtual dataset (its data is in other files)", hint="leave it out with --columns")
    if ds.external:
        raise InputError(f"{where}: its data is stored outside the file", hint="leave it out with --columns")
    if saved and saved.get("kind") == FIXED and str(saved.get("dtype", "")).startswith("<U"):
        return Field(column, FIXED, str(saved["dtype"]), tuple(int(s) for s in ds.shape[1:]))  # stored as UTF-8
    string = h5py.check_string_dtype(dt)
    if string is not None and string.length is None:  # variable-length text
        if len(ds.shape) != 1:
            raise InputError(
                f"{where}: text of shape {ds.shape} (one string per row is read)", hint="leave it out with --columns"
            )
        kind = BINARY if saved and saved.get("kind") == BINARY else STRING
        return Field(column, kind, "|u1")
    base = h5py.check_vlen_dtype(dt)
    if base is not None:
        if base.kind not in "biuf" or len(ds.shape) != 1:
            raise InputError(f"{where}: variable-length {base} of shape {ds.shape}", hint="leave it out with --columns")
        return Field(column, SEQUENCE, base.newbyteorder("=").str if not base.isnative else base.str)
    if dt.names is not None:
        raise InputError(
            f"{where}: a compound type (fields {', '.join(dt.names)})",
            hint="save each field as a dataset of its own, or leave it out with --columns",
        )
    if dt.kind == "c":
        raise InputError(
            f"{where}: complex numbers ({dt}), which no output format holds",
            hint="save the real and imaginary parts as two datasets, or leave it out with --columns",
        )
    if dt.kind not in "biufSU" or h5py.check_enum_dtype(dt) is not None:
        raise InputError(f"{where}: type {dt} is not read", hint="leave it out with --columns")
    dt = dt.newbyteorder("=") if not dt.isnative else dt
    return Field(column, FIXED, dt.str, tuple(int(s) for s in ds.shape[1:]))


def _column(raw: np.ndarray, f: Field, where: str, row0: int):
    """Rows as read by h5py as a batch column of field ``f``."""
    if f.kind in (STRING, BINARY):
        items = [x if isinstance(x, bytes) else str(x).encode("utf-8") for x in raw.tolist()]
        if f.kind == STRING:
            for k, x in enumerate(items):
                try:
                    x.decode("utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"{where}, row {row0 + k + 1}: invalid UTF-8", hint="store it as bytes") from None
        lens = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        offs = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        return VarColumn(np.frombuffer(b"".join(items), dtype=np.uint8), offs)
    if f.kind == SEQUENCE:
        dt = f.np_dtype
        rows = [np.asarray(r, dtype=dt) for r in raw]
        lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        offs = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        return VarColumn(np.concatenate(rows) if rows else np.zeros(0, dt), offs)
    if f.np_dtype.kind == "U" and raw.dtype.kind in "OS":  # a lovecraft <U column, stored as UTF-8
        out = np.array([x.decode("utf-8") if isinstance(x, bytes) else x for x in raw.tolist()], dtype=f.np_dtype)
        return out
    out = native(raw)
    check_unicode(out, where, row0)
    return out
