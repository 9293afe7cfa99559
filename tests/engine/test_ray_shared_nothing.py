"""The Ray engine on a cluster whose nodes share nothing but an object store (issue 40).

The cluster is real and so is the isolation: a head with no CPUs (so every task runs elsewhere)
and worker nodes started as ``unshare -m`` + a tmpfs mounted over the driver's scratch directory
(``LOVECRAFT_SCRATCH`` and ``TMPDIR``), so a worker node sees none of the driver's local files.
The store is moto's S3 server on 127.0.0.1. The worker nodes import this tree's package (its
``PYTHONPATH``), have their own scratch on the tmpfs and the store's endpoint in their environment.

Each run writes a unit log (``LOVECRAFT_UNIT_LOG``: one line per finished unit, with the Ray node
it ran on), which shows where the units ran and, across a driver's death and ``--resume``, which
units were run again. Skipped with the reason where Ray, moto, ``unshare`` or mounts are missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, lovecraft
from tests.storage.conftest import bucket, get, objects, s3, s3_server  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

FORMATS = ["memmap", "hdf5", "parquet", "tfrecord", "megatron"]


# -- the cluster -----------------------------------------------------------------------------------


def _can_isolate(where: str) -> str | None:
    """Why a worker node cannot be isolated here (None: it can)."""
    try:
        r = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", f"mount -t tmpfs tmpfs {where} && ls -A {where}"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as e:
        return f"unshare cannot run here ({e})"
    if r.returncode != 0:
        return f"a mount namespace with a tmpfs is not permitted here ({r.stderr.strip()[:200]})"
    if r.stdout.strip():
        return "the tmpfs did not hide the directory"
    return None


class Cluster:
    """A head with no CPUs, and worker nodes each in its own mount namespace with a tmpfs over the
    driver's scratch directory; nodes are stopped by their process group."""

    def __init__(self, scratch: str, store_env: dict[str, str]) -> None:
        from ray.cluster_utils import Cluster as RayCluster

        self.scratch = scratch
        self.store_env = store_env
        self.head = RayCluster(
            initialize_head=True, connect=False, head_node_args={"num_cpus": 0, "include_dashboard": False}
        )
        self.address = self.head.address
        self.nodes: dict[int, subprocess.Popen] = {}  # process group -> `ray start --block`
        self.node_ids: dict[int, str] = {}  # process group -> Ray node id
        self.head_id = self._alive()[0] if len(self._alive()) == 1 else None

    def env(self) -> dict[str, str]:
        """A worker node's environment: this tree's package first on the path, its own scratch
        (the tmpfs), the store's endpoint and credentials."""
        pythonpath = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("LOVECRAFT_", "RAY_ADDRESS"))},
            **self.store_env,
            "PYTHONPATH": pythonpath,
            "TMPDIR": self.scratch,
            "LOVECRAFT_SCRATCH": self.scratch,
        }

    def _alive(self) -> list[str]:
        import ray

        ray.init(address=self.address, log_to_driver=False, logging_level="error")
        try:
            return [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        finally:
            ray.shutdown()

    def add_worker(self, cpus: int = 2) -> int:
        ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
        before = set(self._alive())
        cmd = (
            f"mount -t tmpfs tmpfs {self.scratch} && exec {ray_bin} start --address {self.address} "
            f"--num-cpus {cpus} --disable-usage-stats --block"
        )
        p = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "bash", "-c", cmd],
            env=self.env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.nodes[p.pid] = p
        t0 = time.time()
        while time.time() - t0 < 120:
            new = set(self._alive()) - before
            if new:
                self.node_ids[p.pid] = new.pop()
                return p.pid
            if p.poll() is not None:
                break
            time.sleep(0.5)
        self.kill(p.pid)
        raise RuntimeError("the worker node did not join the cluster")

    def kill(self, pgid: int) -> None:
        """SIGKILL every process of a worker node (its process group), and wait for them."""
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p = self.nodes.pop(pgid)
        p.wait(timeout=60)
        t0 = time.time()
        while _group(pgid) and time.time() - t0 < 30:
            time.sleep(0.1)

    def live_workers(self) -> list[int]:
        return [g for g, p in self.nodes.items() if p.poll() is None]

    def probe(self) -> dict:
        """Run a task and say where and with what it ran."""
        import ray

        ray.init(address=self.address, log_to_driver=False, logging_level="error")
        try:

            @ray.remote(num_cpus=1)
            def where(scratch: str) -> dict:
                import lovecraft_convert

                return {
                    "node": ray.get_runtime_context().get_node_id(),
                    "dev": os.stat(scratch).st_dev,
                    "listing": sorted(os.listdir(scratch)),
                    "package": lovecraft_convert.__file__,
                    "scratch": os.environ.get("LOVECRAFT_SCRATCH"),
                    "endpoint": os.environ.get("AWS_ENDPOINT_URL"),
                }

            return ray.get(where.remote(self.scratch), timeout=120)
        finally:
            ray.shutdown()

    def shutdown(self) -> None:
        for g in list(self.nodes):
            self.kill(g)
        self.head.shutdown()


