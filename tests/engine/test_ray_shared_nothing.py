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

# ruff: noqa: F811 - the store fixtures imported below are taken as parameters
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, lovecraft
from tests.storage.conftest import bucket, get, objects, s3, s3_log, s3_server  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

FORMATS = ["memmap", "hdf5", "parquet", "tfrecord", "megatron"]
MANY = 12  # parts of the runs killed midway


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

    def _connect(self) -> None:
        """Connect this process to the cluster, after the in-process drivers' own connection is
        gone (a finished run disconnects in a thread of its own)."""
        import ray

        t0 = time.time()
        while ray.is_initialized() and time.time() - t0 < 10:
            time.sleep(0.1)
        if ray.is_initialized():
            ray.shutdown()
        ray.init(address=self.address, log_to_driver=False, logging_level="error")

    def _alive(self) -> list[str]:
        import ray

        self._connect()
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
        """SIGKILL every process of a worker node, and wait for them: its process group (``ray
        start``, the raylet, its agents), and the worker processes, which Ray puts in process
        groups of their own, in the node's session (started with it, so its id is the group's)."""
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in _session(pgid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p = self.nodes.pop(pgid)
        p.wait(timeout=60)
        t0 = time.time()
        while _session(pgid) and time.time() - t0 < 30:
            time.sleep(0.1)

    def live_workers(self) -> list[int]:
        return [g for g, p in self.nodes.items() if p.poll() is None]

    def probe(self) -> dict:
        """Run a task and say where and with what it ran."""
        import ray

        self._connect()
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

    def warm(self, nodes: list[str], per_node: int = 2) -> None:
        """Connect this process to the cluster and leave it connected, with ``per_node`` worker
        processes started on each of ``nodes`` (lovecraft and pyarrow imported): an in-process run
        then works in this Ray session, and its units find idle workers on every node. Without
        them, the node whose first worker starts first takes every unit of a short run."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._connect()

        @ray.remote(num_cpus=1)
        def ready() -> str:
            import pyarrow  # noqa: F401

            import lovecraft_convert  # noqa: F401

            time.sleep(1)  # the node's workers overlap: each starts a process of its own
            return ray.get_runtime_context().get_node_id()

        refs = [
            ready.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
            for n in nodes
            for _ in range(per_node)
        ]
        assert sorted(ray.get(refs, timeout=120)) == sorted(n for n in nodes for _ in range(per_node))

    def shutdown(self) -> None:
        import ray

        if ray.is_initialized():  # the in-process drivers' connection
            ray.shutdown()
        for g in list(self.nodes):
            self.kill(g)
        self.head.shutdown()


def _session(sid: int) -> list[int]:
    """Processes of the session ``sid`` still alive (not zombies)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(pid))
    return out


@pytest.fixture(scope="module")
def cluster(s3_server, tmp_path_factory):
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
    tmpfs hides; returns a fresh path for a unit log."""
    if not cluster.live_workers():
        cluster.add_worker(2)
    scratch = os.path.join(cluster.scratch, f"d-{tmp_path.name}")
    os.makedirs(scratch, exist_ok=True)
    monkeypatch.setenv("LOVECRAFT_SCRATCH", scratch)
    monkeypatch.delenv("LOVECRAFT_UNIT_LOG", raising=False)
    return lambda name: str(tmp_path / f"{name}.units.jsonl")


def workers(cluster, n: int) -> list[str]:
    """Have ``n`` live worker nodes (started or stopped); their Ray node ids."""
    live = cluster.live_workers()
    while len(live) > n:
        cluster.kill(live.pop())
    while len(live) < n:
        live.append(cluster.add_worker(2))
    return [cluster.node_ids[g] for g in live]


def _units(log: str) -> list[dict]:
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [json.loads(line) for line in f]


def _dataset(s3, bucket: str, prefix: str) -> dict[str, bytes]:
    """The committed dataset under ``prefix``: file name (without the run prefix) -> bytes, checked
    to be all there is (the manifest and the run's files, no other object, no open upload)."""
    m = json.loads(get(s3, bucket, f"{prefix}/_manifest.json"))
    names = [f["path"] for f in m["files"]]
    names += [v["path"] for v in m.values() if isinstance(v, dict) and isinstance(v.get("path"), str)]
    assert set(objects(s3, bucket, prefix + "/")) == {f"{prefix}/_manifest.json"} | {f"{prefix}/{n}" for n in names}
    uploads = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix + "/").get("Uploads", [])
    assert [u["Key"] for u in uploads] == []
    return {n.split("/", 1)[1]: get(s3, bucket, f"{prefix}/{n}") for n in names}


