"""A shuffled epoch through the usual PyTorch loop: lovecraft against litdata and MosaicML Streaming,
over the same rows, each system's files written by its own writer and read by its own loader.

    .venv/bin/python bench/peer_loaders_bench.py [--quick] [--rows N] [--runs N] [--limit S]
                                                 [--num-workers W] [--batch-size B] [--workdir DIR]

The data: ``--rows`` rows (default 1,000,000; ``--quick``: 100,000) of ``x`` float32 [64] and
``label`` int64 (0..999), made with numpy (seeded) as ``x.npy`` + ``label.npy`` in ``--workdir``
and reused. Each system writes it once, timed, in a fresh process (imports included), after a
``sync`` of what was written before:

* ours: ``lovecraft shard x.npy label.npy --to memmap --shard-size 64MiB`` (its default workers:
  one per core; it fsyncs every file and hashes it into the manifest);
* litdata: ``optimize(fn, inputs, chunk_bytes="64MB", num_workers=<cores>)``, ``fn`` yielding one
  ``{"x": ndarray, "label": int}`` sample per row;
* MosaicML Streaming: ``MDSWriter(columns={"x": "ndarray:float32:64", "label": "int64"},
  compression=None)`` (its default 64 MiB shards; one process, it has no workers), one
  ``write()`` per row.

Readers, one shuffled epoch in batches of ``--batch-size`` (256), every batch's tensors touched
(rows counted, labels summed):

* ours, the standard DataLoader: ``DataLoader(open_dataset(d).to_torch(), batch_size=B,
  shuffle=True)`` (map-style, whole batches through ``__getitems__``; an exact permutation);
* ours, ``open_dataset(d).batches(B, shuffle=True, seed=0)`` (NumPy batches, no DataLoader);
* litdata: ``StreamingDataLoader(StreamingDataset(d, shuffle=True), batch_size=B)`` on the plain
  local path (read in place, no cache copy); its shuffle permutes chunks and windows of 256 rows
  within them;
* MosaicML: ``DataLoader(StreamingDataset(local=d, shuffle=True, batch_size=B), batch_size=B)``;
  its shuffle (py1e) permutes within blocks of shards.

``--num-workers`` (default 0: the default of both ``DataLoader`` and litdata's
``StreamingDataLoader``) goes to all three DataLoaders. An epoch that runs past ``--limit`` seconds
(default 120; MosaicML's reader has taken ~230 s for 1M rows) is stopped there, and its throughput
is that of the rows it read (its epoch time extrapolated; said in the table).

Each epoch runs in a fresh process and is timed there from opening the dataset to its last batch
(imports excluded): MosaicML's reader leaves its threads running when an epoch is abandoned, and its
shared memory is per process (``clean_stale_shared_memory()`` runs before each of its epochs). The
page cache is warmed by reading every output file once. ``--runs`` rounds (default 3; 1 with
``--quick``) alternate the readers' order; times are medians. Checks: a complete epoch has every row
once by count and by the sum of its labels; a stopped one no more rows than the dataset.

The peers' writes and epochs run in the peers' own venv (``.venv-peers``, docs/design/peers.md;
``LOVECRAFT_PEERS_VENV`` names another): this script, run by that venv's python (it imports only
numpy and the standard library before a peer's package). A peer that cannot be imported there (or
whose write fails) is reported as skipped and the rest is measured. mosaicml-streaming's top-level
package also imports its vision and text datasets (torchvision) and its ``StreamingDataLoader``
(transformers); when those are missing or do not load, the writer and ``StreamingDataset`` are
imported from their modules without the package ``__init__`` (said in the output); they need
neither.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field
from functools import partial

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from loader_bench import COLS, ROW_BYTES, write_source  # noqa: E402
from measure import run  # noqa: E402

CHUNK = 64 << 20  # the chunk/shard size of every writer (Mosaic's default size_limit)
BLOCK = 4096  # rows a writer takes from the source at a time
READERS = ("ours_dl", "ours_batches", "litdata", "mosaic")
PEERS = ("litdata", "mosaic")
SYSTEM = {"ours_dl": "ours", "ours_batches": "ours", "litdata": "litdata", "mosaic": "mosaic"}


def log(msg: str) -> None:
    print(f"peer-bench: {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# the data
# ----------------------------------------------------------------------------------------------


def make_data(workdir: str, rows: int) -> str:
    """``x.npy`` (float32 [rows, 64]) and ``label.npy`` (int64, 0..999) in a directory of their
    own (cached; regenerated when missing)."""
    base = os.path.join(workdir, f"data-{rows}")
    os.makedirs(base, exist_ok=True)
    write_source(base, rows, seed=11, labels=1000, say=log)
    return base


_SOURCE: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def source(src: str) -> tuple[np.ndarray, np.ndarray]:
    """The source columns, memory-mapped (once per process)."""
    if src not in _SOURCE:
        _SOURCE[src] = (
            np.load(os.path.join(src, "x.npy"), mmap_mode="r"),
            np.load(os.path.join(src, "label.npy"), mmap_mode="r"),
        )
    return _SOURCE[src]


# ----------------------------------------------------------------------------------------------
# the peers: imports and writers (each run in a fresh process: `--write NAME`)
# ----------------------------------------------------------------------------------------------


def import_litdata():
    os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")  # no PyPI request in a timed run
    import litdata

    return litdata


def import_mosaic() -> tuple[types.SimpleNamespace, str]:
    """MosaicML Streaming's writer, dataset and shared-memory cleaner, and how they were imported."""
    try:
        import streaming
        from streaming import MDSWriter, StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        ns = types.SimpleNamespace(
            MDSWriter=MDSWriter, StreamingDataset=StreamingDataset, clean=clean_stale_shared_memory
        )
        return ns, f"mosaicml-streaming {streaming.__version__}"
    except Exception as e:  # noqa: BLE001 - any failure of its optional integrations
        why = f"{type(e).__name__}: {e}".splitlines()[0]
    # the package __init__s import the vision/text datasets and StreamingDataLoader; the writer and
    # the dataset do not need them: register the two packages empty and import those modules alone
    for name in [k for k in sys.modules if k == "streaming" or k.startswith("streaming.")]:
        del sys.modules[name]
    spec = importlib.util.find_spec("streaming")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(why)
    pkg = list(spec.submodule_search_locations)[0]
    for name, path in (("streaming", pkg), ("streaming.base", os.path.join(pkg, "base"))):
        mod = types.ModuleType(name)
        mod.__path__ = [path]
        sys.modules[name] = mod
    from streaming._version import __version__
    from streaming.base.dataset import StreamingDataset
    from streaming.base.format.mds.writer import MDSWriter
    from streaming.base.util import clean_stale_shared_memory

    ns = types.SimpleNamespace(MDSWriter=MDSWriter, StreamingDataset=StreamingDataset, clean=clean_stale_shared_memory)
    return ns, f"mosaicml-streaming {__version__}, its core modules alone (`import streaming`: {why})"


