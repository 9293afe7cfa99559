"""The HDF5 library calls of a wide table (formats/hdf5/native.py) never touch a file they do not
own: with a second libhdf5 in the process (PyTables' own copy, imported after or before h5py; a
copy of h5py's library loaded with ctypes, locally or globally, before or after h5py) holding an
open file whose datasets have the names being written, a conversion writes exactly the CSV's
values, leaves the other file's bytes as they were, and prints no HDF5 diagnostics. Where the
calls cannot be proven to reach h5py's library they are refused (silently) and h5py's public
calls write the same file, byte for byte; with another thread writing through h5py meanwhile,
both files are right.

Each case runs in a process of its own, so that which libraries are loaded, and in what order,
is the case's and nothing else's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from tests.conftest import SUBPROCESS_ENV

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the library calls are Linux-only")

ROWS, COLS = 5_000, 40  # at --max-memory 16MiB: one group of 40 columns, chunks written through the calls

# Run as: python -c SCRIPT CASE WORKDIR [LIBHDF5]. Prints one JSON line (the last) with what happened.
SCRIPT = r"""
import ctypes, hashlib, json, os, sys, threading
import numpy as np

case, work = sys.argv[1], sys.argv[2]
cols = other_cols = 40
other = os.path.join(work, "other.h5")
G = None  # a copy of h5py's libhdf5 loaded with ctypes
i64, u64 = ctypes.c_int64, ctypes.c_uint64

def load_copy(mode):
    global G
    lib = sys.argv[3]
    here = os.path.dirname(lib)
    for dep in sorted(os.listdir(here)):  # its dependencies (h5py.libs), found by name when it loads
        if not dep.startswith("libhdf5"):
            ctypes.CDLL(os.path.join(here, dep))
    G = ctypes.CDLL(os.path.join(work, "libhdf5-copy.so"), mode=mode)
    for name, res, args in [
        ("H5open", ctypes.c_int, []), ("H5Fcreate", i64, [ctypes.c_char_p, ctypes.c_uint, i64, i64]),
        ("H5Screate_simple", i64, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]), ("H5Pcreate", i64, [i64]),
        ("H5Pset_chunk", ctypes.c_int, [i64, ctypes.c_int, ctypes.c_void_p]), ("H5Pset_fletcher32", ctypes.c_int, [i64]),
        ("H5Dcreate2", i64, [i64, ctypes.c_char_p, i64, i64, i64, i64, i64]), ("H5Dopen2", i64, [i64, ctypes.c_char_p, i64]),
        ("H5Dwrite", ctypes.c_int, [i64, i64, i64, i64, i64, ctypes.c_void_p]),
        ("H5Dread", ctypes.c_int, [i64, i64, i64, i64, i64, ctypes.c_void_p]), ("H5Dclose", ctypes.c_int, [i64]),
        ("H5Pclose", ctypes.c_int, [i64]), ("H5Sclose", ctypes.c_int, [i64]), ("H5Fflush", ctypes.c_int, [i64, ctypes.c_int]),
        ("H5Fclose", ctypes.c_int, [i64]),
    ]:
        getattr(G, name).restype, getattr(G, name).argtypes = res, args

CHUNK = 16384  # the rows of our writer's chunks for this table: a chunk written into the wrong file would land

def open_other():
    # datasets c0..c39 of 100 int64, laid out as ours (extendible, chunks of CHUNK rows, fletcher32), left open
    if G is not None:
        assert G.H5open() >= 0
        dcpl_cls = i64.in_dll(G, "H5P_CLS_DATASET_CREATE_ID_g").value
        t = i64.in_dll(G, "H5T_NATIVE_LLONG_g").value
        fid = G.H5Fcreate(other.encode(), 2, 0, 0)
        for i in range(cols):
            space = G.H5Screate_simple(1, (u64 * 1)(100), (u64 * 1)(2**64 - 1))
            dcpl = G.H5Pcreate(dcpl_cls)
            G.H5Pset_chunk(dcpl, 1, (u64 * 1)(CHUNK))
            G.H5Pset_fletcher32(dcpl)
            d = G.H5Dcreate2(fid, f"c{i}".encode(), t, space, 0, dcpl, 0)
            assert d >= 0 and G.H5Dwrite(d, t, 0, 0, 0, (np.arange(100, dtype="i8") + i).ctypes.data) >= 0
            G.H5Dclose(d), G.H5Pclose(dcpl), G.H5Sclose(space)
        G.H5Fflush(fid, 1)
        return fid
    import tables
    f = tables.open_file(other, "w")
    for i in range(cols):
        a = f.create_earray("/", f"c{i}", tables.Int64Atom(), shape=(0,), chunkshape=(CHUNK,), filters=tables.Filters(fletcher32=True))
        a.append(np.arange(100, dtype="i8") + i)
    f.flush()
    return f

