"""The input kinds: names, the module and class of each reader, and how each is recognised.

One table maps file extensions to kinds (checked first, before any compression extension), one
maps leading bytes of the content to kinds (for files whose name says nothing), one maps the file
that marks a directory to its kind. Adding an input kind is one module under ``inputs/`` and a
line in each table that applies.
"""

from __future__ import annotations

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
    "dataset": "lovecraft_convert.inputs.dataset:DatasetReader",
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


def names() -> tuple[str, ...]:
    return tuple(READERS)


def recognised_by(kind: str) -> list[str]:
    """How ``kind`` is recognised without --input-format: its extensions and marker files."""
    out = [ext for ext, k in EXTENSIONS.items() if k == kind]
    out += [f"dir/{marker}" for marker, k in DIRECTORIES if k == kind]
    if kind == FILES:
        out = ["dir/", *out[:3], "..."]
    return out