def litdata_rows(src: str, start: int):
    """litdata's ``fn``: the samples of rows ``start`` .. ``start + BLOCK``, one per row."""
    x, label = source(src)
    xs, ys = np.array(x[start : start + BLOCK]), np.array(label[start : start + BLOCK])
    for i in range(len(xs)):
        yield {"x": xs[i], "label": int(ys[i])}


def write_litdata(src: str, out: str) -> None:
    litdata = import_litdata()
    rows = len(source(src)[1])
    litdata.optimize(
        fn=partial(litdata_rows, src),
        inputs=list(range(0, rows, BLOCK)),
        output_dir=out,
        chunk_bytes=CHUNK,
        num_workers=os.cpu_count() or 1,
        verbose=False,
    )


def write_mosaic(src: str, out: str) -> None:
    ms, _ = import_mosaic()
    x, label = source(src)
    columns = {"x": f"ndarray:float32:{COLS}", "label": "int64"}
    with ms.MDSWriter(out=out, columns=columns, compression=None, size_limit=CHUNK) as w:
        for i in range(0, len(label), BLOCK):
            xs, ys = np.array(x[i : i + BLOCK]), np.array(label[i : i + BLOCK])
            for j in range(len(xs)):
                w.write({"x": xs[j], "label": int(ys[j])})


