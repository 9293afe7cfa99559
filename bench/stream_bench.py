"""Training straight from object storage: a shuffled epoch streamed from a local S3 server through a
bounded cache, against the same epoch from local disk, and against MosaicML Streaming and litdata
streaming the same rows from the same server.

    .venv/bin/python bench/stream_bench.py [--quick] [--rows N] [--runs N] [--cache-limit S] [--limit SEC]
                                           [--batch-size B] [--num-workers W] [--readers R,..] [--workdir DIR]

The data: ``--rows`` rows (default 1,000,000, 264 MB; ``--quick``: 100,000) of ``x`` float32 [64]
and ``label`` int64, made with numpy (seeded, as bench/loader_bench.py makes them). Each system
writes it with its own writer into 16 MiB files, on local disk, and the bench uploads each
directory as it is to one S3 server, moto's, on https://127.0.0.1 (tests/peers/s3server.py: litdata
reads through obstore, which needs TLS):

* ours: ``lovecraft shard x.npy label.npy --to parquet --shard-size 16MiB`` (zstd, row groups of
  its default size: three a file);
* MosaicML Streaming: ``MDSWriter(columns={"x": "ndarray:float32:64", "label": "int64"},
  compression=None, size_limit=16 MiB)``;
* litdata: ``optimize(fn, inputs, chunk_bytes=16 MiB)``, one ``{"x", "label"}`` sample per row.

Readers, each in a fresh process with an empty cache directory (everything comes from the server),
one shuffled epoch in batches of ``--batch-size`` (256), every batch's labels counted and summed,
timed from opening the dataset to its last batch (imports excluded: torch, boto3 and each system's
own package are imported before the clock starts); the time to the first batch; the CPU time of
the reader's process and of the S3 server meanwhile (both come out of the same cores: on a loaded
machine the ratio of CPU times says what the wall times blur); the peak anonymous memory of the
process tree (RssAnon, sampled) and the peak size of the cache directory (sampled):

* ours, remote: ``open_dataset("s3://...", cache_dir=, cache_limit=L).batches(B, shuffle=True)``;
  and through ``DataLoader(ds.to_torch(batch_size=B, shuffle=True), batch_size=None)``;
* ours, local disk: ``open_dataset(local_dir).batches(B, shuffle=True)`` (the same order);
* context, the server's own rate: every object of our dataset downloaded with boto3 ``get_object``
  on 4 threads (as our cache fetches), nothing decoded: no reader of this server can go faster, so
  ours from S3 is also given as a ratio of it;
* MosaicML: ``DataLoader(StreamingDataset(remote="s3://...", local=cache, shuffle=True,
  batch_size=B, cache_limit=L), batch_size=B)``; and the same with ``shuffle_block_size`` a
  quarter of the cache in samples (its default shuffle blocks, 262,144 samples, span more shards
  than a cache of a quarter of the dataset holds: it evicts and fetches them again and again);
* litdata: ``StreamingDataLoader(StreamingDataset("s3://...", cache_dir=cache, shuffle=True,
  max_cache_size=L), batch_size=B)``.

``--cache-limit`` (default 64 MiB, a quarter of the dataset; at least 4 files of every system, as
MosaicML needs) is given to all three. ``--num-workers`` (default 0) goes to every DataLoader. An
epoch still running after ``--limit`` seconds (default 120: MosaicML's reader takes minutes) is
stopped there, even waiting for a batch, and its rate is that of the rows it read (said in the
table). The peers run in
``.venv-peers`` (``LOVECRAFT_PEERS_VENV`` names another), as a subprocess; a missing one is reported
as skipped. ``--runs`` rounds (default 3; 1 with ``--quick``) alternate the readers' order; rates
are medians. Ratios are of throughput: ours from S3 over ours from local disk (target >= 0.8x), ours
from S3 over each peer (target >= 2x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from loader_bench import COLS, ROW_BYTES, write_source  # noqa: E402
from measure import tree_anon_kib  # noqa: E402

FILE = 16 << 20
READERS = ("ours", "ours_dl", "ours_local", "raw", "mosaic", "mosaic_fit", "litdata")
PEERS = ("mosaic", "mosaic_fit", "litdata")
LABELS = 1000


def log(msg: str) -> None:
    print(f"stream-bench: {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# writing (each system its own writer) and serving
# ----------------------------------------------------------------------------------------------

PEER_WRITE = """
import os, sys
from functools import partial
import numpy as np

