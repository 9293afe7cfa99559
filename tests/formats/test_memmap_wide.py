"""memmap with many files (a wide table): small per-batch pieces are gathered per file before they
are written; the files must hold exactly the source's values, whatever the batch boundaries."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.readback import assert_manifest_matches_disk


@pytest.mark.parametrize("memory", ["16MiB", "64MiB"])
def test_a_wide_csv_reads_back_exactly(tmp_path, memory):
    rng = np.random.default_rng(5)
    rows, width = 30_000, 40
    src = tmp_path / "wide.csv"
    with open(src, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([f"c{i}" for i in range(width)] + ["name"])
        for r in range(rows):
            w.writerow([f"{x:.6g}" for x in rng.normal(size=width)] + [f"n{r % 97}" * (r % 5)])
    out = tmp_path / "out"
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "memmap", "--max-memory", memory, "-q")
    assert r.exit_code == 0, r.stderr
    with open(src, newline="") as f:
        body = list(csv.reader(f))[1:]
    for i in (0, 17, width - 1):
        got = np.load(out / f"c{i}.npy")
        assert got.dtype == np.float64 and np.array_equal(got, np.array([float(row[i]) for row in body]))
    values, offsets = np.load(out / "name.values.npy"), np.load(out / "name.offsets.npy")
    names = [bytes(values[offsets[j] : offsets[j + 1]]).decode() for j in range(rows)]
    assert names == [row[-1] for row in body]
    assert_manifest_matches_disk(str(out))
    m = json.loads((out / "_manifest.json").read_text())
    assert m["rows"] == rows and len(os.listdir(out)) == width + 3


@pytest.mark.parametrize("source", ["csv", "parquet"])
def test_columns_of_several_dtypes_gathered_together_read_back_exactly(tmp_path, source):
    """Scalar columns of one dtype are gathered in one buffer per dtype (two groups here), across
    batch and buffer boundaries; CSV rows are counted as they come (headers rewritten at close),
    Parquet's are known (preallocated, hashed as written): verify checks every file's hash."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(11)
    rows = 20_011  # more than a group buffer holds (8,192 rows of float64 at this budget)
    floats = {f"f{i}": rng.normal(size=rows).astype(np.float32) for i in range(30)}
    ints = {f"i{i}": rng.integers(-(2**40), 2**40, size=rows) for i in range(12)}
    if source == "csv":
        src = tmp_path / "t.csv"
        names = [*floats, *ints]
        with open(src, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(names)
            for r in range(rows):
                w.writerow([repr(float(floats[n][r])) for n in floats] + [int(ints[n][r]) for n in ints])
        want_f = {n: v.astype(np.float64) for n, v in floats.items()}
    else:
        src = tmp_path / "t.parquet"
        pq.write_table(pa.table({**floats, **ints}), src, row_group_size=1000)
        want_f = floats
    out = tmp_path / "out"
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "memmap", "--max-memory", "16MiB", "-q")
    assert r.exit_code == 0, r.stderr
    for n, v in {**want_f, **ints}.items():
        got = np.load(out / f"{n}.npy")
        assert got.dtype == v.dtype and np.array_equal(got, v), n
    assert_manifest_matches_disk(str(out))
    v = lovecraft("verify", str(out), "-q")
    assert v.exit_code == 0, v.stderr


def _wide_csv(path, rows: int = 2_000, width: int = 40) -> None:
    rng = np.random.default_rng(3)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([f"c{i}" for i in range(width)])
        for _ in range(rows):
            w.writerow([f"{x:.6g}" for x in rng.normal(size=width)])


