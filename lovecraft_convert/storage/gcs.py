"""``gs://`` through pyarrow's GcsFileSystem (credentials as Google's libraries find them).

GCS has preconditions (``ifGenerationMatch=0``) but pyarrow does not expose them, so the commit
here is check-then-put: the manifest is written only if none is there when checked, which leaves
a window (between the check and the write) where two runs racing to one prefix could both
commit. Use S3-protocol access to GCS (its XML API with HMAC keys and
``AWS_ENDPOINT_URL=https://storage.googleapis.com``) where that matters.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from .base import ObjectWriter, PreconditionFailed, StorageError, Store


class GcsStore(Store):
    scheme = "gs"

    def __init__(self, bucket: str) -> None:
        super().__init__(bucket)
        self._fs = None

    @property
    def fs(self):
        if self._fs is None:
            from pyarrow import fs

            with errors(self.uri()):
                self._fs = fs.GcsFileSystem()
        return self._fs

    def _p(self, key: str) -> str:
        return f"{self.bucket}/{key}" if key else self.bucket

    def check(self, key: str = "") -> None:
        from pyarrow import fs

        with errors(self.uri(key)):
            if self.fs.get_file_info(self.bucket).type == fs.FileType.NotFound:
                raise StorageError(f"no such bucket '{self.bucket}'", where=self.uri(key), hint="check the bucket name")

    def size(self, key: str) -> int | None:
        from pyarrow import fs

        with errors(self.uri(key)):
            info = self.fs.get_file_info(self._p(key))
        return info.size if info.type == fs.FileType.File else None

    def open_body(self, key: str, start: int, end: int) -> Any:
        with errors(self.uri(key)):
            f = self.fs.open_input_file(self._p(key))
            f.seek(start)
        return _Limited(f, end - start)

    def read_all(self, key: str) -> bytes | None:
        if self.size(key) is None:
            return None
        with errors(self.uri(key)), self.fs.open_input_stream(self._p(key)) as f:
            return f.read()

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        if if_absent and self.size(key) is not None:  # check-then-put: see the module's note
            raise PreconditionFailed(self.uri(key))
        with errors(self.uri(key)), self.fs.open_output_stream(self._p(key)) as f:
            f.write(data)

    def list(self, prefix: str) -> list[tuple[str, int]]:
        from pyarrow import fs

        base = prefix if prefix.endswith("/") or not prefix else os.path.dirname(prefix.rstrip("/"))
        sel = fs.FileSelector(self._p(base.rstrip("/")), recursive=True, allow_not_found=True)
        with errors(self.uri(prefix)):
            infos = self.fs.get_file_info(sel)
        out = []
        for i in infos:
            key = i.path[len(self.bucket) + 1 :]
            if i.type == fs.FileType.File and key.startswith(prefix):
                out.append((key, i.size))
        return sorted(out)

    def delete(self, keys: list[str]) -> None:
        for k in keys:
            with errors(self.uri(k)), contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(self._p(k))

    def open_writer(self, key: str, *, part: int, cap: int | None = None) -> ObjectWriter:
        return _StreamWriter(self, key)

    def copy(self, src: str, dst: str) -> None:
        with errors(self.uri(src)):
            self.fs.copy_file(self._p(src), self._p(dst))


class _StreamWriter(ObjectWriter):
    """pyarrow's GCS output stream (a resumable upload that sends as it is written); an aborted
    one is finished and deleted, since pyarrow cannot cancel it (it lies under the run's prefix,
    which a failed run removes anyway)."""

    def __init__(self, store: GcsStore, key: str) -> None:
        self.store, self.key = store, key
        with errors(store.uri(key)):
            self.f = store.fs.open_output_stream(store._p(key))
        self.total = 0

    def write(self, data) -> None:
        with errors(self.store.uri(self.key)):
            self.f.write(data)
        self.total += memoryview(data).nbytes

    def close(self) -> int:
        with errors(self.store.uri(self.key)):
            self.f.close()
        return self.total

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.f.close()
        with contextlib.suppress(Exception):
            self.store.delete([self.key])


class _Limited:
    def __init__(self, f, left: int) -> None:
        self.f = f
        self.left = left

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.f.read(n) if n > 0 else b""
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.f.close()


@contextlib.contextmanager
def errors(uri: str):
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError:
        raise StorageError("no such object", where=uri, hint="check the path") from None
    except PermissionError:
        raise StorageError("access denied", where=uri, hint="check the Google credentials") from None
    except OSError as e:
        raise StorageError(" ".join(str(e).split())[:300], where=uri, hint="check the URI and credentials") from None
