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
    "npy": "lovecraft_convert.inputs.npy:NpyReader",
    "parquet": "lovecraft_convert.inputs.parquet:ParquetReader",
    "arrow": "lovecraft_convert.inputs.arrow:ArrowReader",
    "hf": "lovecraft_convert.inputs.arrow:HfReader",
    "dataset": "lovecraft_convert.inputs.dataset:DatasetReader",
}
EXTENSIONS = {
    ".csv": "csv", ".tsv": "csv", ".txt": "text", ".text": "text", ".jsonl": "jsonl", ".ndjson": "jsonl",
    ".npy": "npy", ".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow", ".arrows": "arrow",
}  # fmt: skip
# JSON Lines by content: a first line that opens an object with a key (or an empty object)
MAGICS = [
    (b"\x93NUMPY", "npy"), (b"PAR1", "parquet"), (b"ARROW1", "arrow"), (b"\xff\xff\xff\xff", "arrow"),
    (b'{"', "jsonl"), (b'{ "', "jsonl"), (b"{}", "jsonl"), (b'\xef\xbb\xbf{"', "jsonl"),
]  # fmt: skip
# Directories, by a file inside them: a lovecraft dataset; a Hugging Face ``save_to_disk`` dataset
# (or DatasetDict, which the reader refuses naming its splits).
DIRECTORIES = [("_manifest.json", "dataset"), ("state.json", "hf"), ("dataset_dict.json", "hf")]


def names() -> tuple[str, ...]:
    return tuple(READERS)