def read_other(handle):
    if G is not None:
        G.H5Fflush(handle, 1)
        t = i64.in_dll(G, "H5T_NATIVE_LLONG_g").value
        out = []
        for i in range(cols):
            buf = np.empty(100, "i8")
            d = G.H5Dopen2(handle, f"c{i}".encode(), 0)
            assert d >= 0 and G.H5Dread(d, t, 0, 0, 0, buf.ctypes.data) >= 0
            G.H5Dclose(d)
            out.append(buf.tolist())
        return out
    handle.flush()
    return [handle.get_node(f"/c{i}").read().tolist() for i in range(cols)]

def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()

handle = None
if case.startswith("copy-"):  # copy-{global,local}-{before,after}
    _, scope, when = case.split("-")[:3]
    mode = os.RTLD_GLOBAL if scope == "global" else os.RTLD_LOCAL
    if when == "before":
        load_copy(mode)
        handle = open_other()
        import h5py
    else:
        import h5py
        load_copy(mode)
        handle = open_other()
    import h5py
elif case == "tables-before":
    import tables, h5py
    handle = open_other()
elif case.startswith("tables") or case == "tables-resolved":
    import h5py, tables
    handle = open_other()
else:
    import h5py

import lovecraft_convert as lc
from lovecraft_convert.formats.hdf5 import native

if case == "tables-resolved":  # the functions looked up in PyTables' library (what the first version found)
    native.MODULES = ("tables.hdf5extension", "tables.utilsextension")
if case == "copy-local-after-resolved":  # ... or in the copy's, its errors silenced as h5py silences its own
    import types
    G.H5Eset_auto2.argtypes = [i64, ctypes.c_void_p, ctypes.c_void_p]
    assert G.H5Eset_auto2(0, None, None) >= 0
    sys.modules["the_copy"] = types.ModuleType("the_copy")
    sys.modules["the_copy"].__file__ = os.path.join(work, "libhdf5-copy.so")
    native.MODULES = ("the_copy", "the_copy")
if case == "hdf5-version":  # h5py reports another HDF5 than the library found
    h5py.version.hdf5_version_tuple = (1, 14, 5)
if case == "h5py-version":  # an h5py this was not tested with: its lock and the calls left alone
    native.TESTED_H5PY = set()

used = {"chunks": 0, "created": 0, "bound": 0}
real_for_file, real_write, real_create = native.for_file, native.Bound.write_chunks, native.Bound.create_closed
def for_file(*a):
    b = real_for_file(*a)
    used["bound"] += b is not None
    return b
def write_chunks(self, *a, **k):
    used["chunks"] += 1
    return real_write(self, *a, **k)
def create_closed(self, *a):
    made = real_create(self, *a)
    used["created"] += made
    return made
native.for_file, native.Bound.write_chunks, native.Bound.create_closed = for_file, write_chunks, create_closed

before = None if handle is None else read_other(handle)
before_digest = None if handle is None else digest(other)

