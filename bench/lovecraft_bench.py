"""`make bench`: lovecraft against its peers, measured in the same run on the same files.

These machines are shared and noisy, so every figure that matters is a ratio against a peer run
in the same round on the same input, the median of several rounds (tools alternate within a
round). Peak memory is peak *anonymous* memory (RssAnon from /proc/PID/status, summed over the
process and its children, sampled every few ms), reported above the baseline of an interpreter
that has imported the same libraries: a memmap's page cache inflates RSS without costing anything.

    python bench/lovecraft_bench.py [--runs 3] [--quick] [--only NAME,...] [--workdir DIR] [--save FILE]

``--only`` runs a selection of the benchmarks (default all: csv, npy, shard, bucket, verify, jsonl,
parquet, ray, wide, memory, jsonl_memory, help); ``--save FILE`` also writes the table to FILE. ``make bench``
runs it through ``bench/results.py``, which writes bench/RESULTS.md from a full run of every bench script.

Inputs are generated once (fixed seed) and cached in the work directory.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engine_bench  # noqa: E402
import jsonl_inputs  # noqa: E402
import tokens_bench  # noqa: E402
from measure import BYTECODE_NOTE, Result, compile_package, med, run, write_repeated  # noqa: E402

PY = sys.executable
LOVECRAFT = [PY, "-m", "lovecraft_convert"]
GB = 1000**3


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------


def make_csv(path: str, target: int) -> str:
    """~target bytes of CSV: 20 float columns (%.7g) and an int label. A 64 MiB block repeated."""
    if os.path.exists(path) and os.path.getsize(path) >= target * 0.95:
        return path
    rng = np.random.default_rng(20261122)
    rows = 300_000
    data = rng.normal(size=(rows, 20)).astype(np.float32)
    label = rng.integers(0, 10, size=rows)
    import io

    buf = io.StringIO()
    np.savetxt(buf, np.column_stack([data, label]), fmt=["%.7g"] * 20 + ["%d"], delimiter=",")
    block = buf.getvalue().encode()
    header = (",".join([f"f{i}" for i in range(20)] + ["label"]) + "\n").encode()
    return write_repeated(path, header, block, target)


def make_text(path: str, target: int) -> str:
    """~target bytes of text lines: words from a 5,000-word vocabulary, line lengths log-normal
    (median ~80 bytes, a long tail up to 4 KB). A 64 MiB block repeated."""
    if os.path.exists(path) and os.path.getsize(path) >= target * 0.95:
        return path
    rng = np.random.default_rng(20261123)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    vocab = ["".join(rng.choice(letters, size=int(n))) for n in rng.integers(2, 10, 5000)]
    weights = 1 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    words = rng.choice(len(vocab), size=12_000_000, p=weights)
    counts = np.clip(rng.lognormal(2.6, 0.8, 1_000_000).astype(int), 1, 600)
    lines, pos = [], 0
    for c in counts:
        lines.append(" ".join(vocab[w] for w in words[pos : pos + c]))
        pos += c
        if pos + 600 > len(words):
            pos = 0
    block = ("\n".join(lines) + "\n").encode()[: 64 << 20]
    block = block[: block.rfind(b"\n") + 1]
    return write_repeated(path, b"", block, target)


def make_npy(path: str, target: int, cols: int = 64) -> str:
    """~target bytes of float32 (N, cols) .npy, written in chunks."""
    rows = target // (4 * cols)
    if os.path.exists(path) and os.path.getsize(path) >= rows * 4 * cols:
        return path
    rng = np.random.default_rng(7)
    out = np.lib.format.open_memmap(path + ".tmp", mode="w+", dtype=np.float32, shape=(rows, cols))
    block = rng.normal(scale=10, size=(1 << 18, cols)).astype(np.float32)
    for i in range(0, rows, len(block)):
        n = min(len(block), rows - i)
        out[i : i + n] = block[:n]
    out.flush()
    del out
    os.rename(path + ".tmp", path)
    return path


def make_parquet(path: str, target: int) -> str:
    """~target bytes of Parquet as pyarrow writes it by default (snappy, 1Mi-row row groups): an
    int64 ``label``, a ``text`` column (words of a 5,000-word vocabulary, log-normal lengths,
    median ~60 bytes) and ``x``, 64 float32 features per row (a fixed-size list). A block of
    200,000 rows written again and again."""
    if os.path.exists(path) and os.path.getsize(path) >= target * 0.95:
        return path
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(20261124)
    rows = 200_000
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    vocab = np.array(["".join(rng.choice(letters, size=int(n))) for n in rng.integers(2, 10, 5000)])
    counts = np.clip(rng.lognormal(2.3, 0.7, rows).astype(int), 1, 300)
    words = vocab[rng.integers(0, len(vocab), int(counts.sum()))]
    cuts = np.cumsum(counts)[:-1]
    text = [" ".join(w) for w in np.split(words, cuts)]
    x = rng.normal(size=(rows, 64)).astype(np.float32)
    block = pa.table(
        {
            "label": pa.array(rng.integers(0, 1000, rows)),
            "text": pa.array(text),
            "x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), 64),
        }
    )
    with pq.ParquetWriter(path + ".tmp", block.schema) as w:
        while os.path.getsize(path + ".tmp") < target:
            w.write_table(block)
    os.rename(path + ".tmp", path)
    return path


# --------------------------------------------------------------------------------------------
# peers (each a small script run in its own interpreter)
# --------------------------------------------------------------------------------------------

PEERS = {
    "baseline": "import numpy, pyarrow, pyarrow.csv, pyarrow.parquet, h5py, click, tqdm, time; time.sleep(0.5)",
    "polars": "import polars as pl, sys; pl.scan_csv(sys.argv[1]).sink_parquet(sys.argv[2] + '/data.parquet')",
    "pyarrow": (
        "import pyarrow.csv as pc, pyarrow.parquet as pq, sys\n"
        "r = pc.open_csv(sys.argv[1])\n"
        "w = pq.ParquetWriter(sys.argv[2] + '/data.parquet', r.schema, compression='zstd')\n"
        "for b in r: w.write_batch(b)\n"
        "w.close()\n"
    ),
    "numpy_f16": (
        "import numpy as np, sys\n"
        "src = np.load(sys.argv[1], mmap_mode='r')\n"
        "dst = np.lib.format.open_memmap(sys.argv[2] + '/x.npy', 'w+', np.float16, src.shape)\n"
        "step = max(1, (64 << 20) // (src.itemsize * src[0].size))\n"
        "for i in range(0, len(src), step): dst[i:i+step] = src[i:i+step].astype(np.float16)\n"
        "dst.flush()\n"
    ),
    "h5py": (
        "import numpy as np, h5py, sys\n"
        "src = np.load(sys.argv[1], mmap_mode='r')\n"
        "rows = max(1, (1 << 20) // (src.itemsize * src[0].size))\n"
        "with h5py.File(sys.argv[2] + '/data.h5', 'w') as f:\n"
        "    d = f.create_dataset('x', shape=src.shape, dtype=src.dtype, chunks=(rows,) + src.shape[1:])\n"
        "    step = max(1, (64 << 20) // (src.itemsize * src[0].size))\n"
        "    for i in range(0, len(src), step): d[i:i+step] = src[i:i+step]\n"
    ),
    # the same loop doing the integrity work every lovecraft output carries: fletcher32 chunk
    # checksums, the file's sha256 for the manifest, and fsync before it counts as written
    # the physical limit of a durable output: the same bytes copied and fsynced
    "copy_fsync": (
        "import os, sys\n"
        "src = open(sys.argv[1], 'rb'); fd = os.open(sys.argv[2] + '/copy.npy', os.O_WRONLY | os.O_CREAT, 0o644)\n"
        "while b := src.read(16 << 20): os.write(fd, b)\n"
        "os.fsync(fd); os.close(fd)\n"
    ),
    "h5py_same_work": (
        "import numpy as np, h5py, sys, os, hashlib\n"
        "src = np.load(sys.argv[1], mmap_mode='r')\n"
        "rows = max(1, (1 << 20) // (src.itemsize * src[0].size))\n"
        "p = sys.argv[2] + '/data.h5'\n"
        "with h5py.File(p, 'w') as f:\n"
        "    d = f.create_dataset('x', shape=src.shape, dtype=src.dtype, chunks=(rows,) + src.shape[1:], fletcher32=True)\n"
        "    step = max(1, (64 << 20) // (src.itemsize * src[0].size))\n"
        "    for i in range(0, len(src), step): d[i:i+step] = src[i:i+step]\n"
        "h = hashlib.sha256()\n"
        "with open(p, 'rb') as f:\n"
        "    while b := f.read(1 << 22): h.update(b)\n"
        "fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.close(fd)\n"
    ),
    "tf_rows": (
        "import numpy as np, sys, os\n"
        "os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'\n"
        "import tensorflow as tf\n"
        "src = np.load(sys.argv[1], mmap_mode='r')\n"
        "with tf.io.TFRecordWriter(sys.argv[2] + '/data.tfrecord') as w:\n"
        "    for row in src:\n"
        "        ex = tf.train.Example(features=tf.train.Features(feature={'x': tf.train.Feature(float_list=tf.train.FloatList(value=row))}))\n"
        "        w.write(ex.SerializeToString())\n"
    ),
    # Parquet -> memmap by hand: iter_batches into .npy files of the same bytes as lovecraft's
    # (x [rows, 64] float32, label, text as values + offsets; the values' header is written last)
    "pq_memmap": (
        "import numpy as np, pyarrow.parquet as pq, sys, os, hashlib\n"
        "pf = pq.ParquetFile(sys.argv[1]); out = sys.argv[2]; n = pf.metadata.num_rows\n"
        "x = np.lib.format.open_memmap(out + '/x.npy', 'w+', np.float32, (n, 64))\n"
        "label = np.lib.format.open_memmap(out + '/label.npy', 'w+', np.int64, (n,))\n"
        "offs = np.lib.format.open_memmap(out + '/text.offsets.npy', 'w+', np.int64, (n + 1,))\n"
        "vals = open(out + '/text.values.npy', 'wb'); vals.write(b' ' * 128)\n"
        "i = base = 0\n"
        "for b in pf.iter_batches(batch_size=65536):\n"
        "    k = b.num_rows\n"
        "    x[i:i + k] = b.column('x').flatten().to_numpy().reshape(k, 64)\n"
        "    label[i:i + k] = b.column('label').to_numpy()\n"
        "    t = b.column('text'); o = np.frombuffer(t.buffers()[1], np.int32)[t.offset:t.offset + k + 1].astype(np.int64)\n"
        "    vals.write(memoryview(t.buffers()[2])[o[0]:o[-1]])\n"
        "    offs[i + 1:i + k + 1] = o[1:] - o[0] + base; base += int(o[-1] - o[0]); i += k\n"
        "head = {'descr': '|u1', 'fortran_order': False, 'shape': (base,)}\n"
        "vals.seek(0); np.lib.format.write_array_header_1_0(vals, head); assert vals.tell() == 128; vals.close()\n"
        "for a in (x, label, offs): a.flush()\n"
        "if len(sys.argv) > 3:  # the same integrity work: sha256 of every file, fsync\n"
        "    for name in os.listdir(out):\n"
        "        p = os.path.join(out, name); h = hashlib.sha256()\n"
        "        with open(p, 'rb') as f:\n"
        "            while c := f.read(1 << 22): h.update(c)\n"
        "        fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.close(fd)\n"
    ),
    "pq_tf_rows": (
        "import sys, os\n"
        "os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'\n"
        "import pyarrow.parquet as pq, tensorflow as tf\n"
        "F = tf.train\n"
        "with tf.io.TFRecordWriter(sys.argv[2] + '/data.tfrecord') as w:\n"
        "    for b in pq.ParquetFile(sys.argv[1]).iter_batches(batch_size=8192):\n"
        "        xs = b.column('x').flatten().to_numpy().reshape(-1, 64); ls = b.column('label').to_numpy()\n"
        "        ts = b.column('text').to_pylist()\n"
        "        for j in range(b.num_rows):\n"
        "            ex = F.Example(features=F.Features(feature={'label': F.Feature(int64_list=F.Int64List(value=[ls[j]])),\n"
        "                'text': F.Feature(bytes_list=F.BytesList(value=[ts[j].encode()])),\n"
        "                'x': F.Feature(float_list=F.FloatList(value=xs[j]))}))\n"
        "            w.write(ex.SerializeToString())\n"
    ),
    # the tokenizers package on its own: the same lines, in batches, through encode_batch
    "encode_batch": (
        "import sys\n"
        "from tokenizers import Tokenizer\n"
        "tok = Tokenizer.from_file(sys.argv[2])\n"
        "with open(sys.argv[1], encoding='utf-8') as f:\n"
        "    while lines := f.readlines(16 << 20):\n"
        "        tok.encode_batch([x.rstrip('\\n') for x in lines])\n"
    ),
}


def make_tokenizer(path: str, text: str, specials: tuple[str, ...] = ("[UNK]", "[PAD]")) -> str:
    """A BPE tokenizer.json (8,000 tokens, ``specials`` among them) trained on the first 200,000
    lines of ``text``."""
    if os.path.exists(path):
        return path
    import itertools

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    with open(text, encoding="utf-8") as f:
        lines = list(itertools.islice(f, 200_000))
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=8000, special_tokens=list(specials)))
    tok.save(path + ".tmp")
    os.rename(path + ".tmp", path)
    return path


PEERS.update(jsonl_inputs.PEERS)


def peer(name: str, *args: str) -> list[str]:
    return [PY, "-c", PEERS[name], *args]


# --------------------------------------------------------------------------------------------
# the benchmarks
# --------------------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    ours: float  # MB/s
    peer: str
    theirs: float
    target: float  # minimum ratio
    note: str = ""
    paired: float | None = None  # the median of per-pair ratios (runs side by side), when measured so

    @property
    def ratio(self) -> float:
        if self.paired is not None:
            return self.paired
        return self.ours / self.theirs if self.theirs else float("nan")


@dataclass
class Bench:
    args: argparse.Namespace
    work: str
    rows: list[Row] = field(default_factory=list)
    mem: list[tuple] = field(default_factory=list)
    mem_jsonl: list[tuple] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    baseline: float = 0.0

    def out(self, name: str) -> str:
        d = os.path.join(self.work, "out", name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        return d

    def kept(self, name: str) -> str:
        """A new output path for every run, nothing deleted until :meth:`drop_kept`: on ext4
        without a journal (this machine's), files created within 60 s of deleting many others
        (360 s while the freed inodes' table blocks are not yet written back; the previous run's
        2,000 column files) wait while the inode allocator steps over the freed inodes (here
        0.4-2 s for 2,000 creates, against 0.06 s), a cost of the measuring loop, not of the tool."""
        self._kept = getattr(self, "_kept", 0) + 1
        d = os.path.join(self.work, "out", "kept", f"{name}-{self._kept}")
        os.makedirs(os.path.dirname(d), exist_ok=True)
        return d

    def drop_kept(self) -> None:
        shutil.rmtree(os.path.join(self.work, "out", "kept"), ignore_errors=True)

    def fresh_dir(self, name: str) -> str:
        d = self.out(name)
        os.makedirs(d)
        return d

    def rounds(self, cmds: dict[str, callable], env: dict | None = None) -> dict[str, list[Result]]:
        """Warm up once, then N rounds alternating the tools; each callable returns a command."""
        res: dict[str, list[Result]] = {k: [] for k in cmds}
        for make in cmds.values():  # warm-up (page cache, imports)
            run(make(), env=env, every=0.05)
        for _ in range(self.args.runs):
            for k, make in cmds.items():
                res[k].append(run(make(), env=env, every=0.05))
        return res


def mbps(size: int, rs: list[Result]) -> float:
    return size / 1e6 / med(rs)


def bench_csv_parquet(b: Bench, size: int) -> None:
    """CSV -> Parquet against polars (>= 1.0x) at ~185 MB and ~1 GB, and the plain pyarrow loop."""
    for target in (size * 185 // 1000, size):
        src = make_csv(os.path.join(b.work, f"csv_{target // 10**6}MB.csv"), target)
        n = os.path.getsize(src)
        res = b.rounds(
            {
                "ours": lambda s=src: [*LOVECRAFT, "convert", s, "-o", b.out("csv_pq"), "--to", "parquet", "-q"],
                "polars": lambda s=src: peer("polars", s, b.fresh_dir("csv_pq_pl")),
                "pyarrow": lambda s=src: peer("pyarrow", s, b.fresh_dir("csv_pq_pa")),
            }
        )
        name = f"CSV -> Parquet (zstd), {n / 1e6:.0f} MB"
        b.rows.append(Row(name, mbps(n, res["ours"]), "polars scan_csv.sink_parquet", mbps(n, res["polars"]), 1.0))
        b.rows.append(
            Row(
                name,
                mbps(n, res["ours"]),
                "pyarrow open_csv + ParquetWriter(zstd)",
                mbps(n, res["pyarrow"]),
                0.0,
                "no target",
            )
        )


def bench_npy(b: Bench, size: int) -> None:
    src = make_npy(os.path.join(b.work, f"npy_{size // 10**6}MB.npy"), size)
    n = os.path.getsize(src)
    cmds = {
        "f16": lambda: [
            *LOVECRAFT,
            "convert",
            src,
            "-o",
            b.out("npy_f16"),
            "--to",
            "memmap",
            "--dtype",
            "float16",
            "-q",
        ],
        "numpy": lambda: peer("numpy_f16", src, b.fresh_dir("npy_f16_np")),
        "h5": lambda: [*LOVECRAFT, "convert", src, "-o", b.out("npy_h5"), "--to", "hdf5", "-q"],
        "h5py": lambda: peer("h5py", src, b.fresh_dir("npy_h5_py")),
        "h5py_same": lambda: peer("h5py_same_work", src, b.fresh_dir("npy_h5_same")),
        "copy": lambda: peer("copy_fsync", src, b.fresh_dir("npy_copy")),
        "tfr": lambda: [*LOVECRAFT, "convert", src, "-o", b.out("npy_tfr"), "--to", "tfrecord", "-q"],
    }
    res = b.rounds(cmds)
    b.rows.append(
        Row("NPY f32 -> float16 memmap", mbps(n, res["f16"]), "chunked numpy loop", mbps(n, res["numpy"]), 0.9)
    )
    # Against the disk itself, in adjacent pairs: this machine's disk speed drifts between runs by
    # more than the gap measured (a copy of the same GB: 0.8 to 2.9 s within minutes), so each of
    # our runs is compared with a copy run just before or after it (the order alternating), and
    # the row's ratio is the median of the pairs' ratios.
    pairs = []
    for i in range(max(5, b.args.runs)):
        order = ("h5", "copy") if i % 2 == 0 else ("copy", "h5")
        got = {k: run(cmds[k](), every=0.05) for k in order}
        pairs.append((got["h5"], got["copy"]))
    b.rows.append(
        Row(
            "NPY -> HDF5",
            mbps(n, [h for h, _ in pairs]),
            "the same bytes copied + fsync (durable copy; adjacent pairs)",
            mbps(n, [c for _, c in pairs]),
            0.8,
            f"ratio: median over {len(pairs)} pairs",
            paired=statistics.median(c.seconds / h.seconds for h, c in pairs),
        )
    )
    b.rows.append(
        Row(
            "NPY -> HDF5",
            mbps(n, res["h5"]),
            "chunked h5py loop",
            mbps(n, res["h5py"]),
            0.0,
            "context: no checksums, hashing or fsync",
        )
    )
    b.rows.append(
        Row(
            "NPY -> HDF5",
            mbps(n, res["h5"]),
            "same loop + fletcher32 + sha256 + fsync",
            mbps(n, res["h5py_same"]),
            0.0,
            "context: the same integrity work",
        )
    )
    # The per-row TensorFlow loop is slow: it runs on the first 64 MiB of the same rows.
    small = os.path.join(b.work, "npy_64MiB.npy")
    if not os.path.exists(small):
        a = np.load(src, mmap_mode="r")
        np.save(small, np.asarray(a[: (64 << 20) // (a.itemsize * a.shape[1])]))
    m = os.path.getsize(small)
    tf = [
        run(peer("tf_rows", small, b.fresh_dir("npy_tfr_tf")), every=0.05) for _ in range(max(1, min(2, b.args.runs)))
    ]
    b.rows.append(
        Row(
            "NPY -> TFRecord",
            mbps(n, res["tfr"]),
            "per-row tf.train.Example + TFRecordWriter",
            mbps(m, tf),
            10.0,
            "peer on the first 64 MiB",
        )
    )


def bench_memory(b: Bench) -> None:
    sizes = (GB // 2, 2 * GB) if not b.args.quick else (GB // 32, GB // 8)
    cases = {
        "convert CSV -> parquet": lambda s: [
            *LOVECRAFT, "convert", make_csv(os.path.join(b.work, f"csv_{s // 10**6}MB.csv"), s), "-o", b.out("m"), "--to", "parquet", "-q"],
        "convert NPY -> memmap f16": lambda s: [
            *LOVECRAFT, "convert", make_npy(os.path.join(b.work, f"npy_{s // 10**6}MB.npy"), s), "-o", b.out("m"), "--to", "memmap", "--dtype", "float16", "-q"],
        "convert NPY -> hdf5": lambda s: [
            *LOVECRAFT, "convert", make_npy(os.path.join(b.work, f"npy_{s // 10**6}MB.npy"), s), "-o", b.out("m"), "--to", "hdf5", "-q"],
        "convert NPY -> tfrecord": lambda s: [
            *LOVECRAFT, "convert", make_npy(os.path.join(b.work, f"npy_{s // 10**6}MB.npy"), s), "-o", b.out("m"), "--to", "tfrecord", "-q"],
        "shard CSV -> tfrecord 128MiB --shuffle": lambda s: [
            *LOVECRAFT, "shard", make_csv(os.path.join(b.work, f"csv_{s // 10**6}MB.csv"), s), "-o", b.out("m"), "--to", "tfrecord",
            "--shard-size", "128MiB", "--shuffle", "--seed", "1", "--max-memory", "256MiB", "-q"],
        "bucket text -> memmap (bytes, 8 buckets)": lambda s: [
            *LOVECRAFT, "bucket", make_text(os.path.join(b.work, f"text_{s // 10**6}MB.txt"), s), "-o", b.out("m"),
            "--to", "memmap", "--num-buckets", "8", "-q"],
    }  # fmt: skip
    for name, make in cases.items():
        peaks = [run(make(s)) for s in sizes]
        b.mem.append(
            (name, peaks[0].peak_mib - b.baseline, peaks[1].peak_mib - b.baseline, peaks[0].seconds, peaks[1].seconds)
        )


def bench_shard(b: Bench, size: int) -> None:
    src = make_csv(os.path.join(b.work, f"csv_{size // 10**6}MB.csv"), size)
    n = os.path.getsize(src)

    def cmd(*extra):
        return lambda: [
            *LOVECRAFT,
            "shard",
            src,
            "-o",
            b.out("sh"),
            "--to",
            "tfrecord",
            "--shard-size",
            "128MiB",
            "-q",
            *extra,
        ]

    res = b.rounds(
        {
            "plain2": cmd("--workers", "2"),
            "shuffle2": cmd("--workers", "2", "--shuffle", "--seed", "1"),
            "plain1": cmd("--workers", "1"),
        }
    )
    b.rows.append(
        Row(
            "shard CSV -> TFRecord 128MiB, --workers 2",
            mbps(n, res["plain2"]),
            "same with --workers 1",
            mbps(n, res["plain1"]),
            1.6,
        )
    )
    b.rows.append(
        Row(
            "shard ... --shuffle (cost vs plain)",
            mbps(n, res["shuffle2"]),
            "same without --shuffle",
            mbps(n, res["plain2"]),
            1 / 2.5,
            "ratio >= 0.4 means shuffle costs <= 2.5x",
        )
    )


def bench_verify(b: Bench, size: int) -> None:
    """verify (hashing and decoding) against sha256sum over the same data files."""
    src = make_npy(os.path.join(b.work, f"npy_{size // 10**6}MB.npy"), size)
    for fmt in ("memmap", "hdf5", "parquet", "tfrecord"):
        d = os.path.join(b.work, f"verify_{fmt}_{size // 10**6}MB")
        if not os.path.exists(os.path.join(d, "_manifest.json")):
            run([*LOVECRAFT, "convert", src, "-o", d, "--to", fmt, "-q", "--overwrite"])
        files = sorted(os.path.join(d, f) for f in os.listdir(d) if not f.startswith("_"))
        n = sum(os.path.getsize(f) for f in files)
        res = b.rounds(
            {"ours": lambda d=d: [*LOVECRAFT, "verify", d], "sha": lambda files=files: ["sha256sum", *files]}
        )
        peak = max(r.peak_mib for r in res["ours"]) - b.baseline
        b.rows.append(
            Row(
                f"verify {fmt} dataset",
                mbps(n, res["ours"]),
                "sha256sum over the same files",
                mbps(n, res["sha"]),
                0.5,
                f"verify peak {peak:.0f} MiB above baseline",
            )
        )


def bench_bucket(b: Bench, size: int) -> None:
    """bucket with the bytes tokenizer (an absolute target), and with a tokenizer.json against the
    tokenizers package's own encode_batch over the same lines."""
    src = make_text(os.path.join(b.work, f"text_{size // 10**6}MB.txt"), size)
    n = os.path.getsize(src)

    def ours(*extra):
        return lambda: [
            *LOVECRAFT,
            "bucket",
            src,
            "-o",
            b.out("bk"),
            "--to",
            "memmap",
            "--num-buckets",
            "8",
            "-q",
            *extra,
        ]

    res = b.rounds({"padded": ours(), "ragged": ours("--layout", "ragged")})
    b.rows.append(Row("bucket text -> memmap, bytes, 8 buckets (padded)", mbps(n, res["padded"]),
                      "the target: 150 MB/s of input", 150.0, 1.0))  # fmt: skip
    b.rows.append(Row("bucket text -> memmap, bytes, 8 buckets (ragged)", mbps(n, res["ragged"]),
                      "the target: 150 MB/s of input", 150.0, 0.0, "context, no target"))  # fmt: skip
    small = os.path.join(b.work, f"text_{size // 10**7}MB.txt")
    if not os.path.exists(small):
        with open(src, "rb") as f, open(small + ".tmp", "wb") as g:
            data = f.read(size // 10)
            g.write(data[: data.rfind(b"\n") + 1])
        os.rename(small + ".tmp", small)
    tok = make_tokenizer(os.path.join(b.work, "tokenizer.json"), src)
    m = os.path.getsize(small)
    res = b.rounds(
        {
            "ours": lambda: [*LOVECRAFT, "bucket", small, "-o", b.out("bkt"), "--to", "memmap", "--num-buckets", "8",
                             "--tokenizer", tok, "-q"],
            "peer": lambda: peer("encode_batch", small, tok),
        }
    )  # fmt: skip
    b.rows.append(
        Row(
            f"bucket text -> memmap, tokenizer.json (BPE 8k), {m / 1e6:.0f} MB",
            mbps(m, res["ours"]),
            "tokenizers encode_batch over the same lines",
            mbps(m, res["peer"]),
            0.85,
        )
    )


def bench_jsonl(b: Bench, size: int) -> None:
    """JSON Lines -> Parquet (zstd) against polars' streaming scan_ndjson().sink_parquet() and
    pyarrow's read_json + write_table, on C4-like records at ~185 MB and ~1 GB; and the LLM case,
    keeping only ``text``, against polars selecting it."""
    for target in (size * 185 // 1000, size):
        src = jsonl_inputs.make_jsonl(os.path.join(b.work, f"jsonl_{target // 10**6}MB.jsonl"), target)
        n = os.path.getsize(src)
        mb = f"{n / 1e6:.0f} MB"
        res = b.rounds(
            {
                "ours": lambda src=src: [*LOVECRAFT, "convert", src, "-o", b.out("jl"), "--to", "parquet", "-q"],
                "polars": lambda src=src: peer("polars_ndjson", src, b.fresh_dir("jl_pl")),
                "pyarrow": lambda src=src: peer("pyarrow_json", src, b.fresh_dir("jl_pa")),
                "ours_text": lambda src=src: [
                    *LOVECRAFT, "convert", src, "-o", b.out("jlt"), "--to", "parquet", "--columns", "text", "-q"],
                "polars_text": lambda src=src: peer("polars_ndjson_text", src, b.fresh_dir("jlt_pl")),
            }
        )  # fmt: skip
        ours = mbps(n, res["ours"])
        b.rows.append(
            Row(f"JSONL -> Parquet (zstd), {mb}", ours, "polars scan_ndjson.sink_parquet", mbps(n, res["polars"]), 1.0)
        )
        b.rows.append(
            Row(
                f"JSONL -> Parquet (zstd), {mb}",
                ours,
                "pyarrow.json.read_json + write_table(zstd)",
                mbps(n, res["pyarrow"]),
                0.0,
                "no target; reads the whole file into memory",
            )
        )
        b.rows.append(Row(f"JSONL -> Parquet --columns text, {mb}", mbps(n, res["ours_text"]),
                          "polars scan_ndjson.select('text').sink_parquet", mbps(n, res["polars_text"]), 0.0, "context"))  # fmt: skip


def bench_jsonl_memory(b: Bench) -> None:
    """Peak anonymous memory of JSON Lines -> Parquet at two sizes (1 GB, 4 GB: the 1 GB input four
    times over) under --max-memory 256MiB, and a single 100 MB JSON line refused within it."""
    one = jsonl_inputs.make_jsonl(os.path.join(b.work, "jsonl_1000MB.jsonl"), GB if not b.args.quick else GB // 16)
    four = jsonl_inputs.make_repeated(os.path.join(b.work, "jsonl_x4.jsonl"), one, 4)
    cases = {
        "convert JSONL -> parquet": lambda src: [*LOVECRAFT, "convert", src, "-o", b.out("m"), "--to", "parquet",
                                                 "--max-memory", "256MiB", "-q"],
        "shard JSONL -> parquet 128MiB --workers 2": lambda src: [*LOVECRAFT, "shard", src, "-o", b.out("m"), "--to",
                                                  "parquet", "--shard-size", "128MiB", "--workers", "2", "--max-memory", "256MiB", "-q"],
    }  # fmt: skip
    for name, make in cases.items():
        peaks = [run(make(src)) for src in (one, four)]
        sizes = [os.path.getsize(one) / GB, os.path.getsize(four) / GB]
        b.mem_jsonl.append((name, *sizes, *(p.peak_mib - b.baseline for p in peaks), *(p.seconds for p in peaks)))
    long = jsonl_inputs.make_long_line(os.path.join(b.work, "jsonl_line_100MB.jsonl"), 100 << 20)
    r = run([*LOVECRAFT, "convert", long, "-o", b.out("m"), "--to", "parquet", "--max-memory", "256MiB"], expect=1)
    message = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    peak = r.peak_mib - b.baseline
    met = "yes" if peak < 256 and "longer than" in message else "NO"
    b.extra.append(
        f"A single 100 MB JSON line under --max-memory 256MiB: refused in {r.seconds:.1f}s, exit 1, peak {peak:.0f} MiB "
        f"above the baseline (target < 256 MiB: {met}): `{message}`"
    )


def bench_parquet(b: Bench, size: int) -> None:
    """Parquet -> memmap and Parquet -> TFRecord against the plain pyarrow loops doing the same."""
    src = make_parquet(os.path.join(b.work, f"parquet_{size // 10**6}MB.parquet"), size)
    n = os.path.getsize(src)
    res = b.rounds(
        {
            "mm": lambda: [*LOVECRAFT, "convert", src, "-o", b.out("pq_mm"), "--to", "memmap", "-q"],
            "loop": lambda: peer("pq_memmap", src, b.fresh_dir("pq_mm_loop")),
            "loop_same": lambda: peer("pq_memmap", src, b.fresh_dir("pq_mm_same"), "same"),
            "tfr": lambda: [*LOVECRAFT, "convert", src, "-o", b.out("pq_tfr"), "--to", "tfrecord", "-q"],
        }
    )
    b.rows.append(Row("Parquet -> memmap", mbps(n, res["mm"]), "pyarrow iter_batches into .npy files", mbps(n, res["loop"]), 0.0, "no target"))  # fmt: skip
    b.rows.append(Row("Parquet -> memmap", mbps(n, res["mm"]), "same loop + sha256 + fsync", mbps(n, res["loop_same"]), 0.0, "context: the same integrity work"))  # fmt: skip
    # The per-row TensorFlow loop is slow: it runs on the first ~64 MiB (one row group) of the rows.
    small = os.path.join(b.work, "parquet_64MiB.parquet")
    if not os.path.exists(small):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(src)
        first = next(pf.iter_batches(batch_size=int(pf.metadata.num_rows * (64 << 20) / n)))
        pq.write_table(pa.Table.from_batches([first]), small)
    m = os.path.getsize(small)
    tf = [
        run(peer("pq_tf_rows", small, b.fresh_dir("pq_tfr_tf")), every=0.05) for _ in range(max(1, min(2, b.args.runs)))
    ]
    b.rows.append(Row("Parquet -> TFRecord", mbps(n, res["tfr"]), "pyarrow iter_batches + per-row tf.train.Example + TFRecordWriter", mbps(m, tf), 0.0, "no target; peer on the first 64 MiB"))  # fmt: skip


def help_time(b: Bench) -> None:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run(
            [os.path.join(os.path.dirname(PY), "lovecraft"), "--help"], stdout=subprocess.DEVNULL, check=True
        )
        times.append(time.perf_counter() - t0)
    b.extra.append(f"`lovecraft --help`: median {statistics.median(times) * 1000:.0f} ms over 5 runs (target < 300 ms)")


BENCHES = {
    "csv": bench_csv_parquet,
    "npy": bench_npy,
    "shard": bench_shard,
    "bucket": bench_bucket,
    "tokens": lambda b, size: tokens_bench.bench_tokens(b, size, sys.modules[__name__]),
    "verify": bench_verify,
    "jsonl": bench_jsonl,
    "parquet": bench_parquet,
    "ray": lambda b, size: engine_bench.bench_ray(b, size, Row, mbps, make_csv),
    "wide": lambda b, size: engine_bench.bench_wide(b, size, Row, mbps),
    "s3": lambda b, size: __import__("s3_bench").bench_s3(b, size),  # bench/s3_bench.py
}
ALL = "csv,npy,shard,bucket,tokens,verify,jsonl,parquet,ray,wide,s3,memory,jsonl_memory,help"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="inputs 1/16 the size, one run: a smoke test")
    ap.add_argument("--only", default=ALL, help=f"a comma-separated selection of {ALL}")
    ap.add_argument("--workdir", default="/tmp/lovecraft-bench")
    ap.add_argument("--save", help="also write the table to this file")
    args = ap.parse_args()
    if args.quick:
        args.runs = 1
    size = GB // 16 if args.quick else GB
    os.makedirs(args.workdir, exist_ok=True)
    compile_package()
    b = Bench(args, args.workdir)
    b.baseline = statistics.median(run(peer("baseline")).peak_mib for _ in range(3))
    only = args.only.split(",")
    t0 = time.time()
    for name, fn in BENCHES.items():
        if name in only:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            fn(b, size)
            # a section's outputs are not read by the next: kept, they filled the disk (~19 GB by 's3')
            shutil.rmtree(os.path.join(b.work, "out"), ignore_errors=True)
    if "memory" in only:
        print("bench: memory ...", file=sys.stderr, flush=True)
        bench_memory(b)
    if "jsonl_memory" in only:
        print("bench: jsonl_memory ...", file=sys.stderr, flush=True)
        bench_jsonl_memory(b)
    if "help" in only:
        help_time(b)
    report = render(b, size, time.time() - t0)
    print(report)
    if args.save is not None:
        with open(args.save, "w") as f:
            f.write(report + "\n")
    shutil.rmtree(os.path.join(b.work, "out"), ignore_errors=True)


def render(b: Bench, size: int, elapsed: float) -> str:
    lines = [
        f"Measured {datetime.date.today()} on {os.cpu_count()} cores, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB; inputs ~{size / GB:g} GB; "
        f"median of {b.args.runs} runs; {elapsed / 60:.1f} min in all; {BYTECODE_NOTE}.",
        "",
        "| benchmark | ours MB/s | peer | peer MB/s | ratio | target | met |",
        "|---|---:|---|---:|---:|---:|:---:|",
    ]
    for r in b.rows:
        met = "yes" if r.target == 0 or r.ratio >= r.target else "NO"
        tgt = f">= {r.target:g}x" if r.target else "-"
        note = f" ({r.note})" if r.note else ""
        ours = f"{r.ours:.0f}" if r.ours >= 10 else f"{r.ours:.2f}"  # slow rows (tokenizers) keep their digits
        lines.append(f"| {r.name} | {ours} | {r.peer}{note} | {r.theirs:.2f} | {r.ratio:.2f}x | {tgt} | {met} |")
    if b.mem:
        lines += [
            "",
            f"Peak anonymous memory above the baseline interpreter with its imports ({b.baseline:.0f} MiB), one run each:",
            "",
            "| command | @0.5 GB | @2 GB | difference | target | met |",
            "|---|---:|---:|---:|---|:---:|",
        ]
        for name, a, c, _ta, _tc in b.mem:
            diff = (c - a) / a * 100 if a else 0.0
            met = "yes" if max(a, c) < 256 and abs(diff) <= 10 else "NO"
            if met == "NO" and max(a, c) < 256 and abs(c - a) < 16:
                met = f"NO ({c - a:+.0f} MiB: within sampling noise?)"
            lines.append(
                f"| {name} | {a:.0f} MiB | {c:.0f} MiB | {diff:+.1f}% ({c - a:+.0f} MiB) | < 256 MiB, within 10% | {met} |"
            )
        lines.append("")
        lines.append(
            "Time at the two sizes (linear growth): "
            + "; ".join(f"{n}: {ta:.1f}s / {tc:.1f}s" for n, _, _, ta, tc in b.mem)
        )
    if b.mem_jsonl:
        _, s1, s2, *_ = b.mem_jsonl[0]
        lines += [
            "",
            f"JSON Lines, peak anonymous memory above the baseline ({b.baseline:.0f} MiB), --max-memory 256MiB, one run each:",
            "",
            f"| command | @{s1:.2g} GB | @{s2:.2g} GB | difference | target | met |",
            "|---|---:|---:|---:|---|:---:|",
        ]
        for name, _s1, _s2, a, c, _ta, _tc in b.mem_jsonl:
            diff = (c - a) / a * 100 if a else 0.0
            met = "yes" if max(a, c) < 256 and (abs(diff) <= 10 or abs(c - a) < 16) else "NO"
            lines.append(
                f"| {name} | {a:.0f} MiB | {c:.0f} MiB | {diff:+.1f}% ({c - a:+.0f} MiB) | < 256 MiB, within 10% | {met} |"
            )
        lines.append("")
        lines.append(
            "Time at the two sizes: " + "; ".join(f"{n}: {ta:.1f}s / {tc:.1f}s" for n, *_, ta, tc in b.mem_jsonl)
        )
    if b.extra:
        lines += [""] + b.extra
    return "\n".join(lines)


if __name__ == "__main__":
    main()
