"""Sharding a folder of images: `lovecraft shard DIR --input-format files --to webdataset|mds|litdata`
against the peers' own writers (webdataset's `ShardWriter`, MosaicML's `MDSWriter`, litdata's
`optimize`) over the same files, and the physical limit, the disk writing as many bytes.

    .venv/bin/python bench/writers_bench.py [--quick] [--images N] [--runs N] [--workdir DIR] [--only F,..]

The data: the folder of 10,000 JPEGs (~1 GB; ``--quick``: 1/16) in 10 class folders that
bench/files_bench.py decodes (bench/imagefolder.py, generated once and cached in ``--workdir``).
Every writer writes one sample per file, 10,000 of them: the file's bytes as they are, its label
(the index of its class folder, ImageFolder's) and its relative path, in shards of 64 MiB:

* ours: ``lovecraft shard DIR -o OUT --input-format files --to F --shard-size 64MiB`` (its columns
  ``path``, ``bytes``, ``label``; its defaults: a worker per core, every file hashed and fsynced
  and recorded in the manifest);
* the peers, in their own venv (``.venv-peers``, docs/design/peers.md; ``LOVECRAFT_PEERS_VENV``
  names another), through bench/writers_peers.py, written as their users write them: the folder
  walked sorted, each file read and written as a sample with the same columns:
  ``ShardWriter(maxsize=64 MiB)`` and ``MDSWriter(size_limit=64 MiB, compression=None)`` in one
  process each (they have no workers), ``litdata.optimize(fn, inputs=<files>, chunk_bytes=64 MiB,
  num_workers=<cores>)``; none of them fsyncs or hashes;
* context: the physical limit, the disk alone (``disk``: as many bytes as the files hold, written
  from memory with direct I/O into 64 MiB files, each fsynced: no writer that makes its output
  durable can take less); the same files' bytes gathered into files of 64 MiB, each written with
  one write call, then fsynced (``copy+fsync``: durable, as ours is), and the same without the
  fsyncs (``copy``: what a writer that leaves its output in the page cache can reach).

Each write runs in a fresh process (imports included) after an untimed ``sync`` of what was
written before (so no writer pays for another's dirty pages) and after the folder was read once
(every writer reads it from the page cache). ``--runs`` rounds (default 3; 1 with ``--quick``)
alternate the order of ours and the peer; times are medians, CPU seconds those of the process tree,
the peak the largest anonymous memory (RssAnon) of the process tree in any round. Every output is
counted (tar members, MDS and litdata indexes, our manifest) and must hold one sample per file. A
peer's import alone (its python importing its package, then exiting) is timed in each round too,
and its median given in the notes: part of what the peer's user waits for, but a fixed cost. A
peer whose venv is missing is reported as skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from imagefolder import make_images, sorted_files  # noqa: E402
from measure import BYTECODE_NOTE, compile_package, run  # noqa: E402

from tests.peers import PEERS_PYTHON, peer_env  # noqa: E402

FORMATS = ("webdataset", "mds", "litdata")
PEER = {"webdataset": "webdataset.ShardWriter", "mds": "MDSWriter", "litdata": "litdata.optimize"}
IMPORT = {"webdataset": "import webdataset", "mds": "from streaming import MDSWriter", "litdata": "import litdata"}
COPIES = {
    "disk": "the disk alone: the same number of bytes written from memory, direct I/O + fsync",
    "copy+fsync": "copy into 64 MiB files + fsync (durable)",
    "copy": "copy into 64 MiB files, no fsync",
}
SHARD = 64 << 20
TARGET = 5.0
DROP = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")  # the peers' python must not see this venv's


def cpu() -> float:
    """User and system seconds of the children waited for so far (their own children included)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def log(msg: str) -> None:
    print(f"writers-bench: {msg}", file=sys.stderr, flush=True)


def ours_cmd(fmt: str, root: str, out: str) -> list[str]:
    return [sys.executable, "-m", "lovecraft_convert", "shard", root, "-o", out, "--input-format", "files",
            "--to", fmt, "--shard-size", "64MiB", "-q"]  # fmt: skip


def other_cmd(name: str, root: str, out: str) -> list[str]:
    python = sys.executable if name in COPIES else PEERS_PYTHON
    return [python, os.path.join(HERE, "writers_peers.py"), name, root, out, str(SHARD)]


