"""Executors: what runs the units of a job.

A unit is a pure function of picklable arguments that leaves finished files in the work directory
and returns a small JSON fragment; an executor maps units to fragments. The driver alone keeps
the journal and writes the manifest, so any executor that can run a Python function where the
work directory is reachable will do:

* :class:`LocalExecutor`: in-process for one worker, else a pool of spawned processes (each
  pinned to one core for pyarrow, dying with its parent). In-process, nothing process-wide is
  changed (pyarrow's thread counts stay the application's).

The interface is :meth:`map` (results as units finish, the first error stops everything once the
running units are done), :meth:`map_ordered` (results in order) and :meth:`close`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ..runtime.interrupts import held, raise_pending


def _worker_init(parent: int | None = None, setup: tuple | None = None) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # die with the parent: a killed run must not leave workers writing into its directory
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if parent is not None and os.getppid() != parent:  # it died before the line above: follow it
        os._exit(1)
    if setup is not None:  # what the run registered in the parent (plugin formats and input kinds)
        fn, arg = setup
        fn(arg)
    try:
        import pyarrow as pa

        pa.set_cpu_count(1)
        pa.set_io_thread_count(1)
        # hand freed buffers back at once: a caching allocator in every worker adds up
        pa.set_memory_pool(pa.system_memory_pool())
    except ImportError:
        pass


def leave_if_rerun_by_spawn() -> None:
    """In a worker process running the main script again as it starts (``spawn``: a script that
    calls a job at its top level, not under ``if __name__ == "__main__":``), exit at once and
    quietly instead of running the job a second time (it would find its own output locked, say so
    with a traceback, and die anyway): the parent sees its workers die as they start and says why
    (:func:`_result`). ``_inheriting`` is the flag multiprocessing's own check of this case reads."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise SystemExit(1)


def check_spawnable(workers: int) -> None:
    """Refuse (OptionsError) to start worker processes that could not start.

    Workers are started with ``spawn``: each runs the main script again (as ``__mp_main__``) before
    it can run a unit. A script fed on stdin (``python - < script.py``) is named ``<stdin>`` and
    cannot be run again, so every worker would die at start, which the pool could only report as a
    worker that died. Scripts run by module name (``python -m``), by ``python -c``, in the REPL
    or a notebook have nothing to run again and start fine."""
    import sys

    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) is not None:
        return  # re-imported by module name
    path = getattr(main, "__file__", None)
    if path is None:
        return
    from multiprocessing.process import ORIGINAL_DIR

    full = path if os.path.isabs(path) or ORIGINAL_DIR is None else os.path.join(ORIGINAL_DIR, path)
    if os.path.isfile(full):
        return
    from ..errors import OptionsError

    said = "read from stdin (`python -`)" if path == "<stdin>" else "not a file"
    raise OptionsError(
        f"workers={workers} starts worker processes with spawn, each of which runs the main script again, "
        f"and the main script {path!r} is {said}: they could not start",
        hint='run the script from a file, its calls under `if __name__ == "__main__":`, or pass workers=1',
    )


