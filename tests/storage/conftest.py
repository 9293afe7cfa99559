"""An S3 server on 127.0.0.1 for the storage tests: moto's S3 app in a threaded werkzeug server
(what moto's ThreadedMotoServer runs, the way s3fs's own tests run) with a log of the requests it
answers, started once per session; every test gets its own bucket. Skipped, with the reason,
where moto or boto3 is not installed."""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time

import pytest


class RequestLog:
    """Every request the test server answers: (method, path, Range header), in order. The cache
    tests count the GETs of an object with it (what the server saw, not what the client meant)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str, str | None]] = []
        self.spans: list[tuple[str, str | None, float, float]] = []  # GETs: (path, range, began, answered)
        self.delay = 0.0  # seconds each GET is held before it is answered (to see which GETs overlap)
        self.lock = threading.Lock()

    def wrap(self, app):
        def logged(environ, start_response):
            method, path, rng = environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("HTTP_RANGE")
            with self.lock:
                self.items.append((method, path, rng))
            began = time.monotonic()
            if method == "GET" and self.delay:
                time.sleep(self.delay)
            out = app(environ, start_response)
            if method == "GET":
                with self.lock:
                    self.spans.append((path, rng, began, time.monotonic()))
            return out

        return logged

    def clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.spans.clear()

    def gets(self, bucket: str, key: str | None = None) -> list[tuple[str, str | None]]:
        """(path, range) of every GET of an object of ``bucket`` (``key``: of that object only)."""
        with self.lock:
            items = list(self.items)
        out = []
        for method, path, rng in items:
            if method != "GET" or not path.startswith(f"/{bucket}/"):
                continue
            k = path[len(bucket) + 2 :]
            if k and (key is None or k == key):
                out.append((k, rng))
        return out


class _Server:
    """moto's S3 app served on 127.0.0.1 by werkzeug in a thread (what moto's ThreadedMotoServer
    does), behind the request log."""

    def __init__(self, log: RequestLog) -> None:
        from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        app = DomainDispatcherApplication(create_backend_app)
        self.server = make_server("127.0.0.1", 0, log.wrap(app), threaded=True, request_handler=MotoRequestHandler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join()


@pytest.fixture(scope="session")
def s3_log() -> RequestLog:
    return RequestLog()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory, s3_log):
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as e:
        pytest.skip(f"moto[server] and boto3 are needed for the object-storage tests ({e})")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = _Server(s3_log)
    host, port = server.address()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "LOVECRAFT_CACHE": str(tmp_path_factory.mktemp("cache")),
        "LOVECRAFT_SCRATCH": str(tmp_path_factory.mktemp("scratch")),
        "LOVECRAFT_S3_ATTEMPTS": "3",
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    from lovecraft_convert.storage.stores import drop_stores

    drop_stores()
    try:
        yield env
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        drop_stores()
        server.stop()


@pytest.fixture
def s3(s3_server):
    """A boto3 client of the test server."""
    import boto3

    return boto3.client("s3")


@pytest.fixture
def bucket(s3) -> str:
    name = f"lc-{secrets.token_hex(6)}"
    s3.create_bucket(Bucket=name)
    return name


def objects(s3, bucket: str, prefix: str = "") -> dict[str, int]:
    """key -> size of every object under ``prefix``."""
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            out[o["Key"]] = o["Size"]
    return out


def get(s3, bucket: str, key: str) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def same_as_local(s3, bucket: str, prefix: str, local_dir: str) -> list[str]:
    """Compare a committed dataset on the store with a local run of the same command: the manifest
    parsed with json names ``run-<id>/<file>`` for each local file, every object holds the local
    file's bytes. Returns the files compared."""
    import json

    m = json.loads(get(s3, bucket, f"{prefix}/_manifest.json"))
    local = sorted(n for n in os.listdir(local_dir) if n != "_manifest.json")
    names = []
    extra = [v for v in m.values() if isinstance(v, dict) and isinstance(v.get("path"), str)]  # an index file
    for f in m["files"] + extra:
        run, _, name = f["path"].partition("/")
        assert run.startswith("run-"), f["path"]
        with open(os.path.join(local_dir, name), "rb") as fh:
            assert get(s3, bucket, f"{prefix}/{f['path']}") == fh.read(), name
        names.append(name)
    assert sorted(names) == local
    return names
