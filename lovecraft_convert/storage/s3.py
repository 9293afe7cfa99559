"""S3 and every S3-compatible store, through boto3.

boto3 rather than pyarrow's S3FileSystem or fsspec: the commit needs conditional writes
(``If-None-Match: *`` on ``put_object`` and ``complete_multipart_upload``), control of multipart
uploads (part size, abort, listing the unfinished ones of a dead run), and the endpoint from
``AWS_ENDPOINT_URL`` (which boto3 reads and pyarrow's ``S3FileSystem()`` does not). Transient
errors (throttling, 5xx, dropped connections) are retried by botocore's "standard" mode with
exponential backoff and jitter, ``LOVECRAFT_S3_ATTEMPTS`` attempts (default 8).
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

from ..runtime.interrupts import result
from .base import GROW_AFTER, MAX_PARTS, ObjectWriter, PreconditionFailed, StorageError, Store, stream_limit

CONFIG_HINTS = {
    "creds": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or an AWS profile)",
}


class S3Store(Store):
    scheme = "s3"

    def __init__(self, bucket: str) -> None:
        super().__init__(bucket)
        self._client = None
        self._lock = threading.Lock()

    @property
    def client(self):
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = make_client()
        return self._client

    # -- reading -------------------------------------------------------------------------------

    def check(self, key: str = "") -> None:
        with errors(self.uri(key.rstrip("/")), bucket_op=True):
            self.client.head_bucket(Bucket=self.bucket)

    def size(self, key: str) -> int | None:
        with errors(self.uri(key), missing_ok=True):
            return int(self.client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
        return None

    def open_body(self, key: str, start: int, end: int) -> Any:
        if end <= start:
            import io

            return io.BytesIO(b"")
        with errors(self.uri(key)):
            r = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}")
            return r["Body"]

    def read_all(self, key: str) -> bytes | None:
        with errors(self.uri(key), missing_ok=True):
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return None

    # -- writing -------------------------------------------------------------------------------

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        extra = {"IfNoneMatch": "*"} if if_absent else {}
        with errors(self.uri(key), precondition=True):
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, **extra)

    def list(self, prefix: str) -> list[tuple[str, int]]:
        out = []
        with errors(self.uri(prefix)):
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
            for page in pages:
                for o in page.get("Contents", []):
                    out.append((o["Key"], int(o["Size"])))
        return out

    def delete(self, keys: list[str]) -> None:
        keys = list(keys)
        for i in range(0, len(keys), 1000):
            chunk = keys[i : i + 1000]
            with errors(self.uri(chunk[0])):
                self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True}
                )

    def uploads(self, prefix: str) -> list[str]:
        out = []
        with errors(self.uri(prefix)):
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=prefix)
            for page in pages:
                out.extend(u["Key"] for u in page.get("Uploads", []))
        return sorted(out)

    def abort_uploads(self, prefix: str) -> int:
        n = 0
        with errors(self.uri(prefix)):
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=prefix)
            for page in pages:
                for u in page.get("Uploads", []):
                    with contextlib.suppress(Exception):
                        self.client.abort_multipart_upload(Bucket=self.bucket, Key=u["Key"], UploadId=u["UploadId"])
                        n += 1
        return n

    def _part(self, uri: str, key: str, upload_id: str, number: int, data: bytes) -> dict:
        with errors(uri):
            r = self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data)
        return {"PartNumber": number, "ETag": r["ETag"]}

    def open_writer(self, key: str, *, part: int, cap: int | None = None) -> ObjectWriter:
        return _MultipartWriter(self, key, part, cap or part)

    def copy(self, src: str, dst: str) -> None:
        with errors(self.uri(src)):  # boto3's managed copy: one request, or part copies beyond 5 GB
            self.client.copy({"Bucket": self.bucket, "Key": src}, self.bucket, dst)


class _MultipartWriter(ObjectWriter):
    """An S3 object written as it comes: one ``put_object`` when it ends within its first part,
    otherwise a multipart upload whose parts go up (two at a time, in threads) while the next one
    fills. Parts grow from ``part`` to ``cap`` after :data:`~.base.GROW_AFTER` of them, so an
    object of unknown size can reach :func:`~.base.stream_limit` bytes in S3's 10,000 parts."""

    def __init__(self, store: S3Store, key: str, part: int, cap: int) -> None:
        self.store, self.key, self.part, self.cap = store, key, part, max(cap, part)
        self.uri = store.uri(key)
        self.buf = bytearray()
        self.upload_id: str | None = None
        self.pool = None
        self.pending: list = []
        self.done: list[dict] = []
        self.total = 0

    def _size(self) -> int:
        return self.part if len(self.done) + len(self.pending) < GROW_AFTER else self.cap

    def write(self, data) -> None:
        mv = memoryview(data).cast("B")
        self.total += len(mv)
        if not self.buf and isinstance(data, bytes) and len(data) == self._size():  # a whole part, as it is
            self._send(data)
            return
        while len(mv):
            size = self._size()
            k = min(size - len(self.buf), len(mv))
            self.buf += mv[:k]
            mv = mv[k:]
            if len(self.buf) >= size:
                self._send(bytes(self.buf))
                self.buf = bytearray()

    def _send(self, data: bytes) -> None:
        from concurrent.futures import ThreadPoolExecutor

        number = len(self.done) + len(self.pending) + 1
        if number > MAX_PARTS:
            raise StorageError(
                where=self.uri,
                message=f"an object larger than {stream_limit(self.part, self.cap, MAX_PARTS, GROW_AFTER)} bytes cannot be written "
                "in S3's 10,000 parts of this size",
                hint="raise --max-memory (parts are sized from it)",
            )
        if self.upload_id is None:
            with errors(self.uri):
                self.upload_id = self.store.client.create_multipart_upload(Bucket=self.store.bucket, Key=self.key)[
                    "UploadId"
                ]
            self.pool = ThreadPoolExecutor(2, thread_name_prefix="lovecraft-upload")
        while len(self.pending) >= 2:  # this part and two going up: at most three in memory
            self.done.append(result(self.pending.pop(0)))
        self.pending.append(self.pool.submit(self.store._part, self.uri, self.key, self.upload_id, number, data))

    def close(self) -> int:
        try:
            if self.upload_id is None:
                with errors(self.uri):
                    self.store.client.put_object(Bucket=self.store.bucket, Key=self.key, Body=bytes(self.buf))
            else:
                if self.buf:
                    self._send(bytes(self.buf))
                while self.pending:
                    self.done.append(result(self.pending.pop(0)))
                with errors(self.uri):
                    self.store.client.complete_multipart_upload(
                        Bucket=self.store.bucket,
                        Key=self.key,
                        UploadId=self.upload_id,
                        MultipartUpload={"Parts": self.done},
                    )
        except BaseException:
            self.abort()
            raise
        self.buf = bytearray()
        self._stop()
        return self.total

    def _stop(self) -> None:
        if self.pool is not None:
            for fut in self.pending:
                fut.cancel()
            self.pool.shutdown(wait=True)
            self.pool = None
        self.pending = []

    def abort(self) -> None:
        self.buf = bytearray()
        self._stop()
        if self.upload_id is not None:
            with contextlib.suppress(Exception):
                self.store.client.abort_multipart_upload(
                    Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id
                )
            self.upload_id = None


