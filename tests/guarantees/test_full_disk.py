"""A full disk: converting or sharding onto an 8 MiB tmpfs an input that cannot fit.

Every format must fail with exit 1 and one line saying there is no space (naming the output, and
for convert the file being written), leave nothing at the output path and no temporaries on the
small filesystem (every block freed), never die of SIGBUS (memmap preallocates its files), and
leave an existing dataset that ``--overwrite`` was replacing intact. Needs ``mount -t tmpfs``
(root); skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import leftovers
from tests.readback import manifest

FORMATS = ["memmap", "hdf5", "parquet", "tfrecord"]
SIZE = 8 << 20
DATA_FILE = {"hdf5": "data.h5", "parquet": "data.parquet", "tfrecord": "data.tfrecord"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """Inputs of 12-19 MB on the ordinary disk (float noise does not compress below 8 MiB)."""
    d = tmp_path_factory.mktemp("full_disk_in")
    rng = np.random.default_rng(5)
    npy = str(d / "x.npy")
    np.save(npy, rng.normal(size=(200_000, 16)).astype(np.float32))
    csv = str(d / "d.csv")
    with open(csv, "w") as f:
        f.write("a,b,c,d\n")
        np.savetxt(f, rng.normal(size=(400_000, 4)), fmt="%.9g", delimiter=",")
    small = str(d / "small.csv")
    with open(small, "w") as f:
        f.write("a,b\n")
        np.savetxt(f, rng.normal(size=(1000, 2)), fmt="%.6g", delimiter=",")
    wide = str(d / "wide.csv")  # 240 float columns: HDF5 and memmap write them as one group
    with open(wide, "w") as f:
        f.write(",".join(f"c{i}" for i in range(240)) + "\n")
        np.savetxt(f, rng.normal(size=(5_000, 240)), fmt="%.9g", delimiter=",")
    return {"npy": npy, "csv": csv, "small": small, "wide": wide}


@pytest.fixture
def small_fs(tmp_path):
    mnt = str(tmp_path / "small")
    os.mkdir(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", mnt], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount an {SIZE >> 20} MiB tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", mnt], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mnt], capture_output=True)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lovecraft_convert", *args], capture_output=True, text=True, timeout=300
    )


def _message(out: str, files: str | None) -> re.Pattern:
    writing = rf" while writing (?:{files})(?: \([\d.]+ [KMG]?i?B needed\))?" if files else ""
    return re.compile(
        rf"Error: {re.escape(out)}: no space left on device{writing}; nothing was written; "
        r"free space or choose another output\n"
    )


def _assert_clean(mnt: str, out: str) -> None:
    assert not os.path.exists(out)
    assert leftovers(mnt) == []
    assert os.listdir(mnt) == []  # not even a lock file
    st = os.statvfs(mnt)
    assert st.f_bfree == st.f_blocks  # every block of the temporaries given back


def _files(fmt: str, kind: str) -> str:
    if fmt != "memmap":
        return re.escape(DATA_FILE[fmt])
    return {"npy": r"x\.npy", "csv": r"[abcd]\.npy", "wide": r"c\d+\.npy"}[kind]


@pytest.mark.parametrize("kind", ["npy", "csv"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_convert_onto_a_full_disk(small_fs, inputs, fmt, kind):
    out = os.path.join(small_fs, "out")
    r = _run("convert", inputs[kind], "-o", out, "--to", fmt, "-q", "--max-memory", "64MiB")
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])  # -7 would be SIGBUS
    assert _message(out, _files(fmt, kind)).fullmatch(r.stderr), r.stderr
    assert r.stdout == ""
    _assert_clean(small_fs, out)
    # the filesystem is usable again: a small conversion onto it succeeds
    r = _run("convert", inputs["small"], "-o", out, "--to", fmt, "-q")
    assert r.returncode == 0, r.stderr
    assert manifest(out)["rows"] == 1000


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_wide_table_onto_a_full_disk(small_fs, inputs, fmt):
    """A wide table's own write paths (HDF5's grouped chunks through the library's C calls,
    memmap's gathered files fsynced together) fail as cleanly as the narrow ones."""
    out = os.path.join(small_fs, "out")
    r = _run("convert", inputs["wide"], "-o", out, "--to", fmt, "-q", "--max-memory", "16MiB")
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert _message(out, _files(fmt, "wide")).fullmatch(r.stderr), r.stderr
    assert r.stdout == ""
    _assert_clean(small_fs, out)


@pytest.mark.parametrize(
    "fmt, extra",
    [
        ("memmap", []),
        ("hdf5", []),
        ("parquet", ["--shuffle", "--seed", "3"]),
        ("tfrecord", ["--workers", "2"]),
        ("webdataset", []),
        ("mds", []),  # items written straight into the file, flushed in the background as they go
        ("litdata", ["--workers", "2"]),
    ],
)
def test_shard_onto_a_full_disk(small_fs, inputs, fmt, extra):
    out = os.path.join(small_fs, "shards")
    r = _run("shard", inputs["csv"], "-o", out, "--to", fmt, "--num-shards", "4", "-q", "--max-memory", "64MiB", *extra)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert _message(out, None).fullmatch(r.stderr) or _message(out, r".+").fullmatch(r.stderr), r.stderr
    _assert_clean(small_fs, out)


@pytest.mark.parametrize("fmt", ["memmap", "parquet"])
def test_overwrite_keeps_the_old_dataset_when_the_new_one_does_not_fit(small_fs, inputs, fmt):
    out = os.path.join(small_fs, "out")
    r = _run("convert", inputs["small"], "-o", out, "--to", fmt, "-q")
    assert r.returncode == 0, r.stderr
    before = {n: os.path.getsize(os.path.join(out, n)) for n in os.listdir(out)}
    r = _run("convert", inputs["npy"], "-o", out, "--to", fmt, "-q", "--overwrite")
    assert r.returncode == 1
    assert _message(out, _files(fmt, "npy")).fullmatch(r.stderr), r.stderr
    assert {n: os.path.getsize(os.path.join(out, n)) for n in os.listdir(out)} == before
    assert leftovers(small_fs) == []
    r = _run("verify", out, "-q")
    assert (r.returncode, r.stdout) == (0, ""), r.stdout


@pytest.mark.parametrize("fmt, extra", [("memmap", []), ("tfrecord", ["--workers", "2", "--layout", "ragged"])])
def test_bucket_onto_a_full_disk(small_fs, inputs, fmt, extra):
    out = os.path.join(small_fs, "buckets")
    r = _run("bucket", inputs["csv"], "-o", out, "--to", fmt, "--ragged", "--num-buckets", "2", "-q", *extra)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert _message(out, None).fullmatch(r.stderr) or _message(out, r".+").fullmatch(r.stderr), r.stderr
    _assert_clean(small_fs, out)