class LocalExecutor:
    """Runs units in-process (``workers == 1``) or in a pool of spawned worker processes."""

    name = "local"

    def __init__(self, workers: int, setup: tuple | None = None) -> None:
        self.workers = workers
        self.pool = None
        self.started: list = []
        if workers > 1:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            check_spawnable(workers)
            # the pool fixes the process's default start method as it starts (the standard library's
            # doing, even with a context of its own): put back to unset at close, or a caller's later
            # multiprocessing.set_start_method("spawn") raised "context has already been set"
            self._method = mp.get_start_method(allow_none=True)
            self.pool = ProcessPoolExecutor(
                workers, mp_context=mp.get_context("spawn"), initializer=_worker_init, initargs=(os.getpid(), setup)
            )
            # start the workers now: they import while the main process plans
            self.started = [self.pool.submit(int) for _ in range(workers)]
        # in-process (one worker) the units read with threads=False (their readers' own option) and
        # pyarrow's process-wide thread counts are left alone: another thread of the application may
        # be using pyarrow at the same time

    def map_ordered(self, fn, calls: list[tuple]) -> list:
        """Results in the order of ``calls``."""
        if self.pool is None:
            return [fn(*args) for args in calls]
        if not calls:
            return []
        with held():
            futures = [self.pool.submit(_trimmed, fn, *args) for args in calls]
        return [_result(f, self.started) for f in futures]

    def map(self, fn, calls: list[tuple]) -> Iterator[dict]:
        """Yield results as units finish (any order). The first error stops everything, once the
        units already running have finished: nothing writes into the work directory while the
        caller cleans it or starts again (a type-change restart empties the spill)."""
        if self.pool is None:
            for args in calls:
                yield fn(*args)
            return
        from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED

        with held():
            pending = {self.pool.submit(_trimmed, fn, *args) for args in calls}
        raise_pending()
        try:
            while pending:
                done, pending = _wait(pending, FIRST_COMPLETED)
                for fut in done:
                    yield _result(fut, self.started)
        except Exception:
            _wait([f for f in pending if not f.cancel()], ALL_COMPLETED)
            raise
        finally:
            with held():
                for fut in pending:
                    fut.cancel()

    def close(self, kill: bool = False) -> None:
        """Stop the workers: let them finish, or with ``kill`` (an error or an interrupt) kill them
        at once. Not cut by another interrupt (a pool shut down halfway would block the exit)."""
        if self.pool is not None:
            with held():
                if kill:
                    for p in list((getattr(self.pool, "_processes", None) or {}).values()):
                        p.kill()
                self.pool.shutdown(wait=True, cancel_futures=True)
                self.pool = None
                if self._method is None:
                    import multiprocessing as mp

                    mp.set_start_method(None, force=True)  # (None with force: unset, as it was)


def _trimmed(fn, *args):
    """Run one unit in a worker, then hand the memory it freed back to the system.

    glibc keeps freed heap pages in the process (the encoder's threads each have an arena), so a
    worker would hold the high-water mark of every unit it ran while the next one adds its own
    (measured: workers of a 1 GiB ``shard --to megatron`` at 94 against 107 MiB)."""
    from ..util import trim_heap

    try:
        return fn(*args)
    finally:
        trim_heap()


def _result(fut, started: list | None = None):
    """A unit's result; a worker process that died (killed for memory, or by a signal) is one line.
    ``started``: the calls that started the workers; when none of them ran, the workers died as
    they started, most often a script that calls the job at its top level (see
    :func:`leave_if_rerun_by_spawn`)."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        return fut.result()
    except BrokenProcessPool:
        from ..errors import OutputError

        if started and not any(_ran(f) for f in started):
            raise OutputError(
                "the worker processes died as they started: each runs the main script again (multiprocessing's "
                "spawn), and a script that calls lovecraft_convert at its top level would run the job again there",
                hint='put the script\'s calls under `if __name__ == "__main__":`, or pass workers=1',
            ) from None
        raise OutputError(
            "a worker process died while running a unit (killed by the system, most often for memory)",
            hint="lower --max-memory or --workers and run it again",
        ) from None


def _ran(fut) -> bool:
    try:
        return fut.done() and fut.exception(timeout=0) is None
    except BaseException:  # noqa: BLE001 - cancelled, or broken: it did not run
        return False


def _wait(fs, return_when: str):
    """``concurrent.futures.wait`` with interrupts held (it takes every future's lock: an interrupt
    raised while it holds them would leave the pool's manager thread blocked on them forever), in
    slices of a fifth of a second between which an interrupt is raised."""
    from concurrent.futures import FIRST_COMPLETED, wait

    while True:
        with held():
            done, not_done = wait(fs, timeout=0.2, return_when=return_when)
        raise_pending()
        if not not_done or (done and return_when == FIRST_COMPLETED):
            return done, not_done


ENGINES = ("local", "ray")


def make_executor(
    workers: int,
    setup: tuple | None = None,
    *,
    engine: str = "local",
    address: str | None = None,
    memory: int = 64 << 20,
    work: str = "",
    visible: list[str] | None = None,
):
    """The executor of ``engine``: ``workers`` local processes, or Ray tasks (see
    :mod:`.ray_executor`) of ``memory`` bytes each; ``setup``: ``(fn, arg)``, called as ``fn(arg)`` in
    every worker before its first unit (the jobs make every worker know the formats and input kinds
    registered at run time: :func:`lovecraft_convert.formats.worker_setup`). ``work`` (the work
    directory, "" when units need none) and ``visible`` (the folders of local inputs) must be seen by
    every Ray node."""
    if engine == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(workers, setup, address=address, memory=memory, work=work, visible=visible)
    return LocalExecutor(workers, setup)