def samples(fmt: str, out: str) -> int:
    """The samples in an output, counted from its files: a WebDataset's distinct keys, an MDS or
    litdata index's counts; our manifest's rows must agree."""
    if fmt == "webdataset":
        import tarfile

        keys = set()
        for name in sorted(os.listdir(out)):
            if name.endswith(".tar"):
                with tarfile.open(os.path.join(out, name)) as t:
                    keys.update((name, m.name.split(".", 1)[0]) for m in t.getmembers())
        n = len(keys)
    elif fmt in ("mds", "litdata"):
        with open(os.path.join(out, "index.json")) as f:
            index = json.load(f)
        if fmt == "mds":
            n = sum(s["samples"] for s in index["shards"])
        else:
            n = sum(c["chunk_size"] for c in index["chunks"])
    else:
        return -1
    manifest = os.path.join(out, "_manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            rows = json.load(f)["rows"]
        if rows != n:
            raise SystemExit(f"writers-bench: {out}: the manifest says {rows} rows, its files hold {n} samples")
    return n


def out_bytes(out: str) -> int:
    return sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))


def warm(root: str) -> None:
    """Read every file once (untimed), so that every writer reads the folder from the page cache."""
    for _, path, _ in sorted_files(root):
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1/16 of the images, one run")
    ap.add_argument("--images", type=int, default=10_000, help="images in the folder (default 10,000)")
    ap.add_argument("--runs", type=int, default=None, help="timed rounds (default 3; 1 with --quick)")
    ap.add_argument("--workdir", default=os.environ.get("BENCH_WORKDIR", "/tmp/lovecraft-bench"))
    ap.add_argument("--only", default=None, help="comma-separated formats")
    a = ap.parse_args(argv)
    n = a.images // (16 if a.quick else 1)
    runs = a.runs or (1 if a.quick else 3)
    only = [f for f in FORMATS if not a.only or f in a.only.split(",")]
    compile_package()
    root, nbytes = make_images(a.workdir, n)
    files = len(sorted_files(root))
    peers = os.path.exists(PEERS_PYTHON)
    env = {k: v for k, v in peer_env().items() if k not in os.environ or os.environ[k] != v}
    times: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    peaks: dict[tuple[str, str], float] = {}
    sizes: dict[tuple[str, str], int] = {}
    counts: dict[tuple[str, str], int] = {}
    loads: list[float] = []
    warm(root)

    imports: dict[str, list[float]] = {}

    def import_time(fmt: str) -> None:
        """The seconds the peer's python takes to import the peer's package and exit (part of its time)."""
        saved = {k: os.environ.pop(k) for k in DROP if k in os.environ}
        try:
            res = run([PEERS_PYTHON, "-c", IMPORT[fmt]], env=env, every=0.05)
        finally:
            os.environ.update(saved)
        imports.setdefault(fmt, []).append(res.seconds)

    def measure(who: str, fmt: str, cmd: list[str], peer: bool) -> None:
        out = cmd[cmd.index("-o") + 1] if who == "ours" else cmd[4]
        shutil.rmtree(out, ignore_errors=True)
        loads.append(os.getloadavg()[0])
        c0 = cpu()
        if peer:
            saved = {k: os.environ.pop(k) for k in DROP if k in os.environ}
            try:
                res = run(cmd, env=env, every=0.05)
            finally:
                os.environ.update(saved)
        else:
            res = run(cmd, every=0.05)
        key = (who, fmt)
        cpus.setdefault(key, []).append(cpu() - c0)
        times.setdefault(key, []).append(res.seconds)
        peaks[key] = max(peaks.get(key, 0.0), res.peak_mib)
        sizes[key] = out_bytes(out)
        got = samples(fmt, out)
        if got not in (-1, files):
            raise SystemExit(f"writers-bench: {who} {fmt} wrote {got} samples, not one per file ({files})")
        counts[key] = got
        shutil.rmtree(out, ignore_errors=True)
        log(f"{who} {fmt}: {res.seconds:.2f} s, {cpus[key][-1]:.1f} s CPU, peak {res.peak_mib:.0f} MiB")

    for r in range(runs):
        log(f"round {r + 1}/{runs}")
        for name in COPIES:
            measure(name, "copy", other_cmd(name, root, os.path.join(a.workdir, "writers-out-copy")), False)
        for fmt in only:
            for who in ("ours", "peer") if r % 2 == 0 else ("peer", "ours"):
                out = os.path.join(a.workdir, f"writers-out-{who}-{fmt}")
                if who == "ours":
                    measure(who, fmt, ours_cmd(fmt, root, out), False)
                elif peers:
                    measure(who, fmt, other_cmd(fmt, root, out), True)
                    import_time(fmt)
    print(report(only, runs, n, nbytes, times, cpus, peaks, sizes, counts, imports, loads))
    return 0