def make_client():
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise StorageError(
            "s3:// needs boto3, which is not installed", hint="pip install 'lovecraft_convert[s3]'"
        ) from None
    attempts = int(os.environ.get("LOVECRAFT_S3_ATTEMPTS", "8"))
    config = Config(
        retries={"mode": "standard", "max_attempts": attempts},
        max_pool_connections=16,
        connect_timeout=float(os.environ.get("LOVECRAFT_S3_CONNECT_TIMEOUT", "10")),
        # seconds without a byte from a connection that answered (a stuck endpoint): with 8
        # attempts, 60 s kept a run silent for 9 minutes before its one line
        read_timeout=float(os.environ.get("LOVECRAFT_S3_READ_TIMEOUT", "20")),
    )
    session = boto3.session.Session()
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or session.region_name
    return session.client("s3", region_name=region or "us-east-1", config=config)


@contextlib.contextmanager
def errors(uri: str, *, missing_ok: bool = False, precondition: bool = False, bucket_op: bool = False):
    """Turn botocore's exceptions into one-line StorageErrors naming ``uri`` (and a missing object
    into nothing when ``missing_ok``; a failed ``If-None-Match`` into PreconditionFailed)."""
    from botocore import exceptions as bx

    try:
        yield
    except bx.ClientError as e:
        err = e.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if precondition and (code in ("PreconditionFailed", "412") or status == 412):
            raise PreconditionFailed(uri) from None
        if missing_ok and code in ("NoSuchKey", "404", "NotFound"):
            return
        raise client_error(uri, code, status, str(err.get("Message") or ""), bucket_op) from None
    except bx.NoCredentialsError:
        raise StorageError(where=uri, message="no credentials found", hint=CONFIG_HINTS["creds"]) from None
    except (bx.EndpointConnectionError, bx.ConnectTimeoutError) as e:
        endpoint = os.environ.get("AWS_ENDPOINT_URL") or getattr(e, "kwargs", {}).get("endpoint_url") or "the endpoint"
        raise StorageError(
            where=uri,
            message=f"cannot connect to {endpoint}",
            hint="check the network and AWS_ENDPOINT_URL/AWS_REGION, then run the command again",
        ) from None
    except (bx.ReadTimeoutError, bx.ConnectionClosedError, bx.ResponseStreamingError) as e:
        raise StorageError(
            where=uri,
            message=f"the connection failed after retries ({type(e).__name__})",
            hint="check the network, then run the command again (shard and bucket resume with --resume)",
        ) from None
    except bx.BotoCoreError as e:
        raise StorageError(
            where=uri, message=f"{' '.join(str(e).split())}", hint="check the URI and AWS settings"
        ) from None


def client_error(uri: str, code: str, status: int | None, message: str, bucket_op: bool = False) -> StorageError:
    _, _, rest = uri.partition("://")
    bucket = rest.split("/", 1)[0]
    if code == "NoSuchBucket" or (bucket_op and code in ("404", "NotFound")):
        return StorageError(
            where=uri,
            message=f"no such bucket '{bucket}'",
            hint="check the bucket name, AWS_REGION and AWS_ENDPOINT_URL",
        )
    if code in ("NoSuchKey", "404", "NotFound"):
        return StorageError(where=uri, message="no such object", hint="check the path")
    if code in ("ExpiredToken", "TokenRefreshRequired", "RequestExpired"):
        return StorageError(
            where=uri, message="the credentials have expired", hint="renew them (a new AWS_SESSION_TOKEN) and run again"
        )
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken"):
        return StorageError(where=uri, message=f"the credentials were refused ({code})", hint=CONFIG_HINTS["creds"])
    if code in ("AccessDenied", "403", "Forbidden", "AllAccessDisabled"):
        return StorageError(
            where=uri,
            message="access denied",
            hint="check the credentials and that they may read and write this bucket",
        )
    text = f" ({' '.join(message.split())[:200]})" if message else ""
    return StorageError(
        where=uri, message=f"the store answered {code or status}{text}", hint="check the URI and AWS settings"
    )
