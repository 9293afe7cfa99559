"""One module per format. The registries map names to ``module:Class`` strings so that choosing a
format imports only that format's dependencies."""

from __future__ import annotations

import importlib

READERS = {
    "text": "lovecraft_convert.formats.text:TextReader",
    "csv": "lovecraft_convert.formats.csv:CsvReader",
    "npy": "lovecraft_convert.formats.npy:NpyReader",
}
WRITERS = {
    "memmap": "lovecraft_convert.formats.memmap:MemmapWriter",
    "hdf5": "lovecraft_convert.formats.hdf5:Hdf5Writer",
    "parquet": "lovecraft_convert.formats.parquet:ParquetWriter",
    "tfrecord": "lovecraft_convert.formats.tfrecord:TfrecordWriter",
}
OUTPUT_FORMATS = tuple(WRITERS)


def load(registry: dict[str, str], name: str):
    module, _, cls = registry[name].partition(":")
    return getattr(importlib.import_module(module), cls)