BLOCK = 4096

def rows(src, start):
    x = np.load(os.path.join(src, "x.npy"), mmap_mode="r")
    y = np.load(os.path.join(src, "label.npy"), mmap_mode="r")
    xs, ys = np.array(x[start:start + BLOCK]), np.array(y[start:start + BLOCK])
    for i in range(len(xs)):
        yield {"x": xs[i], "label": int(ys[i])}

if __name__ == "__main__":
    which, src, out, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    n = len(np.load(os.path.join(src, "label.npy"), mmap_mode="r"))
    if which == "mosaic":
        from streaming import MDSWriter
        cols = {"x": "ndarray:float32:" + str(COLS), "label": "int64"}
        with MDSWriter(out=out, columns=cols, compression=None, size_limit=size) as w:
            for start in range(0, n, BLOCK):
                for r in rows(src, start):
                    w.write(r)
    else:
        import litdata
        litdata.optimize(fn=partial(rows, src), inputs=list(range(0, n, BLOCK)), output_dir=out,
                         chunk_bytes=size, num_workers=1, verbose=False)
    print("{}")
""".replace("COLS", str(COLS))


def write_all(src: str, base: str, peers: bool) -> dict[str, str]:
    """Each system's directory of the rows (cached in ``base``)."""
    out = {}
    ours = os.path.join(base, "ours")
    if not os.path.exists(os.path.join(ours, "_manifest.json")):
        xs = [os.path.join(src, "x.npy"), os.path.join(src, "label.npy")]
        cmd = [sys.executable, "-m", "lovecraft_convert", "shard", *xs, "-o", ours, "--to", "parquet"]
        subprocess.run([*cmd, "--shard-size", "16MiB", "-q", "--overwrite"], check=True)
    out["ours"] = ours
    if peers:
        from tests.peers import run_peer

        for name in ("mosaic", "litdata"):
            d = os.path.join(base, name)
            if not os.path.exists(os.path.join(d, "index.json")):
                shutil.rmtree(d, ignore_errors=True)
                log(f"writing with {name}'s writer")
                run_peer(PEER_WRITE, name, src, d, str(FILE), timeout=3600)
            out[name] = d
    return out


def upload(env: dict[str, str], dirs: dict[str, str], bucket: str) -> dict[str, str]:
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        verify=env["AWS_CA_BUNDLE"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    )
    s3.create_bucket(Bucket=bucket)
    uris = {}
    for name, d in dirs.items():
        for f in sorted(os.listdir(d)):
            if os.path.isfile(os.path.join(d, f)):
                s3.upload_file(os.path.join(d, f), bucket, f"{name}/{f}")
        uris[name] = f"s3://{bucket}/{name}"
    return uris


# ----------------------------------------------------------------------------------------------
# one epoch, in a fresh process
# ----------------------------------------------------------------------------------------------

