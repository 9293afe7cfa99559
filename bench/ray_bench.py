"""The Ray engine on a cluster whose nodes share nothing but an object store, against the local
engine: the same job, the same store, on this machine.

    .venv/bin/python bench/ray_bench.py [--quick] [--runs N] [--workdir DIR]

The cluster is built as ``tests/engine/test_ray_shared_nothing.py`` builds it: a Ray head with no
CPUs and one worker node with 2 CPUs in a mount namespace of its own, a tmpfs over the driver's
scratch directory (so it sees none of the driver's files); the store is moto's S3 server on
127.0.0.1 (in this process). The job: C4-like JSON Lines (``jsonl_inputs.make_jsonl``, 8 objects)
to tokenized Megatron shards (a BPE tokenizer of 8,000 tokens trained on the corpus, ``--eos``),
``shard --to megatron --num-shards 4``: phase 1 reads, tokenizes and spills each object; phase 2
writes each shard from the spill. Locally ``--workers 2``, on the cluster ``--engine ray``. Both
write the same store; times are medians of ``--runs`` rounds (alternating), after a warm-up of each.

The time split comes from the units themselves (``LOVECRAFT_UNIT_LOG``, runtime/clock.py): the
seconds each unit waited on store reads, on the spill exchange (frames up in phase 1, back in
phase 2; through the store on the cluster, the local disk for the local engine), on uploads, and
the rest of its wall time (compute). The per-unit figures (seconds per input MB) feed the
projection in docs/guide/clusters.md.

Last, the spill exchange on its own, store against Ray's object store: 8 producer tasks of the
job's spill size per part, 8 consumers each taking its eighth of every producer's spill (the shape
of a shuffle), once through the store (one object per producer, ranged GETs) and once through
Ray's object store (each producer returns 8 objects).

Needs root (unshare, mount), Ray, moto and tokenizers; prints why and exits 0 where one is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

PY = sys.executable
OBJECTS = 8
LOADS: list[float] = []  # the load average after each run
SHARDS = 4


def log(msg: str) -> None:
    print(f"ray-bench: {msg}", file=sys.stderr, flush=True)


def missing() -> str | None:
    """Why this bench cannot run here (None: it can)."""
    for mod in ("ray", "moto", "boto3", "tokenizers"):
        try:
            __import__(mod)
        except ImportError:
            return f"{mod} is not installed"
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "isolating a worker node needs root and unshare"
    return None


# -- the store and the cluster ---------------------------------------------------------------------


def start_store() -> dict[str, str]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_REGION": "us-east-1",
    }
    os.environ.update(env)
    return env


def session(sid: int) -> list[int]:
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


class Cluster:
    """A Ray head with no CPUs and one isolated worker node (its own mount namespace, a tmpfs over
    the driver's scratch), stopped by its process group and session."""

    def __init__(self, scratch: str, store_env: dict[str, str], cpus: int) -> None:
        import ray
        from ray.cluster_utils import Cluster as RayCluster

        self.scratch = scratch
        self.head = RayCluster(
            initialize_head=True, connect=False, head_node_args={"num_cpus": 0, "include_dashboard": False}
        )
        self.address = self.head.address
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOVECRAFT_", "RAY_ADDRESS"))}
        env.update(store_env)
        env.update(
            PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
            TMPDIR=scratch,
            LOVECRAFT_SCRATCH=scratch,
        )
        ray_bin = os.path.join(os.path.dirname(PY), "ray")
        cmd = (
            f"mount -t tmpfs tmpfs {scratch} && exec {ray_bin} start --address {self.address} "
            f"--num-cpus {cpus} --disable-usage-stats --block"
        )
        self.node = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "bash", "-c", cmd],
            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        ray.init(address=self.address, log_to_driver=False, logging_level="error")
        try:
            t0 = time.time()
            while sum(n["Alive"] and n["Resources"].get("CPU", 0) > 0 for n in ray.nodes()) < 1:
                if time.time() - t0 > 120 or self.node.poll() is not None:
                    raise RuntimeError("the worker node did not join the cluster")
                time.sleep(0.5)
        finally:
            ray.shutdown()

    def shutdown(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        pgid = self.node.pid
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in session(pgid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.node.wait(timeout=60)
        self.head.shutdown()


# -- the job ---------------------------------------------------------------------------------------


def make_inputs(work: str, size: int, client, bucket: str) -> str:
    """``OBJECTS`` JSON Lines objects of ~size/OBJECTS bytes on the store; the tokenizer's path."""
    import jsonl_inputs
    from lovecraft_bench import make_tokenizer

    src = jsonl_inputs.make_jsonl(os.path.join(work, f"ray_{size // 10**6}MB.jsonl"), size)
    with open(src, "rb") as f:
        data = f.read()
    cuts = [0]
    for k in range(1, OBJECTS):
        cuts.append(data.index(b"\n", len(data) * k // OBJECTS) + 1)
    cuts.append(len(data))
    for k in range(OBJECTS):
        client.put_object(Bucket=bucket, Key=f"in/p{k}.jsonl", Body=data[cuts[k] : cuts[k + 1]])
    text = os.path.join(work, "ray_tok_text.txt")
    if not os.path.exists(text):
        with open(text, "w", encoding="utf-8") as f:
            for line in data[: 64 << 20].decode("utf-8", "ignore").splitlines()[:200_000]:
                try:
                    f.write(json.loads(line)["text"].replace("\n", " ") + "\n")
                except ValueError:
                    pass
    return make_tokenizer(os.path.join(work, "ray_tokenizer_8k.json"), text, ("[UNK]", "[PAD]", "</s>"))


def split_of(path: str) -> dict[int, dict[str, float]]:
    """Per phase: units, and the summed seconds of each kind (compute: what is left)."""
    out: dict[int, dict[str, float]] = {}
    with open(path) as f:
        for line in f:
            u = json.loads(line)
            t = u["timing"]
            d = out.setdefault(
                u["phase"], {"units": 0, "seconds": 0.0, "read": 0.0, "spill": 0.0, "upload": 0.0, "spill_bytes": 0}
            )
            d["units"] += 1
            d["spill_bytes"] += int(u.get("spill_bytes", 0))
            d["driver"] = d.get("driver", 0.0) + float(u.get("driver", 0.0))
            for k in ("seconds", "read", "spill", "upload", "cpu"):
                d[k] = d.get(k, 0.0) + float(t.get(k, 0.0))
    for d in out.values():
        d["compute"] = d["seconds"] - d["read"] - d["spill"] - d["upload"]
    return out


def run_job(engine: list[str], src: str, out: str, tok: str, scratch: str, unit_log: str) -> float:
    if os.path.exists(unit_log):
        os.unlink(unit_log)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
        "LOVECRAFT_SCRATCH": scratch,
        "LOVECRAFT_UNIT_LOG": unit_log,
    }
    cmd = [PY, "-m", "lovecraft_convert", "shard", src, "-o", out, "--to", "megatron", "--tokenizer", tok,
           "--column", "text", "--eos", "</s>", "--num-shards", str(SHARDS), *engine, "-q"]  # fmt: skip
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-3000:])
        raise SystemExit(f"ray-bench: the job failed (exit {r.returncode})")
    return dt


def objects_of(client, bucket: str, prefix: str) -> dict[str, bytes]:
    m = json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/_manifest.json")["Body"].read())
    return {
        f["path"].split("/", 1)[1]: client.get_object(Bucket=bucket, Key=f"{prefix}/{f['path']}")["Body"].read()
        for f in m["files"]
    }


def drop(client, bucket: str, prefix: str) -> None:
    keys = [o["Key"] for p in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
            for o in p.get("Contents", [])]  # fmt: skip
    for i in range(0, len(keys), 1000):
        client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]})


