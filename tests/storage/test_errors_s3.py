"""Each storage failure is one line naming the URI and what to do, exit 1, nothing left behind."""

from __future__ import annotations

import pytest

from lovecraft_convert.formats import builtin_names

from ..conftest import lovecraft


@pytest.fixture
def csv(tmp_path) -> str:
    p = tmp_path / "in.csv"
    p.write_text("a,b\n1,2\n3,4\n")
    return str(p)


def test_missing_bucket_output(s3_server, csv):
    r = lovecraft("convert", csv, "-o", "s3://lc-no-such-bucket/out", "--to", builtin_names()[0], "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        "Error: s3://lc-no-such-bucket/out: no such bucket 'lc-no-such-bucket'; "
        "check the bucket name, AWS_REGION and AWS_ENDPOINT_URL\n",
    )


def test_missing_bucket_input(s3_server, tmp_path):
    r = lovecraft("convert", "s3://lc-no-such-bucket/in.csv", "-o", str(tmp_path / "o"), "--to", builtin_names()[0])
    assert (r.exit_code, r.stderr) == (
        1,
        "Error: s3://lc-no-such-bucket/in.csv: no such bucket 'lc-no-such-bucket'; "
        "check the bucket name, AWS_REGION and AWS_ENDPOINT_URL\n",
    )


def test_missing_object_and_empty_glob(bucket, tmp_path):
    fmt = builtin_names()[0]
    r = lovecraft("convert", f"s3://{bucket}/nope.csv", "-o", str(tmp_path / "o"), "--to", fmt)
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: s3://{bucket}/nope.csv: no such object or prefix; check the URI (s3://bucket/key, a prefix, or a glob)\n",
    )
    r = lovecraft("convert", f"s3://{bucket}/d/*.csv", "-o", str(tmp_path / "o"), "--to", fmt)
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: s3://{bucket}/d/*.csv: no object matches this pattern; "
        "check the URI (s3://bucket/key, a prefix, or a glob)\n",
    )


def test_dataset_in_missing_bucket(s3_server):
    r = lovecraft("verify", "s3://lc-no-such-bucket/ds")
    assert (r.exit_code, r.stderr) == (
        1,
        "Error: s3://lc-no-such-bucket/ds: no such bucket 'lc-no-such-bucket'; "
        "check the bucket name, AWS_REGION and AWS_ENDPOINT_URL\n",
    )


def test_connection_refused(s3_server, csv, monkeypatch):
    import socket

    from lovecraft_convert.storage.stores import drop_stores

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("LOVECRAFT_S3_ATTEMPTS", "1")
    drop_stores()
    try:
        r = lovecraft("convert", csv, "-o", "s3://lc-bucket/out", "--to", builtin_names()[0], "-q")
    finally:
        drop_stores()
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: s3://lc-bucket/out: cannot connect to http://127.0.0.1:{port}; "
        "check the network and AWS_ENDPOINT_URL/AWS_REGION, then run the command again\n",
    )


def test_no_credentials(s3_server, bucket, tmp_path, monkeypatch):
    from lovecraft_convert.storage.stores import drop_stores

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    drop_stores()
    try:
        r = lovecraft("convert", f"s3://{bucket}/in.csv", "-o", str(tmp_path / "o"), "--to", builtin_names()[0])
    finally:
        drop_stores()
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: s3://{bucket}/in.csv: no credentials found; "
        "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or an AWS profile)\n",
    )


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("AccessDenied", "s3://b/k: access denied; check the credentials and that they may read and write this bucket"),
        ("ExpiredToken", "s3://b/k: the credentials have expired; renew them (a new AWS_SESSION_TOKEN) and run again"),
        (
            "InvalidAccessKeyId",
            "s3://b/k: the credentials were refused (InvalidAccessKeyId); "
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or an AWS profile)",
        ),
        ("NoSuchBucket", "s3://b/k: no such bucket 'b'; check the bucket name, AWS_REGION and AWS_ENDPOINT_URL"),
    ],
)
def test_client_errors_are_one_line(code, line):
    """The store's answers moto cannot be made to give (a denied or expired credential): botocore's
    own ClientError, as it raises it, through the same mapping."""
    pytest.importorskip("botocore")
    from botocore.exceptions import ClientError

    from lovecraft_convert.storage.base import StorageError
    from lovecraft_convert.storage.s3 import errors

    with pytest.raises(StorageError) as e, errors("s3://b/k"):
        raise ClientError({"Error": {"Code": code, "Message": "x"}, "ResponseMetadata": {"HTTPStatusCode": 403}}, "Op")
    assert e.value.one_line() == line
