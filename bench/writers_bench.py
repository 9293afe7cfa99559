"""Writing image-like shards: `lovecraft shard --to webdataset|mds|litdata` against the peers' own
writers (webdataset's `ShardWriter`, MosaicML's `MDSWriter`, litdata's `optimize`) over the same
rows.

    .venv/bin/python bench/writers_bench.py [--quick] [--rows N] [--runs N] [--workdir DIR] [--only F,..]

The data, a stand-in for 10,000 JPEG files of ~100 KB: ``--rows`` rows (default 10,000; ``--quick``:
1/16) of ``jpg`` (random bytes, 50..150 KB, mean 100 KB: incompressible, as JPEG is), ``label``
(int64, 0..999) and ``caption`` (text), in one uncompressed Parquet file of 100-row row groups,
made with numpy and pyarrow (seeded) in ``--workdir`` and reused. Every writer reads that file and
writes shards of 64 MiB: the image's bytes as they are, the label as an integer, the caption as
text (WebDataset: ``.jpg``, ``.cls`` and a ``.json`` holding the caption, as lovecraft writes them).

* ours: ``lovecraft shard data.parquet -o OUT --to F --shard-size 64MiB`` (its defaults: a worker
  per core, every file fsynced and hashed into the manifest; the two phases of ``shard``: the rows
  are spilled once, then written);
* the peers run in their own venv (``.venv-peers``, docs/design/peers.md) through
  bench/writers_peers.py: ``ShardWriter(maxsize=64 MiB)`` and ``MDSWriter(size_limit=64 MiB,
  compression=None)`` in one process each (they have no workers), ``litdata.optimize(chunk_bytes=64
  MiB, num_workers=<cores>)``; none of them fsyncs.

Each write runs in a fresh process (imports included), after a ``sync`` of what was written before;
``--runs`` rounds (default 3; 1 with ``--quick``) alternate the order, times are medians, and the
peak is the largest anonymous memory (RssAnon) of the process tree seen in any round. The ratio is
the peer's time over ours. A peer whose venv is missing is reported as skipped.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from measure import compile_package, run  # noqa: E402

from tests.peers import PEERS_PYTHON, peer_env  # noqa: E402

FORMATS = ("webdataset", "mds", "litdata")
PEER = {"webdataset": "webdataset.ShardWriter", "mds": "MDSWriter", "litdata": "litdata.optimize"}
SHARD = 64 << 20
TARGET = 5.0


def cpu() -> float:
    """User and system seconds of the children waited for so far (their own children included)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def log(msg: str) -> None:
    print(f"writers-bench: {msg}", file=sys.stderr, flush=True)


def make_data(workdir: str, rows: int) -> str:
    """The Parquet file of ``rows`` image-like rows (cached)."""
    path = os.path.join(workdir, f"images-{rows}.parquet")
    if os.path.exists(path):
        return path
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    log(f"making {path}")
    os.makedirs(workdir, exist_ok=True)
    rng = np.random.default_rng(44)
    schema = pa.schema([("jpg", pa.binary()), ("label", pa.int64()), ("caption", pa.string())])
    with pq.ParquetWriter(path + ".tmp", schema, compression="none") as w:
        for a in range(0, rows, 100):
            n = min(100, rows - a)
            sizes = rng.integers(50_000, 150_001, size=n)
            jpg = [rng.bytes(int(s)) for s in sizes]
            label = rng.integers(0, 1000, size=n)
            caption = [f"a photo of thing {int(x)}, number {a + i}" for i, x in enumerate(label)]
            w.write_table(pa.table({"jpg": jpg, "label": label, "caption": caption}, schema=schema))
    os.rename(path + ".tmp", path)
    return path


def ours_cmd(fmt: str, src: str, out: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lovecraft_convert",
        "shard",
        src,
        "-o",
        out,
        "--to",
        fmt,
        "--shard-size",
        "64MiB",
        "-q",
    ]


def peer_cmd(fmt: str, src: str, out: str) -> list[str]:
    return [PEERS_PYTHON, os.path.join(HERE, "writers_peers.py"), fmt, src, out, str(SHARD)]


