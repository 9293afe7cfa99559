"""What every output format provides, and the interfaces of its parts.

A format is one package under ``formats/`` whose ``__init__`` defines one :class:`OutputFormat`
(the *descriptor*): its name, file extensions, the compressions it takes, whether it has random
access, and its parts, each a class or function in a module of the package that is imported only
when used:

* the :class:`Writer` (``convert``, ``shard`` and ``bucket`` write through it),
* the :class:`PartReader` for ``open_dataset`` (the loaders),
* the checker for ``verify`` (:meth:`OutputFormat.check_unit`: decode a shard's files completely,
  with the format's own checksums, raising :class:`FileProblem`),
* the load snippets for ``inspect``.

The descriptor module itself imports nothing heavy, so the registry (:mod:`lovecraft_convert.formats`)
can list formats without importing h5py, pyarrow or TensorFlow. Nothing outside the format packages
names a particular format: every command dispatches through the descriptor.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import LovecraftError, OptionsError
from ..manifest import DEFAULT_HASH, MANIFEST_NAME, Spec, file_path
from ..schema import Batch, Field, Schema, row_nbytes

# --------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------


@dataclass
class FileRecord:
    """One written file, as the manifest records it (path relative to the dataset directory)."""

    path: str
    rows: int
    bytes: int
    digest: str
    hash: str = DEFAULT_HASH  # the algorithm of ``digest``
    column: str | None = None
    role: str | None = None  # which part of a column the file holds (memmap: data | values | offsets)

    def to_dict(self) -> dict[str, Any]:
        d = {"path": self.path, "rows": self.rows, "bytes": self.bytes, self.hash: self.digest}
        if self.column is not None:
            d["column"] = self.column
        if self.role is not None:
            d["role"] = self.role
        return d


@dataclass
class WriteOptions:
    compression: str | None = None  # one of the format's ``compressions`` (None: its default)
    hash: str = DEFAULT_HASH  # how every file is hashed (``HASHES``)
    row_group_bytes: int = 64 << 20  # in-memory bytes gathered before a block is written
    expected_rows: int | None = None  # known up front (files can be preallocated), or None
    memory: int = 64 << 20  # what the writer may hold: per-column costs are sized from it / columns
    # the dataset's files hold fixed 1-d columns whose widths differ from unit to unit (a padded
    # bucket each): a format whose readers unify its files' schemas writes them as lists (Parquet)
    widths_vary: bool = False
    # the unit's first row in the dataset (shard k: the rows of shards 0..k-1), for formats that
    # name rows (WebDataset's keys); 0 where units are not one order (buckets)
    first_row: int = 0


class Writer:
    """Writes one unit (one or more files named after ``stem``) into a temporary directory.

    ``write`` takes batches; ``close`` finishes, fsyncs and hashes every file and returns their
    records; ``abort`` releases handles after a failure (the caller removes the directory).
    """

    def __init__(self, directory: str, stem: str, schema: Schema, options: WriteOptions) -> None:
        self.directory = directory
        self.stem = stem
        self.schema = schema
        self.options = options
        self.rows = 0
        from ..engine.writer import preload_hash

        preload_hash(options.hash)

    @classmethod
    def check_schema(cls, schema: Schema, source: str) -> None:
        """Raise SchemaError if this format cannot hold the schema."""

    def write(self, batch: Batch) -> None:
        raise NotImplementedError

    def close(self) -> list[FileRecord]:
        raise NotImplementedError

    def abort(self) -> None:
        """Release handles after a failure (the temporary directory is removed by the caller)."""

    def manifest_extra(self) -> dict[str, Any]:
        """Keys this unit adds to the manifest (the same for every unit of a dataset)."""
        return {}


# --------------------------------------------------------------------------------------------
# reading (the loaders)
# --------------------------------------------------------------------------------------------


CORRUPT = "the file is corrupt; run `lovecraft verify` or re-create the dataset"


class ColumnBlock:
    """Scalar columns of one dtype gathered in one ``[columns, rows]`` buffer (a wide table's, for
    writers of a file or dataset per column): a batch goes in with one copy (``np.stack``), not a
    call per column; ``full()`` is called each time the buffer is full, and may reuse it."""

    def __init__(self, columns: int, rows: int, dtype, full, buf=None) -> None:
        """``buf``: the ``[columns, rows]`` array to gather into (rows contiguous, any row stride);
        a new one when None."""
        import numpy as np

        self.buf = np.empty((columns, rows), dtype=dtype) if buf is None else buf
        self.held = 0
        self.full = full

    def add_batch(self, batch, names: list[str]) -> None:
        """Add the columns ``names`` of ``batch``: its matrix whole when they are its rows
        (:meth:`Batch.matrix_of`), else column by column."""
        m = batch.matrix_of(names)
        self.add(None if m is not None else [batch.columns[n] for n in names], batch.num_rows, m)

    def add(self, cols: list | None, n: int, matrix=None) -> None:
        """Add ``n`` rows of the columns ``cols``; ``matrix``: the same as one ``[columns, n]``
        array (:meth:`Batch.matrix_of`), copied whole."""
        import numpy as np

        i = 0
        while i < n:
            k = min(self.buf.shape[1] - self.held, n - i)
            out = self.buf[:, self.held : self.held + k]
            if matrix is not None:
                np.copyto(out, matrix[:, i : i + k], casting="same_kind")
            else:
                part = cols if i == 0 and k == n else [c[i : i + k] for c in cols]
                np.stack(part, out=out, casting="same_kind")
            self.held += k
            i += k
            if self.held == self.buf.shape[1]:
                self.full()


class PartReader:
    """One shard's (or bucket's) files. ``rows`` is known from the manifest.

    Every reader gives :class:`~lovecraft_convert.schema.Batch`es of the selected columns in large
    chunks; random-access ones also read a row range (``read``) or any set of rows (``take``).
    Columns come back in the types the files hold (:meth:`OutputFormat.storage_dtype`): fixed-shape
    arrays, :class:`~lovecraft_convert.schema.VarColumn`s or object arrays for variable-length rows.
    Files are opened on first use, never in ``__init__``, so a reader can be built in one process
    and used in another.
    """

    random_access = False
    # which end of each file opening it reads ("head": a header, "tail": a footer, None): the loaders
    # of a remote dataset fetch it with the part (storage/remote.py's range at that end)
    opens_at: str | None = None

    def __init__(self, rows: int, schema: Schema) -> None:
        self.rows = rows
        self.schema = schema

    def chunks(self, start: int, stop: int, chunk_rows: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        """Rows ``[start, stop)`` in batches of about ``chunk_rows``; ``rng`` permutes the order of the
        blocks (row groups for Parquet) for shuffling, never the rows inside a block."""
        blocks = range(start, stop, chunk_rows)
        if rng is not None and len(blocks) > 1:
            blocks = [blocks[i] for i in rng.permutation(len(blocks)).tolist()]
        for a in blocks:
            yield self.read(a, min(stop, a + chunk_rows))

    def block_starts(self) -> np.ndarray:
        """Where the part's blocks start (int64 row offsets, 0 first, ``rows`` last): the units a
        block shuffle permutes, each read whole by :meth:`read_block` (Parquet: row groups;
        TFRecord: the blocks of its index; otherwise runs of about 1 MiB)."""
        size = max(1, int(sum(row_nbytes(f) for f in self.schema)))
        n = max(1, (1 << 20) // size)
        return np.append(np.arange(0, self.rows, n, dtype=np.int64), np.int64(self.rows))

    def read_block(self, k: int, rows: np.ndarray | None = None) -> Batch:
        """Block ``k``'s rows, or only ``rows`` of them (sorted indices within the block)."""
        starts = self.block_starts()
        a, b = int(starts[k]), int(starts[k + 1])
        if rows is None:
            return self.read(a, b)
        return self.take(np.asarray(rows, dtype=np.int64) + a)

    def read_blocks(self, blocks: list[tuple[int, np.ndarray | None]]) -> Batch:
        """Several blocks (``(k, rows)`` pairs as :meth:`read_block` takes them), in that order, as
        one batch (a format may decode them together)."""
        pieces = [self.read_block(k, rows) for k, rows in blocks]
        return pieces[0] if len(pieces) == 1 else Batch.concat(pieces)

    def read(self, start: int, stop: int) -> Batch:
        raise NotImplementedError

    def take(self, idx: np.ndarray) -> Batch:
        """Rows ``idx`` (int64, any order) as one batch, in that order."""
        raise NotImplementedError

    def byte_ranges(self, start: int, stop: int) -> list[tuple[str, int, int]] | None:
        """(file, first byte, end) of the bytes that reading rows ``[start, stop)`` reads, in the
        order it reads them: what a remote dataset's loader fetches ahead of the reader. None when
        the format cannot say (its files are then fetched whole)."""
        return None

    def block_ranges(self, k: int) -> list[tuple[str, int, int]] | None:
        """:meth:`byte_ranges` of block ``k`` (:meth:`block_starts`)."""
        starts = self.block_starts()
        return self.byte_ranges(int(starts[k]), int(starts[k + 1]))

    def close(self) -> None:
        pass


