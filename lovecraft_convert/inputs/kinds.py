"""The input kinds: names, the module and class of each reader, and how each is recognised, and
the registry that adds kinds at run time.

One table maps file extensions to kinds (checked first, before any compression extension), one
maps leading bytes of the content to kinds (for files whose name says nothing), one maps the file
that marks a directory to its kind. Adding a built-in input kind is one module under ``inputs/``
and a line in each table that applies.

Other kinds come as an :class:`InputKind` passed to :func:`register` (from any importable module:
worker processes get the registered kinds, pickled by reference to their reader class, and register
them too) or through the ``lovecraft_convert.inputs`` entry-point group of an installed package, as
output formats do. Nothing here imports a reader: ``lovecraft --help`` reads these tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

READERS = {
    "text": "lovecraft_convert.inputs.text:TextReader",
    "csv": "lovecraft_convert.inputs.csv:CsvReader",
    "jsonl": "lovecraft_convert.inputs.jsonl:JsonlReader",
    "json": "lovecraft_convert.inputs.jsonarray:JsonArrayReader",
    "npy": "lovecraft_convert.inputs.npy:NpyReader",
    "npz": "lovecraft_convert.inputs.npz:NpzReader",
    "hdf5": "lovecraft_convert.inputs.hdf5:Hdf5Reader",
    "parquet": "lovecraft_convert.inputs.parquet:ParquetReader",
    "arrow": "lovecraft_convert.inputs.arrow:ArrowReader",
    "hf": "lovecraft_convert.inputs.arrow:HfReader",
    "dataset": "lovecraft_convert.loaders.asinput:DatasetReader",  # built on the loaders (a layer above)
    "files": "lovecraft_convert.inputs.files:FilesReader",
    "webdataset": "lovecraft_convert.inputs.wdstar:WebDatasetReader",
}
EXTENSIONS = {
    ".csv": "csv", ".tsv": "csv", ".txt": "text", ".text": "text",
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
    ".npy": "npy", ".npz": "npz", ".h5": "hdf5", ".hdf5": "hdf5", ".he5": "hdf5",
    ".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow", ".arrows": "arrow",
    ".tar": "webdataset",
    # images and audio named one by one or by a glob: a row per file (a directory of them is detected too)
    ".jpg": "files", ".jpeg": "files", ".png": "files", ".webp": "files", ".gif": "files", ".bmp": "files",
    ".tif": "files", ".tiff": "files", ".wav": "files", ".flac": "files", ".mp3": "files", ".ogg": "files",
}  # fmt: skip
MAGICS = [
    (b"\x93NUMPY", "npy"), (b"PAR1", "parquet"), (b"ARROW1", "arrow"), (b"\xff\xff\xff\xff", "arrow"),
    (b"\x89HDF\r\n\x1a\n", "hdf5"), (b"PK\x03\x04", "npz"),
]  # fmt: skip
# What a file of a kind in MAGICS is called when its name says another kind (refused naming it),
# the bytes it also ends with when its magic may begin a text file too, and the hint when not
# "pass --input-format KIND" (a zip archive is not always an NPZ)
MAGIC_KINDS = {
    "npy": ("an NPY file", b"", None),
    "parquet": ("a Parquet file", b"PAR1", None),  # (a CSV's first field may be PAR1)
    "arrow": ("an Arrow IPC file", b"", None),
    "hdf5": ("an HDF5 file", b"", None),
    "npz": ("a zip archive", b"", "an NPZ archive: pass --input-format npz, or rename it; another archive: extract it first"),
}  # fmt: skip
# The kinds read as UTF-8 text, and the byte order marks of the encodings they are not (refused
# naming the encoding: read as UTF-8, the first byte is an error that --errors replace only hides)
TEXT_KINDS = ("text", "csv", "jsonl", "json")
OTHER_BOMS = [
    (b"\xff\xfe\x00\x00", "UTF-32LE"), (b"\x00\x00\xfe\xff", "UTF-32BE"),
    (b"\xff\xfe", "UTF-16LE"), (b"\xfe\xff", "UTF-16BE"),
]  # fmt: skip
# Text by its first bytes that are not white space (after a BOM): JSON Lines, a first line that
# opens an object with a key (or an empty object); a JSON array
TEXT_MAGICS = [(b'{"', "jsonl"), (b'{ "', "jsonl"), (b"{}", "jsonl"), (b"[", "json")]
# A directory that holds none of the markers below and none of the files the table above names
FILES = "files"
# Directories, by a file inside them: a lovecraft dataset; a Hugging Face ``save_to_disk`` dataset
# (or DatasetDict, which the reader refuses naming its splits).
DIRECTORIES = [("_manifest.json", "dataset"), ("state.json", "hf"), ("dataset_dict.json", "hf")]


# One line per kind for ``lovecraft --help`` and ``--input-format`` (tests/test_docs.py checks that
# every kind has one, and a reference page in docs/inputs/).
HELP = {
    "text": "one record per line, UTF-8",
    "csv": "CSV/TSV with a header (types inferred over the whole file)",
    "jsonl": "JSON Lines: one object per line; nested keys become dotted columns",
    "json": "a JSON array of objects (or scalars), streamed element by element",
    "npy": "NumPy arrays; several files of equal length become the columns",
    "npz": "NumPy .npz archives (savez, savez_compressed): each array a column",
    "hdf5": "HDF5 files: each dataset a column (groups as dotted names)",
    "parquet": "Parquet files, read by row group",
    "arrow": "Arrow IPC files and streams, Feather v2",
    "hf": "a Hugging Face save_to_disk directory",
    "dataset": "a lovecraft dataset directory (re-format or re-shard it)",
    "files": "a folder tree of files, a row each: path, bytes, label (ImageFolder); --decode image|audio",
    "webdataset": "WebDataset .tar shards: members grouped by key, a column per extension",
}


ENTRY_POINTS = "lovecraft_convert.inputs"


@dataclass(frozen=True)
class InputKind:
    """An input kind added at run time: its name (``--input-format``), its reader (a subclass of
    :class:`~lovecraft_convert.inputs.base.Reader`, or ``"module:Class"``), and how it is recognised
    without ``--input-format``: file extensions (``.ltsv``), leading bytes of the content, files
    that mark a directory of this kind; ``help`` is its line in ``lovecraft --help``."""

    name: str
    reader: Any
    extensions: tuple[str, ...] = ()
    magics: tuple[bytes, ...] = ()
    markers: tuple[str, ...] = ()
    help: str = ""


_registered: dict[str, InputKind] = {}
_entry_points_seen = False


def register(kind: InputKind) -> InputKind:
    """Make ``kind`` available by its name and recognised by its extensions, leading bytes and
    marker files, for every command (convert, shard, bucket, inspect, verify ``--against``). Its
    reader class must be importable by worker processes (defined in a module, not in ``__main__``).
    Built-in kinds and their extensions cannot be taken over."""
    if not kind.name or not isinstance(kind.name, str):
        raise ValueError("an input kind needs a name")
    if kind.name in READERS:
        raise ValueError(f"{kind.name} is a built-in input kind")
    taken = [e for e in kind.extensions if e.lower() in EXTENSIONS]
    if taken:
        raise ValueError(f"{taken[0]} is the extension of the built-in kind {EXTENSIONS[taken[0].lower()]}")
    _registered[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Forget a kind added with :func:`register` (built-in kinds cannot be removed)."""
    if name in READERS:
        raise ValueError(f"{name} is a built-in input kind")
    _registered.pop(name, None)


