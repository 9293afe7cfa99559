"""Writing a dataset to an object store: the commit without rename.

An object store has no directory rename and no lock, so the manifest object is the commit:

1. The run gets an id, ``run-<UTC time>-<random hex>``; its data objects go under
   ``<out>/run-<id>/`` and nowhere else.
2. Files of writers that only append (Parquet, TFRecord, Megatron) go to the store as they are
   written (:func:`~.stream.open_stream`): multipart, parts sized from the memory budget (growing after
   2,000 parts, so an object of unknown size fits S3's 10,000), at most three in memory, hashed on
   the way; nothing of them touches local scratch. The others (memmap, HDF5: their writers seek
   back) are written to local scratch and uploaded when complete, in the same parts. A failed or
   interrupted upload is aborted; the commit compares every object's size and digest with the
   writer's record.
3. ``<out>/_manifest.json`` naming ``run-<id>/<file>`` is written last, and only if absent
   (``If-None-Match: *``): of two runs racing to one prefix exactly one commits; the other deletes
   its own run prefix and fails with one line. With ``--overwrite`` the manifest is replaced and
   the previous run's objects are deleted after the new commit.
4. A resumable run (``shard``, ``bucket``) records ``<out>/_partial.json`` (its run id) first and
   keeps its plan, journal and upload records beside its data, under ``run-<id>/_resume/``
   (:func:`~.stream.mirror`); a later ``--resume``, on this machine or another, rebuilds its
   local state from them and continues the same run id (the spill frames of phase 1 are local,
   and parts whose frames are missing are read again, unless the units put them on the store,
   ``run-<id>/_spill/``, as units on Ray do: engine/units.py). ``--overwrite`` deletes the dead run's
   objects and unfinished uploads, and anything else is refused naming the unfinished run.
   ``_resume/`` and ``_spill/`` are deleted after the commit, and uploads of the run still open
   (a killed unit's) are aborted. A run killed after its commit but before that leaves
   ``_partial.json`` naming the committed run: it is taken for what it is (never for a dead run
   whose objects may be deleted), and ``--resume`` removes it with the ``_resume/`` state.

Before anything, an output that is, holds or lies inside an input is refused (:mod:`.overlap`), and
so is a prefix holding objects that are neither a dataset's nor a dead run's (they would be deleted
as strays after the commit). Local scratch (``LOVECRAFT_SCRATCH``) is locked per run and what dead
runs left there is removed as a run starts (:mod:`.scratch`).

What a reader that ignores the manifest could see: a glob over ``<out>/**/*.parquet`` during a run
sees the new run's objects appear one by one under ``run-<id>/`` (complete objects only: an object
becomes visible when its upload completes), and after an ``--overwrite`` commit briefly both runs.
Our readers start from the manifest and see only committed runs; a glob confined to the prefix
the manifest names sees exactly one run.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import secrets
import shutil

from .. import manifest as mf
from ..errors import OutputError
from ..runtime.clock import timed
from ..runtime.interrupts import committed, held, raise_lost
from . import locks
from .base import PreconditionFailed, part_cap, part_size
from .overlap import check_remote
from .scratch import PARTIAL, claim, new_dir, release, scratch_root, sweep
from .stores import get_store as store_for
from .stream import MARKER, RESUME, SPILL_OBJECTS, UPLOADED, record, restore, target, uploaded
from .uri import split


def new_run_id() -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"run-{now}-{secrets.token_hex(4)}"


class RemoteOutputDir:
    """:class:`~lovecraft_convert.engine.commit.OutputDir` for an object-store URI (same interface:
    ``path``, ``tmp``, ``keep``, ``reset()``, ``commit(manifest)``)."""

    def __init__(
        self,
        uri: str,
        *,
        overwrite: bool = False,
        protect: list[str] | None = None,
        resume: bool | None = None,
        budget: int = 256 << 20,
        state: tuple[str, str],
    ) -> None:
        """``protect``: the inputs (never replaced, never written into); ``state``: the names of the
        run-state files in the work directory (the journal's plan and entries, see
        engine/journal.py), restored from the store on ``--resume``."""
        self.path = uri.rstrip("/")
        _, self.bucket, key = split(self.path)
        self.prefix = key.strip("/") + "/" if key.strip("/") else ""
        self.store = store_for(self.path)
        self.overwrite = overwrite
        self.resumable = resume is not None
        self.resume = bool(resume)
        self.keep = False
        self.budget = budget
        self.run = ""
        self.tmp = ""
        self.old_run: str | None = None
        self.state = state
        self.protect = list(protect or [])
        self._lock: tuple[str, int] | None = None  # (scratch directory, its lock): see .scratch
        self.done = False  # the manifest is in: the run is committed, whatever happens after

    def key(self, rel: str) -> str:
        return self.prefix + rel

    # -- opening -------------------------------------------------------------------------------

    def __enter__(self) -> RemoteOutputDir:
        check_remote(self.path, self.protect)
        self.store.check(self.prefix)
        sweep()  # what dead runs left in local scratch
        local = os.path.join(scratch_root(), hashlib.sha256(self.path.encode()).hexdigest()[:20])
        if self.resumable:  # one work directory per output on this machine: locked before anything
            # of the output is touched, so a second run here is refused before it deletes a thing
            self._claim(local + ".partial")
        try:
            return self._enter(local)
        except BaseException:
            self._unclaim()
            raise

    def _claim(self, path: str) -> None:
        try:
            self._lock = (path, claim(path))
        except locks.Busy:
            raise OutputError(
                f"{self.path}: another lovecraft run on this machine is writing this output",
                hint="wait for it or choose another path",
            ) from None

    def _unclaim(self) -> None:
        if self._lock is not None:
            release(*self._lock)
            self._lock = None

    def _enter(self, local: str) -> RemoteOutputDir:
        if self.prefix and self.store.size(self.prefix.rstrip("/")) is not None:
            # an object of that name (an input CSV): the dataset would be written beside it under
            # ``name/``, and the name would then read as the dataset, never the object again
            raise OutputError(
                f"{self.path}: is an object; a dataset takes a prefix that names no object",
                hint="choose another path (a prefix of its own, such as s3://bucket/out/)",
            )
        existing = self._manifest()
        if existing is not None and not self.overwrite:
            raise OutputError(
                f"{self.path}: output already exists", hint="pass --overwrite to replace it or choose another path"
            )
        self.old_run = run_of(existing)
        partial = self._partial()
        if partial is not None and partial == self.old_run:  # its run committed, then died before removing it
            clear_committed_state(self.path, existing)
            partial = None
        if existing is None and partial is None and not self.overwrite:
            self._refuse_foreign_objects()
        if partial is not None:
            if self.resumable and self.resume:
                self.run = partial
            elif not self.overwrite:
                raise OutputError(
                    f"{self.path}: an unfinished run was left in {self.path}/{partial}",
                    hint="run the same command with --resume to finish it, or --overwrite to start over",
                )
            else:
                self.remove_run(partial)
                self.store.delete([self.key(PARTIAL)])
        if self.run:
            # the run's state on the store is the truth (another machine may have gone further);
            # local spill frames, where this machine has them, are kept
            self.tmp = local + ".partial"
            if os.path.isdir(self.tmp) and _run_here(self.tmp) != self.run:  # another run's spill
                shutil.rmtree(self.tmp)
            os.makedirs(self.tmp, exist_ok=True)
            from ..util import remove_entries

            remove_entries(self.tmp, (*self.state, UPLOADED))
            self.store.abort_uploads(self.key(self.run + "/"))
            if not restore(self.store, self.key(self.run + "/"), self.tmp, *self.state):
                self.remove_run(self.run)  # it never saved its plan: nothing of it can be kept
                shutil.rmtree(self.tmp)
                os.makedirs(self.tmp)
            self._mark()
            return self
        self.run = new_run_id()
        if self.resumable:
            self.tmp = local + ".partial"
            shutil.rmtree(self.tmp, ignore_errors=True)
            os.makedirs(self.tmp)
            body = json.dumps({"run": self.run, "started": self.run.split("-")[1]}).encode()
            self.store.put(self.key(PARTIAL), body)
        else:
            self.tmp, fd = new_dir(f"{os.path.basename(local)}.tmp-")
            self._lock = (self.tmp, fd)
        self._mark()
        return self

    def _refuse_foreign_objects(self) -> None:
        """A prefix without a dataset may still hold objects of dead runs of ours (``run-*/``,
        removed after the commit as strays); anything else is the user's, which the commit would
        delete: refused, as a local directory that exists is."""
        for k, _ in self.store.list(self.prefix):
            if k == self.key(mf.MANIFEST_NAME):  # another run committed since _enter looked
                raise OutputError(
                    f"{self.path}: output already exists", hint="pass --overwrite to replace it or choose another path"
                )
            if k == self.key(PARTIAL):  # another run started since: the commit decides which one wins
                continue
            if not k[len(self.prefix) :].startswith("run-"):
                raise OutputError(
                    f"{self.path}: output already exists (it holds {self.store.uri(k)}, which no run writing "
                    "here made: a dataset takes a prefix of its own)",
                    hint="pass --overwrite to replace everything under it, or choose another path",
                )

    def _mark(self) -> None:
        """Tell the units (in any process) where their files go: see :func:`upload_unit`."""
        with open(os.path.join(self.tmp, MARKER), "w") as f:
            json.dump(
                {
                    "uri": self.path,
                    "run": self.run,
                    "part": part_size(self.budget),
                    "cap": part_cap(self.budget),
                    "resumable": self.resumable,
                },
                f,
            )

    def _manifest(self) -> dict | None:
        data = self.store.read_all(self.key(mf.MANIFEST_NAME))
        if data is None:
            return None
        try:
            m = json.loads(data)
        except (ValueError, RecursionError):
            return {}
        return m if isinstance(m, dict) else {}

    def _partial(self) -> str | None:
        data = self.store.read_all(self.key(PARTIAL))
        if data is None:
            return None
        try:
            run = json.loads(data).get("run")
        except (ValueError, AttributeError):
            run = None
        return run if isinstance(run, str) and run.startswith("run-") and "/" not in run else None

    def remove_run(self, run: str) -> None:
        """Delete every object of ``run`` and abort its unfinished uploads."""
        p = self.key(run + "/")
        self.store.abort_uploads(p)
        self.store.delete([k for k, _ in self.store.list(p)])

    def reset(self) -> None:
        """Start the run's files over (the input's types changed mid-way): local scratch and what
        the writers streamed to the store."""
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)
        self.remove_run(self.run)
        self._mark()

    # -- the commit ----------------------------------------------------------------------------

    def commit(self, manifest: dict, drop: tuple[str, ...] = ()) -> None:
        """Upload what units have not, then put the manifest if absent (the commit); ``drop``: the
        local scratch entries of a resumable run (journal, plan, spill), removed first."""
        from ..util import remove_entries

        remove_entries(self.tmp, drop)
        names = manifest_files(manifest)
        part = part_size(self.budget)
        for rel, entry in names.items():
            local = os.path.join(self.tmp, *rel.split("/"))
            if not os.path.exists(local):  # a unit uploaded it already
                nbytes, digest = uploaded(self.tmp, rel)
            else:
                nbytes, digest = self.store.upload(
                    local, self.key(f"{self.run}/{rel}"), part=part, hash=mf.file_digest(entry)[0] or mf.DEFAULT_HASH
                )
            want = mf.file_digest(entry)[1]
            if nbytes != entry.get("bytes") or (want is not None and digest != want):
                raise OutputError(
                    f"{self.path}/{self.run}/{rel}: the uploaded bytes differ from those written",
                    hint="the scratch file changed during the upload; run the command again",
                )
        final = prefixed(manifest, self.run)
        body = mf.dumps(final).encode()
        mkey = self.key(mf.MANIFEST_NAME)
        # the put is the commit: an interrupt during it (the request may have reached the store)
        # waits for its answer, and once it is in, the run is complete
        raise_lost()  # a Ctrl-C that Python swallowed ends the run here
        with held():
            if self.overwrite and self.old_run is not None:
                self.store.put(mkey, body)
            else:
                try:
                    self.store.put(mkey, body, if_absent=True)
                except PreconditionFailed:
                    self.remove_run(self.run)
                    raise OutputError(
                        f"{self.path}: another run committed this output first (its {mf.MANIFEST_NAME} appeared "
                        "while this run wrote); nothing of this run was kept",
                        hint="pass --overwrite to replace it, or choose another path",
                    ) from None
            committed()
            self.done = True
            manifest.clear()
            manifest.update(final)
            # the run's scratch on the store goes before _partial.json, which names the run until
            # then: a run killed meanwhile is cleaned by the next (clear_committed_state)
            drop_run_scratch(self.store, self.key(self.run + "/"))
            if self.resumable:
                self.store.delete([self.key(PARTIAL)])
            if self.old_run is not None and self.old_run != self.run:
                self.store.abort_uploads(self.key(self.old_run + "/"))
            self.remove_strays()

    def remove_strays(self) -> None:
        """After the commit: delete every object under the prefix the manifest does not name (the
        replaced run's, a dead run's). A run still writing there has lost the race already: its
        own commit will find the manifest and remove what it wrote."""
        mine = self.key(self.run + "/")
        keep = {self.key(mf.MANIFEST_NAME)}
        stray = [k for k, _ in self.store.list(self.prefix) if k not in keep and not k.startswith(mine)]
        if stray:
            self.store.delete(stray)
        for key in self.store.uploads(self.prefix):  # a dead run's unfinished uploads (ours are complete)
            if not key.startswith(mine):
                self.store.abort_uploads(key)

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if self.keep or not self.tmp:
                return
            shutil.rmtree(self.tmp, ignore_errors=True)
            if exc_type is not None and self.run and not self.done:  # a failed run leaves nothing behind
                try:
                    self.remove_run(self.run)
                    if self.resumable:
                        self.store.delete([self.key(PARTIAL)])
                except Exception:  # noqa: BLE001 - the original error is the one to report
                    pass
        finally:
            self._unclaim()  # after the directory is gone (or kept for --resume)


def upload_unit(work: str, records: list) -> None:
    """Upload the files of a unit just committed into the work directory ``work`` when the run
    writes to a store (``work`` holds the marker), each checked against its record (size and
    digest) and recorded as uploaded; the local copy is then removed, so local scratch holds only
    the units in flight. Files the writer streamed are there already. Called in the unit's process
    (any worker that has the credentials)."""
    where = target(work)
    if where is None:
        return
    store = store_for(where["uri"])
    for r in records:
        local = os.path.join(work, *r.path.split("/"))
        if not os.path.exists(local):  # streamed as it was written
            continue
        with timed("upload"):
            nbytes, digest = store.upload(local, where["prefix"] + r.path, part=where["part"], hash=r.hash)
        if nbytes != r.bytes or digest != r.digest:
            raise OutputError(
                f"{where['uri']}/{where['run']}/{r.path}: the uploaded bytes differ from those written",
                hint="the scratch file changed during the upload; run the command again with --resume",
            )
        record(work, r.path, nbytes, digest)
        os.unlink(local)


def clear_committed_state(uri: str, m: dict) -> None:
    """Remove what a resumable run killed between its commit and its cleanup left on the store:
    the ``_partial.json`` naming the run the manifest ``m`` commits, and that run's ``_resume/``
    state and ``_spill/`` frames (``--resume`` of a finished run does this: nothing else is left to do)."""
    run = run_of(m)
    if run is None:
        return
    store = store_for(uri)
    _, _, key = split(uri)
    prefix = key.strip("/") + "/" if key.strip("/") else ""
    data = store.read_all(prefix + PARTIAL)
    try:
        named = json.loads(data).get("run") if data is not None else None
    except (ValueError, AttributeError):
        named = None
    drop_run_scratch(store, f"{prefix}{run}/")
    if named == run:
        store.delete([prefix + PARTIAL])


def drop_run_scratch(store, run_prefix: str) -> None:
    """Delete what a committed run kept beside its data while it ran (the ``_resume/`` state, the
    ``_spill/`` frames units handed each other) and abort its uploads still open (every unit is
    done: such an upload is one a killed unit left)."""
    for sub in (RESUME, SPILL_OBJECTS):
        keys = [k for k, _ in store.list(f"{run_prefix}{sub}/")]
        if keys:
            store.delete(keys)
    store.abort_uploads(run_prefix)


def _run_here(work: str) -> str | None:
    """The run id a local work directory was made for (its marker), None when it cannot be told."""
    try:
        return (target(work) or {}).get("run")
    except (OSError, ValueError, KeyError):
        return None


def run_of(m: dict | None) -> str | None:
    """The run prefix a committed manifest names (``run-...``), None for none."""
    for f in (m or {}).get("files") or []:
        p = f.get("path") if isinstance(f, dict) else None
        if isinstance(p, str) and p.startswith("run-") and "/" in p:
            return p.split("/", 1)[0]
    return None


def manifest_files(m: dict) -> dict[str, dict]:
    """Every file a manifest names (its ``files`` and the files of the format's own sections, such
    as an index: :func:`~lovecraft_convert.manifest.section_files`): relative path -> entry
    (``bytes`` and digest)."""
    out = {f["path"]: f for f in m.get("files") or []}
    out.update(mf.section_files(m))
    return out


def prefixed(m: dict, run: str) -> dict:
    """The manifest with every file it names moved under ``run/``: ``files[].path``, the files of
    its shards and buckets (and their shards), and the format's extra files."""
    import copy

    m = copy.deepcopy(m)
    names = set(manifest_files(m))

    def fix(p):
        return f"{run}/{p}" if isinstance(p, str) and p in names else p

    for f in m.get("files") or []:
        f["path"] = fix(f["path"])
    for group in (m.get("shards") or []) + (m.get("buckets") or []):
        if isinstance(group, dict):
            group["files"] = [fix(p) for p in group.get("files") or []]
            for sub in group.get("shards") or []:
                if isinstance(sub, dict):
                    sub["files"] = [fix(p) for p in sub.get("files") or []]
    for v in m.values():
        if isinstance(v, dict) and isinstance(v.get("path"), str) and v["path"] in names:
            v["path"] = fix(v["path"])
        if isinstance(v, dict) and isinstance(v.get("blocks"), dict):  # a format's index keyed by file
            v["blocks"] = {fix(k): x for k, x in v["blocks"].items()}
    return m