def out_bytes(out: str) -> int:
    return sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1/16 of the rows, one run")
    ap.add_argument("--rows", type=int, default=None, help="rows (default 10,000)")
    ap.add_argument("--runs", type=int, default=None, help="timed rounds (default 3; 1 with --quick)")
    ap.add_argument("--workdir", default=os.environ.get("BENCH_WORKDIR", "/tmp/lovecraft-bench") + "/writers")
    ap.add_argument("--only", default=None, help="comma-separated formats")
    a = ap.parse_args(argv)
    rows = a.rows or (10_000 // 16 if a.quick else 10_000)
    runs = a.runs or (1 if a.quick else 3)
    only = [f for f in FORMATS if not a.only or f in a.only.split(",")]
    compile_package()
    src = make_data(a.workdir, rows)
    mb = os.path.getsize(src) / 1e6
    peers = os.path.exists(PEERS_PYTHON)
    env = {k: v for k, v in peer_env().items() if k not in os.environ or os.environ[k] != v}
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    times: dict[tuple[str, str], list[float]] = {}
    peaks: dict[tuple[str, str], float] = {}
    sizes: dict[tuple[str, str], int] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    floor = []
    for r in range(runs):
        copy = os.path.join(a.workdir, "copy.bin")
        floor.append(run(["sh", "-c", f"cp {src} {copy} && sync {copy}"], every=0.05).seconds)
        os.unlink(copy)
        for fmt in only:
            order = ("ours", "peer") if r % 2 == 0 else ("peer", "ours")
            for who in order:
                if who == "peer" and not peers:
                    continue
                out = os.path.join(a.workdir, f"out-{who}-{fmt}")
                shutil.rmtree(out, ignore_errors=True)
                if who == "ours":
                    cmd, e = ours_cmd(fmt, src, out), None
                else:
                    cmd = peer_cmd(fmt, src, out)
                    e = env
                log(f"round {r + 1}/{runs}: {who} {fmt}")
                c0 = cpu()
                if who == "peer":  # the peers' python must not see this venv's variables
                    saved = {k: os.environ.pop(k) for k in drop if k in os.environ}
                    try:
                        res = run(cmd, env=e, every=0.05)
                    finally:
                        os.environ.update(saved)
                else:
                    res = run(cmd, every=0.05)
                cpus.setdefault((who, fmt), []).append(cpu() - c0)
                times.setdefault((who, fmt), []).append(res.seconds)
                peaks[who, fmt] = max(peaks.get((who, fmt), 0.0), res.peak_mib)
                sizes[who, fmt] = out_bytes(out)
    load = os.getloadavg()[0]
    print(f"\n### Image-like shards: {rows:,} rows, {mb:.0f} MB of Parquet, 64 MiB shards (median of {runs})\n")
    print(
        f"Load average {load:.1f} on {os.cpu_count()} cores when the table was made (the machine is shared: "
        "ratios, not seconds, are what to compare).\n"
    )
    print(
        "| format | ours | peer | peer's time | ratio | target | met | CPU s ours / peer | our peak | peer's peak "
        "| output MB ours / peer |"
    )
    print("|---|---:|---|---:|---:|---|---|---:|---:|---:|---:|")
    for fmt in only:
        ours = statistics.median(times["ours", fmt])
        our_cpu = statistics.median(cpus["ours", fmt])
        if ("peer", fmt) not in times:
            print(
                f"| {fmt} | {ours:.2f} s | {PEER[fmt]} | skipped (no {PEERS_PYTHON}) | | >= {TARGET:.0f}x | | "
                f"{our_cpu:.1f} / - | {peaks['ours', fmt]:.0f} MiB | | |"
            )
            continue
        peer = statistics.median(times["peer", fmt])
        ratio = peer / ours
        met = "yes" if ratio >= TARGET else "NO"
        print(
            f"| {fmt} | {ours:.2f} s | {PEER[fmt]} | {peer:.2f} s | {ratio:.1f}x | >= {TARGET:.0f}x | {met} | "
            f"{our_cpu:.1f} / {statistics.median(cpus['peer', fmt]):.1f} | {peaks['ours', fmt]:.0f} MiB | "
            f"{peaks['peer', fmt]:.0f} MiB | {sizes['ours', fmt] / 1e6:.0f} / {sizes['peer', fmt] / 1e6:.0f} |"
        )
    print(
        f"\nThe physical limit, a durable copy of the Parquet file (`cp` + `sync`): {statistics.median(floor):.2f} s. "
        "CPU seconds are the user and system time of the writer's process tree (the peers' workers included).\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