@dataclass
class PartFiles:
    """What a reader of one part gets from the manifest: absolute paths and their manifest entries."""

    paths: list[str]
    entries: list[dict]
    rows: int
    schema: Schema
    key: tuple  # (group, part): unique within the dataset


# --------------------------------------------------------------------------------------------
# checking (verify)
# --------------------------------------------------------------------------------------------


class FileProblem(Exception):
    """A problem found in one file of a dataset: ``verify`` reports it as one line (``kind`` says
    what sort: decode, rows, schema, manifest, ...)."""

    def __init__(self, file: str, message: str, kind: str = "decode") -> None:
        super().__init__(message)
        self.file = file
        self.message = message
        self.kind = kind

    @classmethod
    def of(cls, file: str, e: LovecraftError, kind: str | None = None) -> FileProblem:
        """A library error raised while decoding ``file``, as a problem of that file."""
        return cls(file, e.without_where() if e.where else e.one_line(), kind or _problem_kind(e))


@dataclass
class Unit:
    """A shard (or a bucket's shard) as the manifest lists it: rows stored in its files."""

    label: str
    rows: int
    files: list[str]
    stats: dict | None
    bucket: dict | None = None

    @property
    def first(self) -> str:
        """The file a problem of the unit is reported on (the manifest when it lists none)."""
        return self.files[0] if self.files else MANIFEST_NAME


