"""Read throughput of ``Dataset.batches()`` against the plain client doing the same work.

    .venv/bin/python bench/loader_bench.py [--quick] [--runs N] [--batch-size B] [--workdir DIR]

One dataset, ~1 GB in memory (``--quick``: 1/16 of it): ``x`` float32 [64] and ``label`` int64 per
row, written once per format with ``lovecraft_convert.convert`` and cached in ``--workdir``. Per
format, every round times both readers over the whole dataset in ``batch_size`` batches, each batch
materialised in RAM as NumPy arrays (the work a training step needs), in the same process, in an
order alternating from round to round; a warm-up pass first (so the files are in the page cache
for both). ratio = median over rounds of (plain time / our time), i.e. our throughput over the
plain client's; target >= 0.9x. MB/s are of the in-memory batches (rows x 264 bytes), medians.

Plain clients (what a user writes without us):

* memmap: ``np.load(f, mmap_mode="r")`` and ``np.array(a[i:i+B])`` per column (slicing a mapping
  alone reads nothing, so the plain client copies, as ``batches()`` does);
* hdf5: ``h5py.File(f)[col][i:i+B]`` per column;
* parquet: ``pyarrow.parquet.ParquetFile(f).iter_batches(batch_size=B)`` + ``to_numpy`` per column;
* tfrecord: ``tf.data.TFRecordDataset(f).batch(B).map(tf.io.parse_example(..., feature_spec),
  AUTOTUNE).prefetch(AUTOTUNE)`` iterated with ``as_numpy_iterator()``.

Two more rows are informative (no target): exact shuffling, ours against the same per-batch
gathers written by hand (memmap: ``np.take`` of a permutation's slices; hdf5: h5py fancy indexing
with sorted indices, on the first 200 batches only, because it reads one chunk per row).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

COLS = 64
ROW_BYTES = COLS * 4 + 8
FORMATS = ("memmap", "hdf5", "parquet", "tfrecord")


def log(msg: str) -> None:
    print(f"loader-bench: {msg}", file=sys.stderr, flush=True)


def write_source(base: str, rows: int, seed: int, labels: int, say=None) -> list[str]:
    """``x.npy`` (float32 [rows, COLS], standard normal, drawn in pieces from ``seed``) and
    ``label.npy`` (int64 in [0, labels), from ``seed + 1``) in ``base``, unless both are there
    (``say``: the caller's log)."""
    src = [os.path.join(base, "x.npy"), os.path.join(base, "label.npy")]
    if not all(os.path.exists(p) for p in src):
        (say or log)(f"generating {rows} rows ({rows * ROW_BYTES / 1e6:.0f} MB)")
        x = np.lib.format.open_memmap(src[0] + ".tmp.npy", mode="w+", dtype=np.float32, shape=(rows, COLS))
        step = 1 << 16
        for i in range(0, rows, step):
            rng = np.random.default_rng([seed, i])
            x[i : i + step] = rng.standard_normal((min(step, rows - i), COLS), dtype=np.float32)
        x.flush()
        del x
        np.save(src[1] + ".tmp.npy", np.random.default_rng(seed + 1).integers(0, labels, rows, dtype=np.int64))
        for p in src:
            os.replace(p + ".tmp.npy", p)
    return src


def make_data(workdir: str, nbytes: int) -> dict[str, str]:
    """The dataset in every format (cached; regenerated when missing)."""
    import lovecraft_convert as lc

    rows = nbytes // ROW_BYTES
    base = os.path.join(workdir, f"loaders-{rows}")
    os.makedirs(base, exist_ok=True)
    src = write_source(base, rows, seed=7, labels=10)
    out = {}
    for fmt in FORMATS:
        path = os.path.join(base, fmt)
        if not os.path.exists(os.path.join(path, "_manifest.json")):
            log(f"writing {fmt}")
            lc.convert(src, path, to=fmt, overwrite=True, progress=False)
        out[fmt] = path
    return out


def manifest(path: str) -> dict:
    with open(os.path.join(path, "_manifest.json")) as f:
        return json.load(f)


# ----------------------------------------------------------------------------------------------
# plain clients
# ----------------------------------------------------------------------------------------------


def plain_memmap(path: str, bs: int) -> int:
    m = manifest(path)
    cols = [np.load(os.path.join(path, f["path"]), mmap_mode="r") for f in m["files"]]
    n = len(cols[0])
    for i in range(0, n, bs):
        batch = {k: np.array(c[i : i + bs]) for k, c in enumerate(cols)}
    del batch
    return n


def plain_hdf5(path: str, bs: int) -> int:
    import h5py

    with h5py.File(os.path.join(path, "data.h5"), "r") as f:
        dsets = [f["x"], f["label"]]
        n = dsets[0].shape[0]
        for i in range(0, n, bs):
            batch = [d[i : i + bs] for d in dsets]
    del batch
    return n


def plain_parquet(path: str, bs: int) -> int:
    import pyarrow.parquet as pq

    n = 0
    for rb in pq.ParquetFile(os.path.join(path, "data.parquet")).iter_batches(batch_size=bs):
        x = rb.column("x").flatten().to_numpy().reshape(-1, COLS)
        y = rb.column("label").to_numpy()
        n += len(x) + 0 * len(y)
    return n


def plain_tfrecord(path: str, bs: int) -> int:
    import tensorflow as tf

    from lovecraft_convert.formats.tfrecord.tfdata import to_tf_feature_spec

    spec = to_tf_feature_spec(manifest(path)["tfrecord"]["feature_spec"])
    d = (
        tf.data.TFRecordDataset([os.path.join(path, "data.tfrecord")])
        .batch(bs)
        .map(lambda s: tf.io.parse_example(s, spec), num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
    n = 0
    for b in d.as_numpy_iterator():
        n += len(b["label"])
    return n


PLAIN = {"memmap": plain_memmap, "hdf5": plain_hdf5, "parquet": plain_parquet, "tfrecord": plain_tfrecord}


def ours(path: str, bs: int) -> int:
    from lovecraft_convert.loaders import open_dataset

    n = 0
    for b in open_dataset(path).batches(batch_size=bs):
        n += len(b["label"])
    return n


# shuffled (informative)


def plain_memmap_shuffled(path: str, bs: int, batches: int | None = None) -> int:
    m = manifest(path)
    cols = [np.load(os.path.join(path, f["path"]), mmap_mode="r") for f in m["files"]]
    n = len(cols[0])
    perm = np.random.default_rng(0).permutation(n)
    stop = n if batches is None else min(n, batches * bs)
    for i in range(0, stop, bs):
        idx = perm[i : i + bs]
        batch = [np.take(c, idx, axis=0) for c in cols]
    del batch
    return stop


def plain_hdf5_shuffled(path: str, bs: int, batches: int | None = None) -> int:
    import h5py

    with h5py.File(os.path.join(path, "data.h5"), "r") as f:
        dsets = [f["x"], f["label"]]
        n = dsets[0].shape[0]
        perm = np.random.default_rng(0).permutation(n)
        stop = n if batches is None else min(n, batches * bs)
        for i in range(0, stop, bs):
            idx = np.sort(perm[i : i + bs])
            batch = [d[idx] for d in dsets]
    del batch
    return stop


def ours_shuffled(path: str, bs: int, batches: int | None = None) -> int:
    from lovecraft_convert.loaders import open_dataset

    n = 0
    for k, b in enumerate(open_dataset(path).batches(batch_size=bs, shuffle=True, seed=0)):
        if batches is not None and k >= batches:
            break
        n += len(b["label"])
    return n


# ----------------------------------------------------------------------------------------------


def timed(fn, *args) -> tuple[float, int]:
    t = time.perf_counter()
    n = fn(*args)
    return time.perf_counter() - t, n


def compare(name: str, ours_fn, plain_fn, args: tuple, runs: int) -> dict:
    ours_fn(*args)  # warm-up: page cache, imports, TensorFlow's graph tracing
    plain_fn(*args)
    ours_t, plain_t, ratios = [], [], []
    rows = 0
    for r in range(runs):
        pair = [("ours", ours_fn), ("plain", plain_fn)]
        if r % 2:
            pair.reverse()
        got = {}
        for who, fn in pair:
            got[who], n = timed(fn, *args)
            rows = n
        ours_t.append(got["ours"])
        plain_t.append(got["plain"])
        ratios.append(got["plain"] / got["ours"])
        log(f"{name}: round {r + 1}: ours {got['ours']:.3f}s, plain {got['plain']:.3f}s, ratio {ratios[-1]:.2f}")
    mb = rows * ROW_BYTES / 1e6
    return {
        "name": name,
        "ours": mb / statistics.median(ours_t),
        "plain": mb / statistics.median(plain_t),
        "ratio": statistics.median(ratios),
    }


PEERS = {
    "memmap": "np.load mmap + np.array(a[i:i+B])",
    "hdf5": "h5py ds[i:i+B]",
    "parquet": "pyarrow iter_batches(B) + to_numpy",
    "tfrecord": "tf.data TFRecordDataset + parse_example",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1/16 of the size, one run")
    ap.add_argument("--runs", type=int, default=None, help="timed rounds (default 3; 1 with --quick)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--size", type=float, default=1e9, help="bytes of the dataset in memory (default 1e9)")
    ap.add_argument("--workdir", default=os.environ.get("BENCH_WORKDIR", "/tmp/lovecraft-bench"))
    ap.add_argument("--only", default=None, help="comma-separated formats")
    ap.add_argument("--no-shuffled", action="store_true", help="skip the informative shuffled rows")
    a = ap.parse_args(argv)
    size = int(a.size / (16 if a.quick else 1))
    runs = a.runs or (1 if a.quick else 3)
    paths = make_data(a.workdir, size)
    bs = a.batch_size
    only = a.only.split(",") if a.only else list(FORMATS)
    rows = []
    for fmt in FORMATS:
        if fmt in only:
            rows.append((fmt, PEERS[fmt], True, compare(fmt, ours, PLAIN[fmt], (paths[fmt], bs), runs)))
    if not a.no_shuffled:
        if "memmap" in only:
            res = compare("memmap shuffled", ours_shuffled, plain_memmap_shuffled, (paths["memmap"], bs), runs)
            rows.append(("memmap, exact shuffle", "np.take(a, perm[i:i+B])", False, res))
        if "hdf5" in only:
            args = (paths["hdf5"], bs, 200)
            res = compare("hdf5 shuffled", ours_shuffled, plain_hdf5_shuffled, args, runs)
            rows.append(("hdf5, exact shuffle (200 batches)", "h5py ds[sorted idx]", False, res))
    print(
        f"\n### Loader read throughput: `batches(batch_size={bs})` vs the plain client "
        f"({size / 1e9:.2f} GB in memory, median of {runs})\n"
    )
    print("| dataset | plain client | ours MB/s | plain MB/s | ratio | target | met |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name, peer, targeted, r in rows:
        met = r["ratio"] >= 0.9
        target = ">= 0.9x" if targeted else "-"
        ok = ("yes" if met else "NO") if targeted else "-"
        ours_mb, plain_mb = (f"{v:.0f}" if v >= 10 else f"{v:.2f}" for v in (r["ours"], r["plain"]))
        print(f"| {name} | {peer} | {ours_mb} | {plain_mb} | {r['ratio']:.2f}x | {target} | {ok} |")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
