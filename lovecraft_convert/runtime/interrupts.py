"""Ctrl-C and SIGTERM during a run: a ``KeyboardInterrupt`` where that is safe, held where it is not.

Python raises ``KeyboardInterrupt`` between any two bytecodes of the main thread. Two places must
not be cut there:

* waiting on a process pool's futures: ``concurrent.futures.wait`` takes every future's lock one
  by one, and an exception raised while it takes them leaves them taken; the pool's manager thread
  then blocks on them forever, and so does the pool's shutdown (the run hangs instead of exiting);
* a wait on a lock another thread also takes (a queue's put or get, a future's result, a
  thread's join): an interrupt raised just after the lock is taken, before the ``with`` that
  releases it, leaves it taken for good, and the writer or reader thread on the other side, then
  this thread's own cleanup, block on it forever (seen as a rare hang of a memmap convert on
  Ctrl-C: a writer thread per column, so many puts per batch). :func:`put_while`,
  :func:`get_polled`, :func:`result` and :func:`join` wait in short held slices instead;
* the commit: between moving an old output aside and renaming the new one into place, or between
  removing a resumable run's journal and the rename, an interrupt would lose work or leave it
  un-resumable.

Inside :func:`held` a signal is only recorded; :func:`raise_pending` raises it at the next safe
point (a waiting loop calls it at least every fraction of a second); a commit finishes first.
:class:`Signals` installs the handler for a run (SIGTERM then behaves like Ctrl-C) and puts the
previous handlers back when the run ends; without it the interpreter's own SIGINT handler applies
and nothing is held.

pyarrow's own interruption (``pa.enable_signal_handlers``) is left as the application set it: it is
process-wide, pyarrow offers no way to read it back (so it could not be restored), and it is
harmless here. pyarrow installs its handler only around a few calls made in the main thread (a
whole-buffer ``pyarrow.csv.read_csv``), cancels that call on a signal and sends the signal again to
the main thread when the call returns, where :func:`_handler` raises it or holds it as for any
other signal.

Once the output is in place (:func:`committed`) the run is complete, and an interrupt can only
make a complete run look failed: from then on the handler ignores SIGINT and SIGTERM, and a
process that ends with the run (the CLI, :func:`ignore_after_commit`) keeps ignoring them after
the run's :class:`Signals` block, until it exits 0 with its summary.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_state = {"holding": 0, "pending": False, "installed": 0, "committed": False, "after_commit": False, "raised": False}


def _handler(signum, frame) -> None:
    if _state["committed"]:  # the output is complete: nothing left to interrupt
        return
    if _state["holding"]:
        _state["pending"] = True
        return
    _state["raised"] = True  # remembered for raise_lost(): Python may swallow what is raised here
    raise KeyboardInterrupt


class Signals:
    """SIGINT and SIGTERM raise ``KeyboardInterrupt`` in the main thread, or are held inside
    :func:`held`. A handler of the application's own (not Python's default: a training script's
    checkpoint on SIGTERM) is left alone, for either signal. Outside the main thread this does
    nothing."""

    def __enter__(self) -> Signals:
        self.old: dict[int, object] = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                current = signal.getsignal(sig)
                default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
                if current is not default and current is not _handler:
                    continue
                self.old[sig] = signal.signal(sig, _handler)
        except ValueError:  # not the main thread
            pass
        if self.old:
            if not _state["installed"]:
                _state["committed"] = False  # a new run
                _state["raised"] = False
            _state["installed"] += 1
        return self

    def __exit__(self, *exc) -> bool:
        keep_ignoring = _state["committed"] and _state["after_commit"]
        for sig, old in self.old.items():
            signal.signal(sig, signal.SIG_IGN if keep_ignoring else old)
        if self.old:
            _state["installed"] -= 1
            if not _state["installed"]:
                _state["pending"] = False
        return False


def committed() -> None:
    """The run's output is in place: the run is complete, and an interrupt that arrived during the
    commit (held) or arrives later is dropped (see the module's docstring). Signals reach the main
    thread only: a run in another thread marks nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    _state["committed"] = True
    _state["pending"] = False
    _state["raised"] = False


def ignore_after_commit() -> None:
    """For a process that ends when its run does (the CLI, never a library caller): once a run has
    committed its output, its :class:`Signals` block leaves SIGINT and SIGTERM ignored instead of
    restoring the handlers it found, so no signal turns the complete run into a failed exit."""
    _state["after_commit"] = True


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
    """Raise ``KeyboardInterrupt`` for an interrupt that arrived while held (outside any held block;
    in the main thread only, where signals arrive)."""
    if _state["pending"] and not _state["holding"] and threading.current_thread() is threading.main_thread():
        _state["pending"] = False
        raise KeyboardInterrupt


def raise_lost() -> None:
    """Raise ``KeyboardInterrupt`` again for an interrupt raised during this run that did not end
    it. Python cannot let an exception out of a generator's finalizer or a ``__del__``: one raised
    there (the signal landed while an abandoned reader's generator was being closed) is printed as
    ignored, and the run would go on to commit a complete output as if no Ctrl-C had come. A commit
    calls this first, so an interrupt always ends the run before its output is in place. (An
    interrupt that propagated never reaches a commit; one held is raised by :func:`raise_pending`.)"""
    if _state["raised"] and not _state["committed"] and threading.current_thread() is threading.main_thread():
        _state["raised"] = False
        raise KeyboardInterrupt


POLL = 0.1  # seconds a held wait lasts before an interrupt that arrived meanwhile is raised


def put_while(q, item, go: Callable[[], bool], poll: float = POLL) -> bool:
    """Put ``item`` on the bounded queue ``q``, waiting for room only while ``go()`` holds (the
    other side is still there): never blocks for good, never cut inside the queue's lock. False
    when it gave up."""
    import queue

    while go():
        with held():
            try:
                q.put(item, timeout=poll)
                put = True
            except queue.Full:
                put = False
        raise_pending()
        if put:
            return True
    return False


def _polled(attempt: Callable[[], object], missed: type[BaseException]):
    """``attempt()`` (a wait with a timeout, which raises ``missed`` when it ran out) repeated in
    held slices until it succeeds, an interrupt that arrived meanwhile raised between them."""
    while True:
        with held():
            try:
                value, got = attempt(), True
            except missed:
                got = False
        raise_pending()
        if got:
            return value


def get_polled(q, poll: float = POLL):
    """``q.get()``, not cut inside the queue's lock: waits in held slices of ``poll`` seconds."""
    import queue

    return _polled(lambda: q.get(timeout=poll), queue.Empty)


def result(fut, poll: float = POLL):
    """``fut.result()``, not cut inside the future's lock (its thread would block setting it)."""
    from concurrent.futures import TimeoutError as FutureTimeout

    return _polled(lambda: fut.result(timeout=poll), FutureTimeout)


def run_each(fn: Callable[[Any], object], items: list, threads: int, name: str) -> None:
    """``fn`` of every item, at most ``threads`` at once (in a pool whose threads are named
    ``name``; in this thread when one would do), waited for with :func:`result`: the first error,
    in the items' order, is raised here and the calls not yet started are cancelled."""
    if len(items) < 2 or threads <= 1:
        for x in items:
            fn(x)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix=name) as pool:
        futs = [pool.submit(fn, x) for x in items]
        try:
            for f in futs:
                result(f)
        finally:
            for f in futs:
                f.cancel()