def _group(pgid: int) -> list[int]:
    """Processes of the process group ``pgid`` still alive."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(pid))
    return out


@pytest.fixture(scope="module")
def cluster(s3_server, tmp_path_factory):  # noqa: F811 - the fixture imported above
    pytest.importorskip("ray", reason="ray is not installed (pip install 'lovecraft-convert[ray]')")
    scratch = str(tmp_path_factory.mktemp("driver_scratch"))
    why = _can_isolate(scratch)
    if why is not None:
        pytest.skip(why)
    with open(os.path.join(scratch, "driver-only"), "w") as f:
        f.write("a file of the driver's machine\n")
    store_env = {k: v for k, v in s3_server.items() if k.startswith("AWS_")}
    try:
        c = Cluster(scratch, store_env)
    except Exception as e:  # noqa: BLE001 - a machine where Ray cannot start
        pytest.skip(f"a local Ray cluster cannot start here: {e}")
    try:
        c.add_worker(2)
        yield c
    finally:
        c.shutdown()


@pytest.fixture
def driver(cluster, monkeypatch, tmp_path):
    """This process as a driver of the cluster: its scratch inside the directory the worker nodes'
    tmpfs hides, a unit log; returns the log's path."""
    if not cluster.live_workers():
        cluster.add_worker(2)
    scratch = os.path.join(cluster.scratch, f"d-{tmp_path.name}")
    os.makedirs(scratch, exist_ok=True)
    monkeypatch.setenv("LOVECRAFT_SCRATCH", scratch)
    log = str(tmp_path / "units.jsonl")
    monkeypatch.setenv("LOVECRAFT_UNIT_LOG", log)
    return log


def _units(log: str) -> list[dict]:
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [json.loads(line) for line in f]


def _dataset(s3, bucket: str, prefix: str) -> dict[str, bytes]:  # noqa: F811
    """The committed dataset under ``prefix``: file name (without the run prefix) -> bytes, checked
    to be all there is (the manifest and the run's files, no other object, no open upload)."""
    m = json.loads(get(s3, bucket, f"{prefix}/_manifest.json"))
    names = [f["path"] for f in m["files"]]
    names += [v["path"] for v in m.values() if isinstance(v, dict) and isinstance(v.get("path"), str)]
    assert set(objects(s3, bucket, prefix + "/")) == {f"{prefix}/_manifest.json"} | {f"{prefix}/{n}" for n in names}
    assert [
        u["Key"]
        for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        if u["Key"].startswith(prefix + "/")
    ] == []
    return {n.split("/", 1)[1]: get(s3, bucket, f"{prefix}/{n}") for n in names}