@dataclass
class CheckContext:
    """What a format's checker gets from ``verify``: the dataset directory, its manifest, the
    manifest's entry of every file by path, and the rows to decode per batch for a schema."""

    root: str
    manifest: dict
    info: dict[str, dict]
    budget: int
    step_rows: Any  # Callable[[Schema], int]

    def full(self, path: str) -> str:
        """The full path (or URI) of manifest path ``path``; DatasetError when it leaves the dataset."""
        return file_path(self.root, path)


def _problem_kind(e: LovecraftError) -> str:
    return e.kind if e.kind in ("rows", "schema", "manifest", "bucket") else "decode"


def short(e: BaseException, limit: int = 300) -> str:
    """An exception's text on one line, at most ``limit`` characters."""
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------
# the descriptor
# --------------------------------------------------------------------------------------------


class OutputFormat:
    """One output format. Subclass it in the format's package and register one instance.

    Class attributes describe the format; methods give its parts. Override what differs from the
    defaults; the parts (``writer_class``, ``open_part``, ``check_unit``, ``load_snippets``) must
    be given.
    """

    name: str = ""
    title: str = ""  # one line for help and inspect
    extensions: tuple[str, ...] = ()  # of its data files, used to find a unit's file among others
    compressions: tuple[str, ...] = ()  # values of --compression it takes besides "none"
    default_compression: str | None = None  # what it does without --compression
    random_access: bool = False  # rows can be read by index (exact shuffles, map-style datasets)
    stem: str = "data"  # file stem of a one-unit dataset (convert); "" for one file per column
    variable_as_objects: bool = False  # variable-length rows decode to Python objects (smaller steps)
    manifest_keys: tuple[str, ...] = ()  # the manifest sections this format adds (inspect shows them)
    manifest_spec: Spec | None = None  # the types of those sections' fields (manifest.check_shape)
    kinds: tuple[str, ...] = ("fixed", "string", "binary", "sequence")  # column kinds it holds
    column_floor: int = 4 << 10  # the least memory its writer holds per column (wide tables)
    reads_remote: bool = False  # its readers stream from an object store URI (inspect shows their code for one)
    padded_buckets: bool = True  # holds a fixed column whose width differs from file to file (bucket --layout padded)

    # -- options ------------------------------------------------------------------------------

    def check_compression(self, compression: str | None) -> str | None:
        """The compression to write with (None: none or the default); OptionsError when not offered."""
        if compression is None:
            return None
        if compression == "none":
            return "none" if self.default_compression else None
        if compression not in self.compressions:
            opts = ", ".join(self.compressions)
            hint = f"choose {opts} or none" if opts else f"{self.name} is written uncompressed: drop the flag"
            raise OptionsError(f"--compression {compression} is not offered for {self.name}", hint=hint)
        return compression

    # -- writing ------------------------------------------------------------------------------

    def writer_class(self) -> type[Writer]:
        raise NotImplementedError

    def check_schema(self, schema: Schema, source: str) -> None:
        """Refuse (SchemaError, one line naming the column) a schema this format cannot hold."""
        from ..errors import SchemaError

        for f in schema:
            if f.kind not in self.kinds:
                raise SchemaError(
                    f"{source}, column '{f.name}': {self.name} cannot hold {f.describe()} columns",
                    hint="leave the column out with --columns, or write a format that holds it",
                )
        self.writer_class().check_schema(schema, source)

    def size_linear(self, compression: str | None) -> bool:
        """Do a unit's bytes grow exactly linearly with its rows (so a sample fixes --shard-size)?"""
        return False

    def dataset_extra(self, schema: Schema, unit_extras: list[dict]) -> dict[str, Any]:
        """Manifest keys for the whole dataset, from its units' ``manifest_extra`` and its schema."""
        return dict(unit_extras[0]) if unit_extras else {}

    def bucket_extra(self, unit_extra: dict) -> dict[str, Any]:
        """Keys a bucket's manifest entry gets from its first unit's ``manifest_extra``."""
        return {}

    def finish_dataset(self, directory: str, manifest: dict) -> dict[str, Any]:
        """Write files that describe the whole dataset once every unit is written (in ``directory``,
        before the commit); returns the manifest keys that list them."""
        return {}

    # -- reading ------------------------------------------------------------------------------

    def storage_dtype(self, field: Field, manifest: dict | None = None) -> np.dtype:
        """The dtype a column's values have as this format's reader gives them back."""
        return field.np_dtype

    def manifest_problems(self, manifest: dict) -> list[str]:
        """This format's manifest fields that contradict the rest of the manifest, each a message
        naming the field, judged from the manifest alone (before any file is opened, once
        ``manifest_spec`` has checked their types)."""
        return []

    def check_manifest(self, manifest: dict, where: str) -> None:
        """Refuse (DatasetError naming ``where`` and the field) the first of :meth:`manifest_problems`."""
        found = self.manifest_problems(manifest)
        if found:
            from ..errors import DatasetError
            from ..manifest import EDITED

            raise DatasetError(f"{where}: {found[0]}", hint=EDITED, kind="manifest")

    def most_rows(self, sizes: list[int], entries: list[dict], schema: Schema, manifest: dict) -> int | None:
        """The most rows a part whose files are ``sizes`` bytes (their manifest ``entries``) can
        hold, or None when their sizes do not bound it (its reader then checks the rows against
        its files before allocating anything for them). ``open_dataset`` refuses a manifest that
        declares more, so nothing is sized from a count the files cannot hold."""
        return None

    def count_problem(
        self, sizes: list[int], entries: list[dict], rows: int, schema: Schema, manifest: dict
    ) -> str | None:
        """Why a part declaring ``rows`` rows cannot be its files (``sizes`` bytes, their manifest
        ``entries``), judged from the numbers alone (nothing is read or allocated), or None. By
        default: more rows than :meth:`most_rows`."""
        most = self.most_rows(sizes, entries, schema, manifest)
        if most is not None and rows > most:
            return f"declares {rows} rows; its files ({sum(sizes)} bytes) hold at most {most}"
        return None

    def open_part(self, files: PartFiles, manifest: dict, shared: dict) -> PartReader:
        """The reader of one part (``shared``: a dict kept per opened dataset, e.g. for caches)."""
        raise NotImplementedError

    def unit_file(self, files: list[str], where: str) -> str:
        """The one data file of a unit among ``files`` (formats that write one file per unit)."""
        mine = [p for p in files if p.endswith(self.extensions)] or files
        if len(mine) != 1:
            from ..errors import DatasetError

            raise DatasetError(
                f"{where} lists {len(mine)} {self.name} files, expected one",
                hint="re-create the dataset",
                kind="manifest",
            )
        return mine[0]

    def tf_dataset(self, ds, plan, input_context, start: tuple[int, int] = (0, 0)) -> tuple[Any, int] | None:
        """A native tf.data pipeline of ``plan``'s batches from ``start = (epoch, position)`` (each
        further pass the next epoch) and the batch count of its first pass, or None to use the
        generic one. Called for datasets that are not bucketed."""
        return None

    # -- verify -------------------------------------------------------------------------------

    def check_unit(self, ctx: CheckContext, unit: Unit, schema: Schema) -> Iterator[tuple[Batch, str]]:
        """Decode every row of ``unit`` with the format's own checks: ``(batch, file)`` pairs, in
        order; raises :class:`FileProblem` at the first problem."""
        raise NotImplementedError

    def checked_unit_file(self, unit: Unit) -> str:
        """The one data file of ``unit`` (formats that write one file per unit); a FileProblem otherwise."""
        mine = [p for p in unit.files if p.endswith(self.extensions)]
        if len(mine) != 1:
            others = ", ".join(unit.files) or "none"
            raise FileProblem(unit.first, f"{unit.label} lists {others}; expected one {self.name} file")
        return mine[0]

    def stat_file(self, ctx: CheckContext, unit: Unit, column: str, key: str) -> str:
        """The file a statistic of ``column`` in ``unit`` is reported on."""
        return unit.first

    def extra_files(self, manifest: dict) -> dict[str, dict] | FileProblem | None:
        """Files the manifest lists outside ``files`` (written by :meth:`finish_dataset`), by path."""
        return None

    def check_extra(self, ctx: CheckContext, path: str) -> list[FileProblem]:
        """Problems of a file of :meth:`extra_files` (its size and hash are checked by verify)."""
        return []

    def stray_reason(self, name: str) -> str | None:
        """Why a file the manifest does not list (``name``: its path in the dataset) would change
        what this format's readers read: ``verify`` reports it as a problem; None: only a warning
        (a README, ``.DS_Store``). By default, a file of the format's own extensions, which a glob
        of the dataset's files would take."""
        if name.endswith(self.extensions):
            return f"a {self.extensions[0]} file: a glob of the dataset's files would take it"
        return None

    # -- inspect ------------------------------------------------------------------------------

    def load_snippets(self, path: str, manifest: dict) -> dict[str, str]:
        """The lines of code that load the dataset with the usual client libraries, by library."""
        return {}

    def claims_file(self, path: str) -> bool:
        """Is ``path`` a file of this format that ``inspect`` can describe on its own?"""
        return False

    def inspect_files(self, paths: list[str], *, sample: int | None, max_expansion: float) -> dict[str, Any]:
        raise NotImplementedError

    def format_file_report(self, report: dict[str, Any]) -> str:
        raise NotImplementedError


