"""Reading a dataset on an object store: its manifest, its stray objects, and its files read
through the node's cache (:class:`RemoteDataset`).

``open_dataset`` of a URI reads the manifest and lists the prefix (every file there, of the
manifest's size), and nothing else: the loaders bring the files' bytes into the bounded cache
(:mod:`.cache`) in the order they read them (:mod:`.prefetch`), a little ahead, and the format
readers read them from there (:mod:`.remote`).
"""

from __future__ import annotations

import json
import os

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
    return parse(data)


def parse(data: bytes | None) -> tuple[dict | None, tuple[str, str] | None]:
    """The manifest in ``data`` (what :func:`manifest_bytes` gave), or the problem with it."""
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
    ours = {name.split("/", 1)[0] for name in listed if name.startswith("run-") and "/" in name}  # the manifest's run
    out = []
    for key, _size in store.list(prefix):
        rel = key[len(prefix) :]
        if rel in listed or rel == mf.MANIFEST_NAME:
            continue
        if rel == PARTIAL:
            out.append((rel, "the marker of an unfinished run (finish it with --resume or remove it with --overwrite)"))
        elif rel.split("/", 1)[0] in ours:
            out.append((rel, "in this dataset's own run folder, not listed in the manifest (a stray object)"))
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


class RemoteDataset:
    """A committed dataset on a store, read through the node's :class:`~.cache.Cache`: a
    :class:`~.remote.RemoteFile` per file its manifest names (registered, so the format readers
    open them by URI), and the prefetches of the loaders reading it (``sessions``).

    ``ranged``: None (whole files where a reader reads a file through and it is no larger than
    :attr:`whole_max`; otherwise the byte ranges of the blocks read), False (whole files only,
    each checked against its digest before use; a file larger than the limit is refused)."""

    def __init__(self, uri: str, manifest: dict, cache, ranged: bool | None = None) -> None:
        from .remote import RemoteFile, Sessions, register
        from .uri import child_path

        if ranged not in (None, False, True):
            raise DatasetError(f"ranged={ranged!r}: use None (automatic), False (whole files) or True")
        self.uri, self.cache, self.ranged = uri, cache, ranged
        self.sessions = Sessions()
        self.listed: set[tuple[int, int]] = set()  # (process, group) whose parts' blocks are listed
        self.warned = False  # an exact shuffle's SlowReadWarning was given (loaders/fetch.py)
        self.files: dict[str, RemoteFile] = {}
        for rel, entry in listed_files(manifest).items():
            alg, hexd = mf.file_digest(entry)
            self.files[rel] = RemoteFile(
                child_path(uri, rel), int(entry.get("bytes", 0)), (alg, hexd) if alg else None, cache, self.sessions
            )
        for f in self.files.values():
            f.whole_only = ranged is False
        self.by_uri = {f.uri: f for f in self.files.values()}
        register(list(self.files.values()))

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "sessions"}

    def __setstate__(self, d: dict) -> None:  # in a DataLoader worker: the files registered there too
        from .remote import Sessions, register

        self.__dict__.update(d)
        self.sessions = Sessions()
        for f in self.files.values():
            f.sessions = self.sessions
        register(list(self.files.values()))

    @property
    def limit(self) -> int:
        return self.cache.limit

    @property
    def whole_max(self) -> int:
        """The largest file fetched whole for a reader that reads it through (an eighth of the
        limit: the file read, the next ones, and other readers' fit)."""
        return self.limit if self.ranged is False else self.limit // 8

    @property
    def read_bytes(self) -> int:
        """What a loader reading in order reads at a time (its chunks): at most 1/16 of the limit,
        so that what it reads at once, and the read-ahead, stay in the cache together."""
        return max(64 << 10, self.limit // 16)

    @property
    def piece_bytes(self) -> int:
        """The size of the ranges a large file read through is fetched in: 1/16 of the limit, at
        most 64 MiB (and at least 64 KiB, or a quarter of a smaller limit)."""
        return min(64 << 20, max(min(64 << 10, self.limit // 4), self.limit // 16))

    def file(self, uri: str):
        """The :class:`~.remote.RemoteFile` of ``uri`` (a file of this dataset)."""
        return self.by_uri[uri]

    def prefetch(self, pieces, *, keep_all: bool = False):
        """A :class:`~.prefetch.Prefetcher` of ``pieces`` for one reader, serving this dataset's
        reads while it lives (``stop`` it when the reader is done)."""
        from .prefetch import Prefetcher

        if keep_all:
            pieces = list(pieces)
            pf = Prefetcher(
                self.cache,
                pieces,
                ahead_bytes=sum(p.nbytes for p in pieces) + 1,
                ahead_pieces=len(pieces) + 1,
                advance=False,
                threads=self.cache.threads,
            )
        else:
            pf = Prefetcher(
                self.cache, pieces, ahead_bytes=max(self.piece_bytes, self.limit // 4), behind_bytes=self.limit // 8
            )
        self.sessions.add(pf)
        return pf

    def stop(self, pf) -> None:
        self.sessions.remove(pf)
        pf.close()


def open_remote(
    uri: str, cache_dir: str | None = None, cache_limit: int | str | None = None, ranged: bool | None = None
) -> tuple[dict, RemoteDataset]:
    """The manifest of the committed dataset at ``uri`` (checked, and its files' sizes against a
    listing of the store) and the dataset read through the cache in ``cache_dir`` of
    ``cache_limit`` bytes (defaults: ``LOVECRAFT_CACHE`` or ``~/.cache/lovecraft``, and
    ``LOVECRAFT_CACHE_LIMIT`` or 4 GiB). Nothing is downloaded but the manifest."""
    from .base import StorageError, named
    from .cache import cache_at

    uri = uri.rstrip("/")
    data = manifest_bytes(uri)
    if data is None:
        raise DatasetError(
            f"{uri}: no {mf.MANIFEST_NAME}; not a lovecraft dataset, or its writing did not finish",
            hint="give the output of a completed `lovecraft convert`/`shard` run",
        )
    m, problem = parse(data)  # (the bytes read above: the object is fetched once)
    if problem is not None or not isinstance(m, dict):
        raise DatasetError(f"{uri}/{mf.MANIFEST_NAME}: unreadable manifest", hint="re-create the dataset")
    mf.check(m, f"{uri}/{mf.MANIFEST_NAME}")
    mf.check_shape(m, f"{uri}/{mf.MANIFEST_NAME}")
    files = listed_files(m)
    try:
        have = sizes(uri)
    except StorageError as e:
        raise named(e, uri) from None
    for rel, entry in files.items():
        size = have.get(rel)
        if size is None:
            raise DatasetError(
                f"{uri}/{rel}: listed in the manifest but missing", hint="the dataset is incomplete; re-create it"
            )
        if "bytes" in entry and int(entry["bytes"]) != size:
            raise DatasetError(
                f"{uri}/{rel}: {size} bytes on the store, the manifest says {entry['bytes']}",
                hint="the object was changed; run `lovecraft verify` on the dataset or re-create it",
            )
    return m, RemoteDataset(uri, m, cache_at(cache_dir, cache_limit), ranged)


def copy_for_verify(uri: str, into: str) -> None:
    """The manifest and every object it names, copied as they are (unchecked: ``verify`` judges
    them) into the local directory ``into``."""
    data = manifest_bytes(uri)
    if data is None:
        return
    with open(os.path.join(into, mf.MANIFEST_NAME), "wb") as f:
        f.write(data)
    m, problem = parse(data)  # (the bytes read above: the object is fetched once)
    if problem is not None or not isinstance(m, dict):
        return
    try:
        files = listed_files(m)
    except Exception:  # noqa: BLE001 - an unreadable manifest is verify's to report
        return
    for rel in files:
        if store_for(uri).size(_key(uri, rel)) is not None:
            download(uri, rel, os.path.join(into, *rel.split("/")), None)
