"""What every unit of a resumable job (``shard``, ``bucket``) runs inside, and where units hand
their spill frames to each other.

A run whose output is on a store has a *place* (``ctx.place``): the run's target on the store (its
URI, run id, key prefix, multipart part sizes), and ``isolated`` when its units share nothing with
the driver but the store, which is how the Ray engine runs them (a cluster's nodes need not see
the driver's disk). An isolated unit:

* works in a directory of its own in its node's scratch (``LOVECRAFT_SCRATCH``, locked while it
  runs, removed after it, swept by a later unit or run on that node if the unit was killed), so
  nothing it needs lives on the driver's disk;
* uploads its finished files itself (streamed or whole, checked against the writer's digest, as a
  unit does for every run that writes to a store), and hands the driver their upload records in
  its fragment (the driver never reads the files);
* hands its spill frames to phase 2 through the store: its spill files (one per hash bucket) go up
  as the sections of one object, ``run-<id>/_spill/u<part>.bin``, with a CRC32C check of every
  byte sent, and the fragment says where each section is (``object``, ``at``). Phase-2 units read
  them back with ranged GETs: frame by frame where they need some frames, or whole sections, the
  adjacent sections of one object in one GET and several objects at once; every frame is checked
  against its digest as it is parsed (:mod:`.frames`).

The store's copy of the spill is what makes the run's state complete without the driver's disk: a
node lost mid-run loses nothing the journal counted, and ``--resume`` on another machine, with an
empty scratch, reads the journalled parts' spill from the store instead of reading their input
again (:func:`usable`). The commit deletes ``_spill/`` (:mod:`~..storage.output`).

Why the store and not Ray's object store: objects in Ray's store belong to the process that made
them (the driver, for task results), so they die with the driver, and a ``--resume`` from another
machine would have to read the whole input again; measured, see docs/guide/clusters.md.

Every unit also reports where its time went (:mod:`lovecraft_convert.runtime.clock`) in its fragment's ``timing``, which
the driver takes out before journalling (``LOVECRAFT_UNIT_LOG`` writes it down).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import OutputError
from ..runtime import clock
from .journal import SPILL, intact

GET_THREADS = 8  # ranged GETs of spill sections in flight at once (a unit's fetch)
SPILL_OBJECT = re.compile(r"u\d{5,}\.bin")  # a unit's spill object under run-<id>/_spill/


def isolated(ctx) -> bool:
    """Do the units of ``ctx``'s run share nothing with its driver but the store?"""
    place = getattr(ctx, "place", None)
    return bool(place and place.get("isolated"))


def place_of(work: str, isolated_units: bool) -> dict | None:
    """The place of a run whose work directory is ``work``: None for a local output, else its
    target on the store (:func:`~..storage.stream.target`) and whether its units are isolated."""
    from ..storage.stream import target

    where = target(work)
    if where is None:
        return None
    return {**where, "isolated": bool(isolated_units)}


# -- the unit's own directory ----------------------------------------------------------------------

_swept: int | None = None  # the process that swept its node's scratch (once per process)


@contextlib.contextmanager
def unit_dir(ctx) -> Iterator[str]:
    """Where the unit of ``ctx`` writes: the run's work directory, or for an isolated unit a new
    directory in this node's scratch, marked with the run's target (so writers stream to the
    store and uploads find it), removed when the unit ends."""
    if not isolated(ctx):
        yield ctx.work
        return
    from ..storage.scratch import UNIT, new_dir, release, sweep
    from ..storage.stream import MARKER

    global _swept
    if _swept != os.getpid():  # what units killed on this node left (a worker process lost mid-unit)
        sweep()
        _swept = os.getpid()
    path, fd = new_dir(UNIT)
    try:
        marker = {k: ctx.place[k] for k in ("uri", "run", "part", "cap", "resumable")}
        with open(os.path.join(path, MARKER), "w") as f:
            json.dump(marker, f)
        os.mkdir(os.path.join(path, SPILL))
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        release(path, fd)


def unit(fn: Callable) -> Callable:
    """Make ``fn(ctx, ...)`` a unit: run in :func:`unit_dir` (``ctx.work`` naming it), its fragment
    given its ``timing`` and, isolated, the ``uploaded`` records of the files it put on the store."""

    @functools.wraps(fn)
    def run(ctx, *args: Any) -> dict:
        clock.take()  # what an earlier unit of this process left
        t0, c0 = time.perf_counter(), time.process_time()
        with unit_dir(ctx) as work:
            own = work != ctx.work
            if own:
                ctx = dataclasses.replace(ctx, work=work, options=_local_options(ctx, work))
            res = fn(ctx, *args)
            if own:
                from ..storage.stream import records

                res["uploaded"] = records(work)
        spent = clock.take()
        spent["seconds"] = time.perf_counter() - t0
        spent["cpu"] = time.process_time() - c0  # every thread of the process: what a loaded machine does not inflate
        res["timing"] = {k: round(v, 4) for k, v in spent.items()}
        return res

    return run


