"""Background work of a loader stopped before the interpreter exits, when its consumer did not.

A script may take a few batches and end without closing its iterator: the loader's threads (a
read-ahead, a window builder, the fetchers of a remote dataset) are daemons, so they do not keep
the process alive, but they are still running when the interpreter finalizes. A read may be inside
a native library that calls back into Python: pyarrow reading a Parquet row group from a remote
dataset calls our file object from its own I/O thread. From finalization on, that callback can
never take the GIL again, the read never completes, and pyarrow's exit handler (its thread pool's
shutdown) waits for it forever: a process that did all its work and hangs at exit (seen on a
shuffled epoch from S3 left after its first batch). And whatever such threads still hold is
released by finalizers that run after the modules they need are gone (a traceback per piece).

So while any such work is live, one :mod:`atexit` hook is registered. It runs before
finalization, while every module and thread still works, and stops each piece of work: first the
readers (they may be waiting on a fetch), then the fetchers; each waits for its threads for a
bounded time. Once no work is live the hook is unregistered: a loader that was closed leaves no
registration behind.
"""

from __future__ import annotations

import atexit
import itertools
import threading
from collections.abc import Callable

READER, FETCHER = 0, 1  # the order the hook stops them in


class _Registry:
    """The live work, and the hook registered while there is some. What :meth:`Token.end` runs
    uses only this object's attributes: an iterator left to the interpreter's finalization is
    closed after the modules' names are gone."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: dict[int, tuple[int, Callable[[], None]]] = {}
        self.ids = itertools.count()
        self.register, self.unregister = atexit.register, atexit.unregister

    def start(self, stop: Callable[[], None], stage: int) -> Token:
        with self.lock:
            if not self.live:
                self.register(self.stop_all)
            key = next(self.ids)
            self.live[key] = (stage, stop)
        return Token(self, key)

    def end(self, key: int) -> None:
        with self.lock:
            if self.live.pop(key, None) is not None and not self.live:
                self.unregister(self.stop_all)

    def stop_all(self) -> None:
        with self.lock:
            work = sorted(self.live.items(), key=lambda kv: (kv[1][0], kv[0]))
        for key, (_stage, stop) in work:
            try:
                stop()
            except Exception:  # noqa: BLE001, S110 - at exit, a failure to stop one is no reason to leave the rest
                pass
            self.end(key)


class Token:
    """Live background work; :meth:`end` when its owner has stopped it."""

    __slots__ = ("registry", "key")

    def __init__(self, registry: _Registry, key: int) -> None:
        self.registry, self.key = registry, key

    def end(self) -> None:
        """The work has stopped (nothing when the hook already stopped it)."""
        self.registry.end(self.key)


_REGISTRY = _Registry()


def started(stop: Callable[[], None], stage: int = READER) -> Token:
    """Register live background work: ``stop`` ends it (stops its threads and waits for them, for
    a bounded time; the hook calls it at most once), ``stage`` says when (readers first)."""
    return _REGISTRY.start(stop, stage)


def live() -> int:
    """How many pieces of background work are registered (for tests)."""
    with _REGISTRY.lock:
        return len(_REGISTRY.live)
