"""Writing a dataset directory without ever leaving a complete-looking partial output.

0. Refuse, before any work, an output that is, holds or lies inside an input (compared by real
   path and by device and inode: :mod:`~lovecraft_convert.storage.overlap`), and an output path
   the final rename could not replace: a symbolic link, a mount point.
1. Lock ``.<name>.lock`` beside the output (``fcntl.flock``, checked to still be the file at that
   path: :mod:`~lovecraft_convert.storage.locks`); then, locked, refuse an existing output unless
   overwriting (a run that held the lock before may have committed it); remove stale temporaries
   of earlier runs (we hold the lock, so they are stale).
2. Write everything into the temporary sibling ``.<name>.tmp-<pid>``.
3. Writers close and fsync each file and record its size and digest.
4. The manifest is written last (temporary name, fsync, rename), the temporary directory is
   fsynced and renamed into place, and the parent is fsynced.
On any error or interrupt the temporary directory is removed; the output path is never touched.
The commit (step 4) is not cut by an interrupt: it completes, and the run is then complete: an
interrupt that arrives meanwhile or later is ignored (:func:`~.interrupts.committed`).
"""

from __future__ import annotations

import errno
import glob
import os
import shutil

from .. import manifest as manifest_file
from ..errors import Interrupted, OutputError
from ..runtime.interrupts import committed, held, raise_lost
from ..storage import locks
from ..storage.overlap import check_local
from ..util import format_size, fsync_path, remove_entries, trim_heap


def output_dir(
    path: str,
    *,
    overwrite: bool = False,
    protect: list[str] | None = None,
    resume: bool | None = None,
    budget: int = 256 << 20,
):
    """The output of a run: an :class:`OutputDir` for a local path (or ``file://`` URI), a
    :class:`~lovecraft_convert.storage.output.RemoteOutputDir` for an object-store URI."""
    from ..storage import is_remote, local_path

    if is_remote(path):
        from ..storage.output import RemoteOutputDir
        from .journal import JOURNAL, PLAN

        return RemoteOutputDir(
            path, overwrite=overwrite, protect=protect, resume=resume, budget=budget, state=(PLAN, JOURNAL)
        )
    return OutputDir(local_path(path), overwrite=overwrite, protect=protect, resume=resume)


