"""Object storage: ``s3://`` (boto3, any S3-compatible store), ``gs://`` (pyarrow's GCS file
system) and ``file://`` (a local path) as inputs and outputs.

Nothing here is imported at CLI start-up beyond this module (boto3 and pyarrow are imported by the
functions that use them). Credentials, region and endpoint come from the variables the AWS SDKs
read (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``); boto3 reads them itself.
"""

from __future__ import annotations

import os
from typing import Any

REMOTE_SCHEMES = ("s3", "gs")


def scheme_of(path: Any) -> str | None:
    """``s3``/``gs``/``file`` of a URI, None for a plain path."""
    if not isinstance(path, str):
        return None
    head, sep, _ = path.partition("://")
    if not sep or not head.isalnum():
        return None
    return head.lower()


def is_remote(path: Any) -> bool:
    """Is ``path`` an object-store URI (``s3://``, ``gs://``)?"""
    return scheme_of(path) in REMOTE_SCHEMES


def local_path(path: str) -> str:
    """A ``file://`` URI as the local path it names; anything else unchanged."""
    if scheme_of(path) == "file":
        return path[len("file://") :] or "/"
    return path


def split(uri: str) -> tuple[str, str, str]:
    """(scheme, bucket, key) of ``s3://bucket/key`` (key without a leading slash, may be empty)."""
    scheme = scheme_of(uri)
    rest = uri.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return scheme or "", bucket, key


def join(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended, one ``/`` between each (URIs and local paths alike)."""
    if not is_remote(uri):
        return os.path.join(uri, *parts)
    out = uri.rstrip("/")
    for p in parts:
        p = p.strip("/")
        if p:
            out = f"{out}/{p}"
    return out


def child_path(root: str, rel: str) -> str:
    """The file ``rel`` (a manifest's relative, ``/``-separated path, already checked safe) of the
    dataset at ``root``: the one place every dataset reader joins a dataset's root and its files."""
    if is_remote(root):
        return join(root, rel)
    return os.path.join(root, *rel.split("/"))


def store_for(uri: str):
    """The :class:`~.base.Store` of ``uri``'s bucket (one per bucket and process)."""
    from .base import get_store

    return get_store(uri)


def open_input(path: str, buffer: int = 1 << 20):
    """A readable, seekable binary file of ``path``: the local file, or ranged reads of the object."""
    if is_remote(path):
        import io

        from .rangefile import RangeFile

        return io.BufferedReader(RangeFile(path, readahead=buffer), buffer_size=min(buffer, 1 << 20))
    return open(local_path(path), "rb")  # noqa: SIM115 - the caller closes it