EPOCH = """
import json, os, sys, threading, time
import numpy as np
import torch  # imported before the clock starts, by every reader, with the S3 client
from torch.utils.data import DataLoader
import boto3

reader, path, cache, limit, bs, workers, stop_after, row_bytes = sys.argv[1:9]
limit, bs, workers, stop_after, row_bytes = int(limit), int(bs), int(workers), float(stop_after), int(row_bytes)
if reader in ("ours", "ours_dl", "ours_local"):
    import lovecraft_convert as lc
    import pyarrow.parquet
    t0, c0 = time.perf_counter(), time.process_time()
    if reader == "ours_local":
        batches = lc.open_dataset(path).batches(bs, shuffle=True, seed=0)
    else:
        ds = lc.open_dataset(path, cache_dir=cache, cache_limit=limit)
        if reader == "ours":
            batches = ds.batches(bs, shuffle=True, seed=0)
        else:
            batches = DataLoader(ds.to_torch(batch_size=bs, shuffle=True, seed=0), batch_size=None,
                                 num_workers=workers)
elif reader == "raw":
    # the server's own limit: every object of our dataset downloaded with boto3 (4 threads, as our
    # cache fetches), the bytes dropped; its rows are counted as each file is read
    import concurrent.futures
    from urllib.parse import urlparse
    t0, c0 = time.perf_counter(), time.process_time()
    u = urlparse(path)
    s3 = boto3.client("s3")
    m = json.loads(s3.get_object(Bucket=u.netloc, Key=u.path.strip("/") + "/_manifest.json")["Body"].read())

    def get(f):
        body = s3.get_object(Bucket=u.netloc, Key=u.path.strip("/") + "/" + f["path"])["Body"]
        while body.read(1 << 20):
            pass
        return f["rows"]

    def fetched():
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            for n in pool.map(get, m["files"]):
                yield {"label": np.zeros(n, np.int64)}

    batches = fetched()
elif reader in ("mosaic", "mosaic_fit"):
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    clean_stale_shared_memory()
    # mosaic_fit: shuffle blocks of a quarter of the cache (its default blocks of 262,144 samples
    # span more shards than the cache holds)
    opts = {"shuffle_block_size": max(1, limit // 4 // row_bytes)} if reader == "mosaic_fit" else {}
    t0, c0 = time.perf_counter(), time.process_time()
    ds = StreamingDataset(remote=path, local=cache, shuffle=True, batch_size=bs, cache_limit=limit, **opts)
    batches = DataLoader(ds, batch_size=bs, num_workers=workers)
else:
    import litdata
    t0, c0 = time.perf_counter(), time.process_time()
    ds = litdata.StreamingDataset(path, cache_dir=cache, shuffle=True, max_cache_size=limit)
    batches = litdata.StreamingDataLoader(ds, batch_size=bs, num_workers=workers)
first = None
rows = total = 0
lock = threading.Lock()


def finish(stopped):
    with lock:  # once, from the loop or from the timer
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        out = {"rows": rows, "label_sum": total, "seconds": seconds, "cpu": cpu, "first": first,
               "stopped": stopped}
        print(json.dumps(out), flush=True)
        os._exit(0)  # a stopped epoch's loader threads and workers are not waited for


# an epoch still running after stop_after seconds ends there, even inside a batch that does not come
timer = threading.Timer(stop_after, finish, (True,))
timer.daemon = True
timer.start()
for b in batches:
    n, s = len(b["label"]), int(b["label"].sum())
    with lock:
        if first is None:
            first = time.perf_counter() - t0
        rows += n
        total += s
finish(False)
"""


def du(path: str) -> int:
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return total


def server_cpu() -> float:
    """CPU seconds the S3 server (a child of this process) has used so far."""
    total, children = 0.0, []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children", encoding="ascii") as f:
            children += [int(x) for x in f.read().split()]
    for pid in children:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"moto.server" not in f.read():
                    continue
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total


def epoch(reader: str, path: str, a: argparse.Namespace, env: dict[str, str]) -> dict:
    """One epoch of ``reader`` in a fresh process, with an empty cache: its result, peak RssAnon of
    the process tree, peak size of the cache directory and the S3 server's CPU meanwhile."""
    cache = tempfile.mkdtemp(prefix=f"stream-{reader}-", dir=a.workdir)
    shutil.rmtree(cache)
    args = [
        reader,
        path,
        cache,
        str(a.cache_limit),
        str(a.batch_size),
        str(a.num_workers),
        str(a.limit),
        str(ROW_BYTES),
    ]
    if reader in PEERS:
        from tests.peers import PEERS_PYTHON, peer_env

        cmd, penv = [PEERS_PYTHON, "-c", EPOCH, *args], peer_env(env)
    else:
        cmd, penv = [sys.executable, "-c", EPOCH, *args], {**os.environ, **env, "PYTHONPATH": ROOT}
    server0 = server_cpu()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=penv, cwd=a.workdir)
    peak = {"mem": 0, "cache": 0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak["mem"] = max(peak["mem"], tree_anon_kib(p.pid))
            peak["cache"] = max(peak["cache"], du(cache))
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = p.communicate(timeout=7200)
    stop.set()
    t.join()
    shutil.rmtree(cache, ignore_errors=True)
    lines = out.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"{reader}: exit {p.returncode}: {err.strip().splitlines()[-1:] or 'no output'}")
    r = json.loads(lines[-1])
    r.update(mem_mib=peak["mem"] / 1024, cache_mib=peak["cache"] / 2**20, server_cpu=server_cpu() - server0)
    return r


