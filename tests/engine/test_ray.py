"""The Ray engine on a real Ray: a local cluster of two nodes (a head and one worker node, one CPU
each) started by these tests (``ray.cluster_utils.Cluster``; skipped with the reason where Ray
cannot start). The same units as the local engine, so the same bytes: plain and shuffled shards in
every format, buckets; a worker process killed during a run is retried and the output is the same;
a bad input gives the local engine's error line; ``--resume`` crosses engines both ways."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import leftovers, lovecraft, write
from tests.readback import entry_digest, manifest

pytestmark = pytest.mark.slow

FORMATS = ["memmap", "hdf5", "parquet", "tfrecord"]


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'lovecraft-convert[ray]')")
    from ray.cluster_utils import Cluster

    try:
        c = Cluster(initialize_head=True, connect=False, head_node_args={"num_cpus": 1, "include_dashboard": False})
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
    except Exception as e:  # noqa: BLE001 - a machine where Ray cannot start
        pytest.skip(f"a local Ray cluster cannot start here: {e}")
    yield c.address
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def csv_input(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("ray_in")
    lines = ["id,x,name"] + [f"{i},{i * 0.25},n{i % 97}" for i in range(120_000)]
    return write(d / "d.csv", ("\n".join(lines) + "\n").encode())


def _digests(out: str) -> dict[str, str]:
    m = manifest(out)
    d = {f["path"]: entry_digest(f)[1] for f in m["files"]}
    for f in m["files"]:  # the digests are those of the files (hashed here, not trusted)
        from tests.readback import file_matches

        assert file_matches(os.path.join(out, f["path"]), f)
    return d


def _shard(src, out, *args):
    r = lovecraft("shard", src, "-o", out, "--max-memory", "32MiB", *args, "-q")
    assert r.exit_code == 0, r.stderr
    return _digests(out)


@pytest.mark.parametrize("fmt", FORMATS)
def test_ray_gives_the_local_bytes(cluster, csv_input, tmp_path, fmt):
    args = ["--to", fmt, "--num-shards", "3"]
    if fmt == "memmap":
        args += ["--columns", "id,x"]
    for extra in ([], ["--shuffle", "--seed", "3"]):
        local = _shard(csv_input, str(tmp_path / f"l{len(extra)}"), *args, *extra, "--workers", "2")
        on_ray = _shard(csv_input, str(tmp_path / f"r{len(extra)}"), *args, *extra, "--engine", "ray",
                        "--ray-address", cluster)  # fmt: skip
        assert on_ray == local
        assert lovecraft("verify", str(tmp_path / f"r{len(extra)}")).exit_code == 0


def test_bucket_on_ray(cluster, tmp_path):
    lines = [("x" * (i % 200)) for i in range(20_000)]
    src = write(tmp_path / "t.txt", ("\n".join(lines) + "\n").encode())
    args = ["--to", "parquet", "--num-buckets", "4", "--rows-per-shard", "3000", "--shuffle", "--seed", "1"]
    outs = []
    for engine in (["--workers", "1"], ["--engine", "ray", "--ray-address", cluster]):
        out = str(tmp_path / f"b{len(outs)}")
        r = lovecraft("bucket", src, "-o", out, *args, *engine, "-q")
        assert r.exit_code == 0, r.stderr
        outs.append(_digests(out))
    assert outs[0] == outs[1]


def test_bad_input_gives_the_local_error(cluster, tmp_path):
    rows = ["x"] + ["1.5"] * 50_000
    rows[40_001] = "70000.0"
    src = write(tmp_path / "f.csv", ("\n".join(rows) + "\n").encode())
    lines = {}
    for name, engine in (("local", []), ("ray", ["--engine", "ray", "--ray-address", cluster])):
        out = str(tmp_path / name)
        r = lovecraft("shard", src, "-o", out, "--to", "parquet", "--num-shards", "2", "--dtype", "float16", *engine)
        lines[name] = (r.exit_code, r.stderr)
        assert not os.path.exists(out)
    assert (
        lines["ray"]
        == lines["local"]
        == (
            1,
            f"Error: {src}, row 40001, column 'x': value 70000.0 overflows float16 (max 65504.0); "
            "scale the data, keep a wider type, or pass --on-overflow clip\n",
        )
    )
    assert leftovers(tmp_path) == []


def _ray_unit_pids() -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"ray::_unit" in cmd:
            out.append(int(pid))
    return out


def test_a_killed_worker_is_retried_and_the_output_is_the_same(cluster, csv_input, tmp_path):
    args = ["--to", "tfrecord", "--num-shards", "8", "--max-memory", "16MiB"]
    want = _shard(csv_input, str(tmp_path / "local"), *args, "--workers", "1")
    out = str(tmp_path / "ray")
    p = subprocess.Popen(
        [sys.executable, "-m", "lovecraft_convert", "shard", csv_input, "-o", out, *args, "--engine", "ray",
         "--ray-address", cluster, "-q"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    killed = None
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < 120 and killed is None:
        pids = _ray_unit_pids()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            killed = pids[0]
        time.sleep(0.02)
    _, err = p.communicate(timeout=300)
    assert killed is not None, "no unit was running to kill"
    assert p.returncode == 0, err
    assert _digests(out) == want


@pytest.mark.parametrize("first, then", [("local", "ray"), ("ray", "local")])
def test_resume_across_engines(cluster, csv_input, tmp_path, first, then):
    engines = {"local": ["--workers", "1"], "ray": ["--engine", "ray", "--ray-address", cluster]}
    args = ["--to", "parquet", "--num-shards", "12", "--max-memory", "16MiB"]
    want = _shard(csv_input, str(tmp_path / "whole"), *args, "--workers", "2")
    out = str(tmp_path / "out")
    p = subprocess.Popen(
        [sys.executable, "-m", "lovecraft_convert", "shard", csv_input, "-o", out, *args, *engines[first], "-q"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    journal = os.path.join(str(tmp_path), ".out.partial", "journal.jsonl")
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < 120:
        if os.path.exists(journal):
            with open(journal) as f:
                if sum('"phase": 2' in line for line in f) >= 2:
                    break
        time.sleep(0.02)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert not os.path.exists(out)
    got = _shard(csv_input, out, *args, *engines[then], "--resume")
    assert got == want
