"""Local scratch (``LOVECRAFT_SCRATCH``) of runs that write to, or verify, an object store, and the
cleaning of what dead runs left there.

Every directory a run makes in the scratch root is locked for as long as the run lives: the lock
file ``<dir>.lock`` beside it (:mod:`.locks`), taken before the directory is made and removed after
it is. A directory whose lock nobody holds belongs to a run that is gone (killed, or a machine
that lost power), and :func:`sweep`, called as a run starts, removes it:

* a one-shot run's ``<output>.tmp-<hex>``, a verify's ``verify-<hex>`` and a unit's ``unit-<hex>``
  (a unit of a run whose units share nothing with its driver: the Ray engine writing to a store),
  always (they are never reused);
* a resumable run's ``<output>.partial`` only when that run can no longer be resumed: the store's
  ``_partial.json`` under the output the directory's marker names no longer names its run (the
  run committed, was replaced, or was removed). While it does, the directory is kept for
  ``--resume`` (its spill frames spare reading the input again); when the store cannot be asked,
  it is kept too.

A directory is removed by renaming it to ``.trash-<hex>`` while locked (a run that wants it waits
at most that long), then deleting the trash; trash a sweep could not finish is deleted by the next.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time

from ..manifest import MANIFEST_NAME
from . import locks

TRASH = ".trash-"
LOCK = ".lock"
UNIT = "unit-"  # the private directory of one unit on a node (engine/units.py)
PARTIAL = "_partial.json"  # under a resumable run's output on the store: the run id it continues


def scratch_root() -> str:
    return os.environ.get("LOVECRAFT_SCRATCH") or os.path.join(tempfile.gettempdir(), "lovecraft-scratch")


def claim(path: str, *, patience: float = 2.0) -> int:
    """Lock the scratch directory ``path`` (before it is made, or to reuse it) and return the lock's
    descriptor, for :func:`release`. Raises :class:`~.locks.Busy` when a live run holds it;
    a sweep holds it only for a moment, which is waited for up to ``patience`` seconds."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    deadline = time.monotonic() + patience
    while True:
        try:
            return locks.acquire(path + LOCK)
        except locks.Busy:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def new_dir(prefix: str) -> tuple[str, int]:
    """A new, locked scratch directory ``<root>/<prefix><hex>``: (path, lock descriptor)."""
    root = scratch_root()
    while True:
        path = os.path.join(root, prefix + secrets.token_hex(6))
        fd = claim(path)
        try:
            os.mkdir(path)
            return path, fd
        except FileExistsError:
            release(path, fd)
        except BaseException:
            release(path, fd)
            raise


def release(path: str, fd: int) -> None:
    """Unlock the scratch directory ``path`` (after removing it, or to keep it for ``--resume``)."""
    locks.release(path + LOCK, fd)


def sweep(still_open=None) -> None:
    """Remove what dead runs left in the scratch root (see the module's docstring).
    ``still_open(uri, run)``: whether the store still lists ``run`` as the unfinished run of
    ``uri`` (True keeps its ``.partial``); by default the store is asked."""
    root = scratch_root()
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return
    for name in names:
        full = os.path.join(root, name)
        if name.startswith(TRASH):
            shutil.rmtree(full, ignore_errors=True)
        elif name.endswith(LOCK):
            if not os.path.lexists(full[: -len(LOCK)]):
                _drop_orphan_lock(full)
        elif os.path.isdir(full) and (".tmp-" in name or name.startswith(("verify-", UNIT))):
            _remove_if_dead(full, None)
        elif os.path.isdir(full) and name.endswith(".partial") and not _held(full + LOCK):
            run = _marked_run(full)  # read unlocked: its run only writes it as it starts
            if run is None or not (still_open or _still_open)(*run):
                _remove_if_dead(full, run)


def _held(lock: str) -> bool:
    """Does a live run hold the lock file ``lock``?"""
    try:
        fd = locks.acquire(lock)
    except locks.Busy:
        return True
    except OSError:
        return False
    locks.release(lock, fd)
    return False


def _drop_orphan_lock(path: str) -> None:
    try:
        fd = locks.acquire(path)
    except (locks.Busy, OSError):
        return
    if os.path.lexists(path[: -len(LOCK)]):  # its directory was made meanwhile: not an orphan
        os.close(fd)
        return
    locks.release(path, fd)


def _remove_if_dead(path: str, run: tuple[str, str] | None) -> None:
    """Remove the directory ``path`` when no live run holds it (and, for a ``.partial``, when its
    marker still names ``run``: a new run of the same output may have taken it meanwhile)."""
    try:
        fd = locks.acquire(path + LOCK)
    except (locks.Busy, OSError):
        return
    try:
        if not os.path.isdir(path) or (path.endswith(".partial") and _marked_run(path) != run):
            return
        trash = os.path.join(os.path.dirname(path), TRASH + secrets.token_hex(6))
        try:
            os.rename(path, trash)
        except OSError:
            return
    finally:
        locks.release(path + LOCK, fd)
    shutil.rmtree(trash, ignore_errors=True)


def _marked_run(path: str) -> tuple[str, str] | None:
    """(output URI, run id) the marker of a work directory names, None when it has none."""
    from .stream import MARKER

    try:
        with open(os.path.join(path, MARKER)) as f:
            m = json.load(f)
        return (m["uri"], m["run"]) if isinstance(m["uri"], str) and isinstance(m["run"], str) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _still_open(uri: str, run: str) -> bool:
    """Does the store still name ``run`` as the unfinished run of ``uri``? True when it cannot be
    told (the store unreachable, other credentials): the directory is then kept."""
    from .stores import get_store
    from .uri import split

    try:
        _, _, key = split(uri)
        prefix = key.strip("/") + "/" if key.strip("/") else ""
        store = get_store(uri)
        data = store.read_all(prefix + PARTIAL)
        if data is None or json.loads(data).get("run") != run:
            return False
        data = store.read_all(prefix + MANIFEST_NAME)  # killed between its commit and removing _partial.json?
        files = (json.loads(data) or {}).get("files") if data is not None else None
        return not any(isinstance(f, dict) and str(f.get("path")).startswith(run + "/") for f in files or [])
    except Exception:  # noqa: BLE001 - whatever went wrong, keeping the directory is safe
        return True
