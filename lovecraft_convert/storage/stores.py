"""The store of a URI: one per scheme, bucket and process."""

from __future__ import annotations

import os
import threading

from .base import StorageError, Store

_stores: dict[tuple[int, str, str], Store] = {}
_lock = threading.Lock()


def get_store(uri: str) -> Store:
    from .uri import split

    scheme, bucket, _ = split(uri)
    if not bucket:
        shown = uri if "://" in uri else uri + "//"  # (a bare s3:// stripped of its slashes)
        raise StorageError("no bucket named", where=shown, hint="give a URI like s3://bucket/path")
    k = (os.getpid(), scheme, bucket)
    with _lock:
        s = _stores.get(k)
        if s is None:
            if scheme == "s3":
                from .s3 import S3Store

                s = S3Store(bucket)
            elif scheme == "gs":
                from .gcs import GcsStore

                s = GcsStore(bucket)
            else:
                raise StorageError(f"{uri}: unknown scheme {scheme}://", hint="use s3://, gs:// or file://")
            _stores[k] = s
        return s


def drop_stores() -> None:
    """Forget the cached stores (tests change the endpoint between sessions)."""
    with _lock:
        _stores.clear()
