"""The S3 server the peer tests read from (tests/peers/s3server.py): moto's, over TLS on
127.0.0.1, started once per session; skipped, with the reason, where moto[server] or cryptography
is not installed in the venv running the tests."""

from __future__ import annotations

import importlib.util

import pytest

from . import require_peers
from .s3server import tls_s3_server


@pytest.fixture(scope="session")
def peer_s3(tmp_path_factory):
    """The environment (endpoint, CA, credentials) that points a peer snippet at the server."""
    require_peers("boto3")
    for module in ("moto", "cryptography"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is needed to serve S3 to the peers (pip install 'moto[server]')")
    with tls_s3_server(str(tmp_path_factory.mktemp("peer-s3"))) as env:
        yield env