def test_the_worker_node_is_isolated(cluster):
    got = cluster.probe()
    assert got["node"] in cluster.node_ids.values() and got["node"] != cluster.head_id
    assert got["dev"] != os.stat(cluster.scratch).st_dev  # its own tmpfs over the driver's scratch
    assert "driver-only" not in got["listing"]
    assert got["package"] == os.path.join(ROOT, "lovecraft_convert", "__init__.py")
    assert got["scratch"] == cluster.scratch and got["endpoint"] == os.environ["AWS_ENDPOINT_URL"]


# -- inputs ----------------------------------------------------------------------------------------

TEXT = [("the quick brown fox " * (1 + i % 23)).strip() + f" {i % 101}" for i in range(6_000)]


@pytest.fixture(scope="module")
def inputs(s3_server, tmp_path_factory):
    """On the store, in a bucket of their own: six CSV objects (six parts), twelve more for the
    runs killed midway, two text objects; a tokenizer.json on the driver's disk only."""
    import boto3

    client = boto3.client("s3")
    name = f"lc-in-{os.getpid()}"
    client.create_bucket(Bucket=name)
    for k in range(6 + MANY):
        rows = "".join(f"{i},{i * 0.25},w{i % 97} x{i % 13}\n" for i in range(k * 20_000, (k + 1) * 20_000))
        where = "csv" if k < 6 else "many"
        client.put_object(Bucket=name, Key=f"{where}/p{k:02d}.csv", Body=("id,x,name\n" + rows).encode())
    text = "\n".join(TEXT) + "\n"
    client.put_object(Bucket=name, Key="text/a.txt", Body=text.encode())
    client.put_object(Bucket=name, Key="text/b.txt", Body="\n".join(reversed(TEXT)).encode() + b"\n")
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    t = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.train_from_iterator(TEXT[:500], trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "</s>"]))
    tok = str(tmp_path_factory.mktemp("tok") / "tokenizer.json")
    t.save(tok)
    return {"bucket": name, "tokenizer": tok}


def _args(fmt: str) -> list[str]:
    if fmt == "memmap":
        return ["--columns", "id,x"]
    if fmt == "megatron":
        return ["--tokenizer", "bytes", "--column", "name"]
    return []


def _same_as_local(s3, bucket, cluster, log, command, src, name, args) -> list[dict]:
    """Run ``command`` with the local engine and on the cluster to the same store; the objects
    must be byte-identical and ``verify`` must pass. Returns the units of the Ray run."""
    local, remote = f"s3://{bucket}/{name}-local", f"s3://{bucket}/{name}-ray"
    r = lovecraft(command, src, "-o", local, *args, "--workers", "2", "-q")
    assert r.exit_code == 0, r.stderr
    os.environ["LOVECRAFT_UNIT_LOG"] = log
    try:
        r = lovecraft(command, src, "-o", remote, *args, "--engine", "ray", "--ray-address", cluster.address, "-q")
    finally:
        del os.environ["LOVECRAFT_UNIT_LOG"]
    assert r.exit_code == 0, r.stderr
    want, got = _dataset(s3, bucket, f"{name}-local"), _dataset(s3, bucket, f"{name}-ray")
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k] == want[k], k
    r = lovecraft("verify", remote)
    assert r.exit_code == 0, r.stdout + r.stderr
    units = _units(log)
    assert units and all("node" in u["timing"] for u in units)
    return units


