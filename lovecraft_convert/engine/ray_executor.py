"""The Ray executor: the same units of work as the local one, as Ray tasks on a cluster.

Each unit is a task with one CPU and the memory one unit may use (a quarter of ``--max-memory``),
so Ray places as many per node as its CPUs and memory allow. The driver (this process) alone keeps
the journal and writes the manifest: tasks only leave finished files (in the work directory, or on
the store when the output is there) and return their JSON fragment, so a task that Ray re-runs
(its worker process or its node died) writes the same files again and the output is the same. A unit that fails on bad input
raises the library's own error, which surfaces here unchanged (one line, the same exit code as
locally); the tasks still queued are cancelled and the ones running are let finish, so nothing
writes into the work directory while the driver cleans it. Ctrl-C ends the run's Ray job (the
driver disconnects) and Ray kills its workers with it.

A run writing to an object store needs nothing else: its units share nothing with the driver but
the store (engine/units.py). A local output and its work directory must be on storage every node
reaches (a shared file system), and so must local inputs; a task that cannot see them says so.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ..errors import LovecraftError, OptionsError, OutputError

RETRIES = 3  # a task whose worker process dies is run again this many times

_disconnecting = None  # the thread ending the last clean run's Ray connection (see RayExecutor.close)


def _await_disconnect() -> None:
    global _disconnecting
    if _disconnecting is not None:
        _disconnecting.join()
        _disconnecting = None


_seen: set[str] = set()  # folders this worker process has found visible


def _check_visible(work: str, visible: list[str]) -> None:
    """Refuse, in one line, to run a unit on a node that cannot see the work directory (a local
    output's) or the folder of a local input."""
    for path, what in [(work, "the work directory")] + [(v, "the folder of an input") for v in visible]:
        if not path or path in _seen:
            continue
        if not os.path.isdir(path):
            import socket

            hint = (
                "a local output (and its work directory) must be on storage every node reaches, e.g. a shared "
                "file system; or write to an object store (s3://, gs://), which needs none"
                if path == work
                else "put the inputs on an object store (s3://, gs://) or on a file system every node mounts "
                "at the same path"
            )
            raise OutputError(f"{path}: {what} is not visible on Ray node {socket.gethostname()}", hint=hint)
        _seen.add(path)


def _unit(fn, args: tuple, setup: tuple | None, work: str, visible: list[str] | None = None):
    """Run one unit in a Ray worker process (``setup``: what the driver registered, made known here
    too: see :func:`~.executors.make_executor`)."""
    if setup is not None:
        setup_fn, arg = setup
        setup_fn(arg)
    _check_visible(work, visible or [])
    try:
        import pyarrow as pa
    except ImportError:
        return _where(fn(*args))
    # one unit, one core (Ray runs as many units as there are cores), freed buffers handed back at
    # once; put back afterwards: the worker process is Ray's, and runs other tasks after this one
    cpus, pool = pa.cpu_count(), pa.default_memory_pool()
    pa.set_cpu_count(1)
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        return _where(fn(*args))
    finally:
        pa.set_cpu_count(cpus)
        pa.set_memory_pool(pool)


def _where(res):
    """A unit's fragment with the Ray node it ran on in its ``timing`` (see engine/units.py)."""
    if isinstance(res, dict) and isinstance(res.get("timing"), dict):
        import ray

        res["timing"]["node"] = ray.get_runtime_context().get_node_id()
    return res


class RayExecutor:
    """Runs units as Ray tasks on the cluster at ``address`` (``RAY_ADDRESS`` when None), or on a
    local Ray started for the run (with ``workers`` CPUs) and stopped after it."""

    name = "ray"

    def __init__(
        self,
        workers: int,
        setup: tuple | None = None,
        *,
        address: str | None,
        memory: int,
        work: str = "",
        visible: list[str] | None = None,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise OptionsError(
                "--engine ray needs the ray package", hint="pip install 'lovecraft-convert[ray]' (or ray)"
            ) from None
        _await_disconnect()  # a previous run in this process still disconnecting: let it finish
        self.ray = ray
        self.setup = setup
        self.work = work
        self.visible = list(visible or [])
        self.memory = memory
        self.started = False  # a local Ray was started for this run
        self.connected = False  # ray.init was called here (not by the program that uses us)
        address = address or os.environ.get("RAY_ADDRESS")
        if not ray.is_initialized():
            import logging

            logging.getLogger("ray").setLevel(logging.ERROR)  # stderr is for our one-line errors
            quiet = {"log_to_driver": False, "include_dashboard": False, "logging_level": logging.ERROR}
            try:
                if address:
                    ray.init(address=address, **quiet)
                else:
                    ray.init(num_cpus=workers, **quiet)
                    self.started = True
                self.connected = True
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise OutputError(
                    f"cannot reach the Ray cluster at {address or 'a new local Ray'} ({' '.join(str(e).split())[:200]})",
                    hint="start it (`ray start --head`), check --ray-address / RAY_ADDRESS (a cluster with token "
                    "authentication also needs RAY_AUTH_MODE=token and its token), or use --engine local",
                ) from None
        self.remote = ray.remote(_unit).options(
            num_cpus=1,
            memory=max(1 << 20, int(memory)),
            max_retries=RETRIES,
            retry_exceptions=False,
            scheduling_strategy="SPREAD",
        )
        self.pending: list = []
        self.cancelled = False  # tasks were cancelled (an error or an interrupt)

    def _submit(self, fn, calls: list[tuple]) -> list:
        refs = [self.remote.remote(fn, args, self.setup, self.work, self.visible) for args in calls]
        self.pending.extend(refs)
        return refs

    def _get(self, ref):
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as e:
            cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else None
            if isinstance(cause, LovecraftError):
                raise cause from None  # the library's own error: the same line as locally
            raise
        finally:
            if ref in self.pending:
                self.pending.remove(ref)

    def map_ordered(self, fn, calls: list[tuple]) -> list:
        """Results in the order of ``calls``."""
        refs = self._submit(fn, calls)
        try:
            return [self._get(r) for r in refs]
        except KeyboardInterrupt:
            raise  # the driver ends the tasks (close(kill=True))
        except BaseException:
            self._stop(refs)
            raise

    def map(self, fn, calls: list[tuple]) -> Iterator[dict]:
        """Yield results as units finish (any order); the first error cancels what is queued and
        waits for what is running, then surfaces."""
        refs = self._submit(fn, calls)
        left = list(refs)
        try:
            while left:
                done, left = self.ray.wait(left, num_returns=1)
                for r in done:
                    yield self._get(r)
        except KeyboardInterrupt:
            raise  # the driver ends the tasks (close(kill=True))
        except BaseException:
            self._stop(left)
            raise

    def _stop(self, refs: list, force: bool = False) -> None:
        """Cancel queued tasks; wait for running ones (or kill them with ``force``). Not used on
        Ctrl-C in a Ray session of ours: see :meth:`close`."""
        self.cancelled = self.cancelled or bool(refs)
        for r in refs:
            try:
                self.ray.cancel(r, force=force)
            except Exception:  # noqa: BLE001 - already finished or gone
                pass
        if not force and refs:
            try:
                self.ray.wait(refs, num_returns=len(refs), timeout=600)
            except Exception:  # noqa: BLE001 - cancelled tasks raise when waited on
                pass
        for r in refs:
            if r in self.pending:
                self.pending.remove(r)

    def close(self, kill: bool = False) -> None:
        if kill and self.pending and self.connected:
            # Ctrl-C or an error outside the tasks: no cancel (a cancel racing a task's reply can
            # make Ray's core worker abort this process, "Tried to complete task that was not
            # pending"); disconnecting ends the job, and Ray kills its workers with it. (A Ray
            # session of the program using us is not ours to end: its tasks are cancelled below.)
            self.pending = []
            self.ray.shutdown()
            self.started = self.connected = False
            return
        clean = not kill and not self.pending and not self.cancelled
        if self.pending:
            self._stop(list(self.pending), force=kill)
        if self.started:
            self.ray.shutdown()  # stops the Ray processes started for the run
            self.started = self.connected = False
        elif self.connected and clean:
            # Disconnect now, in a thread: Ray's core worker spends a quarter of a second on it
            # (flushing task events), which the driver's commit overlaps; the interpreter waits
            # for the thread before it exits. Left to Ray's exit hook, the same takes 0.9 s.
            # Not after cancelling tasks: Ray's core worker can abort on the replies of cancelled
            # tasks that arrive while it shuts down.
            import threading

            global _disconnecting
            _disconnecting = threading.Thread(target=self.ray.shutdown, name="lovecraft-ray-disconnect")
            _disconnecting.start()
            self.connected = False
