"""Hostile datasets against every reader of a dataset directory, not only ``verify``: manifest paths
that leave the dataset and HDF5 files that point elsewhere, given to ``open_dataset`` and to
``lovecraft bucket``; and claims of huge sizes refused before anything is allocated, measured by
running the refusal in a subprocess whose address space is capped a little above what it already
uses (``RLIMIT_AS``), so an implementation that allocated the claim first would die of MemoryError.

Each hostile dataset keeps its manifest's sizes and hashes equal to the bytes (rehashed where a file
was edited), so only the check under test can refuse it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

import lovecraft_convert as lc
from lovecraft_convert.errors import DatasetError
from tests.conftest import leftovers, lovecraft
from tests.readback import digest_of, entry_digest, manifest

FORMATS = ("memmap", "hdf5", "parquet", "tfrecord")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def text_datasets(tmp_path_factory) -> dict[str, str]:
    """One dataset per format of a text column (which ``bucket`` can read as sequences)."""
    d = tmp_path_factory.mktemp("hostile_src")
    src = d / "lines.txt"
    src.write_text("".join(f"line {i} {'w' * (i % 23)}\n" for i in range(300)))
    made = {}
    for fmt in FORMATS:
        made[fmt] = str(d / fmt)
        lc.convert([str(src)], made[fmt], to=fmt, progress=False)
    return made


def _copy(src: str, dst) -> str:
    shutil.copytree(src, str(dst))
    return str(dst)


def _write_manifest(ds: str, m: dict) -> None:
    with open(os.path.join(ds, "_manifest.json"), "w") as f:
        json.dump(m, f, indent=1)


def _rehash(ds: str, rel: str) -> None:
    """Make the manifest agree with the bytes of ``rel`` again (size and digest, in the algorithm
    the entry records)."""
    m = manifest(ds)
    with open(os.path.join(ds, rel), "rb") as f:
        data = f.read()
    for f in m["files"]:
        if f["path"] == rel:
            alg = entry_digest(f)[0]
            f["bytes"], f[alg] = len(data), digest_of(data, alg)
    _write_manifest(ds, m)


def _read_all(ds: str) -> int:
    """Open and read every batch: a reader that refuses lazily is still refusing."""
    return sum(len(next(iter(b.values()))) for b in lc.open_dataset(ds).batches(64))


def _bucket(ds: str, tmp_path):
    out = str(tmp_path / "bucketed")
    r = lovecraft("bucket", ds, "-o", out, "--to", "memmap", "--num-buckets", "2", "--workers", "1", "-q")
    return r, out


# --------------------------------------------------------------------------------------------
# manifest paths that leave the dataset directory
# --------------------------------------------------------------------------------------------


def _path_leaving(text_datasets, tmp_path, fmt: str, where: str) -> tuple[str, str]:
    """A copy of the dataset whose first data file is listed as a path outside it, where an exact
    copy of that file sits (same size, same sha256: only the path is wrong)."""
    ds = _copy(text_datasets[fmt], tmp_path / "ds")
    m = manifest(ds)
    rel = m["files"][0]["path"]
    outside = tmp_path / f"outside-{rel}"
    shutil.copyfile(os.path.join(ds, rel), outside)
    bad = f"../{outside.name}" if where == "relative" else str(outside)
    m["files"][0]["path"] = bad
    for s in m.get("shards") or []:
        s["files"] = [bad if p == rel else p for p in s["files"]]
    os.remove(os.path.join(ds, rel))
    _write_manifest(ds, m)
    return ds, bad


@pytest.mark.parametrize("where", ["relative", "absolute"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_verify_refuses_paths_leaving_the_dataset(text_datasets, tmp_path, fmt, where):
    ds, bad = _path_leaving(text_datasets, tmp_path, fmt, where)
    lines = lc.verify(ds).lines()
    assert f"{ds}/_manifest.json: files[0]: path {bad!r} points outside the dataset directory" in lines


@pytest.mark.parametrize("where", ["relative", "absolute"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_open_dataset_refuses_paths_leaving_the_dataset(text_datasets, tmp_path, fmt, where):
    ds, bad = _path_leaving(text_datasets, tmp_path, fmt, where)
    with pytest.raises(DatasetError, match=rf"path {bad!r} points outside the dataset directory"):
        _read_all(ds)


@pytest.mark.parametrize("where", ["relative", "absolute"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_bucket_refuses_a_dataset_whose_paths_leave_it(text_datasets, tmp_path, fmt, where):
    ds, bad = _path_leaving(text_datasets, tmp_path, fmt, where)
    r, out = _bucket(ds, tmp_path)
    assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"path {bad!r} points outside the dataset directory" in r.stderr
    assert not os.path.exists(out) and leftovers(tmp_path) == []


def _under_run_prefix(text_datasets, tmp_path, fmt: str) -> tuple[str, str]:
    """A copy of the dataset whose data files sit in a subdirectory (as object-storage outputs put
    them under a run prefix), its manifest naming them there."""
    ds = _copy(text_datasets[fmt], tmp_path / "ds")
    sub = "run-20261124-ab12"
    os.mkdir(os.path.join(ds, sub))
    m = manifest(ds)
    moved = {}
    for f in m["files"]:
        os.rename(os.path.join(ds, f["path"]), os.path.join(ds, sub, f["path"]))
        moved[f["path"]] = f"{sub}/{f['path']}"
        f["path"] = moved[f["path"]]
    for s in m["shards"]:
        s["files"] = [moved[p] for p in s["files"]]
    index = (m.get("tfrecord") or {}).get("blocks")
    if index:  # the block index is keyed by file path too
        m["tfrecord"]["blocks"] = {moved[k]: v for k, v in index.items()}
    _write_manifest(ds, m)
    return ds, sub


@pytest.mark.parametrize("fmt", FORMATS)
def test_paths_in_a_subdirectory_are_read(text_datasets, tmp_path, fmt):
    ds, _ = _under_run_prefix(text_datasets, tmp_path, fmt)
    assert lc.verify(ds).lines() == []
    assert _read_all(ds) == 300
    assert lc.inspect(ds)["rows"] == 300
    out = str(tmp_path / "again")
    assert lovecraft("convert", ds, "-o", out, "--to", "parquet", "-q").exit_code == 0
    assert _read_all(out) == 300


@pytest.mark.parametrize("fmt", ["memmap", "parquet"])
def test_a_symlinked_directory_leaving_the_dataset_is_refused(text_datasets, tmp_path, fmt):
    """The run prefix is a symbolic link to a directory elsewhere holding the same files: every
    reader refuses it, naming the manifest and the path; verify never reads through it."""
    ds, sub = _under_run_prefix(text_datasets, tmp_path, fmt)
    elsewhere = str(tmp_path / "elsewhere")
    os.rename(os.path.join(ds, sub), elsewhere)
    os.symlink(elsewhere, os.path.join(ds, sub))
    first = manifest(ds)["files"][0]["path"]
    said = (
        f"{ds}/_manifest.json: files[0]: path {first!r} points outside the dataset directory (through a symbolic link)"
    )
    lines = lc.verify(ds).lines()
    assert (
        f"{ds}/_manifest.json: path {first!r} points outside the dataset directory (through a symbolic link)" in lines
    )
    assert f"{ds}/{sub}: a symbolic link, not listed in the manifest (not followed)" in lines
    for call in (lambda: _read_all(ds), lambda: lc.inspect(ds)):
        with pytest.raises(DatasetError) as e:
            call()
        assert e.value.one_line() == f"{said}; the manifest was edited; re-create the dataset"
    out = str(tmp_path / "again")
    r = lovecraft("convert", ds, "-o", out, "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (1, f"Error: {said}; the manifest was edited; re-create the dataset\n")
    r = lovecraft("inspect", ds)
    assert (r.exit_code, r.stderr) == (1, f"Error: {said}; the manifest was edited; re-create the dataset\n")
    assert not os.path.exists(out) and leftovers(tmp_path) == []


def test_a_data_file_symlinked_elsewhere_is_refused_by_open_dataset(text_datasets, tmp_path):
    ds = _copy(text_datasets["parquet"], tmp_path / "ds")
    rel = manifest(ds)["files"][0]["path"]
    os.rename(os.path.join(ds, rel), tmp_path / "moved.parquet")
    os.symlink(tmp_path / "moved.parquet", os.path.join(ds, rel))
    with pytest.raises(DatasetError, match=r"path 'data.parquet' points outside the dataset directory \(through a"):
        _read_all(ds)
    assert lc.verify(ds).lines() == [f"{ds}/{rel}: a symbolic link (not followed: a dataset holds plain files)"]


# --------------------------------------------------------------------------------------------
# HDF5 that points at other files: external links, external raw storage, virtual datasets
# --------------------------------------------------------------------------------------------


def _hdf5_pointing_elsewhere(text_datasets, tmp_path, how: str) -> tuple[str, str]:
    """A copy of the HDF5 dataset whose column reads another file (rehashed: the manifest agrees
    with the bytes); returns the dataset and what verify says of it."""
    ds = _copy(text_datasets["hdf5"], tmp_path / "ds")
    h5 = os.path.join(ds, "data.h5")
    secret = str(tmp_path / "secret.h5")
    if how == "external link":
        with h5py.File(secret, "w") as f:
            f["t"] = np.array([b"not this dataset's"] * 300, dtype=h5py.string_dtype())
        with h5py.File(h5, "r+") as f:
            del f["text"]
            f["text"] = h5py.ExternalLink(secret, "/t")
        said = f"{h5}: 'text' is an external link to {secret}:/t (not followed)"
    else:  # a fixed-size column for these two: external storage cannot hold strings
        shutil.rmtree(ds)
        np.save(tmp_path / "x.npy", np.arange(600, dtype=np.float32).reshape(300, 2))
        lc.convert([str(tmp_path / "x.npy")], ds, to="hdf5", progress=False)
        if how == "external storage":
            raw = str(tmp_path / "raw.bin")
            np.full((300, 2), 7, np.float32).tofile(raw)
            with h5py.File(h5, "r+") as f:
                del f["x"]
                f.create_dataset("x", shape=(300, 2), dtype="<f4", external=[(raw, 0, 2400)])
            said = f"{h5}: dataset 'x' keeps its data in external raw files (not followed)"
        else:
            with h5py.File(secret, "w") as f:
                f["y"] = np.full((300, 2), 7, np.float32)
            with h5py.File(h5, "r+") as f:
                layout = h5py.VirtualLayout(shape=(300, 2), dtype="<f4")
                layout[:] = h5py.VirtualSource(secret, "y", shape=(300, 2))
                del f["x"]
                f.create_virtual_dataset("x", layout)
            said = f"{h5}: dataset 'x' is a virtual dataset mapping other files (not followed)"
    _rehash(ds, "data.h5")
    return ds, said


HOW = ["external link", "external storage", "virtual dataset"]


@pytest.mark.parametrize("how", HOW)
def test_verify_refuses_hdf5_pointing_elsewhere(text_datasets, tmp_path, how):
    ds, said = _hdf5_pointing_elsewhere(text_datasets, tmp_path, how)
    assert lc.verify(ds).lines() == [said]


@pytest.mark.parametrize("how", HOW)
def test_open_dataset_refuses_hdf5_pointing_elsewhere(text_datasets, tmp_path, how):
    ds, said = _hdf5_pointing_elsewhere(text_datasets, tmp_path, how)
    with pytest.raises(DatasetError) as e:
        _read_all(ds)
    assert e.value.one_line() == f"{said}; a dataset's files hold their own data; re-create the dataset"


def test_bucket_refuses_hdf5_with_an_external_link(text_datasets, tmp_path):
    ds, said = _hdf5_pointing_elsewhere(text_datasets, tmp_path, "external link")
    r, out = _bucket(ds, tmp_path)
    assert r.exit_code == 1 and "(not followed)" in r.stderr, r.stderr
    assert not os.path.exists(out) and leftovers(tmp_path) == []


# --------------------------------------------------------------------------------------------
# refused before allocating: measured under a capped address space
# --------------------------------------------------------------------------------------------

CLAIM = 1 << 28  # rows of float64 a header claims: 2 GiB, four times the headroom the child gets
HEADROOM = 512 << 20

CHILD = """
import gzip, hashlib, io, json, os, re, resource, sys
sys.path.insert(0, {root!r})
import numpy as np
import lovecraft_convert as lc
from lovecraft_convert.errors import LovecraftError