def write_cmd(name: str, src: str, out: str) -> list[str]:
    if name == "ours":
        xs = [os.path.join(src, "x.npy"), os.path.join(src, "label.npy")]
        return [sys.executable, "-m", "lovecraft_convert", "shard", *xs, "-o", out, "--to", "memmap"] + [
            "--shard-size",
            "64MiB",
            "-q",
        ]
    return [python_of(name), os.path.abspath(__file__), "--write", name, "--src", src, "--out", out]


def python_of(system: str) -> str:
    """The interpreter that runs ``system``'s child processes: the peers' venv's for a peer."""
    if system not in PEERS:
        return sys.executable
    from tests.peers import PEERS_PYTHON

    return PEERS_PYTHON


def env_of(system: str) -> dict[str, str] | None:
    """The environment of ``system``'s child processes (a peer's: nothing pointing at ``.venv``)."""
    if system not in PEERS:
        return None
    from tests.peers import peer_env

    return peer_env()


def probe(name: str) -> str:
    """What the child ``--probe NAME`` prints: the peer's version, as imported."""
    if name == "litdata":
        return f"litdata {import_litdata().__version__}"
    ms, version = import_mosaic()
    ms.clean()  # shared memory a stopped epoch of an earlier round may have left
    return version


def peer_version(name: str) -> str:
    """``name``'s version, imported in the peers' venv; raises RuntimeError with why it cannot be."""
    python = python_of(name)
    if not os.path.exists(python):
        raise RuntimeError(f"no peers' venv ({python}): run `make .venv-peers` (docs/design/peers.md)")
    cmd = [python, os.path.abspath(__file__), "--probe", name]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env_of(name))
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise RuntimeError((p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1])
    return lines[-1]


# ----------------------------------------------------------------------------------------------
# one epoch (run in a fresh process: `--epoch READER`)
# ----------------------------------------------------------------------------------------------


def drain(batches, t0: float, limit: float) -> dict:
    rows = total = 0
    for b in batches:
        rows += len(b["label"])
        total += int(b["label"].sum())
        if time.perf_counter() - t0 > limit:
            break
    return {"rows": rows, "label_sum": total, "seconds": time.perf_counter() - t0}


def epoch(reader: str, path: str, bs: int, limit: float, workers: int) -> dict:
    """One shuffled epoch (or its first ``limit`` seconds), timed from opening the dataset."""
    import torch  # noqa: F401 - imported before the clock starts, by every reader

    if reader in ("ours_dl", "ours_batches"):
        from torch.utils.data import DataLoader

        import lovecraft_convert as lc

        t0 = time.perf_counter()
        ds = lc.open_dataset(path)
        if reader == "ours_batches":
            return drain(ds.batches(bs, shuffle=True, seed=0), t0, limit)
        return drain(DataLoader(ds.to_torch(), batch_size=bs, shuffle=True, num_workers=workers), t0, limit)
    if reader == "litdata":
        litdata = import_litdata()
        t0 = time.perf_counter()
        ds = litdata.StreamingDataset(path, shuffle=True)
        return drain(litdata.StreamingDataLoader(ds, batch_size=bs, num_workers=workers), t0, limit)
    if reader == "mosaic":
        from torch.utils.data import DataLoader

        ms, _ = import_mosaic()
        ms.clean()
        t0 = time.perf_counter()
        ds = ms.StreamingDataset(local=path, shuffle=True, batch_size=bs)
        return drain(DataLoader(ds, batch_size=bs, num_workers=workers), t0, limit)
    raise ValueError(reader)


# ----------------------------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------------------------


@dataclass
class Epochs:
    runs: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def epoch_seconds(self, n: int) -> list[float]:
        """Each run's epoch time; a stopped epoch's extrapolated from the rows it read."""
        return [r["seconds"] * n / max(1, r["rows"]) for r in self.runs]

    def median(self, n: int) -> float:
        return statistics.median(self.epoch_seconds(n))

    @property
    def stopped(self) -> bool:
        return any(not r["complete"] for r in self.runs)


def run_epoch(reader: str, path: str, a: argparse.Namespace, n: int, total: int) -> dict:
    cmd = [python_of(SYSTEM[reader]), os.path.abspath(__file__), "--epoch", reader, "--path", path]
    cmd += ["--batch-size", str(a.batch_size), "--limit", str(a.limit), "--num-workers", str(a.num_workers)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.limit + 600, env=env_of(SYSTEM[reader]))
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{reader}: exit {p.returncode}: {tail}")
    r = json.loads(lines[-1])
    r["complete"] = r["rows"] >= n
    if r["complete"]:
        r["ok"] = r["rows"] == n and r["label_sum"] == total
    else:
        r["ok"] = r["rows"] <= n
    return r


