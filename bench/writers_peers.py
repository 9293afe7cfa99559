"""The other writers of bench/writers_bench.py, one per process, over a folder of files:

    PYTHON bench/writers_peers.py NAME ROOT OUT SHARD_BYTES

Each walks ROOT as a user would (:func:`imagefolder.sorted_files`: ``os.walk``, sorted, the label
the index of the file's class folder), reads each file's bytes and writes one sample per file:
the bytes as they are, the label as an integer, the relative path as text (the columns, and names,
of lovecraft's files input), in shards of SHARD_BYTES. It prints the samples written as JSON.

* ``webdataset``: ``webdataset.ShardWriter(maxsize=SHARD_BYTES)``, members ``.bytes``, ``.cls`` and
  a ``.json`` holding the path (as lovecraft lays them out), one process;
* ``mds``: ``streaming.MDSWriter(size_limit=SHARD_BYTES, compression=None)``, one process;
* ``litdata``: ``litdata.optimize(fn, inputs=<the files>, chunk_bytes=SHARD_BYTES,
  num_workers=<cores>)``, ``fn`` reading one file;
* ``disk``, the physical limit: as many bytes as the files hold, written from memory with direct
  I/O into files of SHARD_BYTES, each fsynced (what the disk alone takes to hold them);
* ``copy`` and ``copy+fsync``, the plain copy: the files' bytes gathered into files of
  SHARD_BYTES or more (the file that crosses SHARD_BYTES ends one), each written with one
  ``os.write`` call (looped only on a short write); ``copy+fsync`` fsyncs each file once written and
  the directory at the end, which makes the copy as durable as lovecraft's output.

The peers run with the peers' python (``.venv-peers``, docs/design/peers.md), the copies with any
python. Nothing here imports lovecraft.
"""

from __future__ import annotations

import json
import os
import sys

from imagefolder import sorted_files


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_webdataset(root: str, out: str, size: int) -> int:
    import webdataset as wds

    n = 0
    with wds.ShardWriter(os.path.join(out, "shard-%06d.tar"), maxsize=size, maxcount=10**9, verbose=0) as w:
        for rel, path, label in sorted_files(root):
            w.write({"__key__": f"{n:09d}", "bytes": read(path), "cls": label, "json": {"path": rel}})
            n += 1
    return n


def write_mds(root: str, out: str, size: int) -> int:
    from streaming import MDSWriter

    n = 0
    columns = {"bytes": "bytes", "label": "int64", "path": "str"}
    with MDSWriter(out=out, columns=columns, compression=None, size_limit=size) as w:
        for rel, path, label in sorted_files(root):
            w.write({"bytes": read(path), "label": label, "path": rel})
            n += 1
    return n


def litdata_sample(item: tuple[str, str, int]) -> dict:
    rel, path, label = item
    return {"path": rel, "bytes": read(path), "label": label}


def write_litdata(root: str, out: str, size: int) -> int:
    import litdata

    files = sorted_files(root)
    litdata.optimize(
        fn=litdata_sample,
        inputs=files,
        output_dir=out,
        chunk_bytes=size,
        num_workers=os.cpu_count() or 1,
        verbose=False,
    )
    return len(files)


def write_copy(root: str, out: str, size: int, fsync: bool) -> int:
    n = k = 0
    held: list[bytes] = []
    total = 0

    def flush() -> None:
        nonlocal held, total, k
        data = memoryview(b"".join(held))
        fd = os.open(os.path.join(out, f"copy-{k:05d}.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            done = 0
            while done < len(data):
                done += os.write(fd, data[done:])
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        held, total, k = [], 0, k + 1

    for _, path, _ in sorted_files(root):
        data = read(path)
        held.append(data)
        total += len(data)
        n += 1
        if total >= size:
            flush()
    if held:
        flush()
    if fsync:
        fd = os.open(out, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return n


def write_disk(root: str, out: str, size: int) -> int:
    """The disk alone: as many bytes as the files hold (rounded up to 4 KiB), from memory (a
    mapped, page-aligned buffer of zeros), written with direct I/O in files of ``size`` bytes, one
    write each, each fsynced: no file read, no copy through the page cache."""
    import mmap

    files = sorted_files(root)
    total = sum(os.path.getsize(path) for _, path, _ in files)
    total += -total % 4096
    buf = mmap.mmap(-1, size)
    k = 0
    while total > 0:
        n = min(size, total)
        fd = os.open(os.path.join(out, f"disk-{k:05d}.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        try:
            view = memoryview(buf)[:n]
            done = 0
            while done < n:
                done += os.write(fd, view[done:])
            os.fsync(fd)
        finally:
            os.close(fd)
        total -= n
        k += 1
    fd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(files)


WRITERS = {
    "webdataset": write_webdataset,
    "mds": write_mds,
    "litdata": write_litdata,
    "copy": lambda root, out, size: write_copy(root, out, size, False),
    "copy+fsync": lambda root, out, size: write_copy(root, out, size, True),
    "disk": write_disk,
}

if __name__ == "__main__":
    os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")
    name, root, out, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    os.makedirs(out, exist_ok=True)
    print(json.dumps({"samples": WRITERS[name](root, out, size)}))
