"""The store interface every scheme implements, the store of a URI, and the one-line errors."""

from __future__ import annotations

from typing import Any

from ..errors import LovecraftError


class StorageError(LovecraftError):
    """The object store refused or could not be reached (missing bucket, access denied, expired
    credentials, network); one line naming the URI and what to do."""

    kind = "storage"


def named(e: StorageError, where: str) -> StorageError:
    """The same error naming ``where`` (what the user gave) instead of the object it failed on
    (but a bare ``s3://`` stripped of its slashes, ``s3:``, is named as the error names it)."""
    if "://" not in where and e.where and "://" in e.where:
        where = e.where
    return StorageError(e.detail, where=where, hint=e.hint, kind=e.kind)


class PreconditionFailed(Exception):
    """A conditional write found the object already there (S3's 412 to ``If-None-Match: *``)."""


MIN_PART = 5 << 20  # S3's smallest multipart part (but the last)
MAX_PARTS = 10_000


def part_size(budget: int, size: int | None = None) -> int:
    """The multipart part size for a memory budget: 1/32 of it (three parts are in flight), at
    least 5 MiB, and large enough that ``size`` bytes fit in 10,000 parts."""
    p = max(MIN_PART, budget // 32)
    if size:
        p = max(p, -(-size // MAX_PARTS))
    return p


GROW_AFTER = 2_000  # parts of an object of unknown size before its parts grow to the largest size


def part_cap(budget: int) -> int:
    """The largest part of an object streamed without knowing its size: 1/16 of the budget (three
    in memory are 3/16 of it), never less than :func:`part_size`."""
    return max(part_size(budget), budget // 16)


def stream_limit(part: int, cap: int, parts: int = MAX_PARTS, grow_after: int = GROW_AFTER) -> int:
    """Bytes an object streamed in parts of ``part`` (growing to ``cap`` after ``grow_after``
    parts) can hold within ``parts`` parts (S3's 10,000)."""
    return grow_after * part + (parts - grow_after) * cap


class ObjectWriter:
    """An object written as its bytes come (``write``), made visible by ``close()`` and never by
    ``abort()``; at most three parts of it are in memory."""

    def write(self, data) -> None:
        raise NotImplementedError

    def close(self) -> int:
        """Finish the object; the bytes it holds."""
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError


class Store:
    """One bucket of an object store. Keys are ``/``-separated, without a leading slash."""

    scheme = ""

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket

    def uri(self, key: str = "") -> str:
        return f"{self.scheme}://{self.bucket}/{key}" if key else f"{self.scheme}://{self.bucket}"

    # every method below raises StorageError (naming the URI) for what the user can fix
    def check(self, key: str = "") -> None:
        """The bucket exists and is reachable with these credentials."""
        raise NotImplementedError

    def size(self, key: str) -> int | None:
        """The object's size, None when there is none."""
        raise NotImplementedError

    def open_body(self, key: str, start: int, end: int) -> Any:
        """A stream (``read(n)``, ``close()``) of bytes ``[start, end)`` of the object."""
        raise NotImplementedError

    def read_all(self, key: str) -> bytes | None:
        """The whole (small) object, None when there is none."""
        raise NotImplementedError

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Write a small object; with ``if_absent``, raise PreconditionFailed when one is there."""
        raise NotImplementedError

    def list(self, prefix: str) -> list[tuple[str, int]]:
        """(key, size) of every object under ``prefix`` (a ``/``-ended prefix lists a "directory")."""
        raise NotImplementedError

    def delete(self, keys: list[str]) -> None:
        raise NotImplementedError

    def open_writer(self, key: str, *, part: int, cap: int | None = None) -> ObjectWriter:
        """An :class:`ObjectWriter` of ``key``: parts of ``part`` bytes, growing to ``cap`` when
        the object turns out large (its size is not known in advance)."""
        raise NotImplementedError

    def copy(self, src: str, dst: str) -> None:
        """Copy the object ``src`` to ``dst`` inside the store (no bytes through this process)."""
        raise NotImplementedError

    def upload(self, local: str, key: str, *, part: int, hash: str) -> tuple[int, str]:
        """Upload the local file ``local`` as ``key`` (in parts of ``part`` bytes, hashed on the
        way); (bytes, hex digest). A failed or interrupted upload is aborted."""
        import os

        from ..runtime.hashing import new_hash

        h = new_hash(hash)
        size = os.path.getsize(local)
        part = max(part, -(-size // MAX_PARTS))  # S3 takes at most 10,000 parts
        out = self.open_writer(key, part=part)
        try:
            with open(local, "rb", buffering=0) as f:
                while data := f.read(part):
                    h.update(data)
                    out.write(data)
                    del data
            return out.close(), h.hexdigest()
        except BaseException:
            out.abort()
            raise

    def uploads(self, prefix: str) -> list[str]:
        """Keys of unfinished multipart uploads under ``prefix``."""
        return []

    def abort_uploads(self, prefix: str) -> int:
        """Abort unfinished multipart uploads under ``prefix``; how many."""
        return 0