race = {"rounds": 0, "error": None}
stop = threading.Event()
def writer():  # another thread's own file, written and read back through h5py while the conversion runs:
    try:        # many short calls, each a chance to land inside one of ours were they not under h5py's lock
        while not stop.is_set():
            k = race["rounds"]
            with h5py.File(os.path.join(work, "race.h5"), "w") as f:
                for j in range(50):
                    f.create_dataset(f"d{j}", data=np.arange(64) * (k + j), chunks=(16,)).attrs["k"] = k + j
            with h5py.File(os.path.join(work, "race.h5"), "r") as f:
                for j in range(50):
                    assert np.array_equal(f[f"d{j}"][:], np.arange(64) * (k + j)) and f[f"d{j}"].attrs["k"] == k + j
            race["rounds"] += 1
    except BaseException as e:
        race["error"] = repr(e)
if case == "race":
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    while race["rounds"] < 1 and race["error"] is None:
        stop.wait(0.01)
    during = race["rounds"]
try:
    lc.convert(os.path.join(work, "w.csv"), os.path.join(work, "out"), to="hdf5", max_memory="16MiB")
finally:
    if case == "race":
        race["during"] = race["rounds"] - during
        stop.set()
        t.join()
cols = len(open(os.path.join(work, "w.csv")).readline().split(","))

data = np.loadtxt(os.path.join(work, "w.csv"), delimiter=",", skiprows=1, dtype="i8")
with h5py.File(os.path.join(work, "out", "data.h5"), "r") as f:
    wrong = [i for i in range(cols) if not np.array_equal(f[f"c{i}"][:], data[:, i])]
result = {
    "used": used,
    "refused": native.refused(),
    "wrong": wrong,
    "sha": digest(os.path.join(work, "out", "data.h5")),
    "race": race,
}
if handle is not None:
    cols = other_cols
    result["other_same"] = read_other(handle) == before
    result["other_digest_same"] = digest(other) == before_digest
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def csv_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("native")
    _csv(d / "w.csv", ROWS, COLS)
    return d


def _csv(path, rows: int, cols: int) -> None:
    data = np.random.default_rng(38).integers(-999, 999, size=(rows, cols))
    with open(path, "w") as f:
        f.write(",".join(f"c{i}" for i in range(cols)) + "\n")
        np.savetxt(f, data, fmt="%d", delimiter=",")


def _run(case: str, csv_dir, tmp_path, *extra: str, env: dict | None = None) -> dict:
    if not (tmp_path / "w.csv").exists():
        os.symlink(csv_dir / "w.csv", tmp_path / "w.csv")
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, case, str(tmp_path), *extra],
        capture_output=True,
        text=True,
        env={**SUBPROCESS_ENV, **(env or {})},
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        timeout=180,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "HDF5-DIAG" not in r.stderr, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["wrong"] == [], f"{len(out['wrong'])} columns wrong"
    return out


def _native_used(out: dict) -> None:
    """Every dataset after the first made, and every block written, through the library calls."""
    assert out["refused"] is None
    assert out["used"]["bound"] == 1
    assert out["used"]["created"] == COLS - 1
    assert out["used"]["chunks"] >= 1


@pytest.fixture(scope="module")
def reference(csv_dir, tmp_path_factory) -> str:
    """The output's sha256 through the library calls, in a process holding nothing else."""
    out = _run("plain", csv_dir, tmp_path_factory.mktemp("plain"))
    _native_used(out)
    return out["sha"]


@pytest.mark.parametrize("case", ["tables-after", "tables-before"])
def test_pytables_in_the_same_process(case, csv_dir, tmp_path, reference):
    """PyTables imported after h5py (the first version then found PyTables' libhdf5 and wrote the
    chunks into the user's open file: its c0 and c31 changed, and printed 39 HDF5-DIAG stacks) or
    before it, the user's PyTables file open holding arrays c0..c39 with the names being written:
    the calls are made (PyTables' library cannot take them: it is not in the global scope) and
    reach h5py's file only; the output is the one made alone, byte for byte."""
    pytest.importorskip("tables")
    out = _run(case, csv_dir, tmp_path)
    _native_used(out)
    assert out["other_same"] and out["other_digest_same"]
    assert out["sha"] == reference


