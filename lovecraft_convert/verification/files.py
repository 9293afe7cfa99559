"""The dataset directory against the manifest: every listed file present as a regular file of the
listed size, its digest (BLAKE3 or SHA-256, as the manifest says) computed in a background thread
while the file is decoded; nothing else
there (stray and temporary files reported; symbolic links reported and never followed)."""

from __future__ import annotations

import os
import stat
import threading
from typing import Any

from .. import manifest as mf
from ..engine.interrupts import result
from ..engine.writer import hash_file
from ..storage import child_path
from .structure import is_count

MANIFEST = mf.MANIFEST_NAME


class Files:
    """Presence, size and hash checks of a dataset's files; problems go to ``add(file, kind, message)``."""

    def __init__(self, root: str, info: dict[str, dict], add, warn=None, stray_reason=None) -> None:
        """``warn(file, kind, message)`` takes what is worth saying but not wrong (a README beside
        the data); ``stray_reason(name)``: why an unlisted file matters to readers (the format's)."""
        self.root = root
        self.info = info
        self.add = add
        self.warn = warn or add
        self.stray_reason = stray_reason or (lambda name: "a stray file")
        self._pool = None
        self._stop = threading.Event()
        self._hashes: dict[str, Any] = {}

    def close(self) -> None:
        self._stop.set()  # an interrupted run does not wait for a whole file to be hashed
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def strays(self, listed: set[str]) -> None:
        expected = set(listed) | {MANIFEST}
        dirs_needed = set()
        for p in expected:
            parts = p.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs_needed.add("/".join(parts[:i]))
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            rel_dir = os.path.relpath(dirpath, self.root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
            keep = []
            for d in sorted(dirnames):
                rel = f"{rel_dir}/{d}" if rel_dir else d
                if os.path.islink(os.path.join(dirpath, d)):
                    self.add(rel, "stray", "a symbolic link, not listed in the manifest (not followed)")
                elif rel in dirs_needed:
                    keep.append(d)
                else:
                    self.add(rel, "stray", "a directory not listed in the manifest (stray or temporary)")
            dirnames[:] = keep
            for n in sorted(filenames):
                rel = f"{rel_dir}/{n}" if rel_dir else n
                if rel in expected:
                    continue
                full = os.path.join(dirpath, n)
                if os.path.islink(full):
                    self.add(rel, "stray", "a symbolic link, not listed in the manifest (not followed)")
                elif temporary(n):
                    self.add(rel, "stray", "a temporary file (of an interrupted run?), not listed in the manifest")
                elif (why := self.stray_reason(rel)) is not None:
                    self.add(rel, "stray", f"not listed in the manifest ({why})")
                else:
                    self.warn(
                        rel, "stray", "not listed in the manifest (left alone: no reader of the dataset reads it)"
                    )

    def _hash_pool(self):
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="lovecraft-verify-hash")
        return self._pool

    def present(self, p: str) -> bool:
        """Exists as a regular file of the listed size; a problem otherwise. Starts its hashing."""
        full = child_path(self.root, p)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            self.add(p, "missing", "listed in the manifest but missing")
            return False
        except OSError as e:
            self.add(p, "missing", f"cannot be read ({e.strerror})")
            return False
        if stat.S_ISLNK(st.st_mode):
            self.add(p, "decode", "a symbolic link (not followed: a dataset holds plain files)")
            return False
        if not stat.S_ISREG(st.st_mode):
            self.add(p, "decode", "not a regular file")
            return False
        why = mf.outside(self.root, p)  # a directory on its way is a link leaving the dataset
        if why is not None:
            self.add(MANIFEST, "manifest", why)
            return False
        want = self.info[p].get("bytes")
        if is_count(want) and st.st_size != want:
            what = " (truncated?)" if st.st_size < want else ""
            self.add(p, "size", f"{st.st_size} bytes on disk, the manifest says {want}{what}")
            self._hashes[p] = None
        else:
            alg = mf.file_digest(self.info[p])[0] or mf.DEFAULT_HASH
            self._hashes[p] = self._hash_pool().submit(hash_file, full, alg, self._stop)
        return True

    def check_hash(self, p: str) -> None:
        fut = self._hashes.pop(p, None)
        if fut is None:
            return
        try:
            digest = result(fut)
        except OSError as e:
            self.add(p, "hash", f"cannot be read ({e.strerror})")
            return
        alg, want = mf.file_digest(self.info[p])
        if digest is not None and digest != want:
            self.add(p, "hash", f"{alg} {digest} differs from the manifest's {want}")


def temporary(name: str) -> bool:
    """A name temporary files are given (an editor's, a download's, a run's); not any hidden file
    (``.DS_Store`` is the Finder's, left alone)."""
    n = name.lower()
    return n.endswith((".tmp", ".partial", ".part", "~", ".swp")) or ".tmp-" in n
