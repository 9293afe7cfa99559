"""Files that go to an object store as they are written.

A run writing to a store keeps a local work directory (scratch) with a marker saying where its
files go (:class:`~.output.RemoteOutputDir` writes it). A writer that only appends (Parquet,
TFRecord, Megatron) asks :func:`open_stream` for the object its file becomes and writes there
instead of to scratch; when it is finished, the bytes and digest are recorded in the work
directory, and the commit checks them against the writer's record like those of an uploaded file.

A resumable run (``shard``, ``bucket``) keeps what ``--resume`` needs beside its data objects, under
``<out>/run-<id>/_resume/``: the plan, one object per journal entry and one per upload record
(:func:`mirror`, written after the local file). ``--resume`` on another machine, or after local
scratch was cleaned, restores them (:func:`restore`); only the spill frames of phase 1 stay local
(they are a second copy of the input), and a part whose frames are missing is read again.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

from ..runtime.clock import timed
from .stores import get_store
from .uri import split

MARKER = "_remote.json"  # in the local work directory: where the run's files go
UPLOADED = "_uploaded"  # in the local work directory: one record per file already on the store
RESUME = "_resume"  # beside the run's data objects: the state --resume needs
SPILL_OBJECTS = "_spill"  # beside the run's data objects: spill frames units hand each other (Ray engine)
JOURNAL_DIR = "journal"  # under RESUME: one object per journal entry, j<seq>.json


def target(work: str) -> dict | None:
    """Where the files of the work directory ``work`` go when the run writes to a store (``uri``,
    ``run``, ``part``, ``cap`` and the key ``prefix`` of the run), None for a local run."""
    marker = os.path.join(work, MARKER)
    if not os.path.exists(marker):
        return None
    with open(marker) as f:
        where = json.load(f)
    _, _, key = split(where["uri"])
    where["prefix"] = (key.strip("/") + "/" if key.strip("/") else "") + where["run"] + "/"
    return where


def _work_of(path: str) -> tuple[str, str]:
    """(work directory, path relative to it) of a file a writer makes: in the work directory
    itself (``convert``) or in a unit's private directory inside it (``.unit-<k>``, whose files
    keep their names when they are moved into the work directory)."""
    d, name = os.path.split(os.path.abspath(path))
    if os.path.basename(d).startswith(".unit-"):
        d = os.path.dirname(d)
    return d, name


class StreamedFile:
    """The object the local file ``path`` becomes, written as its bytes come (an
    :class:`~.base.ObjectWriter`); ``close`` records its bytes and digest in the work directory."""

    def __init__(self, path: str, where: dict) -> None:
        self.work, self.rel = _work_of(path)
        store = get_store(where["uri"])
        self.out = store.open_writer(where["prefix"] + self.rel, part=where["part"], cap=where.get("cap"))

    def write(self, data) -> None:
        with timed("upload"):  # waits for parts going up count as the unit's upload time
            self.out.write(data)

    def close(self, nbytes: int, digest: str) -> None:
        with timed("upload"):
            self.out.close()  # the object appears now (an upload that fails is aborted)
        record(self.work, self.rel, nbytes, digest)

    def abort(self) -> None:
        self.out.abort()


def open_stream(path: str) -> StreamedFile | None:
    """The object the file ``path`` becomes when the run writes to a store, so the writer sends
    its bytes there as they come instead of to local scratch; None for a local run."""
    where = target(_work_of(path)[0])
    return None if where is None else StreamedFile(path, where)


def streams(path: str) -> bool:
    """Would the file ``path`` go to an object store as it is written (:func:`open_stream`)? Opens nothing."""
    return target(_work_of(path)[0]) is not None


def move_streamed(src: str, dst: str) -> None:
    """Rename a streamed file (a writer that numbers its first file once it starts a second): the
    object is copied inside the store to its new name and the old one deleted."""
    work, rel = _work_of(src)
    _, new = _work_of(dst)
    where = target(work)
    nbytes, digest = uploaded(work, rel)
    store = get_store(where["uri"])
    store.copy(where["prefix"] + rel, where["prefix"] + new)
    store.delete([where["prefix"] + rel])
    record(work, new, nbytes, digest)
    os.unlink(_record_path(work, rel))
    mirror(work, f"{UPLOADED}/{_record_name(rel)}", None)


def _record_name(rel: str) -> str:
    return rel.replace("/", "%2F") + ".json"


def _record_path(work: str, rel: str) -> str:
    return os.path.join(work, UPLOADED, _record_name(rel))


def record(work: str, rel: str, nbytes: int, digest: str | None, *, mirrored: bool = True) -> None:
    """Record that the file ``rel`` of ``work`` is on the store with these bytes and digest (and
    keep the record beside the run's data for ``--resume``, unless ``mirrored`` is False: a unit
    that ran elsewhere kept it there already)."""
    os.makedirs(os.path.join(work, UPLOADED), exist_ok=True)
    path = _record_path(work, rel)
    body = json.dumps({"bytes": nbytes, "digest": digest})
    with open(path + ".tmp", "w") as f:
        f.write(body)
    os.rename(path + ".tmp", path)
    if mirrored:
        mirror(work, f"{UPLOADED}/{_record_name(rel)}", body.encode())


def records(work: str) -> dict[str, list]:
    """Every upload record of ``work``: relative path -> [bytes, digest] (what a unit that ran in
    a directory of its own hands to the driver in its fragment)."""
    out: dict[str, list] = {}
    folder = os.path.join(work, UPLOADED)
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".json"):
            rel = name[: -len(".json")].replace("%2F", "/")
            nbytes, digest = uploaded(work, rel)
            if nbytes >= 0:
                out[rel] = [nbytes, digest]
    return out


def drop_uploaded(work: str, rel: str) -> None:
    """Remove a file a unit uploaded, and its record (a trial shard of ``--shard-size``)."""
    where = target(work)
    if where is None:
        return
    get_store(where["uri"]).delete([where["prefix"] + rel])
    try:
        os.unlink(_record_path(work, rel))
    except FileNotFoundError:
        pass
    mirror(work, f"{UPLOADED}/{_record_name(rel)}", None)


def uploaded(work: str, rel: str) -> tuple[int, str | None]:
    """(bytes, digest) of a file a unit uploaded; (-1, None) when there is no record of it."""
    try:
        with open(_record_path(work, rel)) as f:
            d = json.load(f)
        return int(d["bytes"]), str(d["digest"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return -1, None


# -- the state of a resumable run, beside its data -------------------------------------------------


def mirror(work: str, name: str, data: bytes | None) -> None:
    """Keep the run-state file ``name`` (``/``-separated, relative to the run's ``_resume/``) of a
    resumable run writing to a store on the store too; None deletes it. Nothing for a local or a
    one-shot run."""
    where = target(work)
    if where is None or not where.get("resumable"):
        return
    store = get_store(where["uri"])
    key = f"{where['prefix']}{RESUME}/{name}"
    if data is None:
        store.delete([key])
    else:
        store.put(key, data)


def forget(work: str, sub: str) -> None:
    """Delete the mirrored run state under ``sub`` (``""``: all of it)."""
    where = target(work)
    if where is None or not where.get("resumable"):
        return
    store = get_store(where["uri"])
    prefix = f"{where['prefix']}{RESUME}/{sub}"
    store.delete([k for k, _ in store.list(prefix)])


def journal_key(seq: int) -> str:
    return f"{JOURNAL_DIR}/j{seq:08d}.json"


def restore(store, run_prefix: str, work: str, plan: str, journal: str) -> bool:
    """Rebuild the local run state of the run whose objects are under the key ``run_prefix``
    (``.../run-<id>/``) from what it mirrored: ``plan`` and ``journal`` (file names in ``work``)
    and the upload records. False when the run never saved a plan (nothing of it can be kept)."""
    base = run_prefix + RESUME + "/"
    body = store.read_all(base + plan)
    if body is None:
        return False
    keys = sorted(k for k, _ in store.list(base))
    entries = [k for k in keys if k.startswith(base + JOURNAL_DIR + "/")]
    records = [k for k in keys if k.startswith(base + UPLOADED + "/")]
    with ThreadPoolExecutor(8) as pool:
        bodies = list(pool.map(store.read_all, entries + records))
    os.makedirs(os.path.join(work, UPLOADED), exist_ok=True)
    _write(os.path.join(work, plan), body)
    lines = [b.rstrip(b"\n") + b"\n" for b in bodies[: len(entries)] if b]
    _write(os.path.join(work, journal), b"".join(lines))
    for k, b in zip(records, bodies[len(entries) :], strict=True):
        if b is not None:
            _write(os.path.join(work, UPLOADED, k[len(base + UPLOADED) + 1 :]), b)
    return True


def _write(path: str, data: bytes) -> None:
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.rename(path + ".tmp", path)
