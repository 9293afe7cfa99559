"""Folders of images: decode + resize into a fixed-shape HDF5 image array.

    .venv/bin/python bench/files_bench.py [--quick] [--runs N] [--workdir DIR]

10,000 JPEGs (~1 GB; ``--quick``: 1/16) in 10 class folders, generated once with Pillow and cached
in ``--workdir`` (bench/imagefolder.py: crops of large pictures of gradients and shapes under
noise, 320 to 640 pixels a side, quality 90: about 100 KB each, as photos of that size are;
bench/writers_bench.py shards the same folder). Each is decoded, converted to RGB, scaled so its shorter side fits and
centre-cropped to 224x224 with Pillow's bilinear filter (``ImageOps.fit``), and written with its
path and class label into one HDF5 file:

* ``lovecraft convert DIR --to hdf5 --decode image --image-size 224x224`` (decoding on a thread
  per core), and ``lovecraft shard ... --num-shards 2 --workers 2`` (the engine's worker processes);
* the plain loop a user would write: ``os.walk`` sorted, ``Image.open``, ``convert``,
  ``ImageOps.fit``, into a preallocated chunked h5py dataset in batches of 256 (one process).

Both do the same work and give the same pixels (tests/inputs/test_files_decode.py checks ours
against those calls). Times are medians of ``--runs`` rounds, the order alternating; ``CPU/wall``
is the CPU time of the process tree over its wall time (2.0: both cores busy); peak is the
anonymous memory of the process tree. Target: >= 1.5x the loop.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from imagefolder import make_images  # noqa: E402
from measure import BYTECODE_NOTE, compile_package, run  # noqa: E402

SIZE = 224
TARGET = 1.5

LOOP = textwrap.dedent(
    """
    import os, sys
    import h5py, numpy as np
    from PIL import Image, ImageOps

    root, out, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    paths = []
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        paths += [os.path.join(dirpath, f) for f in sorted(files) if not f.startswith(".")]
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    n = len(paths)
    with h5py.File(out, "w") as h:
        img = h.create_dataset("image", (n, size, size, 3), np.uint8, chunks=(8, size, size, 3))
        lab = h.create_dataset("label", (n,), np.int64)
        h.create_dataset("path", data=[os.path.relpath(p, root) for p in paths], dtype=h5py.string_dtype())
        batch = []
        for i, p in enumerate(paths):
            im = Image.open(p).convert("RGB")
            batch.append(np.asarray(ImageOps.fit(im, (size, size), Image.Resampling.BILINEAR)))
            if len(batch) == 256 or i == n - 1:
                img[i + 1 - len(batch) : i + 1] = np.stack(batch)
                batch = []
        lab[:] = [classes.index(os.path.relpath(p, root).split(os.sep)[0]) for p in paths]
        h.flush()
        os.fsync(h.id.get_vfd_handle())
    """
)


def log(msg: str) -> None:
    print(f"files-bench: {msg}", file=sys.stderr, flush=True)


def timed(cmd: list[str]):
    """(wall seconds, peak MiB, CPU seconds of the process tree)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = run(cmd, every=0.05)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return r.seconds, r.peak_mib, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1/16 of the images, one run")
    ap.add_argument("--runs", type=int, default=None, help="timed rounds (default 3; 1 with --quick)")
    ap.add_argument("--images", type=int, default=10_000)
    ap.add_argument("--workdir", default=os.environ.get("BENCH_WORKDIR", "/tmp/lovecraft-bench"))
    a = ap.parse_args(argv)
    n = a.images // (16 if a.quick else 1)
    runs = a.runs or (1 if a.quick else 3)
    compile_package()
    root, nbytes = make_images(a.workdir, n)
    out = os.path.join(a.workdir, "files-out")
    script = os.path.join(a.workdir, "pillow_loop.py")
    with open(script, "w") as f:
        f.write(LOOP)
    py = sys.executable
    size = f"{SIZE}x{SIZE}"
    decode = ["--to", "hdf5", "--decode", "image", "--image-size", size, "--overwrite", "-q"]
    jobs = {
        "convert": [py, "-m", "lovecraft_convert", "convert", root, "-o", out + "-c", *decode],
        "shard --workers 2": [
            py,
            "-m",
            "lovecraft_convert",
            "shard",
            root,
            "-o",
            out + "-s",
            *decode,
            "--num-shards",
            "2",
            "--workers",
            "2",
        ],  # fmt: skip
        "Pillow loop": [py, script, root, out + "-loop.h5", str(SIZE)],
    }
    got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in jobs}
    for r in range(runs):
        order = list(jobs) if r % 2 == 0 else list(reversed(jobs))
        for k in order:
            got[k].append(timed(jobs[k]))
        log(f"round {r + 1}: " + ", ".join(f"{k} {got[k][-1][0]:.1f}s ({got[k][-1][2]:.0f} s CPU, "
                                            f"peak {got[k][-1][1]:.0f} MiB)" for k in jobs))  # fmt: skip
    med = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in got.items()}
    loop = med["Pillow loop"][0]
    print(
        f"\n### Folders of images: decode + resize to {size} HDF5 ({n} JPEGs, {nbytes / 1e6:.0f} MB, median of {runs})\n"
    )
    print("| job | seconds | images/s | vs Pillow loop | target | met | CPU s | CPU/wall | peak MiB |")
    print("|---|---:|---:|---:|---|---|---:|---:|---:|")
    for k, (secs, peak, cpu) in med.items():
        ratio = loop / secs
        target, met = ("", "") if k == "Pillow loop" else (f">= {TARGET}x", "yes" if ratio >= TARGET else "NO")
        print(
            f"| {k} | {secs:.1f} | {n / secs:.0f} | {ratio:.2f}x | {target} | {met} | {cpu:.1f} | {cpu / secs:.2f} "
            f"| {peak:.0f} |"
        )
    print(
        f"\nLoad average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end: a CPU/wall well under the "
        "cores means the machine was shared, and the wall-time ratio then says little about using both cores."
    )
    print(f"\nThe same pixels from both (Pillow's `ImageOps.fit`, bilinear); {BYTECODE_NOTE}.\n")
    for suffix in ("-c", "-s"):
        shutil.rmtree(out + suffix, ignore_errors=True)
    if os.path.exists(out + "-loop.h5"):
        os.unlink(out + "-loop.h5")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
