"""Benchmarks of the engine's reach: the Ray engine against the local one on the same shard job,
and a table 2,000 columns wide against the same bytes 20 columns wide (memory and throughput).

Both are registered in lovecraft_bench.py (``--only ray,wide``) and report into its table.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from measure import med, run, write_repeated

PY = sys.executable
LOVECRAFT = [PY, "-m", "lovecraft_convert"]
FORMATS = ("memmap", "hdf5", "parquet", "tfrecord")


def make_wide_csv(path: str, target: int, columns: int) -> str:
    """~target bytes of CSV with ``columns`` float columns (%.7g): the same values per byte
    whatever the width, so a wide and a narrow file differ only in their shape."""
    if os.path.exists(path) and os.path.getsize(path) >= target * 0.95:
        return path
    rng = np.random.default_rng(20261124)
    rows = max(1, (4 << 20) // (columns * 12))  # a ~4 MiB block, repeated
    import io

    buf = io.StringIO()
    np.savetxt(buf, rng.normal(size=(rows, columns)).astype(np.float32), fmt="%.7g", delimiter=",")
    block = buf.getvalue().encode()
    header = (",".join(f"c{i}" for i in range(columns)) + "\n").encode()
    return write_repeated(path, header, block, target)


def bench_wide(b, size: int, Row, mbps) -> None:
    """convert a 2,000-column CSV to every format under --max-memory 64MiB, against the same bytes
    as a 20-column CSV: throughput within 2x, peak anonymous memory within the budget + 32 MiB."""
    n = min(size // 4, 256 * 10**6)
    wide = make_wide_csv(os.path.join(b.work, f"wide2000_{n // 10**6}MB.csv"), n, 2000)
    narrow = make_wide_csv(os.path.join(b.work, f"wide20_{n // 10**6}MB.csv"), n, 20)
    read = (
        "import sys, pyarrow.csv as pc\n"
        "r = pc.open_csv(sys.argv[1], read_options=pc.ReadOptions(block_size=4 << 20))\n"
        "for rb in r:\n    [c.to_numpy() for c in rb.columns]"
    )
    res = b.rounds({src: (lambda s=src: [PY, "-c", read, s]) for src in (wide, narrow)})
    b.rows.append(
        Row(
            "read CSV 2,000 columns: pyarrow open_csv + to_numpy, 4 MiB blocks (context: the column-by-column parse, "
            "which our reader replaces by one column of all values for a table of one numeric type)",
            mbps(os.path.getsize(wide), res[wide]),
            "the same bytes as 20 columns",
            mbps(os.path.getsize(narrow), res[narrow]),
            0,
        )
    )
    for fmt in FORMATS:
        outs: dict[str, list[str]] = {wide: [], narrow: []}

        def out(src: str, fmt: str = fmt, outs: dict = outs) -> str:
            outs[src].append(b.kept(f"wide-{fmt}"))
            return outs[src][-1]

        res = b.rounds(
            {
                src: (lambda s=src, f=fmt: [*LOVECRAFT, "convert", s, "-o", out(s), "--to", f,
                                            "--max-memory", "64MiB", "-q"])
                for src in (wide, narrow)
            }
        )  # fmt: skip
        peak = max(r.peak_mib for r in res[wide]) - b.baseline
        b.rows.append(
            Row(
                f"convert CSV 2,000 columns -> {fmt}, --max-memory 64MiB",
                mbps(os.path.getsize(wide), res[wide]),
                "the same bytes as 20 columns",
                mbps(os.path.getsize(narrow), res[narrow]),
                0.5,
                f"within 2x; peak {peak:.0f} MiB above baseline, target < 96 MiB: {'yes' if peak < 96 else 'NO'}",
            )
        )
        if fmt == "memmap":  # the file system's own share: the output's bytes as 2,000 durable files
            last = outs[wide][-1]
            total = sum(os.path.getsize(os.path.join(last, f)) for f in os.listdir(last) if f.endswith(".npy"))
            res = b.rounds(
                {
                    k: (lambda k=k, t=total: [PY, "-c", DURABLE_FILES, b.kept("files"), str(k), str(t)])
                    for k in (2000, 20)
                }
            )
            b.rows.append(
                Row(
                    "context: the memmap output's bytes written as 2,000 durable files (each one write and an "
                    "fsync, 8 threads; MB/s of the CSV's size): what the file system alone costs",
                    mbps(os.path.getsize(wide), res[2000]),
                    "the same bytes as 20 files",
                    mbps(os.path.getsize(narrow), res[20]),
                    0,
                )
            )
        b.drop_kept()


DURABLE_FILES = """
import os, sys
from concurrent.futures import ThreadPoolExecutor
d, n, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d)
data = os.urandom(total // n)
def one(i):
    fd = os.open(os.path.join(d, f"c{i}.npy"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
with ThreadPoolExecutor(8) as ex:
    list(ex.map(one, range(n)))
fd = os.open(d, os.O_RDONLY)
os.fsync(fd)
os.close(fd)
"""


def _ray_start() -> tuple[str, float, str]:
    """A one-node Ray cluster started as users start one (``ray start --head``): its address, the
    seconds it took, and its temporary directory."""
    import socket

    ray = os.path.join(os.path.dirname(PY), "ray")
    tmp = tempfile.mkdtemp(prefix="lcray")
    # Ray turns token authentication on when ~/.ray/auth_token exists, and another Ray started
    # meanwhile (a test run) may rewrite it: this cluster and its clients share a token of their own.
    import secrets

    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    os.environ["RAY_AUTH_MODE"] = "token"  # ray.init(address=...) does not turn it on by itself
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.time()
    subprocess.run(
        [ray, "start", "--head", "--port", str(port), "--num-cpus", str(os.cpu_count() or 2), "--temp-dir", tmp,
         "--include-dashboard", "false", "--disable-usage-stats"],
        check=True, capture_output=True,
    )  # fmt: skip
    return f"127.0.0.1:{port}", time.time() - t0, tmp


def _ray_stop(tmp: str) -> None:
    ray = os.path.join(os.path.dirname(PY), "ray")
    subprocess.run([ray, "stop", "--force"], capture_output=True)
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.pop("RAY_AUTH_MODE", None)
    shutil.rmtree(tmp, ignore_errors=True)


def bench_ray(b, size: int, Row, mbps, make_csv) -> None:
    """shard on a running Ray cluster (this machine as its one node) against the local engine with
    as many workers (>= 0.8x), on a CSV twice the CSV rows' size: a job sized for a cluster, where
    a Ray job's own start (connecting, the job's workers starting) and end are paid once. That cost
    is measured apart on a 1 MB CSV, like the cluster's start-up."""
    try:
        import ray  # noqa: F401
    except ImportError:
        b.extra.append("Ray engine: skipped (ray is not installed: pip install '.[ray]')")
        return
    src = make_csv(os.path.join(b.work, f"csv_{2 * size // 10**6}MB.csv"), 2 * size)
    n = os.path.getsize(src)
    tiny = os.path.join(b.work, "csv_1MB.csv")
    with open(src, "rb") as f, open(tiny, "wb") as t:
        t.write(f.read(1 << 20).rpartition(b"\n")[0] + b"\n")
    workers = str(os.cpu_count() or 2)
    address, startup, tmp = _ray_start()
    try:

        def cmd(path, *extra):
            return lambda: [*LOVECRAFT, "shard", path, "-o", b.out("ray"), "--to", "tfrecord", "--shard-size", "128MiB",
                            "--workers", workers, "-q", *extra]  # fmt: skip

        on_ray = ("--engine", "ray", "--ray-address", address)
        first = run(cmd(src, *on_ray)(), every=0.05)
        res = b.rounds({"ray": cmd(src, *on_ray), "local": cmd(src)})
        job = b.rounds({"ray": cmd(tiny, *on_ray), "local": cmd(tiny)})
    finally:
        _ray_stop(tmp)
    b.rows.append(
        Row(
            f"shard CSV ({n / 1e9:.1f} GB) -> TFRecord 128MiB, --engine ray ({workers} CPUs, one node)",
            mbps(n, res["ray"]),
            f"--engine local --workers {workers}",
            mbps(n, res["local"]),
            0.8,
        )
    )
    per_job = med(job["ray"]) - med(job["local"])
    b.extra.append(
        f"Ray engine: `ray start --head` took {startup:.1f} s (not in the row); the first run on the fresh "
        f"cluster took {first.seconds:.1f} s, the timed runs {min(r.seconds for r in res['ray']):.1f}"
        f"-{max(r.seconds for r in res['ray']):.1f} s against {min(r.seconds for r in res['local']):.1f}"
        f"-{max(r.seconds for r in res['local']):.1f} s locally. A Ray job's own start and end (connecting, "
        f"the job's workers starting, disconnecting) cost {per_job:.1f} s more than the local pool's, measured "
        f"on a 1 MB CSV ({med(job['ray']):.2f} s against {med(job['local']):.2f} s): "
        f"{per_job / med(res['ray']):.0%} of the row's Ray run, paid once per job whatever its size."
    )
