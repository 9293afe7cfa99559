"""MDS and litdata shards that lovecraft writes to object storage, streamed from there by the peers'
own loaders: ``shard ... -o s3://bucket/out`` against moto's S3 server over TLS (tests/peers/
s3server.py), then ``streaming.StreamingDataset(remote=..., validate_hash="sha256")`` and
``litdata.StreamingDataset("s3://...")`` (through obstore) read every row from it. A dataset on a
store lives under its run's prefix (``out/run-<id>/``, with its ``index.json``), which is what the
manifest names and ``inspect`` prints."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import pytest

from tests.conftest import SUBPROCESS_ENV
from tests.formats.shard_sources import blobs_parquet
from tests.peers import require_peers, run_peer
from tests.peers.conftest import peer_s3  # noqa: F401 - the session's S3 server

READ = """
import json, os, sys

if __name__ == "__main__":
    import boto3
    import litdata
    from streaming import StreamingDataset

    bucket, mds_remote, ld_remote, cache = sys.argv[1:5]
    s3 = boto3.client("s3")
    if sys.argv[5] == "create":
        s3.create_bucket(Bucket=bucket)
        print(json.dumps("created"))
        sys.exit(0)
    ds = StreamingDataset(remote=mds_remote, local=cache + "/mds", shuffle=False, batch_size=1, validate_hash="sha256")
    mds = [[int(ds[i]["label"]), len(ds[i]["jpg"])] for i in range(len(ds))]
    ld = litdata.StreamingDataset(ld_remote, cache_dir=cache + "/ld")
    lit = [[int(ld[i]["label"]), len(ld[i]["jpg"])] for i in range(len(ld))]
    print(json.dumps({"mds": mds, "litdata": lit}))
"""


@pytest.mark.slow
def test_streaming_and_litdata_read_lovecraft_shards_from_s3(peer_s3, tmp_path):  # noqa: F811
    require_peers("streaming", "litdata", "boto3")
    import pyarrow.parquet as pq

    bucket = f"lc-shards-{secrets.token_hex(6)}"
    cache = str(tmp_path / "cache")
    run_peer(READ, bucket, "", "", cache, "create", env=peer_s3)
    src = blobs_parquet(tmp_path / "b.parquet", rows=400)
    env = {**SUBPROCESS_ENV, **peer_s3}
    remotes = {}
    for fmt in ("mds", "litdata"):
        out = f"s3://{bucket}/{fmt}"
        cmd = [sys.executable, "-m", "lovecraft_convert", "shard", src, "-o", out, "--to", fmt, "--num-shards", "3"]
        r = subprocess.run([*cmd, "--hash", "sha256", "-q"], capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
        r = subprocess.run(
            [sys.executable, "-m", "lovecraft_convert", "inspect", out, "--json"],
            capture_output=True,
            text=True,
            env=env,
        )
        assert r.returncode == 0, r.stderr
        code = json.loads(r.stdout)["load"]["streaming" if fmt == "mds" else "litdata"]
        remote = code.split('"s3://', 1)[1].split('"', 1)[0]  # the loading code inspect prints names the run's prefix
        assert remote.startswith(f"{bucket}/{fmt}/run-"), code
        remotes[fmt] = "s3://" + remote
    got = run_peer(READ, bucket, remotes["mds"], remotes["litdata"], cache, "read", env=peer_s3)
    t = pq.read_table(src)
    want = [
        [label, len(jpg)] for label, jpg in zip(t.column("label").to_pylist(), t.column("jpg").to_pylist(), strict=True)
    ]
    assert got["mds"] == want
    assert got["litdata"] == want
    assert os.path.isdir(cache)