def map_daemons(fn: Callable[[Any], object], items: list, threads: int, name: str) -> list:
    """``[fn(x) for x in items]``, at most ``threads`` at once in daemon threads named ``name``,
    waited for in held slices. The first error (in the items' order) is raised here; then, as on an
    interrupt, the calls not started are dropped and those under way are not waited for: their
    threads end with their call and, being daemons, do not hold the interpreter's exit (a pool's
    threads would: a Ctrl-C during GETs that a store holds for a minute kept the process that
    long). On success every thread has ended when this returns."""
    import itertools

    n = len(items)
    if not n:
        return []
    out: list = [None] * n
    errors: list = [None] * n
    order = itertools.count()  # (its next() is atomic: each item taken once)
    stop, finished = threading.Event(), threading.Event()
    left = [n]
    lock = threading.Lock()

    def work() -> None:
        while not stop.is_set():
            i = next(order)
            if i >= n:
                return
            try:
                out[i] = fn(items[i])
            except BaseException as e:  # noqa: BLE001 - raised by the caller
                errors[i] = e
                stop.set()
            with lock:
                left[0] -= 1
                if not left[0]:
                    finished.set()

    workers = [threading.Thread(target=work, name=f"{name}_{k}", daemon=True) for k in range(min(threads, n))]
    try:
        for t in workers:
            t.start()
        while True:
            with held():
                ended = finished.wait(POLL)
            raise_pending()
            if ended or stop.is_set():
                break
    finally:
        stop.set()
    failed = next((e for e in errors if e is not None), None)
    if failed is not None:
        raise failed
    for t in workers:
        join(t)
    return out


def join(t: threading.Thread, poll: float = POLL) -> None:
    """``t.join()`` in held slices of ``poll`` seconds."""
    while t.is_alive():
        with held():
            t.join(poll)
        raise_pending()