def report(only, runs, n, nbytes, times, cpus, peaks, sizes, counts, imports, loads) -> str:
    med = {k: statistics.median(v) for k, v in times.items()}
    disk, durable, plain = med["disk", "copy"], med["copy+fsync", "copy"], med["copy", "copy"]
    lines = [
        f"\n### Sharding a folder of images: {n:,} JPEGs, {nbytes / 1e6:.0f} MB, 64 MiB shards (median of {runs})\n",
        f"Load average (1 min) {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores while measuring "
        "(the machine is shared: ratios, not seconds, are what to compare).\n",
        "| format | writer | seconds | x disk alone | x durable copy | peer over ours | target | met | CPU s "
        "| peak MiB | samples | output MB |",
        "|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|",
    ]

    def row(fmt: str, who: str, name: str, ratio: str = "", target: str = "", met: str = "") -> str:
        k = (who, fmt)
        return (
            f"| {fmt} | {name} | {med[k]:.2f} | {med[k] / disk:.2f}x | {med[k] / durable:.2f}x | {ratio} | {target} "
            f"| {met} | {statistics.median(cpus[k]):.1f} | {peaks[k]:.0f} | {counts[k] if counts[k] >= 0 else '-'} "
            f"| {sizes[k] / 1e6:.0f} |"
        )

    notes = []
    for fmt in only:
        lines.append(row(fmt, "ours", "lovecraft shard"))
        if ("peer", fmt) not in med:
            lines.append(f"| {fmt} | {PEER[fmt]} | skipped (no {PEERS_PYTHON}) | | | | >= {TARGET:.0f}x | | | | | |")
            continue
        ratio = med["peer", fmt] / med["ours", fmt]
        lines.append(
            row(fmt, "peer", PEER[fmt], f"{ratio:.2f}x", f">= {TARGET:.0f}x", "yes" if ratio >= TARGET else "NO")
        )
        ceiling = med["peer", fmt] / disk
        notes.append(
            f"{PEER[fmt]}: {med['peer', fmt]:.2f} s = {ceiling:.2f}x the disk alone ({disk:.2f} s), so no writer "
            f"that makes its output durable can be more than {ceiling:.2f}x faster than it"
            + (f" ({TARGET:.0f}x is out of reach)" if ceiling < TARGET else "")
            + f"; ours is at {ratio:.2f}x ({ratio / ceiling:.0%} of that ceiling). "
            f"{statistics.median(imports[fmt]):.2f} s of the peer's time is its python importing it "
            f"(`{IMPORT[fmt]}`, timed alone)."
        )
    lines.append(row("copy", "disk", COPIES["disk"]))
    lines.append(row("copy", "copy+fsync", COPIES["copy+fsync"]))
    lines.append(row("copy", "copy", COPIES["copy"]))
    lines += [
        "",
        "What a ratio can reach: whatever a writer does, the disk must take the bytes: the same number of bytes "
        f"written from memory with direct I/O and fsynced took {disk:.2f} s here (the disk alone). Against a peer "
        f"that takes T seconds, a writer that keeps lovecraft's guarantee (every file on disk, fsynced, before the "
        f"dataset counts as written) is at most T / {disk:.2f} s faster; >= {TARGET:.0f}x needs a peer slower than "
        f"{TARGET:.0f}x the disk alone ({TARGET * disk:.2f} s). The plain durable copy (the files read in order, "
        f"their bytes written into 64 MiB files with one write each and fsynced: {durable:.2f} s, {plain:.2f} s "
        "without the fsyncs) is no floor: one thread copies every byte into the page cache before the disk writes "
        "it, which a writer with direct I/O and a worker per core (ours) overlaps or avoids.",
        "",
        *[f"- {x}" for x in notes],
        "",
        "Each writer writes one sample per file (its bytes, its class label, its path: lovecraft's files columns), "
        "counted in every output. `x disk alone`, `x durable copy`: the writer's time over theirs. CPU seconds: user "
        "and system time of the writer's process tree (workers included). The peers neither fsync nor hash; ours "
        f"hashes (BLAKE3) and fsyncs every file. {BYTECODE_NOTE[0].upper()}{BYTECODE_NOTE[1:]}.\n",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
