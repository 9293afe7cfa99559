"""Ctrl-C and SIGTERM during a run: a ``KeyboardInterrupt`` where that is safe, held where it is not.

Python raises ``KeyboardInterrupt`` between any two bytecodes of the main thread. Two places must
not be cut there:

* waiting on a process pool's futures: ``concurrent.futures.wait`` takes every future's lock one
  by one, and an exception raised while it takes them leaves them taken; the pool's manager thread
  then blocks on them forever, and so does the pool's shutdown (the run hangs instead of exiting);
* the commit: between moving an old output aside and renaming the new one into place, or between
  removing a resumable run's journal and the rename, an interrupt would lose work or leave it
  un-resumable.

Inside :func:`held` a signal is only recorded; :func:`raise_pending` raises it at the next safe
point (a waiting loop calls it at least every fraction of a second); a commit finishes first.
:class:`Signals` installs the handler for a run (SIGTERM then behaves like Ctrl-C; pyarrow's own
handlers are turned off); without it the interpreter's own SIGINT handler applies and nothing is held.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_state = {"holding": 0, "pending": False, "installed": 0}


def _handler(signum, frame) -> None:
    if _state["holding"]:
        _state["pending"] = True
        return
    raise KeyboardInterrupt


class Signals:
    """SIGINT and SIGTERM raise ``KeyboardInterrupt`` in the main thread, or are held inside
    :func:`held`. A SIGINT handler of the application's own (not Python's default) is left alone.
    Outside the main thread this does nothing."""

    def __enter__(self) -> Signals:
        self.old: dict[int, object] = {}
        try:  # pyarrow would otherwise catch SIGINT/SIGTERM during its reads and re-send them later
            import pyarrow as pa

            pa.enable_signal_handlers(False)
        except ImportError:
            pass
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                current = signal.getsignal(sig)
                if sig == signal.SIGINT and current is not signal.default_int_handler and current is not _handler:
                    continue
                self.old[sig] = signal.signal(sig, _handler)
        except ValueError:  # not the main thread
            pass
        if self.old:
            _state["installed"] += 1
        return self

    def __exit__(self, *exc) -> bool:
        for sig, old in self.old.items():
            signal.signal(sig, old)
        if self.old:
            _state["installed"] -= 1
            if not _state["installed"]:
                _state["pending"] = False
        return False


@contextmanager
def held() -> Iterator[None]:
    """Run the block without being cut by an interrupt: one that arrives is recorded and raised by
    the next :func:`raise_pending` outside every ``held`` block. (Signals reach the main thread
    only: elsewhere this holds nothing.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["holding"] += 1
    try:
        yield
    finally:
        _state["holding"] -= 1


def pending() -> bool:
    """Did an interrupt arrive while held (and was not raised yet)?"""
    return bool(_state["pending"])


def raise_pending() -> None:
    """Raise ``KeyboardInterrupt`` for an interrupt that arrived while held (outside any held block)."""
    if _state["pending"] and not _state["holding"]:
        _state["pending"] = False
        raise KeyboardInterrupt