d = {d!r}

def npy_header(shape, data=b""):
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {{"descr": "<f8", "fortran_order": False, "shape": shape}})
    return b.getvalue() + data

# small, valid inputs of every kind used below: every lazy import and thread pool is made now
with open(f"{{d}}/ok.npy.gz", "wb") as f:
    f.write(gzip.compress(npy_header((8,), bytes(64)), mtime=0))
np.save(f"{{d}}/ok.npy", np.zeros(8))
lc.convert([f"{{d}}/ok.npy.gz"], f"{{d}}/warm1", to="parquet", progress=False)
lc.convert([f"{{d}}/ok.npy"], f"{{d}}/warm2", to="memmap", progress=False)
lc.inspect([f"{{d}}/ok.npy.gz"])
lc.verify(f"{{d}}/warm2")
sum(len(b["ok"]) for b in lc.open_dataset(f"{{d}}/warm2").batches(4))

# the hostile files: headers claiming {claim} float64 rows over a few bytes of data
with open(f"{{d}}/huge.npy.gz", "wb") as f:
    f.write(gzip.compress(npy_header(({claim},), bytes(64)), mtime=0))
with open(f"{{d}}/huge.npy", "wb") as f:
    f.write(npy_header(({claim},), bytes(64)))
ds = f"{{d}}/claims"  # a memmap dataset whose file now claims the rows, its manifest rehashed
lc.convert([f"{{d}}/ok.npy"], ds, to="memmap", progress=False)
data = npy_header(({claim},), bytes(64))
with open(f"{{ds}}/ok.npy", "wb") as f:
    f.write(data)