def test_functions_found_in_pytables_library_are_refused(csv_dir, tmp_path, reference):
    """The functions looked up in PyTables' library, as the first version did by its place in
    /proc/self/maps: refused before anything is written (that build is thread-safe, its error
    printing silenced per thread, so a failed call could print), without a word on stderr. h5py's
    calls write the file."""
    pytest.importorskip("tables")
    out = _run("tables-resolved", csv_dir, tmp_path)
    assert "thread-safe" in out["refused"]
    assert out["used"] == {"chunks": 0, "created": 0, "bound": 0}
    assert out["other_same"] and out["other_digest_same"]
    assert out["sha"] == reference


@pytest.fixture(scope="module")
def library_copy() -> str:
    """The path of h5py's libhdf5 (where the calls are found)."""
    from lovecraft_convert.formats.hdf5 import native

    lib = native.library()
    if lib is None:
        pytest.skip(f"the library calls are refused here: {native.refused()}")
    return lib.path


def _copy(lib: str, work) -> None:
    """``lib`` copied to ``work/libhdf5-copy.so`` under another soname, so that the loader makes it a
    second library (its own state, its own ids) rather than h5py's by name."""
    with open(lib, "rb") as f:
        data = f.read()
    name = os.path.basename(lib).encode()
    if data.count(name) != 1:
        pytest.skip(f"{lib}'s soname is not its file name")
    with open(work / "libhdf5-copy.so", "wb") as f:
        f.write(data.replace(name, name.replace(b"libhdf5", b"libHDF5")))


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("scope", ["local", "global"])
def test_a_copy_of_the_library_holding_an_open_file(scope, when, library_copy, csv_dir, tmp_path, reference):
    """A second copy of h5py's own libhdf5 (the same version), loaded with ctypes before or after
    h5py, holding an open file with datasets c0..c39 whose ids are the ones h5py's file gets.
    Loaded locally, it cannot take h5py's calls: ours are made and reach h5py's file only. Loaded
    globally, it takes the calls of whatever binds after it (before h5py: all of h5py's, and
    h5py's libhdf5's own), so ours are refused and h5py's make the file. Either way the copy's
    file is untouched, nothing is printed, and the output is the one made alone."""
    _copy(library_copy, tmp_path)
    out = _run(f"copy-{scope}-{when}", csv_dir, tmp_path, library_copy)
    if scope == "local":
        _native_used(out)
    else:
        assert "global scope" in out["refused"] and "libhdf5-copy.so" in out["refused"]
        assert out["used"] == {"chunks": 0, "created": 0, "bound": 0}
    assert out["other_same"] and out["other_digest_same"]
    assert out["sha"] == reference


def test_functions_found_in_another_copy_are_refused_per_file(library_copy, csv_dir, tmp_path, reference):
    """The functions looked up in a second copy of h5py's library (loaded locally after h5py, its
    errors silenced as h5py silences its own: every process-wide check holds) that holds an open
    file whose id is the one h5py's file gets and whose datasets have the names being written:
    the file check refuses them, as that id names the other file there, before anything is
    written. h5py's calls write the file."""
    _copy(library_copy, tmp_path)
    out = _run("copy-local-after-resolved", csv_dir, tmp_path, library_copy)
    assert out["refused"].startswith("h5py's file id names") and "other.h5" in out["refused"]
    assert out["used"] == {"chunks": 0, "created": 0, "bound": 0}
    assert out["other_same"] and out["other_digest_same"]
    assert out["sha"] == reference


@pytest.mark.parametrize(
    "case,env,why",
    [
        ("hdf5-version", {}, "is not h5py's"),
        ("h5py-version", {}, "is not one this was tested with"),
        ("plain", {"LOVECRAFT_HDF5_NATIVE": "0"}, "LOVECRAFT_HDF5_NATIVE=0"),
    ],
)
def test_refused_calls_give_the_same_file_through_h5py(case, env, why, csv_dir, tmp_path, reference):
    """A library whose version is not the one h5py reports, an h5py this was not tested with (its
    private lock then left alone too), or the switch off: h5py's public calls make the file, byte
    for byte the one the library calls make, silently."""
    out = _run(case, csv_dir, tmp_path, env=env)
    assert why in out["refused"]
    assert out["used"] == {"chunks": 0, "created": 0, "bound": 0}
    assert out["sha"] == reference