@pytest.mark.parametrize("system", ["alone", "busy", "no syncfs"])
def test_many_files_are_finished_on_their_own_descriptors_and_made_durable(tmp_path, monkeypatch, system):
    """A wide table's files (row count unknown: a CSV) are finished on the descriptor the data
    went through: each file opened once (its header rewritten, hashed). They are made durable by
    one syncfs of their file system while what is dirty on the system is about what the run wrote
    ("alone"; background ones start as the data is written), and by an fsync of each file when
    other programs have much more waiting to be written ("busy") or syncfs is not to be had."""
    import sys
    import threading

    from lovecraft_convert.runtime import durable as durable

    if system != "no syncfs" and durable._syncfs_call() is None:
        pytest.skip("no syncfs that reports errors here (Linux 5.8 or later)")
    src = tmp_path / "w.csv"
    _wide_csv(src, rows=20_000)
    opened: dict[str, int] = {}
    synced: list[str] = []
    whole: list[str] = []
    lock = threading.Lock()

    def audit(event, args):
        if event == "open" and isinstance(args[0], str) and args[0].endswith(".npy"):
            with lock:
                opened[os.path.basename(args[0])] = opened.get(os.path.basename(args[0]), 0) + 1

    real_fsync, real_syncfs = os.fsync, durable.FileSystemSync._syncfs

    def counting_fsync(fd):
        with lock:
            synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def counting_syncfs(self, fd):
        with lock:
            whole.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        return real_syncfs(self, fd)

    sys.addaudithook(audit)  # cannot be removed: it ignores everything but .npy files
    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(durable.FileSystemSync, "_syncfs", counting_syncfs)
    monkeypatch.setattr(durable.FileSystemSync, "KICK", 64 << 10)  # a background syncfs every 64 KiB
    monkeypatch.setattr(durable, "dirty_bytes", lambda: 0 if system == "alone" else 1 << 40)
    if system == "no syncfs":
        monkeypatch.setattr(durable, "_syncfs_call", lambda: None)
    out = tmp_path / "out"
    r = lovecraft("convert", str(src), "-o", str(out), "--to", "memmap", "--max-memory", "16MiB", "-q")
    assert r.exit_code == 0, r.stderr
    assert opened == {f"c{i}.npy": 1 for i in range(40)}
    npy = sorted(n for n in synced if n.endswith(".npy"))
    if system == "alone":
        # 6.4 MB gathered in blocks of 8,192 rows (2.6 MB): background syncs while the input is
        # read (a kick during one that runs is folded into the next), then the final one
        assert npy == [] and len(whole) >= 2 and len(set(whole)) == 1, (npy, whole)
    else:
        assert npy == sorted(f"c{i}.npy" for i in range(40)) and whole == []
    with open(src, newline="") as f:
        body = list(csv.reader(f))[1:]
    assert np.array_equal(np.load(out / "c39.npy"), np.array([float(row[39]) for row in body]))
    assert_manifest_matches_disk(str(out))
    v = lovecraft("verify", str(out), "-q")
    assert v.exit_code == 0, v.stderr


def test_a_failed_syncfs_is_followed_by_an_fsync_of_each_file_which_names_the_one(tmp_path, monkeypatch):
    """syncfs reports that something on the file system failed to reach the disk: every file is
    then fsynced, and the error names the file whose own descriptor reports it (or, when none
    does, the directory); every file is closed."""
    import ctypes
    import errno

    from lovecraft_convert.runtime import durable as durable

    def failing_syncfs(fd):
        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(durable, "_syncfs_call", lambda: failing_syncfs)
    monkeypatch.setattr(durable, "dirty_bytes", lambda: 0)
    real_fsync = os.fsync
    bad: list[int] = []

    def fsync(fd):
        if fd in bad:
            raise OSError(errno.EIO, "Input/output error")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    for failing in (3, None):
        d = tmp_path / f"d{failing}"
        d.mkdir()
        fs = durable.FileSystemSync(str(d))
        files = [(str(d / f"f{i}"), open(d / f"f{i}", "wb", buffering=0)) for i in range(6)]  # noqa: SIM115
        bad[:] = [] if failing is None else [files[failing][1].fileno()]
        with pytest.raises(OSError) as e:
            durable.finish_and_fsync(files, lambda pf: (None, *pf), fs=fs)
        fs.close()
        assert e.value.errno == errno.EIO
        assert e.value.filename == (str(d) if failing is None else files[failing][0])
        assert all(f.closed for _, f in files)


def test_a_background_syncfs_error_is_raised_at_close(tmp_path, monkeypatch):
    import ctypes
    import errno

    from lovecraft_convert.runtime import durable as durable

    calls = []

    def syncfs(fd):
        calls.append(fd)
        ctypes.set_errno(errno.EIO)
        return -1 if len(calls) == 1 else 0

    monkeypatch.setattr(durable, "_syncfs_call", lambda: syncfs)
    monkeypatch.setattr(durable, "dirty_bytes", lambda: 0)
    fs = durable.FileSystemSync(str(tmp_path))
    fs.wrote(fs.KICK)  # a background syncfs, which fails
    with open(tmp_path / "f", "wb", buffering=0) as f, pytest.raises(OSError) as e:
        fs.sync_all([(str(tmp_path / "f"), f)])
    fs.close()
    assert e.value.errno == errno.EIO and e.value.filename == str(tmp_path) and len(calls) == 1


