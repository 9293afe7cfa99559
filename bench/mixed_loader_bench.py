"""Loaders on a table of text and float64 columns (issue 39): our ``batches()`` (in order and
shuffled) and ``to_tf_dataset()`` against the plain reader of each format, in the same run.

    .venv/bin/python bench/mixed_loader_bench.py [--rows N] [--runs N] [--only tfrecord,parquet]

The table is shaped like the trial's flights table (336,776 rows by default): 9 int64 columns,
5 float64 columns with NaN (delays and times), 5 short text columns (carrier and airport codes,
tail numbers, an ISO timestamp), a float64 ratio and a text column of 50-300 characters (tweets):
21 columns: 9 int64, 6 float64, 6 text. It is written once as Parquet (the source) and converted to each format with
``lovecraft_convert.convert`` (cached in ``--workdir``). Megatron is not measured: it holds token
ids only, no text or float64 columns.

Plain readers (what a user writes without us), each materialising every batch in RAM:

* tfrecord: ``tf.data.TFRecordDataset(files).batch(B).map(parse_example + decode_raw of the
  float64 columns, AUTOTUNE).prefetch(AUTOTUNE)`` (shuffled: ``.shuffle(W)`` of the records first,
  ``W`` = our window's rows), iterated with ``as_numpy_iterator()``;
* parquet: ``pyarrow.parquet.ParquetFile(f).iter_batches(B)`` and ``to_numpy`` per column;
* memmap: ``np.load(f, mmap_mode="r")`` sliced per batch (text: ``values[offsets[i]:offsets[i+1]]``
  decoded per row);
* hdf5: ``h5py`` ``ds[i:i+B]`` per column (text comes as bytes).

The shuffled rows of parquet, memmap and HDF5 are against the in-order plain reader (context: a
plain shuffle of these is a different program per format). ratio = median over rounds of (plain
time / our time), each round both in the same process, in alternating order, after a warm-up.
The CPU-time ratio (plain CPU seconds / ours, all threads of the process) is printed beside it: on a
machine shared with other work, a reader that runs many threads (tf.data's) takes a larger share
of the CPUs than one that runs few, and the wall-time ratio then says as much about the machine's
load as about the readers; the load average is printed.
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

FORMATS = ("tfrecord", "parquet", "memmap", "hdf5")
TRIAL_ROWS = 336_776
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "you",
    "that",
    "it",
    "he",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "at",
    "be",
    "this",
    "from",
    "have",
    "or",
    "by",
    "one",
    "had",
    "not",
    "but",
    "what",
    "all",
    "were",
    "when",
    "we",
    "there",
    "can",
    "an",
    "your",
    "which",
    "their",
    "said",
    "if",
    "do",
    "will",
    "each",
    "about",
    "how",
    "up",
    "out",
    "them",
    "then",
    "she",
    "many",
    "some",
    "so",
    "these",
    "would",
    "other",
    "into",
    "has",
    "more",
    "her",
    "two",
    "like",
    "him",
    "see",
    "time",
    "could",
    "no",
    "make",
    "than",
    "first",
    "been",
    "its",
    "who",
    "now",
    "people",
    "my",
    "made",
    "over",
    "did",
    "down",
    "only",
    "way",
    "find",
    "use",
    "may",
    "water",
    "long",
    "little",
    "very",
    "after",
    "words",
    "called",
    "just",
    "café",
    "naïve",
    "東京",
    "señor",
    "🙂",
]


def log(msg: str) -> None:
    print(f"mixed-loader-bench: {msg}", file=sys.stderr, flush=True)


def make_table(rows: int, seed: int = 0):
    """The flights-and-tweets table as an Arrow table (vectorised: seconds for the trial's size)."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    cols: dict = {}
    cols["year"] = np.full(rows, 2013, dtype=np.int64)
    cols["month"] = rng.integers(1, 13, rows)
    cols["day"] = rng.integers(1, 29, rows)
    sched = rng.integers(500, 2359, rows)
    cols["sched_dep_time"] = sched
    missing = rng.random(rows) < 0.025
    for name, scale in (("dep_time", 400.0), ("dep_delay", 40.0), ("arr_time", 500.0), ("arr_delay", 44.0)):
        v = np.round(rng.normal(0, scale, rows))
        v[missing | (rng.random(rows) < 0.003)] = np.nan
        cols[name] = v
    cols["sched_arr_time"] = rng.integers(1, 2359, rows)
    carriers = np.array(["UA", "AA", "B6", "DL", "EV", "MQ", "US", "WN", "VX", "FL", "AS", "9E", "F9", "HA", "YV"])
    airports = np.array(["EWR", "LGA", "JFK", "ATL", "ORD", "LAX", "BOS", "MCO", "SFO", "CLT", "MIA", "DFW", "IAH"])
    cols["carrier"] = rng.choice(carriers, rows)
    cols["flight"] = rng.integers(1, 8500, rows)
    suffix = rng.choice(np.array(["AA", "UA", "JB", "DL", "", "EV"]), rows)
    cols["tailnum"] = np.char.add(np.char.add("N", rng.integers(100, 999, rows).astype(str)), suffix)
    cols["origin"] = rng.choice(airports[:3], rows)
    cols["dest"] = rng.choice(airports, rows)
    air = np.round(rng.normal(150, 90, rows))
    air[missing] = np.nan
    cols["air_time"] = air
    cols["distance"] = rng.integers(17, 4983, rows)
    cols["hour"] = sched // 100
    cols["minute"] = sched % 100
    stamp = np.datetime64("2013-01-01T00") + rng.integers(0, 365 * 24, rows).astype("timedelta64[h]")
    cols["time_hour"] = np.datetime_as_string(stamp, unit="h")
    cols["speed"] = cols["distance"] / rng.uniform(0.5, 6.0, rows)
    pool = []
    for _ in range(2000):  # tweets: 50-300 characters of words
        n = int(rng.integers(50, 301))
        pool.append(" ".join(rng.choice(WORDS, n // 3 + 1))[:n])
    cols["text"] = np.array(pool, dtype=object)[rng.integers(0, len(pool), rows)]
    return pa.table({k: pa.array(v.tolist() if v.dtype.kind in "UO" else v) for k, v in cols.items()})


def make_data(workdir: str, rows: int) -> dict[str, str]:
    import pyarrow.parquet as pq

    import lovecraft_convert as lc

    base = os.path.join(workdir, f"mixed-{rows}")
    os.makedirs(base, exist_ok=True)
    src = os.path.join(base, "source.parquet")
    if not os.path.exists(src):
        log(f"generating {rows} rows")
        pq.write_table(make_table(rows), src + ".tmp", row_group_size=65536)
        os.replace(src + ".tmp", src)
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
# plain readers
# ----------------------------------------------------------------------------------------------


def _tf_pipeline(path: str, bs: int, shuffle: int | None = None):
    import tensorflow as tf

    from lovecraft_convert.formats.tfrecord.tfdata import decode_float64, to_tf_feature_spec

    m = manifest(path)
    spec_json = m["tfrecord"]["feature_spec"]
    spec = to_tf_feature_spec(spec_json)
    f64 = {k: s for k, s in spec_json.items() if s.get("encoding") == "float64le"}

    def parse(records):
        ex = tf.io.parse_example(records, spec)
        for k, s in f64.items():  # float64 is kept exact as bytes: the same values as ours
            ex[k] = decode_float64(tf, ex[k], s)
        return ex

    d = tf.data.TFRecordDataset([os.path.join(path, f["path"]) for f in m["files"]])
    if shuffle:
        d = d.shuffle(shuffle, seed=0)
    return d.batch(bs).map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def plain_tfrecord(path: str, bs: int) -> int:
    return sum(len(b["year"]) for b in _tf_pipeline(path, bs).as_numpy_iterator())


def plain_tfrecord_shuffled(path: str, bs: int) -> int:
    from lovecraft_convert.loaders import open_dataset

    window = open_dataset(path).plan(bs, True, 0).shuffle_buffer
    return sum(len(b["year"]) for b in _tf_pipeline(path, bs, window).as_numpy_iterator())


def plain_parquet(path: str, bs: int) -> int:
    import pyarrow.parquet as pq

    n = 0
    for f in manifest(path)["files"]:
        for rb in pq.ParquetFile(os.path.join(path, f["path"])).iter_batches(batch_size=bs):
            batch = {c: rb.column(c).to_numpy(zero_copy_only=False) for c in rb.schema.names}
            n += len(batch["year"])
    return n


def plain_memmap(path: str, bs: int) -> int:
    m = manifest(path)
    cols: dict = {}
    for f in m["files"]:
        cols.setdefault(f["column"], {})[f.get("role", "data")] = np.load(os.path.join(path, f["path"]), mmap_mode="r")
    n = len(cols["year"]["data"])
    for i in range(0, n, bs):
        batch = {}
        for name, c in cols.items():
            if "data" in c:
                batch[name] = np.array(c["data"][i : i + bs])
            else:
                o = np.asarray(c["offsets"][i : i + bs + 1])
                data = np.asarray(c["values"][o[0] : o[-1]]).tobytes()
                o = (o - o[0]).tolist()
                batch[name] = [data[o[j] : o[j + 1]].decode() for j in range(len(o) - 1)]
    return n


def plain_hdf5(path: str, bs: int) -> int:
    import h5py

    with h5py.File(os.path.join(path, "data.h5"), "r") as f:
        dsets = {k: f[k] for k in f}
        n = dsets["year"].shape[0]
        for i in range(0, n, bs):
            batch = {k: d[i : i + bs] for k, d in dsets.items()}
    del batch
    return n


PLAIN = {"tfrecord": plain_tfrecord, "parquet": plain_parquet, "memmap": plain_memmap, "hdf5": plain_hdf5}
PEERS = {
    "tfrecord": "TFRecordDataset + parse_example (+ decode_raw float64)",
    "parquet": "pyarrow iter_batches(B) + to_numpy",
    "memmap": "np.load mmap + slices (text decoded per row)",
    "hdf5": "h5py ds[i:i+B] (text as bytes)",
}


def ours_batches(path: str, bs: int, shuffle: bool = False) -> int:
    from lovecraft_convert.loaders import open_dataset

    return sum(len(b["year"]) for b in open_dataset(path).batches(bs, shuffle=shuffle, seed=0))


def ours_shuffled(path: str, bs: int) -> int:
    return ours_batches(path, bs, True)


def ours_tf(path: str, bs: int, shuffle: bool = False) -> int:
    from lovecraft_convert.loaders import open_dataset

    d = open_dataset(path).to_tf_dataset(bs, shuffle=shuffle, seed=0, y=None)
    return sum(len(b["year"]) for b in d.as_numpy_iterator())


def ours_tf_shuffled(path: str, bs: int) -> int:
    return ours_tf(path, bs, True)


# ----------------------------------------------------------------------------------------------


def compare(name: str, ours_fn, plain_fn, args: tuple, runs: int) -> dict:
    ours_fn(*args)  # warm-up: page cache, imports, TensorFlow's tracing
    plain_fn(*args)
    ours_t, plain_t, ratios, cpu_ratios = [], [], [], []
    for r in range(runs):
        pair = [("ours", ours_fn), ("plain", plain_fn)]
        if r % 2:
            pair.reverse()
        got, cpu = {}, {}
        for who, fn in pair:
            t, c = time.perf_counter(), time.process_time()
            fn(*args)
            got[who], cpu[who] = time.perf_counter() - t, time.process_time() - c
        ours_t.append(got["ours"])
        plain_t.append(got["plain"])
        ratios.append(got["plain"] / got["ours"])
        cpu_ratios.append(cpu["plain"] / cpu["ours"])
        log(
            f"{name}: round {r + 1}: ours {got['ours']:.2f}s (cpu {cpu['ours']:.2f}s), "
            f"plain {got['plain']:.2f}s (cpu {cpu['plain']:.2f}s), ratio {ratios[-1]:.2f}"
        )
    return {
        "ours": statistics.median(ours_t),
        "plain": statistics.median(plain_t),
        "ratio": statistics.median(ratios),
        "spread": (min(ratios), max(ratios)),
        "cpu_ratio": statistics.median(cpu_ratios),
    }


def rows_for(fmt: str) -> list[tuple[str, object, object, bool]]:
    """(what, ours, plain, targeted) for one format."""
    plain = PLAIN[fmt]
    if fmt == "tfrecord":
        return [
            ("batches()", ours_batches, plain, True),
            ("batches(shuffle=True)", ours_shuffled, plain_tfrecord_shuffled, True),
            ("to_tf_dataset()", ours_tf, plain, True),
            ("to_tf_dataset(shuffle=True)", ours_tf_shuffled, plain_tfrecord_shuffled, True),
        ]
    return [
        ("batches()", ours_batches, plain, False),
        ("batches(shuffle=True) vs in order", ours_shuffled, plain, False),
        ("to_tf_dataset() vs plain reader", ours_tf, plain, False),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=TRIAL_ROWS)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workdir", default=os.environ.get("BENCH_WORKDIR", "/tmp/lovecraft-bench"))
    ap.add_argument("--only", default=None, help="comma-separated formats")
    ap.add_argument("--rows-of", default=None, help="only the rows whose name contains this (e.g. shuffle)")
    a = ap.parse_args(argv)
    paths = make_data(a.workdir, a.rows)
    only = a.only.split(",") if a.only else list(FORMATS)
    load0 = f"{os.getloadavg()[0]:.1f}"
    table = []
    for fmt in FORMATS:
        if fmt not in only:
            continue
        for what, ours_fn, plain_fn, targeted in rows_for(fmt):
            if a.rows_of and a.rows_of not in what:
                continue
            res = compare(f"{fmt} {what}", ours_fn, plain_fn, (paths[fmt], a.batch_size), a.runs)
            table.append((fmt, what, PEERS[fmt], targeted, res))
    print(
        f"\n### Loaders on text and float64 columns ({a.rows} rows x 21 columns: 6 text, 6 float64, 9 int64; "
        f"batch {a.batch_size}; median of {a.runs})\n"
    )
    print(f"load average before and after: {load0} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    print("| format | ours | plain reader | ours s | plain s | ratio (spread) | CPU-time ratio | target | met |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for fmt, what, peer, targeted, r in table:
        lo, hi = r["spread"]
        met = ("yes" if r["ratio"] >= 1.0 else "NO") if targeted else "-"
        target = ">= 1.0x" if targeted else "-"
        print(
            f"| {fmt} | {what} | {peer} | {r['ours']:.2f} | {r['plain']:.2f} | {r['ratio']:.2f}x "
            f"({lo:.2f}-{hi:.2f}) | {r['cpu_ratio']:.2f}x | {target} | {met} |"
        )
    print("\nmegatron: not measured (token ids only: no text or float64 columns)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
