"""Reading a dataset on an object store: its manifest, its stray objects, and a local copy.

The format readers need local files (NumPy memory maps, HDF5's own I/O), so ``open_dataset`` of a
URI first copies the files its manifest names into a local cache (``LOVECRAFT_CACHE``, default
``~/.cache/lovecraft``), checking each one's size and digest on the way, and opens the copy;
a copy is made once per committed manifest (the cache key includes the manifest's digest), so
re-opening is free and a new commit to the same prefix gets a new copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

from .. import manifest as mf
from ..errors import DatasetError
from .output import PARTIAL
from .stores import get_store as store_for
from .uri import split


def _key(uri: str, rel: str) -> str:
    key = split(uri)[2].strip("/")
    return f"{key}/{rel}" if key else rel


def manifest_bytes(uri: str) -> bytes | None:
    """The manifest object of the dataset at ``uri`` (None when there is none); DatasetError when it
    is larger than a manifest may be (its size is asked first: it is not read)."""
    from .base import StorageError, named

    try:
        store = store_for(uri)
        key = _key(uri, mf.MANIFEST_NAME)
        size = store.size(key)
        if size is not None and size > mf.MAX_MANIFEST_BYTES:
            raise DatasetError(mf.too_large(size), where=f"{uri}/{mf.MANIFEST_NAME}", kind="manifest")
        return store.read_all(key)
    except StorageError as e:
        raise named(e, uri) from None


def load(uri: str) -> tuple[dict | None, tuple[str, str] | None]:
    """:func:`lovecraft_convert.manifest.load` of a dataset on a store."""
    try:
        data = manifest_bytes(uri)
    except DatasetError as e:
        if e.kind != "manifest":
            raise
        return None, ("manifest", e.detail)
    if data is None:
        return None, ("missing", "missing: not a lovecraft dataset, or the run that wrote it did not finish")
    if len(data) > mf.MAX_MANIFEST_BYTES:
        return None, ("manifest", mf.too_large(len(data)))
    try:
        return json.loads(data), None
    except (ValueError, RecursionError) as e:
        text = " ".join(str(e).split())
        return None, ("unreadable", f"unreadable ({text[:297] + '...' if len(text) > 300 else text})")


def sizes(uri: str) -> dict[str, int]:
    """Relative key -> size of every object under the dataset's prefix."""
    prefix = _key(uri, "")
    return {k[len(prefix) :]: size for k, size in store_for(uri).list(prefix)}


def strays(uri: str, listed: set[str]) -> list[tuple[str, str]]:
    """(relative key, why) of every object under the dataset's prefix its manifest does not name:
    the objects of a dead or losing run, a ``_partial.json`` of an unfinished one, anything else."""
    store = store_for(uri)
    prefix = _key(uri, "")
    out = []
    for key, _size in store.list(prefix):
        rel = key[len(prefix) :]
        if rel in listed or rel == mf.MANIFEST_NAME:
            continue
        if rel == PARTIAL:
            out.append((rel, "the marker of an unfinished run (finish it with --resume or remove it with --overwrite)"))
        elif rel.startswith("run-"):
            out.append((rel, "an object of another run, not listed in the manifest (stray: --overwrite removes it)"))
        else:
            out.append((rel, "not listed in the manifest (a stray object)"))
    for key in store.uploads(prefix):
        out.append((key[len(prefix) :], "an unfinished multipart upload (of a dead run: --overwrite aborts it)"))
    return out


def download(uri: str, rel: str, dest: str, entry: dict | None, bufsize: int = 8 << 20) -> tuple[int, str | None]:
    """Copy the object ``rel`` of the dataset at ``uri`` to the local file ``dest``; (bytes, digest
    in the entry's algorithm, or None without an entry)."""
    from ..runtime.hashing import new_hash

    store = store_for(uri)
    key = _key(uri, rel)
    size = store.size(key)
    if size is None:
        raise DatasetError(f"{uri}/{rel}: listed in the manifest but missing", hint="the dataset is incomplete")
    h = new_hash(mf.file_digest(entry)[0] or mf.DEFAULT_HASH) if entry else None
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    body = store.open_body(key, 0, size)
    n = 0
    try:
        with open(dest, "wb") as f:
            while chunk := body.read(bufsize):
                if h is not None:
                    h.update(chunk)
                f.write(chunk)
                n += len(chunk)
    finally:
        body.close()
    return n, (h.hexdigest() if h is not None else None)


def listed_files(m: dict) -> dict[str, dict]:
    """The files the manifest names, by relative path; a path that would leave the dataset (or the
    local copy's directory) is refused, as every dataset reader refuses it (manifest.relative_path)."""
    from .output import manifest_files

    out = {}
    for rel, entry in manifest_files(m).items():
        if mf.relative_path(rel) is None:
            raise DatasetError(
                f"{rel}: a manifest path outside the dataset", hint="the manifest was edited; re-create the dataset"
            )
        out[rel] = entry
    return out


def cache_root() -> str:
    return os.environ.get("LOVECRAFT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "lovecraft")


def local_copy(uri: str) -> str:
    """A local directory holding the committed dataset at ``uri`` (copied once, checked)."""
    uri = uri.rstrip("/")
    data = manifest_bytes(uri)
    if data is None:
        raise DatasetError(
            f"{uri}: no {mf.MANIFEST_NAME}; not a lovecraft dataset, or its writing did not finish",
            hint="give the output of a completed `lovecraft convert`/`shard` run",
        )
    m, problem = load(uri)
    if problem is not None or not isinstance(m, dict):
        raise DatasetError(f"{uri}/{mf.MANIFEST_NAME}: unreadable manifest", hint="re-create the dataset")
    mf.check(m, f"{uri}/{mf.MANIFEST_NAME}")
    mf.check_shape(m, f"{uri}/{mf.MANIFEST_NAME}")
    digest = hashlib.sha256(uri.encode() + b"\0" + data).hexdigest()[:24]
    root = os.path.join(cache_root(), digest)
    if os.path.isfile(os.path.join(root, mf.MANIFEST_NAME)):
        return root
    os.makedirs(cache_root(), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{digest}.tmp-", dir=cache_root())
    try:
        for rel, entry in listed_files(m).items():
            n, got = download(uri, rel, os.path.join(tmp, *rel.split("/")), entry)
            alg, want = mf.file_digest(entry)
            if n != entry.get("bytes") or got != want:
                raise DatasetError(
                    f"{uri}/{rel}: {n} bytes, {alg} {got}; the manifest says {entry.get('bytes')} bytes, {want}",
                    hint="the object was changed; run `lovecraft verify` on the dataset or re-create it",
                )
        with open(os.path.join(tmp, mf.MANIFEST_NAME), "wb") as f:
            f.write(data)
        try:
            os.rename(tmp, root)
        except OSError:  # another process made the same copy first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def copy_for_verify(uri: str, into: str) -> None:
    """The manifest and every object it names, copied as they are (unchecked: ``verify`` judges
    them) into the local directory ``into``."""
    data = manifest_bytes(uri)
    if data is None:
        return
    with open(os.path.join(into, mf.MANIFEST_NAME), "wb") as f:
        f.write(data)
    m, problem = load(uri)
    if problem is not None or not isinstance(m, dict):
        return
    try:
        files = listed_files(m)
    except Exception:  # noqa: BLE001 - an unreadable manifest is verify's to report
        return
    for rel in files:
        if store_for(uri).size(_key(uri, rel)) is not None:
            download(uri, rel, os.path.join(into, *rel.split("/")), None)