def test_finish_and_fsync_names_the_file_and_closes_every_one(tmp_path, monkeypatch):
    import errno

    from lovecraft_convert.runtime import durable as durable

    files = [(str(tmp_path / f"f{i}"), open(tmp_path / f"f{i}", "wb", buffering=0)) for i in range(12)]  # noqa: SIM115
    bad = files[5][1].fileno()
    real_fsync = os.fsync

    def failing(fd):
        if fd == bad:
            raise OSError(errno.EIO, "Input/output error")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)
    finished = []
    with pytest.raises(OSError) as e:
        durable.finish_and_fsync(files, lambda pf: finished.append(pf[0]) or (None, *pf))
    assert e.value.filename == files[5][0] and e.value.errno == errno.EIO
    assert finished == [p for p, _ in files] and all(f.closed for _, f in files)
    # a file that fails to finish: the ones finished before it are synced and closed, it is not
    # taken, the error is its own
    files = [(str(tmp_path / f"g{i}"), open(tmp_path / f"g{i}", "wb", buffering=0)) for i in range(6)]  # noqa: SIM115

    def finish(pf):
        if pf[0].endswith("g3"):
            raise OSError(errno.ENOSPC, "No space left on device", pf[0])
        return None, *pf

    monkeypatch.setattr(os, "fsync", real_fsync)
    with pytest.raises(OSError) as e:
        durable.finish_and_fsync(files, finish)
    assert e.value.errno == errno.ENOSPC and e.value.filename.endswith("g3")
    assert all(f.closed for _, f in files[:3]) and not any(f.closed for _, f in files[3:])
    for _, f in files[3:]:
        f.close()


def test_more_columns_than_the_soft_limit_of_open_files(tmp_path):
    """A memmap file per column stays open: 2,000 columns under the common soft limit of 1,024
    open files were a traceback ("Too many open files"), in convert and in verify (an outside
    trial). A library call raises the soft limit while its writer runs and puts it back; the CLI
    raises it to the hard limit for its process; beyond the hard limit, one line."""
    import resource
    import subprocess
    import sys

    from tests.conftest import SUBPROCESS_ENV

    cols = 1100
    src = tmp_path / "w.csv"
    src.write_text(
        ",".join(f"c{i}" for i in range(cols))
        + "\n"
        + "".join(",".join(str(r * i % 97) for i in range(cols)) + "\n" for r in range(20))
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the hard limit of open files is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        m = lc.convert(str(src), str(tmp_path / "o"), to="memmap", progress=False)
        assert m.rows == 20 and resource.getrlimit(resource.RLIMIT_NOFILE) == (1024, hard)
        assert np.load(tmp_path / "o" / "c1099.npy").tolist() == [r * 1099 % 97 for r in range(20)]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    def limited(n_soft: int, n_hard: int):
        return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n_soft, n_hard))

    cli = [sys.executable, "-m", "lovecraft_convert"]
    out = str(tmp_path / "c")
    r = subprocess.run([*cli, "convert", str(src), "-o", out, "--to", "memmap", "-q"], capture_output=True, text=True,
                       env=SUBPROCESS_ENV, preexec_fn=limited(1024, hard))  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*cli, "verify", out, "-q"], capture_output=True, text=True, env=SUBPROCESS_ENV,
                       preexec_fn=limited(1024, hard))  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([*cli, "convert", str(src), "-o", str(tmp_path / "d"), "--to", "memmap"], capture_output=True,
                       text=True, env=SUBPROCESS_ENV, preexec_fn=limited(1024, 1024))  # fmt: skip
    assert (r.returncode, r.stderr) == (
        1,
        "Error: memmap writes a file per column and holds them open: 1100 files, more than this process may open "
        "(1024, the hard limit of ulimit -n); stack the columns into one (--stack-columns), or write parquet or "
        "hdf5\n",
    )
    assert not os.path.exists(tmp_path / "d")
