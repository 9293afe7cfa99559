"""The output's lock cannot be lost, and a run that finds the output committed refuses (issue 38,
point 3); a run whose output is committed exits 0 whatever signal comes after (point 8).

The races are made deterministic with real processes paused at the moment that matters
(tests/engine/paused.py): the test decides when each may go on."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, SUBPROCESS_ENV, leftovers
from tests.readback import manifest

PAUSED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "paused.py")


def _csv(path, rows: int) -> str:
    with open(path, "w") as f:
        f.write("a,b\n" + "".join(f"{i},{i % 7}\n" for i in range(rows)))
    return str(path)


def _start(moment: str, flag, go, *args: str, env=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, PAUSED, ROOT, moment, str(flag), str(go), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or SUBPROCESS_ENV,
    )


def _wait_for(path, proc: subprocess.Popen, timeout: float = 60) -> None:
    t0 = time.time()
    while not os.path.exists(path):
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {os.path.basename(str(path))}: {proc.communicate()}")
        if time.time() - t0 > timeout:
            proc.kill()
            pytest.fail(f"no {path} after {timeout} s")
        time.sleep(0.01)


def test_a_run_that_locks_just_after_another_committed_refuses(tmp_path):
    """Run A holds the lock, its files written; run B, started then, finds no output yet and opens
    the lock file; A commits and removes the lock file; only then does B's ``flock`` run. B used to
    get that lock (on the removed file), then commit over A's finished output, both exiting 0. B
    must find the output A committed and refuse with one line, A's output untouched."""
    out = tmp_path / "out"
    a = _start("commit", tmp_path / "a.paused", tmp_path / "a.go", "convert", _csv(tmp_path / "a.csv", 3), "-o", str(out), "--to", "parquet", "-q")  # fmt: skip
    _wait_for(tmp_path / "a.paused", a)
    b = _start("flock", tmp_path / "b.paused", tmp_path / "b.go", "convert", _csv(tmp_path / "b.csv", 5), "-o", str(out), "--to", "parquet", "-q")  # fmt: skip
    _wait_for(tmp_path / "b.paused", b)
    (tmp_path / "a.go").touch()
    assert a.communicate(timeout=60) == ("", "") and a.returncode == 0
    (tmp_path / "b.go").touch()
    _, err = b.communicate(timeout=60)
    assert (b.returncode, err) == (
        1,
        f"Error: {out}: output already exists; pass --overwrite to replace it or choose another path\n",
    )
    assert manifest(str(out))["rows"] == 3  # A's
    assert leftovers(tmp_path) == []


def test_a_lock_taken_on_a_removed_lock_file_is_not_kept(tmp_path, monkeypatch):
    """The lock itself: B opens the lock file, A finishes (removing it) before B's ``flock``. B must
    not keep a lock on the removed file while a third run C locks the new one: C is refused as
    long as B holds the output."""
    from lovecraft_convert.engine.commit import OutputDir
    from lovecraft_convert.errors import OutputError

    out = str(tmp_path / "out")
    a = OutputDir(out).__enter__()
    real = fcntl.flock
    finished = []

    def flock(fd, op):
        if not finished:
            finished.append(fd)
            a.__exit__(None, None, None)  # A is done: the lock file is removed and unlocked
        return real(fd, op)

    with monkeypatch.context() as m:
        m.setattr(fcntl, "flock", flock)
        b = OutputDir(out).__enter__()
    assert finished
    try:
        with pytest.raises(OutputError) as e:
            OutputDir(out).__enter__()
        assert e.value.one_line() == (
            f"{out}: another lovecraft run is writing this output; wait for it or choose another path"
        )
    finally:
        b.__exit__(None, None, None)
    assert leftovers(tmp_path) == []


SUMMARY = {
    "convert": (["--to", "parquet"], "wrote 300 rows to {out} (parquet, 1 file, "),
    "shard": (
        ["--to", "parquet", "--num-shards", "2", "--workers", "1"],
        "wrote 300 rows to {out} (parquet, 2 files, ",
    ),
}


@pytest.mark.parametrize("sig", ["TERM", "INT"])
@pytest.mark.parametrize("moment", ["after-commit", "after-run"])
@pytest.mark.parametrize("command", sorted(SUMMARY))
def test_a_signal_after_the_commit_leaves_a_complete_run(tmp_path, command, moment, sig):
    """SIGTERM or SIGINT just after the output was put in place (still inside the run), or just
    after the run returned (before the summary line): the output is complete, so the run says so
    and exits 0. It used to exit 143 (killed by SIGTERM) or 130 ("interrupted") without its line."""
    out = tmp_path / "out"
    args, line = SUMMARY[command]
    p = _start(f"{moment}-{sig}", tmp_path / "f", tmp_path / "g", command, _csv(tmp_path / "in.csv", 300), "-o", str(out), *args)  # fmt: skip
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0 and err.startswith(line.format(out=out)) and err.count("\n") == 1, (p.returncode, err)
    assert manifest(str(out))["rows"] == 300
    from lovecraft_convert import verify

    assert verify(str(out)).lines() == [] and leftovers(tmp_path) == []
