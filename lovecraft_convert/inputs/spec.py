"""One input as the readers see it (:class:`InputSpec`): a path (or ``-``), its compression and
kind, and what the manifest records of it. Apart from :mod:`.sources`, which resolves what the user
named into specs, so that the streams that open a spec (:mod:`.streams`) and the resolver that
peeks into one do not import each other."""

from __future__ import annotations

import os
from dataclasses import dataclass

COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd", ".zstd": "zstd"}


@dataclass
class InputSpec:
    """One input: a path (or ``-``), its compression and format, and what the manifest records."""

    path: str
    name: str
    compression: str | None = None
    format: str | None = None
    size: int | None = None
    mtime: float | None = None
    stdin_spool: str | None = None  # stdin is spooled to this file when it must be read twice
    notes: dict | None = None  # what the reader decided about it that the manifest records (column types)
    directory: bool = False  # a dataset on an object store (a prefix holding a manifest)
    # CSV: the delimiter its first lines showed, sniffed once by the first reader that needed it and
    # carried with the spec to the units that read it (a shard of many small files reads each once)
    sniffed_delimiter: str | None = None

    @property
    def is_stdin(self) -> bool:
        return self.path == "-"

    @property
    def base_ext(self) -> str:
        """The extension before any compression extension (``.csv`` of ``a.csv.gz``)."""
        base = self.path.lower()
        for ext in COMPRESSIONS:
            if base.endswith(ext):
                base = base[: -len(ext)]
        return os.path.splitext(base)[1]

    @property
    def stem(self) -> str:
        base = os.path.basename(self.path if not self.is_stdin else "stdin")
        for ext in COMPRESSIONS:
            if base.endswith(ext):
                base = base[: -len(ext)]
        return os.path.splitext(base)[0]

    def describe(self) -> dict:
        d = {
            "name": self.name,
            "path": None if self.is_stdin or not self.path else _absolute(self.path),  # "": data in memory
            "size": self.size,
            "mtime": self.mtime,
            "format": self.format,
            "compression": self.compression,
        }
        if self.notes:
            d.update(self.notes)
        return d

    @property
    def is_dir(self) -> bool:
        return self.directory or (not self.is_stdin and "://" not in self.path and os.path.isdir(self.path))


def _absolute(path: str) -> str:
    from ..storage import is_remote

    return path if is_remote(path) else os.path.abspath(path)