# -- the same bytes ----------------------------------------------------------------------------------


def test_a_local_output_still_needs_a_shared_file_system(cluster, driver, inputs, bucket, tmp_path):
    workers(cluster, 1)
    out = os.path.join(os.environ["LOVECRAFT_SCRATCH"], "out")  # on the driver's disk only
    ray = ["--engine", "ray", "--ray-address", cluster.address]
    r = lovecraft("shard", f"s3://{inputs['bucket']}/csv/", "-o", out, "--to", "parquet", "--num-shards", "2", *ray)
    assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(
        f"Error: {os.path.dirname(out)}/.out.partial: the work directory is not visible on Ray node "
    )
    assert "must be on storage every node reaches, e.g. a shared file system" in r.stderr
    assert not os.path.exists(out)
    # a local input with an object-store output: the input's folder is what the node cannot see
    src = os.path.join(os.environ["LOVECRAFT_SCRATCH"], "in.csv")
    with open(src, "w") as f:
        f.write("a,b\n" + "".join(f"{i},{i}\n" for i in range(100)))
    r = lovecraft("shard", src, "-o", f"s3://{bucket}/x", "--to", "parquet", "--num-shards", "2", *ray)
    assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"Error: {os.path.dirname(src)}: the folder of an input is not visible on Ray node ")
    assert "put the inputs on an object store" in r.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_shard_on_one_node_equals_local(cluster, driver, s3, bucket, inputs, fmt):
    (node,) = workers(cluster, 1)
    size = ["--shard-size", "300KiB"] if fmt == "tfrecord" else ["--num-shards", "3"]  # trial shards too
    args = ["--to", fmt, *size, "--max-memory", "32MiB", *_args(fmt)]
    units = _same_as_local(s3, bucket, cluster, driver("plain"), "shard", f"s3://{inputs['bucket']}/csv/", fmt, args)
    assert {u["phase"] for u in units} == {1, 2}
    assert {u["timing"]["node"] for u in units} == {node}  # the head has no CPUs


@pytest.mark.parametrize("fmt", FORMATS)
def test_shard_shuffled_across_two_nodes_equals_local(cluster, driver, s3, bucket, inputs, fmt):
    import ray

    nodes = workers(cluster, 2)
    args = ["--to", fmt, "--num-shards", "4", "--shuffle", "--seed", "5", "--max-memory", "32MiB", *_args(fmt)]
    log = driver("shuffled")
    cluster.warm(nodes)  # units spread over the nodes (SPREAD) find a started worker on each
    try:
        units = _same_as_local(s3, bucket, cluster, log, "shard", f"s3://{inputs['bucket']}/csv/", f"{fmt}-s", args)
    finally:
        ray.shutdown()
    assert {u["phase"] for u in units} == {1, 2}
    # both nodes ran units: the phase-2 units read frames that units of the other node spilled
    placed = [
        (u["phase"], u["timing"]["node"][:6], {k: v for k, v in u["timing"].items() if k != "node"}) for u in units
    ]
    assert {u["timing"]["node"] for u in units} == set(nodes), (sorted(n[:6] for n in nodes), placed)
    assert sum(u["timing"].get("spill", 0) > 0 for u in units) == len(units)


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_bucket_with_a_tokenizer_across_two_nodes_equals_local(cluster, driver, s3, bucket, inputs, layout):
    nodes = workers(cluster, 2)
    args = ["--to", "parquet", "--tokenizer", inputs["tokenizer"], "--eos", "</s>", "--shuffle", "--seed", "2",
            "--max-memory", "32MiB"]  # fmt: skip
    if layout == "packed":
        args += ["--layout", "packed", "--seq-len", "64", "--num-shards", "3"]
    else:
        args += ["--num-buckets", "3", "--rows-per-shard", "2000"]
    src = f"s3://{inputs['bucket']}/text/"
    units = _same_as_local(s3, bucket, cluster, driver(layout), "bucket", src, f"b-{layout}", args)
    assert {u["timing"]["node"] for u in units} <= set(nodes)


