"""The one file that lists a dataset's shards for another project's loader (MDS's and litdata's
``index.json``), written once every unit is (``finish_dataset``), from the manifest alone, so
that it depends only on the files written (the same bytes whatever the workers, and after a
``--resume``); ``verify`` makes it again from the manifest and compares."""

from __future__ import annotations

import os
from collections.abc import Callable

from ..manifest import DEFAULT_HASH
from ..runtime.durable import HashingWriter
from ..storage.stream import open_stream
from .checking import CheckContext, FileProblem
from .writing import FileRecord


def write_index(directory: str, name: str, data: bytes, manifest: dict) -> dict:
    """Write ``data`` as ``directory/name`` (hashed with the run's algorithm, fsynced); its manifest entry."""
    hash = (manifest.get("options") or {}).get("hash") or DEFAULT_HASH
    path = os.path.join(directory, name)
    out = HashingWriter(path, hash=hash, threaded=False, sink=open_stream(path))
    try:
        out.write(data)
        nbytes, digest = out.close()
    except BaseException:
        out.abort()
        raise
    return FileRecord(name, 0, nbytes, digest, hash).to_dict()


def check_index(ctx: CheckContext, path: str, make: Callable[[dict], bytes], what: str) -> list[FileProblem]:
    """The index ``path`` against the one the manifest gives (``make(manifest)``)."""
    try:
        want = make(ctx.manifest)
    except (KeyError, TypeError, ValueError) as e:
        return [
            FileProblem(
                path, f"the manifest does not describe its files well enough to check the {what} ({e})", "manifest"
            )
        ]
    try:
        with open(ctx.full(path), "rb") as f:
            got = f.read(len(want) + 1)
    except OSError as e:
        return [FileProblem(path, f"cannot be read ({e})")]
    if got != want:
        return [FileProblem(path, f"is not the {what} of the files the manifest lists")]
    return []
