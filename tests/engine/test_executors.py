"""What the engines say when a unit cannot run: without Ray, without a shared work directory (no cluster needed;
tests/engine/test_ray.py runs the real thing), or when a local worker process is killed."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from lovecraft_convert.engine.ray_executor import _unit
from lovecraft_convert.errors import OutputError
from tests.conftest import lovecraft, write


def test_a_worker_that_cannot_see_the_work_directory_says_so(tmp_path):
    missing = str(tmp_path / "not-shared")
    with pytest.raises(OutputError) as e:
        _unit(print, ("never",), [], missing)
    assert e.value.one_line().startswith(f"{missing}: the work directory is not visible on Ray node ")
    assert e.value.one_line().endswith(
        "; the output (and its work directory) must be on storage every node reaches, e.g. a shared file system"
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
            "lower --max-memory or --workers and run it again"
        )
    finally:
        ex.close(kill=True)