# -- killed midway -----------------------------------------------------------------------------------


def _driver(cluster, out: str, kw: dict, scratch: str, log: str) -> subprocess.Popen:
    """A driver in a process of its own (a machine of its own: its own scratch), running
    ``lovecraft_convert.shard(**kw)`` on the cluster (the API, for its ``part_bytes``)."""
    os.makedirs(scratch, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
           "LOVECRAFT_SCRATCH": scratch, "LOVECRAFT_UNIT_LOG": log}  # fmt: skip
    kw = {**kw, "output": out, "engine": "ray", "ray_address": cluster.address, "progress": False}
    code = f"import lovecraft_convert as lc; lc.shard(**{kw!r})"
    return subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)


def _journal(s3, bucket: str, prefix: str) -> list[dict]:
    """The journal entries the run under ``prefix`` keeps on the store."""
    keys = sorted(k for k in objects(s3, bucket, prefix + "/") if "/_resume/journal/" in k)
    return [json.loads(get(s3, bucket, k)) for k in keys]


def _key(entry: dict) -> tuple[int, int]:
    return entry["phase"], entry["part"] if entry["phase"] == 1 else entry["shard"]


# the runs killed midway: parts of 1 MiB (small files are gathered into parts of up to part_bytes,
# 64 MiB from the command line), so the MANY objects make several parts
SHUFFLED = {"to": "parquet", "num_shards": 8, "shuffle": True, "seed": 9, "max_memory": "16MiB", "part_bytes": 1 << 20}


@pytest.fixture(scope="module")
def shuffled_local(s3_server, inputs, tmp_path_factory):
    """The local engine's objects for the runs killed midway (their own bucket), and its units."""
    import boto3

    import lovecraft_convert as lc

    client = boto3.client("s3")
    name = f"lc-local-{os.getpid()}"
    client.create_bucket(Bucket=name)
    log = str(tmp_path_factory.mktemp("local") / "units.jsonl")
    os.environ["LOVECRAFT_UNIT_LOG"] = log
    try:
        lc.shard([f"s3://{inputs['bucket']}/many/"], f"s3://{name}/local", workers=2, progress=False, **SHUFFLED)
    finally:
        del os.environ["LOVECRAFT_UNIT_LOG"]
    units = {(u["phase"], u["key"]) for u in _units(log)}
    assert len([u for u in units if u[0] == 1]) >= 4  # several parts: a kill can fall between them
    return _dataset(client, name, "local"), units


def _unit_processes(node: int) -> list[int]:
    """The Ray worker processes of the worker node ``node`` running a unit now."""
    out = []
    for pid in _session(node):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"ray::_unit" in f.read():
                    out.append(pid)
        except OSError:
            pass
    return out


def test_a_killed_worker_node_loses_nothing(cluster, driver, s3, bucket, inputs, shuffled_local):
    """SIGKILL of every process of a worker node while it runs units: Ray runs them again on the
    other node, and the output is the local engine's."""
    workers(cluster, 2)
    log = driver("killed-node")
    src = f"s3://{inputs['bucket']}/many/"
    kw = {"inputs": [src], **SHUFFLED}
    p = _driver(cluster, f"s3://{bucket}/ray", kw, os.environ["LOVECRAFT_SCRATCH"], log)
    try:
        victim, busy, t0 = cluster.live_workers()[0], [], time.time()
        while p.poll() is None and time.time() - t0 < 300:
            busy = _unit_processes(victim)
            if busy and len(_units(log)) >= 2:
                break
            time.sleep(0.02)
        assert p.poll() is None and busy, "the run ended before a node running units could be killed"
        cluster.kill(victim)
        _, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    survivor = {cluster.node_ids[g] for g in cluster.live_workers()}
    after = [u for u in _units(log) if u["timing"]["node"] in survivor]
    assert {(u["phase"], u["key"]) for u in _units(log)} == shuffled_local[1]
    assert after  # units the killed node had were run again there
    assert _dataset(s3, bucket, "ray") == shuffled_local[0]
    assert lovecraft("verify", f"s3://{bucket}/ray").exit_code == 0


