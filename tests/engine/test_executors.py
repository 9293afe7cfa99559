"""What the engines say when a unit cannot run: without Ray, without a shared work directory (no cluster needed;
tests/engine/test_ray.py runs the real thing), or when a local worker process is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from lovecraft_convert.engine.ray_executor import _unit
from lovecraft_convert.errors import OutputError
from tests.conftest import lovecraft, write


def test_a_worker_that_cannot_see_the_work_directory_says_so(tmp_path):
    missing = str(tmp_path / "not-shared")
    with pytest.raises(OutputError) as e:
        _unit(print, ("never",), None, missing)
    assert e.value.one_line().startswith(f"{missing}: the work directory is not visible on Ray node ")
    assert e.value.one_line().endswith(
        "; a local output (and its work directory) must be on storage every node reaches, e.g. a shared file "
        "system; or write to an object store (s3://, gs://), which needs none"
    )


def test_a_worker_that_cannot_see_a_local_input_says_so(tmp_path):
    missing = str(tmp_path / "inputs-not-shared")
    with pytest.raises(OutputError) as e:
        _unit(print, ("never",), None, "", [missing])
    assert e.value.one_line().startswith(f"{missing}: the folder of an input is not visible on Ray node ")
    assert e.value.one_line().endswith(
        "; put the inputs on an object store (s3://, gs://) or on a file system every node mounts at the same path"
    )


def test_engine_ray_without_ray_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed
    src = write(tmp_path / "d.csv", b"a\n1\n2\n")
    r = lovecraft("shard", src, "-o", str(tmp_path / "o"), "--to", "parquet", "--num-shards", "2", "--engine", "ray")
    assert (r.exit_code, r.stderr) == (
        2,
        "Error: --engine ray needs the ray package; pip install 'lovecraft-convert[ray]' (or ray)\n",
    )
    assert not (tmp_path / "o").exists()


def test_ray_address_needs_the_ray_engine(tmp_path):
    src = write(tmp_path / "d.csv", b"a\n1\n2\n")
    r = lovecraft(
        "shard", src, "-o", str(tmp_path / "o"), "--to", "parquet", "--num-shards", "2", "--ray-address", "x:1"
    )
    assert (r.exit_code, r.stderr) == (2, "Error: --ray-address applies to --engine ray\n")


def _die(i: int) -> dict:
    if i == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer does
    return {"i": i}


@pytest.mark.parametrize("ordered", [False, True])
def test_a_worker_killed_mid_unit_is_one_line(ordered):
    from lovecraft_convert.engine.executors import LocalExecutor

    ex = LocalExecutor(2)
    try:
        with pytest.raises(OutputError) as e:
            calls = [(i,) for i in range(4)]
            ex.map_ordered(_die, calls) if ordered else list(ex.map(_die, calls))
        assert e.value.one_line() == (
            "a worker process died while running a unit (killed by the system, most often for memory); "
            "lower max_memory or workers and run it again"
        )  # a Python caller's spelling (the CLI's: --max-memory, --workers)
    finally:
        ex.close(kill=True)


STDIN_SCRIPT = """
import sys
import lovecraft_convert as lc
from lovecraft_convert.errors import LovecraftError

try:
    lc.bucket([{src!r}], {out!r}, to="memmap", num_buckets=2, workers=2, progress=False)
except LovecraftError as e:
    print(type(e).__name__, e.one_line())
    sys.exit(e.exit_code)
print("written")
"""


def test_workers_from_a_script_on_stdin_say_why_they_cannot_start(tmp_path):
    """``python - < script.py`` with ``workers=2``: spawned workers run the main script again and
    ``<stdin>`` cannot be; the run says so (it said a worker died, most often for memory) and
    leaves nothing behind. The same script from a file, under a ``__main__`` guard, runs."""
    from tests.conftest import SUBPROCESS_ENV, leftovers

    src = write(tmp_path / "seq.txt", b"".join(b"a" * (i % 17) + b" b\n" for i in range(2000)))
    out = str(tmp_path / "out")
    script = STDIN_SCRIPT.format(src=src, out=out)
    r = subprocess.run(
        [sys.executable, "-"], input=script, capture_output=True, text=True, env=SUBPROCESS_ENV, cwd=tmp_path
    )
    assert (r.returncode, r.stdout) == (
        2,
        "OptionsError workers=2 starts worker processes with spawn, each of which runs the main script again, "
        "and the main script '<stdin>' is read from stdin (`python -`): they could not start; run the script "
        'from a file, its calls under `if __name__ == "__main__":`, or pass workers=1\n',
    ), r.stderr[-2000:]
    assert not os.path.exists(out) and leftovers(tmp_path) == []
    guarded = tmp_path / "script.py"
    guarded.write_text('if __name__ == "__main__":\n' + "".join(f"    {line}\n" for line in script.splitlines()))
    r = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True, env=SUBPROCESS_ENV, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "written\n"), r.stderr[-2000:]


UNGUARDED = """
import sys
import lovecraft_convert as lc
from lovecraft_convert.errors import LovecraftError

print("top", flush=True)
try:
    m = lc.shard([{src!r}], {out!r}, to="tfrecord", num_shards=2, workers=2, progress=False)
except LovecraftError as e:
    print(type(e).__name__, e.one_line())
    sys.exit(e.exit_code)
print("written", m["rows"])
"""


def test_a_script_that_calls_a_job_at_its_top_level_is_told_to_guard_it(tmp_path):
    """The docs' ``lc.shard(...)`` in a script without a ``__main__`` guard: each spawned worker
    runs the script again. The workers now leave at once, quietly (they ran the job a second
    time, found the output locked and printed a traceback each), and the run says why in one
    line (it said a worker died, most often for memory), leaving nothing behind; guarded, it runs."""
    from tests.conftest import SUBPROCESS_ENV, leftovers

    src = write(tmp_path / "t.csv", b"a,b\n" + b"".join(b"%d,%d\n" % (i, i * 2) for i in range(3000)))
    out = str(tmp_path / "out")
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED.format(src=src, out=out))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=SUBPROCESS_ENV, cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (
        1,
        "top\ntop\ntop\nOutputError the worker processes died as they started: each runs the main script again "
        "(multiprocessing's spawn), and a script that calls lovecraft_convert at its top level would run the job "
        'again there; put the script\'s calls under `if __name__ == "__main__":`, or pass workers=1\n',
        "",
    )
    assert not os.path.exists(out) and leftovers(tmp_path) == []
    guarded = tmp_path / "guarded.py"
    body = UNGUARDED.format(src=src, out=out)
    guarded.write_text('if __name__ == "__main__":\n' + "".join(f"    {line}\n" for line in body.splitlines()))
    r = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True, env=SUBPROCESS_ENV, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "top\nwritten 3000\n"), r.stderr[-2000:]


def test_a_ray_unit_puts_pyarrows_settings_back():
    """A unit run by a Ray worker pins pyarrow to one core and its system allocator while it runs,
    and puts both back after it, also when it fails: the worker process runs other tasks after."""
    import pyarrow as pa

    before = (pa.cpu_count(), pa.default_memory_pool().backend_name)
    seen = []
    assert _unit(lambda: seen.append((pa.cpu_count(), pa.default_memory_pool().backend_name)) or 7, (), None, "") == 7
    assert seen == [(1, "system")]
    with pytest.raises(ZeroDivisionError):
        _unit(lambda: 1 / 0, (), None, "")
    assert (pa.cpu_count(), pa.default_memory_pool().backend_name) == before