def _local_options(ctx, work: str) -> dict:
    """``ctx.options`` with the files the driver put on the store for its units (a tokenizer
    file: :func:`~.driver.put_local_files`) fetched into the unit's directory and named there."""
    files = (ctx.place or {}).get("files") or {}
    if not files:
        return ctx.options
    import hashlib

    from ..storage.stores import get_store

    options = dict(ctx.options)
    store = get_store(ctx.place["uri"])
    for opt, f in files.items():
        with clock.timed("read"):
            data = store.read_all(f["key"])
        if data is None or len(data) != f["bytes"] or hashlib.sha256(data).hexdigest() != f["sha256"]:
            raise OutputError(
                f"{_object_uri(ctx.place, f['key'].rsplit('/', 1)[-1])}: the copy of --{opt.replace('_', '-')} "
                "the driver put on the store is missing or changed",
                hint="run the same command with --resume (the driver puts it there again)",
            )
        path = os.path.join(work, f"{opt}-{f['name']}")
        with open(path, "wb") as out:
            out.write(data)
        options[opt] = path
    return options


def hand_over(work: str, res: dict) -> dict:
    """Take a unit's fragment in the driver: the upload records it carries are kept in the work
    directory (the unit kept them on the store already); returns its ``timing``, taken out."""
    uploaded = res.pop("uploaded", None) or {}
    if uploaded:
        from ..storage.stream import record

        for rel, (nbytes, digest) in uploaded.items():
            record(work, rel, int(nbytes), digest, mirrored=False)
    return res.pop("timing", None) or {}


def discard(work: str, res: dict) -> None:
    """Remove the files of a unit's fragment wherever they went (a trial shard): local files, or
    the objects a unit uploaded and their records."""
    from ..storage.stream import drop_uploaded

    for f in res["files"]:
        local = os.path.join(work, f["path"])
        if os.path.exists(local):
            os.unlink(local)
        else:
            drop_uploaded(work, f["path"])


def log_unit(res: dict, key: str, timing: dict, driver: float = 0.0) -> None:
    """One JSON line per finished unit in the file ``LOVECRAFT_UNIT_LOG`` names, when it is set:
    its phase, key, time split, the bytes it spilled and the seconds the driver spent taking it
    (``driver``: its records kept, its journal entry written and put on the store), for tuning a
    cluster run and the benchmark's split."""
    path = os.environ.get("LOVECRAFT_UNIT_LOG")
    if not path:
        return
    files = res.get("files")
    spilled = (
        sum(int(i.get("size", 0)) for i in files.values() if isinstance(i, dict)) if isinstance(files, dict) else 0
    )
    entry = {"phase": res.get("phase"), "key": res.get(key), "timing": timing, "spill_bytes": spilled}
    entry["driver"] = round(driver, 5)
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


# -- spill frames: written ---------------------------------------------------------------------


def publish(spill, ctx) -> list[tuple[int, str, dict]]:
    """Publish a unit's spill files (a closed :class:`~.frames.UnitSpill`): (bucket, name, info)
    of each, ``info`` its ``size`` and ``crc32c``, and for an isolated unit where it is on the store
    (``object``, ``at``): the files go up one after the other as one object, each byte sent checked
    against the digest the file was written with, and are removed locally."""
    files = list(spill.publish())
    if not isolated(ctx):
        return [(b, name, {"size": size, "crc32c": crc}) for b, name, size, crc in files]
    import crc32c

    from ..storage.stores import get_store
    from ..storage.stream import SPILL_OBJECTS

    place = ctx.place
    obj = f"u{spill.unit:05d}.bin"  # matches SPILL_OBJECT
    key = f"{place['prefix']}{SPILL_OBJECTS}/{obj}"
    if not files:
        return []
    store = get_store(place["uri"])
    out = []
    at = 0
    with clock.timed("spill"):
        writer = store.open_writer(key, part=place["part"], cap=place["cap"])
        try:
            for b, name, size, crc in files:
                path = os.path.join(spill.dir, name)
                sent = got = 0
                with open(path, "rb", buffering=0) as f:
                    while data := f.read(place["part"]):
                        got = crc32c.crc32c(data, got)
                        writer.write(data)
                        sent += len(data)
                        del data
                if sent != size or got != crc:
                    raise OutputError(
                        f"{path}: the spill file changed while it was uploaded",
                        hint="run the same command with --resume",
                    )
                os.unlink(path)
                out.append((b, name, {"size": size, "crc32c": crc, "object": obj, "at": at}))
                at += size
            writer.close()
        except BaseException:
            writer.abort()
            raise
    return out


def spill_info(info: dict) -> dict:
    """What a reader needs of a spill file's journal info (its size, and where on the store)."""
    return {k: info[k] for k in ("size", "object", "at") if k in info}


def drop_spill(ctx_or_run) -> None:
    """Delete the spill the run's units put on the store (a run that starts its phase 1 over);
    the files the driver put there for its units (a tokenizer file, stdin) stay."""
    place = getattr(ctx_or_run, "place", None)
    if not place:
        return
    from ..storage.stores import get_store
    from ..storage.stream import SPILL_OBJECTS

    store = get_store(place["uri"])
    base = f"{place['prefix']}{SPILL_OBJECTS}/"
    store.delete([k for k, _ in store.list(base) if SPILL_OBJECT.fullmatch(k[len(base) :])])


