"""URIs and paths: which are remote, their parts, joining a dataset's root and its files."""

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
    rest = uri.split("://", 1)[1] if "://" in uri else ""  # ("s3:" left of a bare s3:// stripped of its /)
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