def test_another_thread_writing_through_h5py_meanwhile(csv_dir, tmp_path):
    """The calls are made under h5py's lock, so another thread's h5py calls never run inside HDF5
    at the same time: that thread's file (50 datasets and attributes, written and read back over
    and over) and the output (200 columns: ~200 creations and ~400 opens, writes and closes) are
    both right. (Made without the lock, 5 runs of 6 failed inside HDF5, in one thread or the other.)"""
    _csv(tmp_path / "w.csv", ROWS, 200)
    out = _run("race", csv_dir, tmp_path)
    assert out["refused"] is None and out["used"]["bound"] == 1 and out["used"]["created"] == 199
    assert out["race"]["error"] is None
    assert out["race"]["during"] >= 1  # it did write while the conversion ran


def test_the_calls_are_found_in_h5pys_library():
    """In this process: the functions live in one library file, the one h5py's own module depends
    on (dladdr), and its version is h5py's."""
    from lovecraft_convert.formats.hdf5 import native

    lib = native.library()
    if lib is None:
        pytest.skip(f"refused here: {native.refused()}")
    with open("/proc/self/maps") as f:
        mapped = {line.split(maxsplit=5)[-1].strip() for line in f if "/" in line}
    assert os.path.realpath(lib.path) in {os.path.realpath(p) for p in mapped}
    assert os.path.basename(lib.path).startswith("libhdf5")
    assert native.interposed() is None
    assert h5py.version.hdf5_version_tuple[:2] in native.TESTED_HDF5
    assert h5py.version.version_tuple[:2] in native.TESTED_H5PY, (
        f"h5py {h5py.version.version}: run this file with it and add it to native.TESTED_H5PY"
    )


@pytest.mark.parametrize("shape", ["narrow", "wide"])
def test_the_switch_off_makes_the_same_file(shape, tmp_path, monkeypatch):
    """h5py's public calls alone (``LOVECRAFT_HDF5_NATIVE=0``: no library calls, and no lock of
    h5py's taken by the writer, each h5py call taking its own) make the same file, byte for byte,
    for a narrow table of mixed columns (written from the writer's thread, text through the chunk
    cache) and a wide one whose groups' datasets are made in the caller's thread (two dtypes and a
    text column); the values are the source's."""
    import csv

    import lovecraft_convert as lc
    from lovecraft_convert.formats.hdf5 import native

    rng = np.random.default_rng(9)
    rows, nf, ni = (30_001, 3, 2) if shape == "narrow" else (9_003, 24, 18)
    floats, ints = rng.normal(size=(rows, nf)), rng.integers(-(2**40), 2**40, size=(rows, ni))
    src = tmp_path / "t.csv"
    with open(src, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([f"f{i}" for i in range(nf)] + [f"i{i}" for i in range(ni)] + ["name"])
        for r in range(rows):
            w.writerow([repr(float(x)) for x in floats[r]] + [int(x) for x in ints[r]] + [f"n{r % 7}"])
    made = []
    real_create = native.Bound.create_closed
    monkeypatch.setattr(native.Bound, "create_closed", lambda self, *a: made.append(a[0]) or real_create(self, *a))
    outs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv("LOVECRAFT_HDF5_NATIVE", switch)
        lc.convert(str(src), str(tmp_path / switch), to="hdf5", max_memory="16MiB", progress=False)
        outs[switch] = (tmp_path / switch / "data.h5").read_bytes()
        if native.library() is not None:
            assert native.refused() == (None if switch == "1" else "LOVECRAFT_HDF5_NATIVE=0")
            # the wide table's groups: every dataset after the first of each made by the calls
            assert len(made) == (0 if shape == "narrow" else nf + ni - 2)
    assert outs["1"] == outs["0"]
    with h5py.File(tmp_path / "0" / "data.h5", "r") as f:
        assert all(np.array_equal(f[f"f{i}"][:], floats[:, i]) for i in range(nf))
        assert all(np.array_equal(f[f"i{i}"][:], ints[:, i]) for i in range(ni))
        assert f["name"].asstr()[:].tolist() == [f"n{r % 7}" for r in range(rows)]