# ----------------------------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100,000 rows, one run")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--cache-limit", default="64MiB")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--limit", type=float, default=120.0, help="seconds after which an epoch is stopped")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "lovecraft-bench"))
    ap.add_argument("--readers", default=",".join(READERS))
    a = ap.parse_args(argv)
    from lovecraft_convert.storage.cache import parse_size

    a.cache_limit = parse_size(a.cache_limit)
    rows = a.rows or (100_000 if a.quick else 1_000_000)
    runs = a.runs or (1 if a.quick else 3)
    os.makedirs(a.workdir, exist_ok=True)
    # a SIGTERM (a timeout's, make's) unwinds as Ctrl-C does: the S3 server and the caches go with it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from tests.peers import PEERS_VENV, peers_available

    readers = [r for r in a.readers.split(",") if r]
    peers = peers_available("streaming") and peers_available("litdata")
    if not peers:
        skipped = [r for r in readers if r in PEERS]
        readers = [r for r in readers if r not in skipped]
        if skipped:
            log(f"skipped {', '.join(skipped)}: no peers' venv with streaming and litdata at {PEERS_VENV}")
    base = os.path.join(a.workdir, f"stream-{rows}")
    src = os.path.join(base, "src")
    os.makedirs(src, exist_ok=True)
    write_source(src, rows, 0, LABELS, say=log)
    dirs = write_all(src, base, peers and any(r in PEERS for r in readers))
    import numpy as np

    want = int(np.load(os.path.join(src, "label.npy"), mmap_mode="r").sum())
    sys.path.insert(0, os.path.join(ROOT, "tests", "peers"))
    from s3server import tls_s3_server

    results: dict[str, list[dict]] = {r: [] for r in readers}
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="stream-s3-", dir=a.workdir) as tls, tls_s3_server(tls) as env:
        log("uploading")
        uris = upload(env, dict(dirs), "bench")
        paths = {"ours": uris["ours"], "ours_dl": uris["ours"], "ours_local": dirs["ours"], "raw": uris["ours"]}
        paths.update({k: uris[k.split("_")[0]] for k in PEERS if k.split("_")[0] in uris})
        for k in range(runs):
            for r in readers if k % 2 == 0 else readers[::-1]:
                log(f"round {k + 1}/{runs}: {r}")
                res = epoch(r, paths[r], a, env)
                if res["stopped"]:
                    if res["rows"] > rows:
                        raise SystemExit(f"{r}: {res['rows']} rows read of {rows}")
                elif res["rows"] != rows or (res["label_sum"] != want and r != "raw"):
                    raise SystemExit(f"{r}: {res['rows']} rows, label sum {res['label_sum']}; expected {rows}, {want}")
                log(
                    f"  {res['rows']:,} rows in {res['seconds']:.2f} s (first batch {res['first'] or 0:.2f} s), "
                    f"peak RssAnon {res['mem_mib']:.0f} MiB, cache {res['cache_mib']:.0f} MiB"
                )
                results[r].append(res)
    with open(os.path.join(base, "stream-results.json"), "w", encoding="utf-8") as f:
        json.dump({"results": results, "seconds": time.time() - t0}, f)  # the rounds as measured
    print(table(results, rows, a, time.time() - t0))
    return 0


NAMES = {
    "ours": "ours, from S3: `batches(B, shuffle=True)`",
    "ours_dl": "ours, from S3: `DataLoader(to_torch(batch_size=B, shuffle=True), batch_size=None)`",
    "ours_local": "ours, from local disk: `batches(B, shuffle=True)`",
    "raw": "context: our dataset's objects downloaded with boto3 `get_object` (4 threads, as our cache "
    "fetches; nothing decoded): what this server serves",
    "mosaic": 'MosaicML `DataLoader(StreamingDataset(remote="s3://...", shuffle=True, cache_limit=L))`',
    "mosaic_fit": "MosaicML, the same with `shuffle_block_size=L // 4 // row bytes` (blocks of a quarter of the cache)",
    "litdata": 'litdata `StreamingDataLoader(StreamingDataset("s3://...", shuffle=True, max_cache_size=L))`',
}


