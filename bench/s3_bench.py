"""``--only s3``: convert and shard to a local S3 server (moto's threaded server, started here)
against the same runs to local disk, and peak anonymous memory with a remote input 4x the budget.

The S3 server runs in this process and keeps objects in memory, so it is a measure of our side of
the protocol (multipart uploads, hashing, ranged reads, the commit), not of a network.
"""

from __future__ import annotations

import os
import secrets


def start_server() -> dict[str, str]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_REGION": "us-east-1",
    }


def bench_s3(b, size: int) -> None:
    import boto3
    from lovecraft_bench import LOVECRAFT, Row, make_csv, mbps, run

    env = start_server()
    os.environ.update(env)  # for boto3 here; the commands get it too
    client = boto3.client("s3")
    bucket = f"bench-{secrets.token_hex(4)}"
    client.create_bucket(Bucket=bucket)
    size = max(size // 4, 16 << 20)  # the server keeps every object in this process's memory
    src = make_csv(os.path.join(b.work, f"csv_{size // 10**6}MB.csv"), size)
    n = os.path.getsize(src)
    client.upload_file(src, bucket, "in/data.csv")
    remote_src = f"s3://{bucket}/in/data.csv"

    def remote(name: str) -> str:
        uri = f"s3://{bucket}/{name}"
        keys = [o["Key"] for p in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=name + "/")
                for o in p.get("Contents", [])]  # fmt: skip
        for i in range(0, len(keys), 1000):
            client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]})
        return uri

    res = b.rounds(
        {
            "conv_s3": lambda: [*LOVECRAFT, "convert", remote_src, "-o", remote("c"), "--to", "parquet", "-q"],
            "conv_disk": lambda: [*LOVECRAFT, "convert", src, "-o", b.out("s3c"), "--to", "parquet", "-q"],
            "conv_up": lambda: [*LOVECRAFT, "convert", src, "-o", remote("u"), "--to", "parquet", "-q"],
            "shard_s3": lambda: [
                *LOVECRAFT, "shard", remote_src, "-o", remote("s"), "--to", "tfrecord", "--num-shards", "8",
                "--workers", "2", "-q"],
            "shard_disk": lambda: [
                *LOVECRAFT, "shard", src, "-o", b.out("s3s"), "--to", "tfrecord", "--num-shards", "8",
                "--workers", "2", "-q"],
        }
    )  # fmt: skip
    b.rows.append(
        Row("convert CSV -> Parquet, s3 -> s3 (local moto)", mbps(n, res["conv_s3"]), "same, disk -> disk",
            mbps(n, res["conv_disk"]), 0.0, "no target")
    )  # fmt: skip
    b.rows.append(
        Row("convert CSV -> Parquet, disk -> s3 (local moto; the output streamed)", mbps(n, res["conv_up"]),
            "same, disk -> disk", mbps(n, res["conv_disk"]), 0.0, "no target")
    )  # fmt: skip
    b.rows.append(
        Row("shard CSV -> TFRecord x8, s3 -> s3 (local moto), --workers 2", mbps(n, res["shard_s3"]),
            "same, disk -> disk", mbps(n, res["shard_disk"]), 0.0, "no target")
    )  # fmt: skip

    budget = 64 << 20
    big = make_csv(os.path.join(b.work, "csv_s3_4x.csv"), 4 * budget)
    client.upload_file(big, bucket, "in/big.csv")
    import time

    def ranged_get(key: str) -> float:
        t0 = time.perf_counter()
        client.get_object(Bucket=bucket, Key=key, Range="bytes=1000-2023")["Body"].read()
        return time.perf_counter() - t0

    b.extra.append(
        f"context: moto serves a 1 KiB ranged GET of the {os.path.getsize(big) / 2**20:.0f} MiB object in "
        f"{ranged_get('in/big.csv') * 1000:.0f} ms, of the {n / 2**20:.0f} MiB one in "
        f"{ranged_get('in/data.csv') * 1000:.0f} ms (it reads the whole object per request): the remote-input "
        "times here are mostly moto's, where S3 answers a range in constant time"
    )
    for cmd, extra in (("convert", []), ("shard", ["--num-shards", "4", "--workers", "1"])):
        common = ["--to", "parquet", "--max-memory", "64MiB", "-q", *extra]
        r = run([*LOVECRAFT, cmd, f"s3://{bucket}/in/big.csv", "-o", remote(f"m{cmd}"), *common])
        d = run([*LOVECRAFT, cmd, big, "-o", b.out(f"m{cmd}"), *common])
        b.extra.append(
            f"{cmd} of a remote CSV of {os.path.getsize(big) / 2**20:.0f} MiB (4x the budget) to s3, --max-memory "
            f"64MiB: peak anonymous memory {r.peak_mib - b.baseline:.0f} MiB above the baseline ({r.seconds:.1f}s); "
            f"the same run disk to disk: {d.peak_mib - b.baseline:.0f} MiB ({d.seconds:.1f}s); the difference is "
            "a boto3 S3 client (33 MiB of parsed service models per process, measured) and the upload's parts "
            "(three of 5 MiB at this budget)"
        )