# --------------------------------------------------------------------------------------------
# helpers for load snippets
# --------------------------------------------------------------------------------------------


def py_str(s: str) -> str:
    """A Python string literal of ``s`` (for generated code)."""
    import json

    return json.dumps(s)


def py_ident(name: str) -> str:
    """A Python identifier made from a column name (for generated code): characters an identifier
    cannot hold become ``_``; a keyword gets a trailing ``_``."""
    import keyword

    s = "".join(c if ("_" + c).isidentifier() else "_" for c in name)
    if not s.isidentifier():
        s = "_" + s
    return s + "_" if keyword.iskeyword(s) or keyword.issoftkeyword(s) else s


class Idents:
    """Distinct identifiers for the variables of generated code: two columns never share one
    (``a.b`` and ``a_b``, or ``ﬁle`` and ``file``, which Python reads as one name), and none
    shadows a name the code itself uses (``reserved``: ``np``, a file handle)."""

    def __init__(self, reserved: tuple[str, ...] = ()) -> None:
        self.used = {self._key(r) for r in reserved}

    @staticmethod
    def _key(ident: str) -> str:
        import unicodedata

        return unicodedata.normalize("NFKC", ident)  # how Python compares identifiers

    def take(self, name: str, suffixes: tuple[str, ...] = ("",)) -> str:
        """A base identifier made from ``name`` such that base + each suffix is still free; all
        of those are taken."""
        base = py_ident(name)
        cand, k = base, 2
        while any(self._key(cand + sfx) in self.used for sfx in suffixes):
            cand, k = f"{base}_{k}", k + 1
        self.used.update(self._key(cand + sfx) for sfx in suffixes)
        return cand
