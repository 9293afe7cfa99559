"""Run the ``lovecraft`` CLI of this tree, paused or signalled at one chosen moment: races between
real processes made deterministic. The test tells the moment, and creates the "go" file when the
paused process may go on.

    python paused.py ROOT MOMENT FLAG GO lovecraft-args...

MOMENT is one of:

* ``commit``: every file written, the output locked, just before the commit: FLAG is created,
  then the process waits for GO;
* ``flock``: the output's lock file opened, just before ``flock``: FLAG, then wait for GO;
* ``put-manifest-kill``: SIGKILL right after the manifest was put to the object store;
* ``after-commit-SIG`` (SIG: TERM or INT): the signal sent to itself just after the commit
  (before the run's interrupt handling ends);
* ``after-run-SIG``: the signal sent just after the library returned (before the summary line).
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import time


def _wait(flag: str, go: str) -> None:
    open(flag, "w").close()
    while not os.path.exists(go):
        time.sleep(0.01)


def _signal(name: str) -> None:
    os.kill(os.getpid(), getattr(signal, "SIG" + name))
    for _ in range(1000):  # bytecodes: the handler runs among them
        pass


def main() -> None:
    root, moment, flag, go = sys.argv[1:5]
    del sys.argv[1:5]
    sys.path.insert(0, root)
    from lovecraft_convert.engine import commit
    from lovecraft_convert.storage import output

    if moment == "commit":
        for cls in (commit.OutputDir, output.RemoteOutputDir):
            real_commit = cls.commit

            def paused(self, *args, _real=real_commit, **kwargs):
                _wait(flag, go)
                return _real(self, *args, **kwargs)

            cls.commit = paused
    elif moment == "flock":
        real_flock = fcntl.flock
        done = []

        def flock(fd, op):
            if not done and os.readlink(f"/proc/self/fd/{fd}").endswith(".out.lock"):
                done.append(fd)
                _wait(flag, go)
            return real_flock(fd, op)

        fcntl.flock = flock
    elif moment == "put-manifest-kill":
        from lovecraft_convert.storage.s3 import S3Store

        real_put = S3Store.put

        def put(self, key, data, **kwargs):
            real_put(self, key, data, **kwargs)
            if key.endswith("_manifest.json"):
                os.kill(os.getpid(), signal.SIGKILL)

        S3Store.put = put
    elif moment.startswith("after-commit-"):
        real = commit.OutputDir.commit

        def then_signal(self, *args, **kwargs):
            real(self, *args, **kwargs)
            _signal(moment.rsplit("-", 1)[1])

        commit.OutputDir.commit = then_signal
    elif moment.startswith("after-run-"):
        import importlib

        command = sys.argv[1]
        job = importlib.import_module(f"lovecraft_convert.jobs.{command}")
        real_job = getattr(job, command)

        def run_then_signal(*args, **kwargs):
            m = real_job(*args, **kwargs)
            _signal(moment.rsplit("-", 1)[1])
            return m

        setattr(job, command, run_then_signal)
    else:
        raise SystemExit(f"unknown moment {moment}")
    from lovecraft_convert.cli import main as cli_main

    sys.argv = ["lovecraft", *sys.argv[1:]]
    cli_main()


if __name__ == "__main__":
    main()
