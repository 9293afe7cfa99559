from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import signal
import subprocess
from dataclasses import dataclass

import pytest
import zstandard
from click.testing import CliRunner

from lovecraft_convert.cli import cli


def pytest_configure(config: pytest.Config) -> None:
    """A shell's background job (``make test &``, nohup) starts with SIGINT ignored, which the
    CLI rightly leaves alone (runtime/interrupts.py); the tests that send SIGINT, in-process and to
    the commands they start, need it as an interactive shell leaves it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SHARED = os.path.abspath(os.path.join(ROOT, "..", "shared"))
VECTORS = os.path.join(SHARED, "vectors")
MEMCAP = os.path.join(SHARED, "tools", "memcap")
# For subprocesses that run the ``lovecraft`` console script: this tree's package first on the path.
# The script imports whatever the environment installed (another checkout, when several share a
# virtualenv), so without this a subprocess could test other code than the tests' own.
SUBPROCESS_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str


def lovecraft(*args: str, input: bytes | None = None) -> Run:
    """Run the CLI in-process; stderr kept apart from stdout."""
    r = CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)
    return Run(r.exit_code, r.stdout, r.stderr)


def compress(data: bytes, kind: str | None) -> bytes:
    if kind is None:
        return data
    if kind == "gz":
        return gzip.compress(data, mtime=0)
    if kind == "bz2":
        return bz2.compress(data)
    if kind == "xz":
        return lzma.compress(data)
    if kind == "zst":
        return zstandard.ZstdCompressor(write_checksum=True).compress(data)
    raise ValueError(kind)


def write(path, data: bytes, kind: str | None = None) -> str:
    p = str(path) + (f".{kind}" if kind else "")
    with open(p, "wb") as f:
        f.write(compress(data, kind))
    return p


def memcapped(memcap: str, mib: int, cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, int | None]:
    """``memcap MIB cmd...`` and the peak MiB it reports (None when it reports none). memcap names
    its cgroup after its PID: one left behind by an earlier run (its rmdir failed while a process
    was still leaving) makes a later memcap of the same PID exit 3, so that is tried again."""
    for _ in range(5):
        r = subprocess.run([memcap, str(mib), *cmd], capture_output=True, text=True, **kw)
        if not (r.returncode == 3 and "cannot make a memory cgroup" in r.stderr):
            break
    m = re.search(r"memcap: limit \d+ MiB, peak (\d+) MiB, rc (\d+)", r.stderr)
    return r, int(m.group(1)) if m else None


def require_memcap() -> str:
    """The path of ``memcap``, or the test skipped with the reason: not found beside the checkout
    (../shared/tools), or unable to make a memory cgroup here."""
    if not os.access(MEMCAP, os.X_OK):
        pytest.skip(f"{MEMCAP} not found (../shared/tools/memcap)")
    r, _ = memcapped(MEMCAP, 64, ["true"])
    if r.returncode != 0:
        pytest.skip(f"memcap does not work here (rc {r.returncode}): {r.stderr.strip()}")
    return MEMCAP


def sigkilled_at(cmd: list[str], journal: str, marker: bytes, timeout: float = 120.0) -> bool:
    """Start ``cmd`` (a resumable run, in a session of its own) and SIGKILL its process group as
    soon as its ``journal`` holds ``marker`` (e.g. ``b'"phase": "decide"'``); False when the run
    finished first (the caller skips)."""
    import time

    p = subprocess.Popen(cmd, env=SUBPROCESS_ENV, start_new_session=True, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and p.poll() is None:
            try:
                with open(journal, "rb") as f:
                    if marker in f.read():
                        os.killpg(p.pid, signal.SIGKILL)
                        return True
            except FileNotFoundError:
                pass
            time.sleep(0.002)
        return False
    finally:
        p.wait()


def leftovers(directory) -> list[str]:
    """Anything a failed run may have left beside its output (temporaries, locks)."""
    return sorted(n for n in os.listdir(directory) if n.startswith("."))


@pytest.fixture
def vectors() -> str:
    if not os.path.isdir(VECTORS):
        pytest.skip(f"../shared/vectors not found at {VECTORS}")
    return VECTORS


def interrupted_after_first_phase(run, out: str, attempts: int = 5) -> str:
    """Run ``run()`` (a resumable job writing ``out`` in this process, with one worker) and interrupt
    it (SIGINT) as soon as its journal holds a unit of its first phase; returns the work directory
    it keeps for ``--resume``.

    A trial the run finishes anyway is made again, from scratch (at most ``attempts`` times): the
    signal can land after the commit, where a complete run ignores it, or after the run has put
    Python's own handler back, where it raises ``KeyboardInterrupt`` here with the output complete.
    (One that lands inside a generator's finalizer, where Python reports the ``KeyboardInterrupt``
    as ignored and goes on, ends the run at its commit: ``runtime.interrupts.raise_lost``.)"""
    import shutil
    import threading
    import time

    from lovecraft_convert.errors import Interrupted

    parent, name = os.path.split(os.path.abspath(out))
    work = os.path.join(parent, f".{name}.partial")
    journal = os.path.join(work, "journal.jsonl")
    for _ in range(attempts):
        stop = threading.Event()

        def watch(stop=stop) -> None:
            while not stop.is_set():
                try:
                    with open(journal) as f:
                        if any('"phase": 1' in line for line in f):
                            os.kill(os.getpid(), signal.SIGINT)
                            return
                except FileNotFoundError:
                    pass
                time.sleep(0.001)

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        finished = False
        try:
            try:
                run()
                finished = True
            except Interrupted:
                return work
            finally:
                stop.set()
                t.join()
            time.sleep(0.05)  # a signal sent just as the run returned is met here, not later
        except KeyboardInterrupt:
            if not finished and not os.path.exists(os.path.join(out, "_manifest.json")):
                raise
        shutil.rmtree(out, ignore_errors=True)  # finished: not the trial wanted; again
        shutil.rmtree(work, ignore_errors=True)
    pytest.fail(f"the run finished {attempts} times despite a SIGINT after its first journalled unit")