def mbps(x: dict) -> float:
    return x["rows"] * ROW_BYTES / 1e6 / x["seconds"]


def table(results: dict[str, list[dict]], rows: int, a: argparse.Namespace, seconds: float) -> str:
    """The results in Markdown: a row per reader (medians of the rounds), ratios of throughput."""
    mb = rows * ROW_BYTES / 1e6
    rate = {r: statistics.median(mbps(x) for x in v) for r, v in results.items() if v}
    n = max(len(v) for v in results.values())
    # CPU seconds of an epoch, the reader's and the server's meanwhile (a stopped epoch's as they were)
    cpu_of = {
        r: tuple(statistics.median(x[k] for x in v) for k in ("cpu", "server_cpu")) for r, v in results.items() if v
    }
    lines = [
        f"#### Streaming from S3: a shuffled epoch of {rows:,} rows ({mb:.0f} MB: x float32[64] + label int64), "
        f"batches of {a.batch_size}, cache limit {a.cache_limit / 2**20:.0f} MiB, num_workers={a.num_workers}, "
        f"median of {n}",
        "",
        f"(`bench/stream_bench.py`, {time.strftime('%Y-%m-%d')}, {seconds / 60:.0f} min; moto's S3 server on "
        "https://127.0.0.1 of this machine; each system's files written by its own writer, 16 MiB each; every "
        f"epoch in a fresh process with an empty cache; one still running after {a.limit:.0f} s is stopped, its "
        "rate that of the rows it read)",
        "",
        "| reader | MB/s | first batch s | CPU s (+ server's) | peak RssAnon MiB | peak cache MiB | ratio | target "
        "| met |",
        "|---|---:|---:|---:|---:|---:|---|---:|:---:|",
    ]
    for r, v in results.items():
        if not v:
            continue
        firsts = [x["first"] for x in v if x["first"] is not None]
        first = f"{statistics.median(firsts):.2f}" if firsts else "-"
        name = NAMES[r]
        stopped = any(x["stopped"] for x in v)
        if stopped:
            read = statistics.median(x["rows"] for x in v)
            name += f" (stopped at {a.limit:.0f} s: ~{read:,.0f} of {rows:,} rows read; its CPU in those seconds)"
        ratio = target = met = ""
        if r == "ours" and "ours_local" in rate:
            q = rate["ours"] / rate["ours_local"]
            c = cpu_of["ours_local"][0] / sum(cpu_of["ours"])
            ratio, target, met = f"{q:.2f}x local disk (CPU: {c:.2f}x)", ">= 0.8x", "yes" if q >= 0.8 else "no"
            if "raw" in rate:
                ratio += f"; {rate['ours'] / rate['raw']:.2f}x the server's own rate"
        if r in PEERS and "ours" in rate:
            q = rate["ours"] / rate[r] if rate[r] > 0 else float("inf")
            ratio, met, target = (f"ours {q:.2f}x" if q < 1000 else "ours > 1000x"), "yes" if q >= 2 else "no", ">= 2x"
        mem, cache = max(x["mem_mib"] for x in v), max(x["cache_mib"] for x in v)
        cpu = f"{cpu_of[r][0]:.2f}" + (f" (+ {cpu_of[r][1]:.2f})" if r != "ours_local" else "")
        mbs = f"{rate[r]:.1f}" if rate[r] >= 0.1 else f"{rate[r]:.3f}"
        lines.append(f"| {name} | {mbs} | {first} | {cpu} | {mem:.0f} | {cache:.0f} | {ratio} | {target} | {met} |")
    lines += ["", "| reader | each round: MB/s (first batch s, CPU s + server's) |", "|---|---|"]
    for r, v in results.items():
        if v:
            each = ", ".join(
                f"{mbps(x):.1f} ({x['first'] or 0:.2f}, {x['cpu']:.1f} + {x['server_cpu']:.1f})" for x in v
            )
            lines.append(f"| {r} | {each} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
