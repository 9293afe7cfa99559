"""Object storage: ``s3://`` (boto3, any S3-compatible store), ``gs://`` (pyarrow's GCS file
system) and ``file://`` (a local path) as inputs and outputs.

Nothing here is imported at CLI start-up beyond this module (boto3 and pyarrow are imported by the
functions that use them). Credentials, region and endpoint come from the variables the AWS SDKs
read (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``); boto3 reads them itself.
"""

from __future__ import annotations

import os

from .uri import REMOTE_SCHEMES, child_path, is_remote, join, local_path, scheme_of, split

__all__ = ["REMOTE_SCHEMES", "child_path", "is_remote", "join", "local_path", "scheme_of", "split"]


def store_for(uri: str):
    """The :class:`~.base.Store` of ``uri``'s bucket (one per bucket and process)."""
    from .stores import get_store

    return get_store(uri)


def open_input(path: str, buffering: int = -1, readahead: int = 8 << 20):
    """A readable, seekable binary file of ``path`` (``open(path, "rb", buffering)`` alike): the
    local file; a file of a remote dataset opened for reading through the node's cache
    (:mod:`.remote`); or ranged reads of the object (``buffering=0``: the raw file)."""
    if is_remote(path):
        from .remote import registered

        rf = registered(path)
        if rf is not None:
            return rf.open(buffering)
        import io

        from .rangefile import RangeFile

        raw = RangeFile(path, readahead=readahead)
        return raw if buffering == 0 else io.BufferedReader(raw, buffer_size=1 << 20)
    return open(local_path(path), "rb", buffering=buffering)  # noqa: SIM115 - the caller closes it


def input_size(path: str) -> int:
    """The size of ``path``: a local file, a file of a remote dataset (its manifest's), an object."""
    if is_remote(path):
        from .remote import registered

        rf = registered(path)
        if rf is not None:
            return rf.size
        size = store_for(path).size(split(path)[2])
        if size is None:
            from .base import StorageError

            raise StorageError(f"{path}: no such object", hint="check the path")
        return size
    return os.path.getsize(local_path(path))


def list_matches(uri: str) -> list[tuple[str, int]]:
    """(URI, size) of the objects ``uri`` names: the object itself; every object under it when it
    names a prefix ("directory"); the objects matching it when it holds a glob (``*``, ``?``,
    ``[``; ``**`` crosses ``/``). Sorted by key; objects whose name starts with ``_`` or ``.`` in
    a listed prefix are skipped (markers and manifests, as Spark and pyarrow skip them)."""
    from .base import StorageError, named

    try:
        return _list_matches(uri)
    except StorageError as e:
        raise named(e, uri) from None


def _list_matches(uri: str) -> list[tuple[str, int]]:
    import fnmatch

    scheme, bucket, key = split(uri)
    store = store_for(uri)
    base = f"{scheme}://{bucket}/"
    magic = min((i for i, c in enumerate(key) if c in "*?["), default=-1)
    if magic >= 0:
        listed = store.list(key[:magic])
        pattern = key
        out = []
        # ``**/`` is any number of folders, none included (as Python's glob(recursive=True) and the
        # local inputs read it): fnmatch's ``**/`` needs one, so the pattern without it is tried too
        flat = pattern.replace("**/", "") if "**/" in pattern else None
        for k, size in listed:
            if "**" in pattern:
                hit = fnmatch.fnmatchcase(k, pattern) or (flat is not None and fnmatch.fnmatchcase(k, flat))
            else:
                hit = fnmatch.fnmatchcase(k, pattern) and k.count("/") == pattern.count("/")
            if hit:
                out.append((base + k, size))
        return sorted(out)
    if key and not key.endswith("/"):
        size = store.size(key)
        if size is not None:
            return [(uri, size)]
    prefix = key if key.endswith("/") or not key else key + "/"
    out = []
    for k, size in store.list(prefix):
        name = k[len(prefix) :]
        if any(part.startswith(("_", ".")) for part in name.split("/")) or k.endswith("/"):
            continue
        out.append((base + k, size))
    return sorted(out)