# -- the spill exchange on its own -----------------------------------------------------------------


def exchange(address: str, bucket: str, size: int, rounds: int) -> dict[str, float]:
    """Median seconds of one exchange of ``size`` bytes per producer, through the store and
    through Ray's object store (see the module's docstring)."""
    import ray

    n = OBJECTS
    ray.init(address=address, log_to_driver=False, logging_level="error")
    try:

        @ray.remote(num_cpus=1)
        def put_store(k: int, run: str) -> None:
            from lovecraft_convert.storage.stores import get_store

            block = os.urandom(size // n)
            w = get_store(f"s3://{bucket}").open_writer(f"x/{run}/u{k}.bin", part=8 << 20)
            for _ in range(n):
                w.write(block)
            w.close()

        @ray.remote(num_cpus=1)
        def get_store_(j: int, run: str) -> int:
            from lovecraft_convert.storage.rangefile import read_range

            piece = size // n
            return sum(len(read_range(f"s3://{bucket}/x/{run}/u{k}.bin", j * piece, (j + 1) * piece)) for k in range(n))

        @ray.remote(num_cpus=1, num_returns=n)
        def put_ray(k: int):
            block = os.urandom(size // n)
            return tuple(bytes(block) for _ in range(n))

        @ray.remote(num_cpus=1)
        def get_ray(*pieces) -> int:
            return sum(len(p) for p in pieces)

        def via_store() -> float:
            run = secrets.token_hex(4)
            t0 = time.perf_counter()
            ray.get([put_store.remote(k, run) for k in range(n)])
            got = ray.get([get_store_.remote(j, run) for j in range(n)])
            dt = time.perf_counter() - t0
            assert sum(got) == n * n * (size // n)
            return dt

        def via_ray() -> float:
            t0 = time.perf_counter()
            refs = [put_ray.remote(k) for k in range(n)]
            got = ray.get([get_ray.remote(*[refs[k][j] for k in range(n)]) for j in range(n)])
            dt = time.perf_counter() - t0
            assert sum(got) == n * n * (size // n)
            del refs
            return dt

        via_store(), via_ray()  # warm-up (the workers start, import)
        times: dict[str, list[float]] = {"store": [], "ray": []}
        for r in range(rounds):
            for name, fn in (
                (("store", via_store), ("ray", via_ray)) if r % 2 == 0 else (("ray", via_ray), ("store", via_store))
            ):
                times[name].append(fn())
        return {k: statistics.median(v) for k, v in times.items()}
    finally:
        ray.shutdown()


# -- main -----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="an input 1/16 the size, one round")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "lovecraft_bench"))
    a = ap.parse_args()
    why = missing()
    if why:
        print(f"## Ray engine, shared nothing but a store\n\nskipped: {why}")
        return
    size = (128 if not a.quick else 8) * 10**6
    runs = 1 if a.quick else a.runs
    os.makedirs(a.workdir, exist_ok=True)
    import boto3

    store_env = start_store()
    client = boto3.client("s3")
    bucket = f"bench-{secrets.token_hex(4)}"
    client.create_bucket(Bucket=bucket)
    log("making the input")
    tok = make_inputs(a.workdir, size, client, bucket)
    n = sum(o["Size"] for o in client.list_objects_v2(Bucket=bucket, Prefix="in/")["Contents"])
    src = f"s3://{bucket}/in/"
    scratch = tempfile.mkdtemp(prefix="lcraybench")
    driver_scratch = os.path.join(scratch, "driver")
    os.makedirs(driver_scratch)
    unit_log = os.path.join(a.workdir, "ray_units.jsonl")
    cpus = 2
    log("starting the cluster")
    cluster = Cluster(scratch, store_env, cpus)
    try:
        engines = {"ray": ["--engine", "ray", "--ray-address", cluster.address], "local": ["--workers", str(cpus)]}
        times: dict[str, list[float]] = {k: [] for k in engines}
        splits: dict[str, list[dict]] = {k: [] for k in engines}
        outs = {}
        for r in range(runs + 1):  # the first round warms up (workers start, imports, the page cache)
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for name in order:
                out = f"{name}-{r}"
                dt = run_job(engines[name], src, f"s3://{bucket}/{out}", tok, driver_scratch, unit_log)
                LOADS.append(os.getloadavg()[0])
                log(f"round {r}: {name} {dt:.1f} s")
                if r:
                    times[name].append(dt)
                    splits[name].append(split_of(unit_log))
                outs[name] = out
        same = objects_of(client, bucket, outs["ray"]) == objects_of(client, bucket, outs["local"])
        for name in engines:
            for r in range(runs + 1):
                drop(client, bucket, f"{name}-{r}")
        p1 = _median_split(splits["ray"])[1]
        spill_bytes = max(1 << 20, int(p1["spill_bytes"] / p1["units"]))  # one part's spill
        log("the spill exchange, store against Ray's object store")
        ex = exchange(cluster.address, bucket, spill_bytes, 1 if a.quick else 3)
    finally:
        cluster.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    print(report(n, times, splits, same, ex, spill_bytes, cpus))


def _median_split(splits: list[dict]) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for phase in sorted({p for s in splits for p in s}):
        keys = splits[0][phase].keys()
        out[phase] = {k: statistics.median(s[phase][k] for s in splits if phase in s) for k in keys}
    return out


def report(n: int, times, splits, same: bool, ex: dict, spill_bytes: int, cpus: int) -> str:
    ray_s, local_s = statistics.median(times["ray"]), statistics.median(times["local"])
    ratio = local_s / ray_s
    mb = n / 1e6
    lines = [
        "## Ray engine, shared nothing but a store",
        "",
        f"JSON Lines ({mb:.0f} MB, {OBJECTS} objects on moto's S3 server) -> Megatron, BPE 8k + EOS, "
        f"{SHARDS} shards; the cluster: a head with no CPUs and one isolated worker node of {cpus} CPUs "
        f"(its own mount namespace); local: --workers {cpus}. Medians of {len(times['ray'])} rounds.",
        "",
        "| benchmark | ours MB/s | peer | peer MB/s | ratio | target | met |",
        "|---|---:|---|---:|---:|---:|---|",
        f"| shard JSONL -> Megatron (tokenized), --engine ray, shared nothing | {mb / ray_s:.1f} | "
        f"--engine local --workers {cpus}, same store | {mb / local_s:.1f} | {ratio:.2f}x | >= 0.8x | "
        f"{'yes' if ratio >= 0.8 else 'no'} |",
        "",
        f"Same objects from both engines: {'yes' if same else 'NO'}.",
        "",
        "Time split (seconds summed over the units of a run, medians of the rounds; compute is the rest "
        "of the units' wall time: parsing, tokenizing, encoding, hashing):",
        "",
        "| engine | phase | units | unit seconds | store reads | spill exchange | uploads | compute |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    per_mb = {}
    for name in ("ray", "local"):
        for phase, d in _median_split(splits[name]).items():
            lines.append(
                f"| {name} | {phase} | {d['units']:.0f} | {d['seconds']:.2f} | {d['read']:.2f} | {d['spill']:.2f} | "
                f"{d['upload']:.2f} | {d['compute']:.2f} |"
            )
            if name == "ray":
                per_mb[phase] = {k: d[k] / mb for k in ("seconds", "read", "spill", "upload", "compute", "cpu")}
    ray_split = _median_split(splits["ray"])
    units = sum(d["seconds"] for d in ray_split.values())
    n_units = sum(d["units"] for d in ray_split.values())
    driver_ms = 1000 * sum(d["driver"] for d in ray_split.values()) / max(1, n_units)
    spill_ratio = ray_split[1]["spill_bytes"] / n
    lines += [
        "",
        f"Per input MB on the cluster (one core): phase 1 {per_mb[1]['seconds'] * 1000:.0f} ms "
        f"(store reads {per_mb[1]['read'] * 1000:.1f}, spill up {per_mb[1]['spill'] * 1000:.1f}, "
        f"compute {per_mb[1]['compute'] * 1000:.0f}), phase 2 {per_mb[2]['seconds'] * 1000:.0f} ms "
        f"(spill back {per_mb[2]['spill'] * 1000:.1f}, uploads {per_mb[2]['upload'] * 1000:.1f}, "
        f"compute {per_mb[2]['compute'] * 1000:.0f}); CPU seconds (the units' processes, all threads, "
        f"which other work on the machine does not inflate): phase 1 {per_mb[1]['cpu'] * 1000:.0f} ms, "
        f"phase 2 {per_mb[2]['cpu'] * 1000:.0f} ms per MB. Load average during the runs: "
        f"{statistics.median(LOADS):.1f} (this machine has {os.cpu_count()} cores). The Ray run's wall time is {ray_s:.1f} s for "
        f"{units:.1f} unit-seconds on {cpus} CPUs: {ray_s - units / cpus:.1f} s are the job's start and "
        "end, the driver and the waits between the phases. The driver spends "
        f"{driver_ms:.1f} ms on each finished unit (its upload records kept, its journal entry "
        f"written, fsynced and put on the store); the spill is {spill_ratio:.2f} bytes per input byte.",
        "",
        f"Spill exchange alone ({OBJECTS} producers x {spill_bytes / 1e6:.1f} MB, {OBJECTS} consumers each "
        f"taking an eighth of every producer's): through the store {ex['store']:.2f} s, through Ray's "
        f"object store {ex['ray']:.2f} s ({ex['store'] / ex['ray']:.1f}x). The store is kept for the "
        "exchange: objects in Ray's store are owned by the driver and die with it, so a --resume after "
        "a driver's death would read the whole input again; see docs/guide/clusters.md.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
