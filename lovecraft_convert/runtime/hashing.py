"""Hashing the files a dataset is made of: BLAKE3 by default, SHA-256 on request (``--hash
sha256``); the manifest records the algorithm of each file (the key of its digest). BLAKE3 is a
cryptographic hash like SHA-256 (a manifest still proves what was written, against accidents and
tampering alike), and measured on the reference machine it hashes about 3.8 GB/s per core where
SHA-256 does 1.2 to 1.7 GB/s: on a 2-core machine writing at disk speed, hashing every output byte
with SHA-256 costs a large share of a core."""

from __future__ import annotations

import hashlib
import mmap
import os
import sys
import threading

HASHES = ("blake3", "sha256")  # a file's entry in the manifest holds its digest under the algorithm's name
DEFAULT_HASH = "blake3"


def preload_hash(name: str = DEFAULT_HASH) -> None:
    """Import the hash's module in a thread of its own when the writer starts (BLAKE3's takes
    25 ms), so the hash at close does not wait for it: the writing leaves room for it."""
    if name == "blake3":
        preload("blake3")


def preload(module: str) -> None:
    """Import ``module`` in a thread of its own, unless it is imported: whoever imports it next
    waits only for what is left (Python's import lock)."""
    if module not in sys.modules:
        import importlib

        threading.Thread(target=importlib.import_module, args=(module,), name="lovecraft-import", daemon=True).start()


class _NoHash:
    """What a file that will be hashed later (after a rewrite) is hashed with while written."""

    def update(self, data) -> None:
        pass

    def hexdigest(self) -> str:
        return ""


def new_hash(name: str | None = DEFAULT_HASH, threads: bool = False):
    """A hash object (``update``, ``hexdigest``) of algorithm ``name`` (one of ``HASHES``; None:
    nothing is hashed); ``threads``: a BLAKE3 that spreads large updates over every core (the
    same digest)."""
    if name is None:
        return _NoHash()
    if name == "blake3":
        import blake3

        return blake3.blake3(max_threads=blake3.blake3.AUTO) if threads else blake3.blake3()
    if name == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown hash {name!r} (known: {', '.join(HASHES)})")


def hash_file(
    path: str,
    name: str = DEFAULT_HASH,
    stop: threading.Event | None = None,
    bufsize: int = 8 << 20,
    mapped: bool = False,
):
    """The hex digest of a file, read in large blocks, BLAKE3 hashing each on every core (files of
    16 MiB or more); None when ``stop`` is set while it runs. Both hashes release the GIL. ``mapped``: BLAKE3 reads the
    file mapped, with no copy out of the page cache; only for a file nobody else changes (ours,
    just written), since a file truncated under a mapping kills the reader with SIGBUS."""
    with open(path, "rb", buffering=0) as f:
        return hash_open(f, name, stop, bufsize, mapped)


def hash_open(f, name: str = DEFAULT_HASH, stop=None, bufsize: int = 8 << 20, mapped: bool = False):
    """:func:`hash_file` of a file already open for reading (unbuffered), from its start."""
    size = os.fstat(f.fileno()).st_size
    # every core for a large file; a small one (a wide table's column) costs more to share out
    h = new_hash(name, threads=size >= 16 << 20)
    if mapped and name == "blake3" and size:
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            try:
                for i in range(0, size, 64 << 20):
                    if stop is not None and stop.is_set():
                        return None
                    h.update(view[i : i + (64 << 20)])
            finally:
                view.release()
        return h.hexdigest()
    f.seek(0)
    buf = bytearray(bufsize)
    view = memoryview(buf)
    while n := f.readinto(buf):
        if stop is not None and stop.is_set():
            return None
        h.update(view[:n])
    return h.hexdigest()