# -- spill frames: read back -------------------------------------------------------------------


def _object_uri(place: dict, obj: str) -> str:
    from ..storage.stream import SPILL_OBJECTS
    from ..storage.uri import split

    scheme, bucket, _ = split(place["uri"])
    return f"{scheme}://{bucket}/{place['prefix']}{SPILL_OBJECTS}/{obj}"


def open_section(ctx, name: str, info: dict, *, sequential: bool = True):
    """The spill file ``name`` (its journal ``info``) open for reading: the local file, or its
    section of the run's spill object read with ranged GETs (``sequential``: one GET streams on
    from the first frame read; otherwise the GETs are short, for readers that seek about)."""
    if "object" not in info:
        return open(os.path.join(ctx.work, SPILL, name), "rb")  # noqa: SIM115 - the caller closes it
    from ..storage.rangefile import RangeFile

    at, size = int(info["at"]), int(info["size"])
    span = max(1, min(size, 64 << 20)) if sequential else None
    return RangeFile(
        _object_uri(ctx.place, info["object"]),
        start=at,
        end=at + size,
        size=at + size,
        readahead=span or (8 << 20),
        first=span,
        kind="spill",
    )


def fetch(ctx, items: list[tuple[str, dict]]) -> list[tuple[Any, str]]:
    """Whole spill sections ``items`` (name, journal info), in order, as (bytes, the name for
    errors): local files read; sections on the store fetched with one ranged GET per run of
    adjacent sections of one object, up to :data:`GET_THREADS` at once. Their frames are checked
    against their digests when parsed."""
    out: list[Any] = [None] * len(items)
    runs: list[list] = []  # [object, start, end, [(index, offset in the run, size)]]
    for i, (name, info) in sorted(
        enumerate(items), key=lambda x: (x[1][1].get("object", ""), int(x[1][1].get("at", 0)))
    ):
        if "object" not in info:
            with open(os.path.join(ctx.work, SPILL, name), "rb") as f:
                out[i] = (f.read(), f.name)
            continue
        at, size = int(info["at"]), int(info["size"])
        if runs and runs[-1][0] == info["object"] and runs[-1][2] == at:
            runs[-1][2] = at + size
        else:
            runs.append([info["object"], at, at + size, []])
        runs[-1][3].append((i, at - runs[-1][1], size, name))
    if not runs:
        return out
    from concurrent.futures import ThreadPoolExecutor

    from ..storage.rangefile import read_range

    def get(run: list) -> bytes:
        return read_range(_object_uri(ctx.place, run[0]), run[1], run[2])

    with clock.timed("spill"):
        if len(runs) == 1:
            bodies = [get(runs[0])]
        else:
            with ThreadPoolExecutor(min(GET_THREADS, len(runs)), thread_name_prefix="lovecraft-spill") as pool:
                bodies = list(pool.map(get, runs))
    for run, body in zip(runs, bodies, strict=True):
        if len(body) != run[2] - run[1]:
            raise OutputError(
                f"{_object_uri(ctx.place, run[0])}: the spill object ended early (bytes {run[1]}-{run[2]} asked)",
                hint="run the same command with --resume: the parts that wrote it are read again",
            )
        view = memoryview(body)
        for i, off, size, name in run[3]:
            out[i] = (view[off : off + size], f"{_object_uri(ctx.place, run[0])} ({name})")
    return out


# -- resuming ------------------------------------------------------------------------------------


def usable(run, entries: list[dict]) -> list[dict]:
    """The journalled phase-1 entries whose spill every unit of ``run`` can still read (the others'
    parts are read again): spill on the store whose objects are there at their sizes; spill in the
    work directory, all there with its digests, unless the run's units are isolated (they cannot
    see the driver's disk)."""
    place = run.place
    sizes: dict[str, int] | None = None
    out = []
    for e in entries:
        infos = [i for i in (e.get("files") or {}).values() if isinstance(i, dict)]
        on_store = {"object" in i for i in infos}
        if not infos:
            out.append(e)
        elif on_store == {False}:
            if not (place and place.get("isolated")) and intact(run.work, e):
                out.append(e)
        elif on_store == {True} and place:
            if sizes is None:
                sizes = _spill_sizes(place)
            ends: dict[str, int] = {}
            for i in infos:
                ends[i["object"]] = max(ends.get(i["object"], 0), int(i["at"]) + int(i["size"]))
            if all(sizes.get(o) == n for o, n in ends.items()):
                out.append(e)
    return out


def _spill_sizes(place: dict) -> dict[str, int]:
    from ..storage.stores import get_store
    from ..storage.stream import SPILL_OBJECTS

    base = f"{place['prefix']}{SPILL_OBJECTS}/"
    return {k[len(base) :]: n for k, n in get_store(place["uri"]).list(base)}
