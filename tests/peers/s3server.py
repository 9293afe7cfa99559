"""An S3 server on https://127.0.0.1 for the peers: moto's own server (``python -m moto.server``,
from the venv running the tests, which has moto[server]) with a certificate from a throwaway CA.

Why TLS: litdata fetches chunks through obstore, whose client options it sets itself without
``allow_http``, so against a plain ``http://`` endpoint its reads and uploads fail ("builder
error"); with https it takes its ordinary path. The peers are pointed at it by environment:

* ``AWS_ENDPOINT_URL``: botocore's own variable, which boto3 clients honour when no
  ``endpoint_url`` is given (litdata's client; MosaicML Streaming's too, which passes
  ``S3_ENDPOINT_URL`` and so ``None`` when that is unset); obstore takes litdata's endpoint from
  the boto3 client it builds.
* ``S3_ENDPOINT_URL``: MosaicML Streaming's own (its S3 downloader and uploader).
* ``AWS_CA_BUNDLE`` (botocore) and ``SSL_CERT_FILE`` (OpenSSL's default paths, and the native
  roots obstore's HTTP client loads) name the CA.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator


def _write_certificates(directory: str) -> tuple[str, str, str]:
    """A CA and a server certificate for 127.0.0.1 and localhost signed by it, valid for a day:
    (ca.pem, server.pem, server.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lovecraft peers test CA")])
    usage = dict(content_commitment=False, key_encipherment=False, data_encipherment=False, key_agreement=False)
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
                **usage,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = tuple(os.path.join(directory, n) for n in ("ca.pem", "server.pem", "server.key"))
    with open(paths[0], "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths[1], "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths[2], "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return paths  # type: ignore[return-value]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(url: str, ca: str, proc: subprocess.Popen, log: str, limit: float = 60) -> None:
    context = ssl.create_default_context(cafile=ca)
    deadline = time.monotonic() + limit
    while True:
        if proc.poll() is not None:
            with open(log, encoding="utf-8", errors="replace") as f:
                raise RuntimeError(f"moto's server exited {proc.returncode}:\n{f.read()[-3000:]}")
        try:
            urllib.request.urlopen(url, context=context, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # it answered
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"moto's server did not answer on {url} within {limit:.0f} s") from None
            time.sleep(0.2)


@contextlib.contextmanager
def tls_s3_server(directory: str) -> Iterator[dict[str, str]]:
    """Start moto's S3 server on a free port of 127.0.0.1 with TLS; yield the environment that
    points boto3, MosaicML Streaming, litdata (and obstore) at it; stop it on exit. ``directory``
    receives the certificates and the server's log."""
    ca, cert, key = _write_certificates(directory)
    log = os.path.join(directory, "moto.log")
    port = _free_port()
    url = f"https://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port), "-c", cert, "-k", key],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        _wait_until_up(url, ca, proc, log)
        yield {
            "AWS_ENDPOINT_URL": url,
            "S3_ENDPOINT_URL": url,
            "AWS_CA_BUNDLE": ca,
            "SSL_CERT_FILE": ca,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
