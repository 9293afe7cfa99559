"""Input bytes read by units running elsewhere (in this process, spawned worker processes or Ray
tasks), for the progress bar of a reading phase in the driver.

The channel is a small file per running unit, ``<work>/spill/progress/<key>``. The driver
(:class:`ByteBar`) makes the folder only when it shows a bar; a unit (:class:`UnitMeter`) that
finds it there overwrites its file with the input bytes it has read so far, at most every
``INTERVAL`` seconds (one ``pwrite`` of 40 bytes: no measurable cost), and writes nothing at all
otherwise (``--quiet``, stderr not a terminal). The driver adds the final counts of the finished
units (from their journal fragments) and the files of the running ones, on a thread that
refreshes the bar a few times a second.

A file needs nothing from the executor: it works for the in-process executor, for processes
started with spawn and for Ray workers, which share the work directory anyway (they leave their
spill files there). It goes away with the spill folder. A unit never fails because of its meter,
and the bar never goes back (a unit that Ray runs again starts its count from zero).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable

from ..runtime.interrupts import join
from .journal import SPILL

PROGRESS = "progress"
INTERVAL = 0.25  # seconds between two writes of a unit's count
REFRESH = 0.25  # seconds between two refreshes of the bar
WIDTH = 20  # digits of a count; a count is written twice, and read only when both copies agree


def meter_dir(work: str) -> str:
    return os.path.join(work, SPILL, PROGRESS)


class UnitMeter:
    """The count of input bytes one unit has read, written where the driver looks for it.

    ``done()`` returns the bytes read so far by the unit's reader (its ``progress_done``)."""

    def __init__(self, work: str, key: int | str, done: Callable[[], int]) -> None:
        folder = meter_dir(work)
        self.path = os.path.join(folder, str(key))
        self.done = done
        self.fd: int | None = None
        self.written = 0
        self.at = time.monotonic()
        self.off = not os.path.isdir(folder)  # no bar is shown: nothing to write

    def tick(self) -> None:
        """Called after each batch: writes the count when it moved and ``INTERVAL`` has passed."""
        if self.off:
            return
        now = time.monotonic()
        if now - self.at < INTERVAL:
            return
        n = int(self.done())
        if n <= self.written:
            return
        self.at = now
        try:
            if self.fd is None:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.pwrite(self.fd, b"%0*d%0*d" % (WIDTH, n, WIDTH, n), 0)
            self.written = n
        except OSError:  # progress is a nicety: a unit does not fail for it
            self.off = True

    def close(self) -> int:
        """The unit's final count (for its fragment); the file is left for the driver to remove."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        return int(self.done())


def read_count(path: str) -> int | None:
    """The count in a unit's file; None when it is gone or was caught half-written."""
    try:
        with open(path, "rb") as f:
            raw = f.read(2 * WIDTH)
    except OSError:
        return None
    if len(raw) != 2 * WIDTH or raw[:WIDTH] != raw[WIDTH:] or not raw.isdigit():
        return None
    return int(raw[:WIDTH])


class ByteBar:
    """A bar of the input bytes read by the units of a phase: ``initial`` bytes already read
    (parts finished before a ``--resume``), plus the finished units' counts, plus the running
    units' files. On stderr when ``enabled`` (None: when stderr is a terminal), else nothing at all
    (and the units write no counts)."""

    def __init__(self, work: str, total: int | None, initial: int, enabled: bool | None, desc: str) -> None:
        self.dir = meter_dir(work)
        self.total = total
        self.done = initial
        self.running: dict[str, int] = {}  # the last count seen of each running unit
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.bar = None
        self.thread = None
        shutil.rmtree(self.dir, ignore_errors=True)  # counts left by a killed run
        if enabled is None:
            enabled = sys.stderr.isatty()
        if not enabled:
            return
        from .pipeline import byte_bar

        os.makedirs(self.dir, exist_ok=True)
        self.bar = byte_bar(total, initial, desc)
        self.thread = threading.Thread(target=self._loop, name="lovecraft-progress", daemon=True)
        self.thread.start()

    def finished(self, key: int | str, nbytes: int) -> None:
        """Unit ``key`` is done, having read ``nbytes``."""
        if self.bar is None:
            return
        with self.lock:
            self.running.pop(str(key), None)
            self.done += int(nbytes)
            _unlink(os.path.join(self.dir, str(key)))
            self._show()

    def _scan(self) -> None:
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for name in names:
            n = read_count(os.path.join(self.dir, name))
            if n is not None:
                self.running[name] = n

    def _show(self) -> None:
        n = self.done + sum(self.running.values())
        if self.total:
            n = min(n, self.total)
        if n > self.bar.n:  # never back
            self.bar.update(n - self.bar.n)
        else:
            self.bar.refresh()

    def _loop(self) -> None:
        while not self.stop.wait(REFRESH):
            with self.lock:
                self._scan()
                self._show()

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            join(self.thread)
        if self.bar is not None:
            self.bar.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
