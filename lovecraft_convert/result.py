"""What ``convert``, ``shard`` and ``bucket`` return: the manifest they wrote, typed and frozen.

On disk the manifest stays ``_manifest.json`` (:mod:`lovecraft_convert.manifest` writes and reads
it); a Python caller gets a :class:`Manifest`: the fields every dataset has as typed attributes
(``rows``, ``schema``, ``files``...) and the whole JSON document behind a read-only mapping, so
``m["bucketing"]`` and ``m.get("notes")`` still reach the sections a command or a format adds.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .schema import Schema

__all__ = ["FileEntry", "Manifest"]


@dataclass(frozen=True)
class FileEntry:
    """One file of a dataset, as the manifest lists it (``path`` relative to the dataset)."""

    path: str
    rows: int
    bytes: int
    hash: str | None  # the algorithm of ``digest`` (blake3 | sha256)
    digest: str | None
    column: str | None = None  # formats writing a file per column (memmap)
    role: str | None = None  # which part of a column the file holds (memmap: data | values | offsets)
    shard: int | None = None
    bucket: int | None = None

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> FileEntry:
        from .manifest import file_digest

        algo, digest = file_digest(dict(entry))
        return cls(
            path=entry["path"],
            rows=entry["rows"],
            bytes=entry["bytes"],
            hash=algo,
            digest=digest,
            column=entry.get("column"),
            role=entry.get("role"),
            shard=entry.get("shard"),
            bucket=entry.get("bucket"),
        )


@dataclass(frozen=True, eq=False)
class Manifest(Mapping[str, Any]):
    """A dataset's manifest: what a job wrote, or what :meth:`read` found.

    The attributes are typed views of the JSON document; indexing (``m["rows"]``, ``m.get(...)``,
    ``"buckets" in m``, ``dict(m)``) reads the document itself, exactly as ``_manifest.json``
    holds it. Neither can be changed: :meth:`to_dict` gives a copy to edit.
    """

    path: str  # the dataset directory (or object-store URI)
    output_format: str
    rows: int
    schema: Schema
    files: tuple[FileEntry, ...]
    command: str | None = None  # convert | shard | bucket
    created_by: str | None = None
    created_at: str | None = None
    # ``--resume`` found the dataset complete, made by the same command and inputs: nothing was written
    nothing_to_do: bool = False
    document: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, document: Mapping[str, Any], path: str) -> Manifest:
        """The typed view of manifest ``document`` (a job's, or one read from ``path``)."""
        from .manifest import parse_schema

        doc = dict(document)
        nothing = bool(doc.pop("nothing_to_do", False))  # the driver's flag, never written to disk
        return cls(
            path=str(path),
            output_format=doc["output_format"],
            rows=doc["rows"],
            schema=parse_schema(doc["schema"]),
            files=tuple(FileEntry.of(f) for f in doc["files"]),
            command=doc.get("command"),
            created_by=doc.get("created_by"),
            created_at=doc.get("created_at"),
            nothing_to_do=nothing,
            document=types.MappingProxyType(doc),
        )

    @classmethod
    def read(cls, path: str) -> Manifest:
        """The manifest of the dataset at ``path`` (a directory or object-store URI), checked as
        every reader checks it (DatasetError: missing, unreadable, incomplete, edited)."""
        from . import manifest as mf
        from .errors import DatasetError
        from .storage.uri import is_remote

        if is_remote(path):
            from .storage.dataset import load

            m, problem = load(path.rstrip("/"))
            if problem is not None:
                raise DatasetError(f"{path.rstrip('/')}/{mf.MANIFEST_NAME}: {problem[1]}", hint="re-create the dataset")
        else:
            m = mf.read(path)
        where = mf.path_of(path)
        mf.check(m, where)
        mf.check_shape(m, where)
        return cls.of(m, path)

    # -- figures ------------------------------------------------------------------------------

    @property
    def bytes(self) -> int:
        """The bytes of every file the manifest lists."""
        return sum(f.bytes for f in self.files)

    @property
    def notes(self) -> tuple[str, ...]:
        """What the run noticed and did not refuse (a delimiter detected, columns left wide)."""
        return tuple(self.document.get("notes") or ())

    @property
    def float16(self) -> Mapping[str, Mapping[str, Any]]:
        """Per downcast column: values, overflows, clips, flushes to zero and the largest errors."""
        return self.document.get("float16") or {}

    @property
    def stats(self) -> Mapping[str, Any]:
        """Per column: count, NaNs, lengths (the dataset's statistics)."""
        return self.document.get("stats") or {}

    # -- the JSON document --------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of the document (what ``_manifest.json`` holds)."""
        return copy.deepcopy(dict(self.document))

    def to_json(self) -> str:
        from .manifest import dumps

        return dumps(dict(self.document))

    def __getitem__(self, key: str) -> Any:
        return self.document[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.document)

    def __len__(self) -> int:
        return len(self.document)

    def __repr__(self) -> str:
        return (
            f"Manifest(path={self.path!r}, output_format={self.output_format!r}, command={self.command!r}, "
            f"rows={self.rows}, columns={self.schema.names}, files={len(self.files)})"
        )