@pytest.mark.parametrize("phase", [1, 2])
def test_a_killed_driver_is_resumed_from_another_machine(
    cluster, driver, s3, bucket, inputs, shuffled_local, tmp_path, phase
):
    """SIGKILL of the driver in phase 1 or 2, then ``--resume`` from another driver with an empty
    scratch: the local engine's bytes; the units the journal counted are not run again (phase 1's
    spill is read back from the store); nothing else is left on the store."""
    workers(cluster, 1)
    src = f"s3://{inputs['bucket']}/many/"
    first = driver("first")
    p = _driver(cluster, f"s3://{bucket}/ray", {"inputs": [src], **SHUFFLED}, str(tmp_path / "machine-a"), first)
    try:
        t0 = time.time()
        while p.poll() is None and time.time() - t0 < 300:
            if sum(u["phase"] == phase for u in _units(first)) >= 2:
                break
            time.sleep(0.02)
        assert p.poll() is None, "the run ended before its driver could be killed"
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    journalled = {_key(e) for e in _journal(s3, bucket, "ray")}
    assert {k for k in journalled if k[0] == phase}, "nothing of the phase was journalled"
    again = driver("again")
    kw = {"inputs": [src], **SHUFFLED, "resume": True}
    p = _driver(cluster, f"s3://{bucket}/ray", kw, str(tmp_path / "machine-b"), again)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    redone = {(u["phase"], u["key"]) for u in _units(again)}
    assert not redone & journalled  # no unit the journal counted ran again
    assert redone | journalled == shuffled_local[1]
    print(f"phase {phase}: {len(journalled)} units journalled before the kill, {len(redone)} run on --resume")
    assert _dataset(s3, bucket, "ray") == shuffled_local[0]
    assert lovecraft("verify", f"s3://{bucket}/ray").exit_code == 0


def test_gs_takes_the_same_path(cluster, driver, inputs):
    """gs:// goes through the same units (the store is chosen by the output's scheme). No GCS
    emulator is installed here, so this runs only where LOVECRAFT_TEST_GCS names a bucket the
    driver and the worker nodes can write to (credentials as Google's libraries find them)."""
    gcs = os.environ.get("LOVECRAFT_TEST_GCS")
    if not gcs:
        pytest.skip("no GCS emulator or bucket here (set LOVECRAFT_TEST_GCS=<bucket> to run against one)")
    import secrets

    from lovecraft_convert.storage import store_for

    workers(cluster, 1)
    base = f"lovecraft-test-{secrets.token_hex(4)}"
    args = ["--to", "parquet", "--num-shards", "3", "--shuffle", "--seed", "1"]
    src = f"s3://{inputs['bucket']}/csv/"
    store = store_for(f"gs://{gcs}")
    try:
        for name, engine in (("local", []), ("ray", ["--engine", "ray", "--ray-address", cluster.address])):
            r = lovecraft("shard", src, "-o", f"gs://{gcs}/{base}/{name}", *args, *engine, "-q")
            assert r.exit_code == 0, r.stderr
        got = {}
        for name in ("local", "ray"):
            m = json.loads(store.read_all(f"{base}/{name}/_manifest.json"))
            keys = {k for k, _ in store.list(f"{base}/{name}/")}
            assert keys == {f"{base}/{name}/_manifest.json"} | {f"{base}/{name}/{f['path']}" for f in m["files"]}
            got[name] = {f["path"].split("/", 1)[1]: store.read_all(f"{base}/{name}/{f['path']}") for f in m["files"]}
        assert got["ray"] == got["local"]
        assert lovecraft("verify", f"gs://{gcs}/{base}/ray").exit_code == 0
    finally:
        store.delete([k for k, _ in store.list(f"{base}/")])
