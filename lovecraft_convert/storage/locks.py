"""Lock files that can be removed without losing the lock.

A lock file beside an output (``.<name>.lock``) or a scratch directory is removed by its holder
when it is done, so nothing is left behind. That makes a naive ``open`` + ``flock`` unsafe: a
second process that opened the file just before the holder removed it gets the lock as soon as the
holder closes it, but on a file no longer at the path, while a third process creates a new file
there and locks that one too; both then believe they hold the lock. :func:`acquire` closes that
gap: after ``flock`` it checks that the path still names the file it locked (same device and
inode) and starts again when it does not. :func:`release` removes the file while still holding it,
so whoever locked it meanwhile finds it gone and starts again.
"""

from __future__ import annotations

import fcntl
import os


class Busy(Exception):
    """Another process holds the lock."""


def acquire(path: str, *, wait: bool = False) -> int:
    """Lock the file ``path`` (created when missing) and return its descriptor; raises
    :class:`Busy` when another process holds it (``wait`` False) and ``OSError`` when it cannot be
    created."""
    while True:
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            raise Busy(path) from None
        except BaseException:
            os.close(fd)
            raise
        if _still_at(path, fd):
            return fd
        os.close(fd)  # its holder removed it after we opened it: lock the file now at the path


def _still_at(path: str, fd: int) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def release(path: str, fd: int) -> None:
    """Remove the lock file ``path`` and unlock it (in that order: see the module's docstring)."""
    try:
        os.unlink(path)
    except OSError:
        pass
    os.close(fd)
