"""Files that go to an object store as they are written.

A run writing to a store keeps a local work directory (scratch) with a marker saying where its
files go (:class:`~.output.RemoteOutputDir` writes it). A writer that only appends (Parquet,
TFRecord, Megatron) asks :func:`open_stream` for the object its file becomes and writes there
instead of to scratch; when it is finished, the bytes and digest are recorded in the work
directory, and the commit checks them against the writer's record like those of an uploaded file.
"""

from __future__ import annotations

import json
import os

from .stores import get_store
from .uri import split

MARKER = "_remote.json"  # in the local work directory: where the run's files go
UPLOADED = "_uploaded"  # in the local work directory: one record per file already on the store


def target(work: str) -> dict | None:
    """Where the files of the work directory ``work`` go when the run writes to a store (``uri``,
    ``run``, ``part``, ``cap`` and the key ``prefix`` of the run), None for a local run."""
    marker = os.path.join(work, MARKER)
    if not os.path.exists(marker):
        return None
    with open(marker) as f:
        where = json.load(f)
    _, _, key = split(where["uri"])
    where["prefix"] = (key.strip("/") + "/" if key.strip("/") else "") + where["run"] + "/"
    return where


def _work_of(path: str) -> tuple[str, str]:
    """(work directory, path relative to it) of a file a writer makes: in the work directory
    itself (``convert``) or in a unit's private directory inside it (``.unit-<k>``, whose files
    keep their names when they are moved into the work directory)."""
    d, name = os.path.split(os.path.abspath(path))
    if os.path.basename(d).startswith(".unit-"):
        d = os.path.dirname(d)
    return d, name


class StreamedFile:
    """The object the local file ``path`` becomes, written as its bytes come (an
    :class:`~.base.ObjectWriter`); ``close`` records its bytes and digest in the work directory."""

    def __init__(self, path: str, where: dict) -> None:
        self.work, self.rel = _work_of(path)
        store = get_store(where["uri"])
        self.out = store.open_writer(where["prefix"] + self.rel, part=where["part"], cap=where.get("cap"))

    def write(self, data) -> None:
        self.out.write(data)

    def close(self, nbytes: int, digest: str) -> None:
        self.out.close()  # the object appears now (an upload that fails is aborted)
        record(self.work, self.rel, nbytes, digest)

    def abort(self) -> None:
        self.out.abort()


def open_stream(path: str) -> StreamedFile | None:
    """The object the file ``path`` becomes when the run writes to a store, so the writer sends
    its bytes there as they come instead of to local scratch; None for a local run."""
    where = target(_work_of(path)[0])
    return None if where is None else StreamedFile(path, where)


def move_streamed(src: str, dst: str) -> None:
    """Rename a streamed file (a writer that numbers its first file once it starts a second): the
    object is copied inside the store to its new name and the old one deleted."""
    work, rel = _work_of(src)
    _, new = _work_of(dst)
    where = target(work)
    nbytes, digest = uploaded(work, rel)
    store = get_store(where["uri"])
    store.copy(where["prefix"] + rel, where["prefix"] + new)
    store.delete([where["prefix"] + rel])
    record(work, new, nbytes, digest)
    os.unlink(_record_path(work, rel))


def _record_path(work: str, rel: str) -> str:
    return os.path.join(work, UPLOADED, rel.replace("/", "%2F") + ".json")


def record(work: str, rel: str, nbytes: int, digest: str | None) -> None:
    """Record that the file ``rel`` of ``work`` is on the store with these bytes and digest."""
    os.makedirs(os.path.join(work, UPLOADED), exist_ok=True)
    path = _record_path(work, rel)
    with open(path + ".tmp", "w") as f:
        json.dump({"bytes": nbytes, "digest": digest}, f)
    os.rename(path + ".tmp", path)


def uploaded(work: str, rel: str) -> tuple[int, str | None]:
    """(bytes, digest) of a file a unit uploaded; (-1, None) when there is no record of it."""
    try:
        with open(_record_path(work, rel)) as f:
            d = json.load(f)
        return int(d["bytes"]), str(d["digest"])
    except (OSError, ValueError, KeyError):
        return -1, None
