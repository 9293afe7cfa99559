"""The input kinds: names, the module and class of each reader, and how each is recognised.

One table maps file extensions to kinds (checked first, before any compression extension), one
maps leading bytes of the content to kinds (for files whose name says nothing). Adding an input
kind is one module under ``inputs/`` and a line in each table that applies.
"""

from __future__ import annotations

READERS = {
    "text": "lovecraft_convert.inputs.text:TextReader",
    "csv": "lovecraft_convert.inputs.csv:CsvReader",
    "jsonl": "lovecraft_convert.inputs.jsonl:JsonlReader",
    "npy": "lovecraft_convert.inputs.npy:NpyReader",
}
EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "text",
    ".text": "text",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".npy": "npy",
}
# JSON Lines by content: a first line that opens an object with a key (or an empty object)
MAGICS = [(b"\x93NUMPY", "npy"), (b'{"', "jsonl"), (b'{ "', "jsonl"), (b"{}", "jsonl"), (b'\xef\xbb\xbf{"', "jsonl")]


def names() -> tuple[str, ...]:
    return tuple(READERS)