def warm(path: str) -> None:
    """Read every file of an output once (the page cache, as a warm-up epoch would leave it)."""
    for root, _, files in os.walk(path):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                while fh.read(16 << 20):
                    pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100,000 rows, one run")
    ap.add_argument("--rows", type=int, default=None, help="rows of the dataset (default 1,000,000)")
    ap.add_argument("--runs", type=int, default=None, help="timed rounds (default 3; 1 with --quick)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--limit", type=float, default=120.0, help="seconds an epoch may take before it is stopped")
    ap.add_argument("--num-workers", type=int, default=0, help="num_workers of every DataLoader (default 0)")
    ap.add_argument("--workdir", default=os.environ.get("BENCH_WORKDIR", "/tmp/lovecraft-bench") + "/peers")
    # the child processes
    ap.add_argument("--write", choices=PEERS, help=argparse.SUPPRESS)
    ap.add_argument("--probe", choices=PEERS, help=argparse.SUPPRESS)
    ap.add_argument("--epoch", choices=READERS, help=argparse.SUPPRESS)
    ap.add_argument("--src", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.probe:
        print(probe(a.probe), flush=True)
        return 0
    if a.write:
        (write_litdata if a.write == "litdata" else write_mosaic)(a.src, a.out)
        return 0
    if a.epoch:
        print(json.dumps(epoch(a.epoch, a.path, a.batch_size, a.limit, a.num_workers)), flush=True)
        os._exit(0)  # not waiting for threads a stopped epoch left running (MosaicML's)

    n = a.rows or (100_000 if a.quick else 1_000_000)
    runs = a.runs or (1 if a.quick else 3)
    bs = a.batch_size
    mb = n * ROW_BYTES / 1e6
    src = make_data(a.workdir, n)
    total = int(np.load(os.path.join(src, "label.npy"), mmap_mode="r").sum())
    cores = os.cpu_count() or 1

    # which peers are here (imported in the peers' venv)
    versions = {"ours": "lovecraft_convert (this tree)"}
    skipped: dict[str, str] = {}
    for name in PEERS:
        try:
            versions[name] = peer_version(name)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            skipped[name] = str(e)
    for name, why in skipped.items():
        log(f"{name}: skipped ({why})")

    # the writes: one each, a fresh process, after a sync
    outs = {name: os.path.join(a.workdir, f"out-{n}", name) for name in ("ours", "litdata", "mosaic")}
    writes: dict[str, tuple[float, float]] = {}
    for name, out in outs.items():
        if name in skipped:
            continue
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        log(f"writing {name}")
        try:
            r = run(write_cmd(name, src, out), env=env_of(name), every=0.05)
        except SystemExit as e:
            if name == "ours":
                raise
            skipped[name] = f"its write failed: {e}"
            log(f"{name}: skipped ({skipped[name]})")
            continue
        writes[name] = (r.seconds, r.peak_mib)
        log(f"{name}: written in {r.seconds:.2f} s (peak anonymous memory {r.peak_mib:.0f} MiB)")

    # the epochs: a fresh process each, the readers' order alternating from round to round
    readers = [k for k in READERS if SYSTEM[k] not in skipped]
    for k in readers:
        warm(outs[SYSTEM[k]])
    res = {k: Epochs() for k in readers}
    for r in range(runs):
        order = readers if r % 2 == 0 else list(reversed(readers))
        for k in order:
            try:
                res[k].runs.append(run_epoch(k, outs[SYSTEM[k]], a, n, total))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                res[k].errors.append(str(e))
                log(f"round {r + 1}: {e}")
                continue
            e_ = res[k].runs[-1]
            how = "" if e_["complete"] else f" (stopped at {e_['rows']} rows)"
            log(f"round {r + 1}: {k} {e_['seconds']:.2f} s{how}, check {'ok' if e_['ok'] else 'FAILED'}")
    for k in [k for k in readers if not res[k].runs]:
        if SYSTEM[k] == "ours":
            raise SystemExit(f"peer-bench: {k} failed: {res[k].errors[-1]}")
        skipped[SYSTEM[k]] = f"its epochs failed: {res[k].errors[-1]}"
        readers.remove(k)
    if "mosaic" in readers:
        peer_version("mosaic")  # its shared memory, which the last epoch's os._exit left, cleaned

    # the tables
    names = {
        "ours_dl": f"`DataLoader(ds.to_torch(), batch_size={bs}, shuffle=True)`",
        "ours_batches": f"`ds.batches({bs}, shuffle=True, seed=0)`",
        "litdata": f"litdata `StreamingDataLoader(StreamingDataset(d, shuffle=True), batch_size={bs})`",
        "mosaic": f"MosaicML `DataLoader(StreamingDataset(local=d, shuffle=True, batch_size={bs}), batch_size={bs})`",
    }
    mbps = {k: mb / res[k].median(n) for k in readers}

    def note(k: str) -> str:
        if not res[k].stopped:
            return ""
        read = statistics.median(r["rows"] for r in res[k].runs)
        return f" (stopped at {a.limit:g} s: ~{read:,.0f} of {n:,} rows read)"

    print(
        f"\n### Peer loaders: a shuffled epoch of {n:,} rows ({mb:.0f} MB: x float32[{COLS}] + label int64), "
        f"batches of {bs}, num_workers={a.num_workers}, median of {runs}\n"
    )
    print("| benchmark | ours MB/s | peer | peer MB/s | ratio | target | met |")
    print("|---|---:|---|---:|---:|---:|:---:|")
    for ours, target in (("ours_dl", 1.0), ("ours_batches", 0.0)):
        for peer in ("litdata", "mosaic"):
            if peer not in readers:
                continue
            ratio = mbps[ours] / mbps[peer]
            tgt, met = (f"> {target:g}x", "yes" if ratio > target else "NO") if target else ("-", "-")
            print(
                f"| shuffled epoch, {names[ours]} | {mbps[ours]:.0f} | {names[peer]}{note(peer)} | "
                f"{mbps[peer]:.1f} | {ratio:.2f}x | {tgt} | {met} |"
            )
    wname = {
        "ours": "`lovecraft shard --to memmap --shard-size 64MiB`",
        "litdata": f"litdata `optimize(chunk_bytes=64 MiB, num_workers={cores})`, a sample per row",
        "mosaic": "MosaicML `MDSWriter(compression=None)`, a `write()` per row",
    }
    for peer in ("litdata", "mosaic"):
        if peer in writes:
            ours_w, peer_w = mb / writes["ours"][0], mb / writes[peer][0]
            print(
                f"| write, {wname['ours']} | {ours_w:.0f} | {wname[peer]} | {peer_w:.1f} | {ours_w / peer_w:.2f}x | - | - |"
            )
    print()
    print("| reader | epoch s (median) | MB/s | rows per epoch | check | each run (s) |")
    print("|---|---:|---:|---:|---|---|")
    for k in readers:
        e = res[k]
        rows = statistics.median(r["rows"] for r in e.runs)
        check = "ok" if all(r["ok"] for r in e.runs) else "FAILED"
        check += " (count, label sum)" if not e.stopped else " (count only: stopped)"
        secs = ", ".join(f"{r['seconds']:.2f}" for r in e.runs)
        extra = " (extrapolated)" if e.stopped else ""
        fails = f"; {len(e.errors)} failed: {e.errors[-1]}" if e.errors else ""
        print(f"| {names[k]} | {e.median(n):.2f}{extra} | {mbps[k]:.1f} | {rows:,.0f} | {check} | {secs}{fails} |")
    print()
    print(
        "Writes (one each, a fresh process with its imports, after a sync): "
        + "; ".join(f"{versions[k]}: {s:.2f} s, peak anonymous memory {m:.0f} MiB" for k, (s, m) in writes.items())
        + ". Ours fsyncs and hashes every file it writes; the peers do neither."
    )
    for name, why in skipped.items():
        print(f"\n{name}: skipped ({why}).")
    if "mosaic" in versions and "mosaic" not in skipped:
        print(f"\nMosaicML: {versions['mosaic']}.")
    print()
    bad = [k for k in readers if not all(r["ok"] for r in res[k].runs)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