def plugins() -> list[InputKind]:
    """The kinds registered at run time (handed to worker processes, which register them too)."""
    return list(_registered.values())


def load_plugins(kinds: list[InputKind]) -> None:
    """Register the kinds of :func:`plugins` (in a worker process)."""
    for k in kinds:
        _registered.setdefault(k.name, k)


def builtin_names() -> tuple[str, ...]:
    """The built-in kinds (no entry-point scan: for the CLI's help)."""
    return tuple(READERS)


def names() -> tuple[str, ...]:
    """Every kind's name: the built-in ones first, then registered ones in order."""
    _entry_points()
    return tuple(READERS) + tuple(_registered)


def reader_of(kind: str) -> Any:
    """The reader class of ``kind`` (or its ``"module:Class"``), None for an unknown kind."""
    if kind in READERS:
        return READERS[kind]
    _entry_points()
    k = _registered.get(kind)
    return None if k is None else k.reader


def help_line(kind: str) -> str:
    return HELP.get(kind) or (_registered[kind].help if kind in _registered else "")


def by_extension(ext: str) -> str | None:
    """The kind a file extension (``.csv``, lower case) says, if any."""
    if ext in EXTENSIONS:
        return EXTENSIONS[ext]
    _entry_points()
    return next((k.name for k in _registered.values() if ext in (e.lower() for e in k.extensions)), None)


def by_content(head: bytes) -> str | None:
    """The kind the first bytes of a (decompressed) file say, if any: binary magics, then text ones
    (after a BOM and white space), then the registered kinds' magics."""
    for magic, kind in MAGICS:
        if head.startswith(magic):
            return kind
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
    for magic, kind in TEXT_MAGICS:
        if text.startswith(magic):
            return kind
    _entry_points()
    return next((k.name for k in _registered.values() if any(head.startswith(m) for m in k.magics)), None)


def markers() -> list[tuple[str, str]]:
    """(file, kind) pairs: a directory holding the file is an input of the kind."""
    _entry_points()
    return DIRECTORIES + [(m, k.name) for k in _registered.values() for m in k.markers]


def recognised_by(kind: str) -> list[str]:
    """How ``kind`` is recognised without --input-format: its extensions and marker files."""
    out = [ext for ext, k in EXTENSIONS.items() if k == kind]
    if kind in _registered:
        out += list(_registered[kind].extensions)
    out += [f"dir/{marker}" for marker, k in DIRECTORIES if k == kind]
    out += [f"dir/{marker}" for marker in (_registered[kind].markers if kind in _registered else ())]
    if kind == FILES:
        out = ["dir/", *out[:3], "..."]
    return out


def _entry_points() -> None:
    """Kinds of installed packages (entry-point group ``lovecraft_convert.inputs``), once."""
    global _entry_points_seen
    if _entry_points_seen:
        return
    _entry_points_seen = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        if ep.name not in _registered and ep.name not in READERS:
            register(ep.load())