class OutputDir:
    def __init__(
        self, path: str, *, overwrite: bool = False, protect: list[str] | None = None, resume: bool | None = None
    ) -> None:
        """``resume`` None: a one-shot run (temporary ``.<name>.tmp-<pid>``, removed on any failure).
        True/False: a resumable run (work directory ``.<name>.partial``, kept when interrupted or
        killed; True continues it, False refuses to touch one unless overwriting)."""
        self.path = os.path.abspath(path.rstrip("/") or path)
        self.parent = os.path.dirname(self.path)
        self.name = os.path.basename(self.path)
        self.overwrite = overwrite
        self.protect = list(protect or [])  # the inputs: never replaced, never written into
        self.resumable = resume is not None
        self.resume = bool(resume)
        self.keep = False  # set by a resumable run that was interrupted
        if self.resumable:
            self.tmp = os.path.join(self.parent, f".{self.name}.partial")
        else:
            self.tmp = os.path.join(self.parent, f".{self.name}.tmp-{os.getpid()}")
        self.lock_path = os.path.join(self.parent, f".{self.name}.lock")
        self._lock_fd: int | None = None

    def __enter__(self) -> OutputDir:
        """Lock, check and create the temporary directory. An interrupt meanwhile (a signal can land
        between creating it and the caller's ``try``) leaves neither it nor the lock behind."""
        try:
            return self._enter()
        except KeyboardInterrupt:
            if not self.resumable and os.path.isdir(self.tmp):
                shutil.rmtree(self.tmp, ignore_errors=True)
            self._unlock()
            if self.resumable:
                raise
            raise Interrupted(f"interrupted; nothing was written to {self.path}") from None

    def _enter(self) -> OutputDir:
        check_local(self.path, self.protect)
        self._check_target()  # before anything is made: the usual refusals cost nothing
        try:
            os.makedirs(self.parent, exist_ok=True)
            self._lock_fd = locks.acquire(self.lock_path)
        except locks.Busy:
            raise OutputError(
                f"{self.path}: another lovecraft run is writing this output", hint="wait for it or choose another path"
            ) from None
        except OSError as e:
            blocker = _file_in_the_way(self.parent)
            if blocker is not None:
                raise OutputError(
                    f"{self.path}: cannot create the output: {blocker} is a file, not a directory",
                    hint="choose another output path",
                ) from None
            raise OutputError(
                f"{self.path}: cannot create the output ({e.strerror})", hint="check the path and permissions"
            ) from None
        try:
            self._check_target()  # again, locked: a run that held the lock may have committed meanwhile
        except OutputError:
            self._unlock()
            raise
        for stale in glob.glob(os.path.join(self.parent, f".{glob.escape(self.name)}.tmp-*")):
            shutil.rmtree(stale, ignore_errors=True)
        for stale in glob.glob(os.path.join(self.parent, f".{glob.escape(self.name)}.old-*")):
            _remove(stale)
        partial = os.path.join(self.parent, f".{self.name}.partial")
        if os.path.exists(partial):
            if self.resumable and self.resume:
                return self
            if not self.overwrite:
                self._unlock()
                raise OutputError(
                    f"{self.path}: an unfinished run was left in {partial}",
                    hint="run the same command with --resume to finish it, or --overwrite to start over",
                )
            shutil.rmtree(partial, ignore_errors=True)
        os.mkdir(self.tmp)
        return self

    def _check_target(self) -> None:
        """Refuse an output path the commit could not replace, before any work: a symbolic link
        (the rename would replace the link, not the directory it names), a mount point (it cannot
        be renamed), an existing output without ``--overwrite``, a file."""
        if os.path.islink(self.path):
            raise OutputError(
                f"{self.path}: is a symbolic link (to {os.readlink(self.path)}), which the output cannot replace",
                hint="name the directory itself, or remove the link",
            )
        if not os.path.exists(self.path):
            return
        if os.path.isdir(self.path) and is_mount_point(self.path):
            raise OutputError(
                f"{self.path}: is a mount point, which the output cannot replace (it is renamed into place)",
                hint=f"write into a directory inside it (e.g. {os.path.join(self.path, 'dataset')}) or choose another path",
            )
        if not self.overwrite:
            raise OutputError(
                f"{self.path}: output already exists", hint="pass --overwrite to replace it or choose another path"
            )
        if not os.path.isdir(self.path):
            raise OutputError(f"{self.path}: exists and is not a directory", hint="remove it or choose another path")

    def reset(self) -> None:
        """Empty the temporary directory (a run that starts over)."""
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.mkdir(self.tmp)

    def commit(self, manifest: dict, drop: tuple[str, ...] = ()) -> None:
        """Write the manifest, remove the scratch entries ``drop`` of the temporary directory (a
        resumable run's journal, plan and spill), and rename it into place (an old output moved
        aside first, then removed). No interrupt cuts it: one that arrives meanwhile waits until the
        output is in place, and once it is the run is complete (:func:`~.interrupts.committed`), so
        an overwrite never loses the old output and a resumable run keeps its journal until its
        output is complete."""
        try:
            raise_lost()  # a Ctrl-C that Python swallowed ends the run here, before anything moves
        except KeyboardInterrupt:
            if self.resumable:
                raise  # the run's driver says what was kept for --resume
            raise Interrupted(f"interrupted; nothing was written to {self.path}") from None
        with held():
            if not self.overwrite and os.path.lexists(self.path):  # made by something else than a run of ours
                raise OutputError(
                    f"{self.path}: appeared while this run wrote; nothing was written",
                    hint="pass --overwrite to replace it or choose another path",
                )
            manifest_file.write(self.tmp, manifest)
            remove_entries(self.tmp, drop)
            fsync_path(self.tmp)
            old = None
            try:
                if os.path.lexists(self.path):
                    old = os.path.join(self.parent, f".{self.name}.old-{os.getpid()}")
                    os.rename(self.path, old)
                os.rename(self.tmp, self.path)
            except OSError as e:
                if old is not None and not os.path.lexists(self.path):
                    os.rename(old, self.path)  # the old output back where it was
                raise OutputError(
                    f"{self.path}: cannot put the output in place ({e.strerror}); nothing was written",
                    hint="choose another output path",
                ) from None
            committed()
            fsync_path(self.parent)
            if old:
                _remove(old)

    def __exit__(self, exc_type, exc, tb) -> None:
        if os.path.exists(self.tmp) and not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        self._unlock()
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OutputError(
                f"{self.path}: {_no_space(exc)}{self._writing(exc)}; nothing was written",
                hint="free space or choose another output",
            ) from None

    def _writing(self, exc: OSError) -> str:
        """`` while writing data.h5 (12.2 MiB needed)``: the file, as it will be named in the output."""
        what = ""
        name = exc.filename if isinstance(exc.filename, str) else None
        if name:
            full = os.path.abspath(name)
            rel = os.path.relpath(full, self.tmp) if full.startswith(self.tmp + os.sep) else None
            if rel is not None and not rel.startswith(".."):
                what = f" while writing {rel}"
        needed = getattr(exc, "needed", None)
        if needed:
            what += f" ({format_size(needed)} needed)" if what else f" ({format_size(needed)} needed for a file)"
        return what

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            locks.release(self.lock_path, self._lock_fd)
            self._lock_fd = None


