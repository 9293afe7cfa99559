"""Local scratch of runs writing to a store: what a killed run left is cleaned by a later run,
never what a live run holds (issue 38, point 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..conftest import ROOT, SUBPROCESS_ENV, lovecraft
from ..engine.test_output_lock import PAUSED, _wait_for
from .conftest import get, objects


def _csv(path, rows: int) -> str:
    with open(path, "w") as f:
        f.write("a,b\n" + "".join(f"{i},{i % 7}\n" for i in range(rows)))
    return str(path)


def _paused(moment: str, tmp_path, *args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, PAUSED, ROOT, moment, str(tmp_path / "paused"), str(tmp_path / "go"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


SHARD = ["--to", "parquet", "--num-shards", "2", "--workers", "1", "-q"]


@pytest.mark.parametrize("later", ["resume of the same run", "a run to another output"])
def test_scratch_of_a_run_killed_just_after_its_commit_is_cleaned_by_a_later_run(
    s3, bucket, tmp_path, monkeypatch, later
):
    """A resumable run killed just after its manifest was put: the dataset is complete, its local
    ``.partial`` (and the store's ``_partial.json``) stay. The next run cleans both, whichever
    output it writes; the dataset is untouched."""
    scratch = tmp_path / "scratch"
    src = _csv(tmp_path / "in.csv", 2000)
    env = SUBPROCESS_ENV | dict(os.environ) | {"LOVECRAFT_SCRATCH": str(scratch)}
    p = _paused("put-manifest-kill", tmp_path, "shard", src, "-o", f"s3://{bucket}/sh", *SHARD, env=env)
    p.communicate(timeout=120)
    assert p.returncode == -9
    left = sorted(os.listdir(scratch))
    assert [n for n in left if n.endswith(".partial")] and "sh/_partial.json" in objects(s3, bucket, "sh/")
    committed = json.loads(get(s3, bucket, "sh/_manifest.json"))

    monkeypatch.setenv("LOVECRAFT_SCRATCH", str(scratch))
    if later == "resume of the same run":
        r = lovecraft("shard", src, "-o", f"s3://{bucket}/sh", *SHARD, "--resume")
    else:
        r = lovecraft("convert", src, "-o", f"s3://{bucket}/other", "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr
    assert os.listdir(scratch) == []
    assert json.loads(get(s3, bucket, "sh/_manifest.json")) == committed
    if later == "resume of the same run":  # it also removes the run's state left on the store
        assert lovecraft("verify", f"s3://{bucket}/sh", "-q").exit_code == 0
        assert sorted(objects(s3, bucket, "sh/")) == sorted(
            ["sh/_manifest.json"] + [f"sh/{f['path']}" for f in committed["files"]]
        )


def test_a_committed_runs_leftover_partial_marker_is_not_taken_for_an_unfinished_run(s3, bucket, tmp_path):
    """The same kill, then a run with ``--overwrite`` that fails: the store's ``_partial.json`` names
    the committed run, whose objects must not be deleted as a dead run's (that left a manifest
    naming deleted objects); the dataset is whole, and the leftover state of its run is gone."""
    scratch = tmp_path / "scratch"
    src = _csv(tmp_path / "in.csv", 2000)
    env = SUBPROCESS_ENV | dict(os.environ) | {"LOVECRAFT_SCRATCH": str(scratch)}
    p = _paused("put-manifest-kill", tmp_path, "shard", src, "-o", f"s3://{bucket}/sh", *SHARD, env=env)
    p.communicate(timeout=120)
    bad = _csv(tmp_path / "bad.csv", 300_000)  # its last row, far past what is read before the output is opened
    with open(bad, "a") as f:
        f.write("1\n")
    r = lovecraft("convert", bad, "-o", f"s3://{bucket}/sh", "--to", "parquet", "--overwrite", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {bad}, row 300001 (line 300002): expected 2 fields, found 1; "
        "fix the row (is a quote unbalanced or a delimiter missing?)\n",
    )
    assert "sh/_partial.json" not in objects(s3, bucket, "sh/")
    assert lovecraft("verify", f"s3://{bucket}/sh", "-q").exit_code == 0  # the committed dataset, whole


def test_a_live_runs_scratch_is_never_swept(s3, bucket, tmp_path, monkeypatch):
    """Run A (writing to one output) is paused just before its commit, its scratch unlocked by
    nothing but its own lock; a dead run's temporary lies beside it. Run B, to another output,
    cleans the dead one and leaves A's; A then commits."""
    scratch = tmp_path / "scratch"
    dead = scratch / "0123456789abcdef0123.tmp-deadbeef0000"
    dead.mkdir(parents=True)
    (dead / "part.npy").write_bytes(b"x" * 100)
    src = _csv(tmp_path / "in.csv", 3000)
    env = SUBPROCESS_ENV | dict(os.environ) | {"LOVECRAFT_SCRATCH": str(scratch)}
    a = _paused("commit", tmp_path, "convert", src, "-o", f"s3://{bucket}/a", "--to", "memmap", "-q", env=env)
    _wait_for(tmp_path / "paused", a)
    live = sorted(n for n in os.listdir(scratch) if n != dead.name and not n.endswith(".lock"))
    assert len(live) == 1 and os.listdir(scratch / live[0])  # A's files, in scratch until the commit
    monkeypatch.setenv("LOVECRAFT_SCRATCH", str(scratch))
    r = lovecraft("convert", src, "-o", f"s3://{bucket}/b", "--to", "memmap", "-q")
    assert r.exit_code == 0, r.stderr
    assert sorted(os.listdir(scratch)) == sorted([live[0], live[0] + ".lock"])
    (tmp_path / "go").touch()
    assert a.communicate(timeout=120) == ("", "") and a.returncode == 0
    assert os.listdir(scratch) == []
    for out in ("a", "b"):
        assert lovecraft("verify", f"s3://{bucket}/{out}", "-q").exit_code == 0


def test_a_resumable_runs_scratch_is_kept_while_it_can_be_resumed(s3, bucket, tmp_path, monkeypatch):
    """An interrupted resumable run's ``.partial`` holds spill frames a ``--resume`` uses: a later
    run to another output keeps it while the store still names the run as unfinished."""
    scratch = tmp_path / "scratch"
    src = _csv(tmp_path / "in.csv", 3000)
    env = SUBPROCESS_ENV | dict(os.environ) | {"LOVECRAFT_SCRATCH": str(scratch)}
    a = _paused("commit", tmp_path, "shard", src, "-o", f"s3://{bucket}/sh", *SHARD, env=env)
    _wait_for(tmp_path / "paused", a)
    a.kill()
    a.communicate()
    partial = [n for n in os.listdir(scratch) if n.endswith(".partial")]
    assert len(partial) == 1
    monkeypatch.setenv("LOVECRAFT_SCRATCH", str(scratch))
    assert lovecraft("convert", src, "-o", f"s3://{bucket}/other", "--to", "parquet", "-q").exit_code == 0
    assert [n for n in os.listdir(scratch) if n.endswith(".partial")] == partial
    r = lovecraft("shard", src, "-o", f"s3://{bucket}/sh", *SHARD, "--resume")
    assert r.exit_code == 0, r.stderr
    assert os.listdir(scratch) == []
    assert lovecraft("verify", f"s3://{bucket}/sh", "-q").exit_code == 0
