"""The commit without rename: two runs racing to one prefix, a run killed mid-upload and resumed,
a failed run leaving nothing behind."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import lovecraft_convert as lc
from lovecraft_convert.formats import builtin_names

from ..conftest import SUBPROCESS_ENV, lovecraft
from .conftest import get, objects, same_as_local


def _csv(path, rows: int) -> str:
    with open(path, "w") as f:
        f.write("a,b,c\n")
        for start in range(0, rows, 10000):
            f.write("".join(f"{i},{i * 0.25},word{i % 1000}\n" for i in range(start, min(rows, start + 10000))))
    return str(path)


def test_two_runs_racing_one_commits_the_other_fails_cleanly(s3, bucket, tmp_path, monkeypatch):
    """Both runs get past the start (no manifest yet) and reach their commit together: the
    conditional put lets exactly one in; the other deletes its own objects and says so."""
    from lovecraft_convert.errors import OutputError
    from lovecraft_convert.jobs.convert import convert
    from lovecraft_convert.storage.output import RemoteOutputDir

    src = _csv(tmp_path / "in.csv", 3000)
    fmt = builtin_names()[0]
    barrier = threading.Barrier(2, timeout=60)
    turn = threading.Lock()
    original = RemoteOutputDir.commit

    def commit(self, manifest):
        barrier.wait()  # both have written everything and are about to commit
        with turn:
            original(self, manifest)

    monkeypatch.setattr(RemoteOutputDir, "commit", commit)
    results: list = [None, None]

    def run(i: int) -> None:
        try:
            results[i] = convert([src], f"s3://{bucket}/out", to=fmt, progress=False)
        except OutputError as e:
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    won = [r for r in results if isinstance(r, lc.Manifest)]
    lost = [r for r in results if isinstance(r, OutputError)]
    assert len(won) == 1 and len(lost) == 1, results
    assert lost[0].one_line() == (
        f"s3://{bucket}/out: another run committed this output first (its _manifest.json appeared while this "
        "run wrote); nothing of this run was kept; pass overwrite=True to replace it, or choose another path"
    )
    m = json.loads(get(s3, bucket, "out/_manifest.json"))
    assert m == json.loads(json.dumps(won[0].to_dict(), default=str))
    run_id = m["files"][0]["path"].split("/")[0]
    assert sorted(objects(s3, bucket, "out/")) == sorted(
        ["out/_manifest.json"] + [f"out/{f['path']}" for f in m["files"]]
    )
    assert all(f["path"].startswith(run_id + "/") for f in m["files"])
    assert lovecraft("verify", f"s3://{bucket}/out").exit_code == 0


def test_two_processes_racing(s3, bucket, tmp_path):
    """Two CLI runs started together: one writes the dataset, the other exits 1 with one line
    (refused at the start, or losing the commit), and nothing of it is left."""
    src = _csv(tmp_path / "in.csv", 20000)
    fmt = builtin_names()[0]
    cmd = [sys.executable, "-m", "lovecraft_convert", "convert", src, "-o", f"s3://{bucket}/out", "--to", fmt, "-q"]
    procs = [
        subprocess.Popen(cmd, env=SUBPROCESS_ENV | dict(os.environ), stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [(p.wait(120), p.stderr.read()) for p in procs]
    codes = sorted(c for c, _ in outs)
    assert codes == [0, 1], outs
    err = next(e for c, e in outs if c == 1)
    assert err in (
        f"Error: s3://{bucket}/out: output already exists; pass --overwrite to replace it or choose another path\n",
        f"Error: s3://{bucket}/out: another run committed this output first (its _manifest.json appeared while "
        "this run wrote); nothing of this run was kept; pass --overwrite to replace it, or choose another path\n",
    )
    m = json.loads(get(s3, bucket, "out/_manifest.json"))
    assert sorted(objects(s3, bucket, "out/")) == sorted(
        ["out/_manifest.json"] + [f"out/{f['path']}" for f in m["files"]]
    )
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_commit_between_the_manifest_check_and_the_listing_is_an_existing_output(s3, bucket, tmp_path, monkeypatch):
    """The other run commits after this one found no manifest but before it listed the prefix for
    foreign objects: the manifest it then lists is a dataset, refused as one (CI hit this window)."""
    from lovecraft_convert.storage.output import RemoteOutputDir

    src = _csv(tmp_path / "in.csv", 100)
    fmt = builtin_names()[0]
    assert lovecraft("convert", src, "-o", f"s3://{bucket}/out", "--to", fmt, "-q").exit_code == 0
    before = sorted(objects(s3, bucket, "out/"))
    monkeypatch.setattr(RemoteOutputDir, "_manifest", lambda self: None)  # as seen just before the commit
    r = lovecraft("convert", src, "-o", f"s3://{bucket}/out", "--to", fmt, "-q")
    assert r.exit_code == 1
    assert r.stderr == (
        f"Error: s3://{bucket}/out: output already exists; pass --overwrite to replace it or choose another path\n"
    )
    assert sorted(objects(s3, bucket, "out/")) == before


def test_failed_run_leaves_nothing(s3, bucket, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3,4\n5\n")
    r = lovecraft("convert", str(bad), "-o", f"s3://{bucket}/out", "--to", builtin_names()[0], "-q")
    assert r.exit_code == 1
    assert objects(s3, bucket) == {}
    r = lovecraft("shard", str(bad), "-o", f"s3://{bucket}/sh", "--to", builtin_names()[0], "-q", "--num-shards", "2")
    assert r.exit_code == 1
    assert objects(s3, bucket) == {}


def test_unfinished_run_is_refused_then_overwritten(s3, bucket, tmp_path):
    s3.put_object(Bucket=bucket, Key="sh/_partial.json", Body=json.dumps({"run": "run-dead"}).encode())
    s3.put_object(Bucket=bucket, Key="sh/run-dead/part-00000.npy", Body=b"half")
    src = _csv(tmp_path / "in.csv", 2000)
    args = ["shard", src, "-o", f"s3://{bucket}/sh", "--to", builtin_names()[0], "-q", "--num-shards", "2"]
    r = lovecraft(*args)
    assert r.exit_code == 1
    assert r.stderr == (
        f"Error: s3://{bucket}/sh: an unfinished run was left in s3://{bucket}/sh/run-dead; run the same command "
        "with --resume to finish it, or --overwrite to start over\n"
    )
    assert lovecraft(*args, "--overwrite").exit_code == 0
    keys = objects(s3, bucket, "sh/")
    assert "sh/_partial.json" not in keys and not any(k.startswith("sh/run-dead/") for k in keys)
    assert lovecraft("verify", f"s3://{bucket}/sh").exit_code == 0


@pytest.mark.slow
def test_sigkill_mid_upload_then_resume_gives_the_same_bytes(s3, bucket, tmp_path):
    src = _csv(tmp_path / "in.csv", 1_500_000)
    fmt = builtin_names()[0]
    args = ["--to", fmt, "--num-shards", "12", "--max-memory", "64MiB", "--workers", "1", "-q"]
    assert lovecraft("shard", src, "-o", str(tmp_path / "loc"), *args).exit_code == 0
    cmd = [sys.executable, "-m", "lovecraft_convert", "shard", src, "-o", f"s3://{bucket}/sh", *args]
    p = subprocess.Popen(cmd, env=SUBPROCESS_ENV | dict(os.environ), stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        if any("/run-" in k for k in objects(s3, bucket, "sh/")):
            break  # the first unit's objects are up: the run is mid-upload
        time.sleep(0.05)
    assert p.poll() is None, "the run finished before it could be killed: give it a larger input"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    keys = objects(s3, bucket, "sh/")
    assert "sh/_manifest.json" not in keys and "sh/_partial.json" in keys
    from lovecraft_convert import open_dataset
    from lovecraft_convert.errors import DatasetError

    with pytest.raises(DatasetError):
        open_dataset(f"s3://{bucket}/sh")
    r = lovecraft("shard", src, "-o", f"s3://{bucket}/sh", *args, "--resume")
    assert r.exit_code == 0, r.stderr
    same_as_local(s3, bucket, "sh", str(tmp_path / "loc"))
    keys = objects(s3, bucket, "sh/")
    assert "sh/_partial.json" not in keys
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert lovecraft("verify", f"s3://{bucket}/sh").exit_code == 0


def _versions(s3, bucket: str, prefix: str) -> dict[str, int]:
    """key -> how many times it was written (the bucket keeps every version)."""
    out: dict[str, int] = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for v in page.get("Versions", []):
            out[v["Key"]] = out.get(v["Key"], 0) + 1
    return out


@pytest.mark.parametrize("fmt", ["memmap", "parquet"])
def test_resume_on_another_machine_keeps_the_finished_shards(s3, bucket, tmp_path, monkeypatch, fmt):
    """The journal lives beside the data: a shard run SIGKILLed after some shards, resumed with an
    empty scratch (another machine), rewrites none of them, ends with the bytes of a local run and
    leaves no run state behind."""
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    src = _csv(tmp_path / "in.csv", 600_000)
    args = ["--to", fmt, "--num-shards", "10", "--shuffle", "--seed", "3", "--max-memory", "64MiB", "--workers", "1"]
    assert lovecraft("shard", src, "-o", str(tmp_path / "loc"), *args, "-q").exit_code == 0
    env = SUBPROCESS_ENV | dict(os.environ) | {"LOVECRAFT_SCRATCH": str(tmp_path / "machine-a")}
    cmd = [sys.executable, "-m", "lovecraft_convert", "shard", src, "-o", f"s3://{bucket}/sh", *args, "-q"]
    p = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        journal = [k for k in objects(s3, bucket, "sh/run-") if "/_resume/journal/" in k]
        if sum(json.loads(get(s3, bucket, k)).get("phase") == 2 for k in journal) >= 2:
            break  # two shards are journalled: kill the run while it writes the next
        time.sleep(0.02)
    assert p.poll() is None, "the run finished before it could be killed: give it a larger input"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    state = objects(s3, bucket, "sh/run-")
    run = next(iter(state)).split("/")[1]
    assert f"sh/{run}/_resume/plan.json" in state
    entries = [json.loads(get(s3, bucket, k)) for k in sorted(state) if "/_resume/journal/" in k]
    assert [e.get("phase") for e in entries] == sorted(e.get("phase") for e in entries)
    done = [f"sh/{run}/{f['path']}" for e in entries if e.get("phase") == 2 for f in e["files"]]
    assert done, entries  # the shards journalled before the kill

    # machine b holds the scratch of another run of the same output: same names and sizes, other
    # bytes; its spill frames must not be taken for this run's
    name = hashlib.sha256(f"s3://{bucket}/sh".encode()).hexdigest()[:20] + ".partial"
    other = tmp_path / "machine-b" / name
    shutil.copytree(tmp_path / "machine-a" / name, other)
    marker = json.loads((other / "_remote.json").read_text())
    (other / "_remote.json").write_text(json.dumps({**marker, "run": "run-other"}))
    spilled = [p for p in (other / "spill").iterdir() if p.is_file()]
    assert spilled
    for p in spilled:
        p.write_bytes(bytes(p.stat().st_size))
    monkeypatch.setenv("LOVECRAFT_SCRATCH", str(tmp_path / "machine-b"))
    r = lovecraft("shard", src, "-o", f"s3://{bucket}/sh", *args, "--resume", "-q")
    assert r.exit_code == 0, r.stderr
    assert not any(n.endswith(".partial") for n in os.listdir(tmp_path / "machine-b"))
    same_as_local(s3, bucket, "sh", str(tmp_path / "loc"))
    keys = objects(s3, bucket, "sh/")
    assert not any("/_resume/" in k for k in keys) and "sh/_partial.json" not in keys
    versions = _versions(s3, bucket, f"sh/{run}/")
    assert all(versions[k] == 1 for k in done), {k: versions[k] for k in done}  # none written again
    assert any("/_resume/" not in k and k not in done for k in versions)  # the rest were written now
    assert lovecraft("verify", f"s3://{bucket}/sh", "-q").exit_code == 0


def test_resume_of_a_run_that_saved_no_plan_starts_it_over(s3, bucket, tmp_path):
    s3.put_object(Bucket=bucket, Key="sh/_partial.json", Body=json.dumps({"run": "run-dead"}).encode())
    s3.put_object(Bucket=bucket, Key="sh/run-dead/part-00000.npy", Body=b"half")
    src = _csv(tmp_path / "in.csv", 2000)
    args = ["--to", "memmap", "-q", "--num-shards", "2"]
    assert lovecraft("shard", src, "-o", str(tmp_path / "loc"), *args).exit_code == 0
    r = lovecraft("shard", src, "-o", f"s3://{bucket}/sh", *args, "--resume")
    assert r.exit_code == 0, r.stderr
    same_as_local(s3, bucket, "sh", str(tmp_path / "loc"))
    files = json.loads(get(s3, bucket, "sh/_manifest.json"))["files"]
    assert all(f["path"].startswith("run-dead/") for f in files)  # the same run id, its stray object gone
    assert sorted(objects(s3, bucket, "sh/")) == sorted(["sh/_manifest.json"] + [f"sh/{f['path']}" for f in files])