def _remove(path: str) -> None:
    """Remove a directory tree, or the link or file at ``path``."""
    if os.path.islink(path) or not os.path.isdir(path):
        try:
            os.unlink(path)
        except OSError:
            pass
    else:
        shutil.rmtree(path, ignore_errors=True)


def is_mount_point(path: str) -> bool:
    """Is ``path`` where a file system is mounted (another device, or a bind mount of the same one,
    which only the kernel's mount table tells)?"""
    if os.path.ismount(path):
        return True
    real = os.fsencode(os.path.realpath(path))
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            for line in f:
                fields = line.split(b" ")
                if len(fields) > 4 and _unescape(fields[4]) == real:
                    return True
    except OSError:  # not Linux
        pass
    return False


def _unescape(field: bytes) -> bytes:
    """A mount table path: space, tab, newline and backslash are written as octal escapes."""
    import re

    return re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), field)


def _no_space(exc: OSError) -> str:
    return "disk quota exceeded" if exc.errno == errno.EDQUOT else "no space left on device"


def _file_in_the_way(parent: str) -> str | None:
    """The closest existing ancestor of ``parent`` when it is not a directory (``a.csv`` of ``a.csv/out``)."""
    p = parent
    while p and not os.path.lexists(p):
        up = os.path.dirname(p)
        if up == p:
            return None
        p = up
    return p if p and os.path.lexists(p) and not os.path.isdir(p) else None


def commit_unit(work: str, k: int, make_writer, feed) -> tuple[list, dict]:
    """Write one unit's files in a private temporary directory, then move them into ``work``
    (fsynced): a unit's files appear complete or not at all.

    ``make_writer(directory)`` opens the unit's writer there; ``feed(writer)`` writes every batch.
    Returns the file records and the writer's manifest keys.
    """
    tmp = os.path.join(work, f".unit-{k:05d}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.mkdir(tmp)
    writer = make_writer(tmp)
    try:
        feed(writer)
        files = writer.close()
    except BaseException:
        writer.abort()
        raise
    extra = writer.manifest_extra()
    del writer
    trim_heap()
    from ..storage.output import upload_unit
    from ..storage.stream import uploaded

    for f in files:
        src = os.path.join(tmp, f.path)
        if not os.path.exists(src) and uploaded(work, f.path)[0] >= 0:  # the writer streamed it to a store
            continue
        os.rename(src, os.path.join(work, f.path))
    fsync_path(work)
    os.rmdir(tmp)
    upload_unit(work, files)  # a run writing to a store: the unit's files go up now
    return files, extra