m = json.load(open(f"{{ds}}/_manifest.json"))
m["files"][0].pop("blake3", None)  # the entry's digest, recomputed as sha256 (an entry names its algorithm)
m["files"][0].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
json.dump(m, open(f"{{ds}}/_manifest.json", "w"))

vm = int(re.search(r"VmSize:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + {headroom}, resource.RLIM_INFINITY))
calls = [
    ("convert npy.gz", lambda: lc.convert([f"{{d}}/huge.npy.gz"], f"{{d}}/o1", to="parquet", progress=False)),
    ("convert npy", lambda: lc.convert([f"{{d}}/huge.npy"], f"{{d}}/o2", to="hdf5", progress=False)),
    ("inspect npy.gz", lambda: lc.inspect([f"{{d}}/huge.npy.gz"])),
    ("verify", lambda: "reported: " + " | ".join(lc.verify(ds).lines())),
    ("open_dataset", lambda: sum(len(b["ok"]) for b in lc.open_dataset(ds).batches(64)) and None),
]
for name, call in calls:
    try:
        said = call()
        print(f"{{name}}: {{said}}" if said else f"{{name}}: not refused")
    except LovecraftError as e:
        print(f"{{name}}: refused: {{e.one_line()}}")
    except MemoryError:
        print(f"{{name}}: MemoryError (it allocated the claim)")
"""


def test_huge_claims_are_refused_before_allocating(tmp_path):
    """NPY headers claiming 2 GiB over 64 bytes of data: convert (streamed and mapped), inspect,
    verify and open_dataset each refuse with their one line while the process may grow by no more
    than 512 MiB; none needs the memory the header claims."""
    d = str(tmp_path)
    code = textwrap.dedent(CHILD).format(root=ROOT, d=d, claim=CLAIM, headroom=HEADROOM)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    data_bytes = CLAIM * 8
    assert r.stdout.splitlines() == [
        f"convert npy.gz: refused: {d}/huge.npy.gz: truncated: data ends at row 9 of the {CLAIM} the header "
        "declares; re-create the file",
        f"convert npy: refused: {d}/huge.npy: truncated: header declares shape ({CLAIM},) float64 ({data_bytes} "
        "data bytes) but the file holds 64; re-create the file",
        f"inspect npy.gz: refused: {d}/huge.npy.gz: truncated: data ends at row 9 of the {CLAIM} the header "
        "declares; re-create the file",
        f"verify: reported: {d}/claims/ok.npy: truncated: the header declares shape ({CLAIM},) float64 "
        f"({data_bytes} data bytes) but the file holds 64",
        f"open_dataset: refused: {d}/claims/ok.npy: cannot map (mmap length is greater than file size); the "
        "dataset is damaged; run `lovecraft verify`",
    ]