def test_the_worker_node_is_isolated(cluster):
    got = cluster.probe()
    assert got["node"] in cluster.node_ids.values() and got["node"] != cluster.head_id
    assert got["dev"] != os.stat(cluster.scratch).st_dev  # its own tmpfs over the driver's scratch
    assert "driver-only" not in got["listing"]
    assert got["package"] == os.path.join(ROOT, "lovecraft_convert", "__init__.py")
    assert got["scratch"] == cluster.scratch and got["endpoint"] == os.environ["AWS_ENDPOINT_URL"]


# -- inputs ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def csv_objects(s3_server, tmp_path_factory):  # noqa: F811
    """Six CSV objects (six parts) on the store, in their own bucket."""
    import boto3

    client = boto3.client("s3")
    name = f"lc-in-{os.getpid()}"
    client.create_bucket(Bucket=name)
    for k in range(6):
        rows = "".join(f"{i},{i * 0.25},w{i % 97} x{i % 13}\n" for i in range(k * 20_000, (k + 1) * 20_000))
        client.put_object(Bucket=name, Key=f"csv/p{k}.csv", Body=("id,x,name\n" + rows).encode())
    text = "".join(("word " * (1 + i % 53)).strip() + "\n" for i in range(30_000))
    client.put_object(Bucket=name, Key="text/a.txt", Body=text.encode())
    client.put_object(Bucket=name, Key="text/b.txt", Body=text[::-1].encode())
    return name


def _args(fmt: str) -> list[str]:
    if fmt == "memmap":
        return ["--columns", "id,x"]
    if fmt == "megatron":
        return ["--tokenizer", "bytes", "--column", "name"]
    return []


def _same_as_local(s3, bucket, cluster, command: str, src: str, name: str, args: list[str], ray_workers: str):  # noqa: F811
    """Run ``command`` with the local engine and on the cluster to the same store; the objects
    must be byte-identical and ``verify`` must pass."""
    local, remote = f"s3://{bucket}/{name}-local", f"s3://{bucket}/{name}-ray"
    r = lovecraft(command, src, "-o", local, *args, "--workers", "2", "-q")
    assert r.exit_code == 0, r.stderr
    ray = ["--engine", "ray", "--ray-address", cluster.address, "--workers", ray_workers]
    r = lovecraft(command, src, "-o", remote, *args, *ray, "-q")
    assert r.exit_code == 0, r.stderr
    want, got = _dataset(s3, bucket, f"{name}-local"), _dataset(s3, bucket, f"{name}-ray")
    assert got.keys() == want.keys() and got == want
    r = lovecraft("verify", remote)
    assert r.exit_code == 0, r.stdout + r.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_shard_on_the_cluster_equals_local(cluster, driver, s3, bucket, csv_objects, fmt):  # noqa: F811
    for extra, workers in (([], "1"), (["--shuffle", "--seed", "5"], "2")):
        args = ["--to", fmt, "--num-shards", "3", "--max-memory", "32MiB", *_args(fmt), *extra]
        _same_as_local(s3, bucket, cluster, "shard", f"s3://{csv_objects}/csv/", f"{fmt}{len(extra)}", args, workers)
    units = _units(driver)
    assert {u["phase"] for u in units} == {1, 2}
    # every unit ran on the isolated node (the head has no CPUs)
    assert {u["timing"]["node"] for u in units} <= set(cluster.node_ids.values()) - {cluster.head_id}


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_bucket_on_the_cluster_equals_local(cluster, driver, s3, bucket, csv_objects, layout):  # noqa: F811
    args = ["--to", "parquet", "--tokenizer", "bytes", "--shuffle", "--seed", "2", "--max-memory", "32MiB"]
    args += ["--layout", "packed", "--seq-len", "64", "--num-shards", "3"] if layout == "packed" else [
        "--num-buckets", "3", "--rows-per-shard", "9000"]  # fmt: skip
    _same_as_local(s3, bucket, cluster, "bucket", f"s3://{csv_objects}/text/", f"b-{layout}", args, "2")
    assert {u["timing"]["node"] for u in _units(driver)} <= set(cluster.node_ids.values()) - {cluster.head_id}
