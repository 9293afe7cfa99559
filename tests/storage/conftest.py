"""An S3 server on 127.0.0.1 for the storage tests: moto's threaded server (the way s3fs's own
tests run), started once per session; every test gets its own bucket. Skipped, with the reason,
where moto or boto3 is not installed."""

from __future__ import annotations

import logging
import os
import secrets

import pytest


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    try:
        import boto3  # noqa: F401
        from moto.server import ThreadedMotoServer
    except ImportError as e:
        pytest.skip(f"moto[server] and boto3 are needed for the object-storage tests ({e})")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
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
