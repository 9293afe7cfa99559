"""A wide table's dataset creations and chunk writes made through h5py's own HDF5 library, called
with ctypes, only where that library is provably the one holding the file.

Why: h5py holds the GIL through every HDF5 call; ctypes releases it for the length of each
foreign call. A table of 2,000 columns makes ~20,000 dataset opens, chunk writes and closes per
250 MB, and held, the GIL stalls the reading thread for all of them. The calls are the ones h5py
makes (``H5Dcreate2``, ``H5Dopen2``, ``H5Dset_extent``, ``H5Dwrite_chunk``, ``H5Acreate2``,
``H5Awrite`` and the closes), with the same arguments, so the file is the one h5py's own calls
make, byte for byte.

This reaches below h5py's public API, so it is used only when every check below holds, and h5py's
public calls are made otherwise (the writer's other path, tested as well):

- ``LOVECRAFT_HDF5_NATIVE`` is not ``0`` (the switch: ``0`` turns this off);
- Linux (glibc's ``dlsym``/``dladdr``), and an h5py of a version this was tested with
  (:data:`TESTED_H5PY`), whose lock ``h5py._objects.phil`` (private) is there: every call here is
  made holding it, so no other thread's h5py call runs inside HDF5 meanwhile;
- the functions are looked up through h5py's own extension module (``h5py.defs``, which makes
  h5py's calls), opened without loading anything (``RTLD_NOLOAD``): ``dlsym`` on that handle
  searches the module and its own dependencies, so it finds the libhdf5 h5py was linked with, never
  whichever copy another package (PyTables, netCDF4) mapped first. ``dladdr`` confirms they all
  live in one library file (h5py's libhdf5, or the module itself where HDF5 is linked in), and the
  lookup through another h5py module (``h5py.h5d``) agrees;
- no library in the global scope (one loaded ``RTLD_GLOBAL`` or preloaded) defines any of them:
  such a copy would take over the calls h5py's modules and h5py's libhdf5 itself make into HDF5
  (symbol interposition), so the calls found here would no longer be the ones holding h5py's file;
- that library's version (``H5get_libversion``) is h5py's (``h5py.version.hdf5_version_tuple``),
  it is not a thread-safe build (whose error printing is silenced per thread: h5py silences it in
  its own threads only), and its automatic error printing is off (as h5py leaves it), so a failed
  call here prints nothing;
- per file (:func:`for_file`): the id h5py gave for the file is a file in that library, under the
  path being written (``H5Iget_type``, then ``H5Fget_name``), and every other id passed (types,
  dataspaces, property lists) has the kind it should there. Only then is anything written.

The checks call nothing that could fail loudly: ``H5Iget_type`` of an unknown id returns an
error value without recording an error, and ``H5Fget_name`` is asked only of a valid file id.
A refusal is silent; :func:`refused` says why (for tests). A call that fails once in use is made
again through h5py, for its error (silenced, as h5py's are).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

hid_t = ctypes.c_int64
herr_t = ctypes.c_int
hsize_p = ctypes.POINTER(ctypes.c_uint64)
H5P_DEFAULT = 0
H5E_DEFAULT = 0
SWITCH = "LOVECRAFT_HDF5_NATIVE"
# h5py (major, minor) and HDF5 (major, minor) this was tested with (tests/formats/test_hdf5_native.py,
# two libhdf5 copies in one process among them); any other: h5py's public calls
TESTED_H5PY = {(3, 14)}
TESTED_HDF5 = {(1, 14)}
# the h5py modules the functions are looked up through: the first makes h5py's calls into HDF5
# (every low-level call goes through its wrappers); the second must find the same ones
MODULES = ("h5py.defs", "h5py.h5d")

_SIGNATURES = {
    "H5Dcreate2": ([hid_t, ctypes.c_char_p, hid_t, hid_t, hid_t, hid_t, hid_t], hid_t),
    "H5Dopen2": ([hid_t, ctypes.c_char_p, hid_t], hid_t),
    "H5Dset_extent": ([hid_t, hsize_p], herr_t),
    "H5Dwrite_chunk": ([hid_t, hid_t, ctypes.c_uint32, hsize_p, ctypes.c_size_t, ctypes.c_void_p], herr_t),
    "H5Dclose": ([hid_t], herr_t),
    "H5Acreate2": ([hid_t, ctypes.c_char_p, hid_t, hid_t, hid_t, hid_t], hid_t),
    "H5Awrite": ([hid_t, hid_t, ctypes.c_void_p], herr_t),
    "H5Aclose": ([hid_t], herr_t),
    # the checks
    "H5get_libversion": ([ctypes.POINTER(ctypes.c_uint)] * 3, herr_t),
    "H5is_library_threadsafe": ([ctypes.c_void_p], herr_t),
    "H5Eget_auto2": ([hid_t, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)], herr_t),
    "H5Iget_type": ([hid_t], ctypes.c_int),
    "H5Fget_name": ([hid_t, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_ssize_t),
}


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


class Library:
    """h5py's HDF5 functions, typed (attributes named as the C functions), and the file they live
    in (``path``)."""

    def __init__(self, fns: dict, path: str) -> None:
        self.__dict__.update(fns)
        self.path = path


def _address(fn) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


def _resolve(module_file: str) -> dict | None:
    """The functions as ``dlsym`` finds them through the already loaded ``module_file`` (its own
    dependencies), or None."""
    try:
        handle = ctypes.CDLL(module_file, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
        return {name: getattr(handle, name) for name in _SIGNATURES}
    except (OSError, AttributeError):
        return None


def _dladdr():
    """glibc's ``dladdr`` (in libc since 2.34, in libdl before), or None."""
    for lib in (None, "libdl.so.2"):
        try:
            fn = ctypes.CDLL(lib).dladdr
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)], ctypes.c_int
        return fn
    return None


def _file_of(dladdr, fn) -> str | None:
    info = _DlInfo()
    if not dladdr(_address(fn), ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.realpath(os.fsdecode(info.dli_fname))


def interposed(names=tuple(_SIGNATURES)) -> str | None:
    """The file of a library in the global scope (the program, its dependencies, libraries loaded
    ``RTLD_GLOBAL`` or preloaded) that defines one of ``names`` elsewhere than h5py's library, or
    None. Such a copy, loaded before h5py, takes the calls of h5py's modules and those h5py's
    libhdf5 makes to its own exported functions (symbol interposition: the library found here
    would then run on the copy's state); loaded after, it takes whatever was bound lazily. Either
    way the functions found through h5py's module are not provably the ones holding h5py's files,
    and no call here could tell (the copy's ids and file names then look right). Checked again
    for every file: a copy can be loaded between two."""
    lib = library()
    dladdr = _dladdr()
    if lib is None or dladdr is None:
        return "no library"
    try:
        everywhere = ctypes.CDLL(None)
    except OSError:
        return "no global scope"
    for name in names:
        try:
            fn = getattr(everywhere, name)
        except AttributeError:
            continue  # defined nowhere in the global scope: nothing to interpose
        if _address(fn) != _address(getattr(lib, name)):
            return _file_of(dladdr, fn) or "an unknown library"
    return None


def h5py_lock():
    """h5py's own lock (``h5py._objects.phil``, private), which every h5py call takes: to be held
    around every call here (:class:`Bound`). None when the switch is off, or unless this h5py is
    one :data:`TESTED_H5PY` names and the lock is there: then nothing here is used and the writer
    needs no lock of h5py's (each h5py call takes it)."""
    if os.environ.get(SWITCH) == "0":
        return None
    return _lock()


def _lock():
    import h5py

    if tuple(h5py.version.version_tuple[:2]) not in TESTED_H5PY:
        return None
    try:
        from h5py._objects import phil
    except ImportError:
        return None
    if not all(callable(getattr(phil, m, None)) for m in ("__enter__", "__exit__", "acquire", "release")):
        return None
    return phil


_WHY: dict[str, str] = {}


def refused() -> str | None:
    """Why the last :func:`for_file` refused the library calls, or None when it gave them."""
    return _WHY.get("last")


def _refuse(why: str) -> None:
    _WHY["last"] = why


def library() -> Library | None:
    """h5py's HDF5 functions, typed, when the process-wide checks that call nothing hold (see the
    module docstring), or None (:func:`refused` says why)."""
    lib, why = _library()
    if lib is None:
        _refuse(why)
    return lib


@functools.cache
def _library() -> tuple[Library | None, str | None]:
    """:func:`library`, and why not."""
    import importlib

    import h5py

    if not sys.platform.startswith("linux"):
        return None, "not Linux"
    if tuple(h5py.version.version_tuple[:2]) not in TESTED_H5PY:
        return None, f"h5py {h5py.version.version} is not one this was tested with"
    if tuple(h5py.version.hdf5_version_tuple[:2]) not in TESTED_HDF5:
        return None, f"HDF5 {h5py.version.hdf5_version} is not one this was tested with"
    if _lock() is None:
        return None, "h5py's lock not found"
    modules = [importlib.import_module(m).__file__ for m in MODULES]
    fns, other = _resolve(modules[0]), _resolve(modules[1])
    if fns is None or other is None:
        return None, "functions not found through h5py's modules"
    if any(_address(fns[n]) != _address(other[n]) for n in fns):
        return None, "h5py's modules find different functions"
    dladdr = _dladdr()
    if dladdr is None:
        return None, "no dladdr"
    files = {_file_of(dladdr, fn) for fn in fns.values()}
    if len(files) != 1 or None in files:
        return None, f"the functions are not in one library: {sorted(map(str, files))}"
    for name, fn in fns.items():
        fn.argtypes, fn.restype = _SIGNATURES[name]
    return Library(fns, files.pop()), None


def _checked() -> Library | None:
    """:func:`library` after the checks that call into it: none interposed, its version, its
    build and its error printing."""
    import h5py

    lib, why = _library()
    if lib is None:
        return _refuse(why)
    where = interposed()
    if where is not None:
        return _refuse(f"HDF5's functions are also defined by {where} in the global scope")
    v = [ctypes.c_uint() for _ in range(3)]
    if lib.H5get_libversion(*map(ctypes.byref, v)) < 0:
        return _refuse("no version")
    if tuple(x.value for x in v) != tuple(h5py.version.hdf5_version_tuple):
        return _refuse(f"library {tuple(x.value for x in v)} is not h5py's {h5py.version.hdf5_version_tuple}")
    ts = ctypes.c_uint64(0)  # hbool_t: one byte in 1.14, wider before; zeroed, any byte set is true
    if lib.H5is_library_threadsafe(ctypes.byref(ts)) < 0 or ts.value:
        return _refuse("a thread-safe build (error printing is silenced per thread)")
    func, data = ctypes.c_void_p(), ctypes.c_void_p()
    if lib.H5Eget_auto2(H5E_DEFAULT, ctypes.byref(func), ctypes.byref(data)) < 0 or func.value:
        return _refuse("the library prints its errors (h5py silences them in the library it uses)")
    return lib


def for_file(fid: int, path: str) -> Bound | None:
    """The library calls bound to the file h5py made at ``path`` (``fid``: its h5py ``FileID.id``),
    or None (then make every call through h5py). The caller holds :func:`h5py_lock` (where it is
    None, the calls are refused before any is made)."""
    import h5py

    if os.environ.get(SWITCH) == "0":
        return _refuse(f"{SWITCH}=0")
    lib = _checked()
    if lib is None:
        return None
    if lib.H5Iget_type(fid) != h5py.h5i.FILE:
        return _refuse("h5py's file id is not a file in the library found")
    want = os.fsencode(path)
    buf = ctypes.create_string_buffer(len(want) + 2)
    n = lib.H5Fget_name(fid, buf, len(buf))
    if n != len(want) or buf.value != want:
        return _refuse(f"h5py's file id names {buf.value!r} in the library found, not {want!r}")
    _WHY.pop("last", None)
    return Bound(lib, fid)


class Bound:
    """The library calls on one file: every id they are given is checked once to be of its kind in
    that library (``H5Iget_type``) before any call uses it. The caller holds :func:`h5py_lock`."""

    def __init__(self, lib: Library, fid: int) -> None:
        self.lib = lib
        self.fid = fid
        self.seen: dict[int, int] = {fid: 1}  # ids checked, and their kind there

    def ids(self, **kinds: tuple[int, int]) -> bool:
        """Whether every id (a name: (id, the h5py.h5i kind it must be)) is that kind here."""
        for i, kind in kinds.values():
            if i not in self.seen:
                self.seen[i] = self.lib.H5Iget_type(i)
            if self.seen[i] != kind:
                return False
        return True

    def create_closed(self, name: bytes, tid: int, space: int, dcpl: int) -> bool:
        """Dataset ``name`` of the file created (type ``tid``, dataspace ``space``, creation
        properties ``dcpl``; links and access as h5py's ``h5d.create`` makes them) and closed at
        once: whether it was. False when an id is not what it should be or the call failed
        (nothing left open): make it with h5py, for its error."""
        from h5py import h5i

        if not self.ids(tid=(tid, h5i.DATATYPE), space=(space, h5i.DATASPACE), dcpl=(dcpl, h5i.GENPROP_LST)):
            return False
        d = self.lib.H5Dcreate2(self.fid, name, tid, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)
        return d >= 0 and self.lib.H5Dclose(d) >= 0

    def _attributes(self, d: int, pairs: list[tuple[bytes, bytes]], tid: int, space: int) -> bool:
        """Dataset ``d``'s attributes ``pairs`` ((name, UTF-8 value)) created as ``tid`` (a
        variable-length string type) over ``space`` (scalar) and written, as h5py's
        ``h5a.create(...).write(...)`` does: whether all were (nothing left open)."""
        lib = self.lib
        for aname, value in pairs:
            a = lib.H5Acreate2(d, aname, tid, space, H5P_DEFAULT, H5P_DEFAULT)
            if a < 0:
                return False
            text = ctypes.c_char_p(value)
            ok = lib.H5Awrite(a, tid, ctypes.byref(text)) >= 0
            if lib.H5Aclose(a) < 0 or not ok:
                return False
        return True

    def write_chunks(
        self,
        names: list[bytes],
        chunks,
        coord: int | None,
        resize: int | None,
        attrs: list[list[tuple[bytes, bytes]]] | None = None,
        text: tuple[int, int] = (0, 0),
    ) -> int:
        """For each dataset ``names[i]`` of the file: opened, resized to ``resize`` rows (None:
        left), its chunk at row ``coord`` written from ``chunks[i]`` (None: none), its attributes
        ``attrs[i]`` written (None: none; ``text``: their type and space, see :meth:`_attributes`),
        closed. Returns the index of the first dataset whose call failed (its dataset closed), or
        -1 when all were done; 0 when ``text`` is not a type and a space here (nothing done)."""
        from h5py import h5i

        if attrs is not None and not self.ids(tid=(text[0], h5i.DATATYPE), space=(text[1], h5i.DATASPACE)):
            return 0
        lib = self.lib
        op, extent, write, close = lib.H5Dopen2, lib.H5Dset_extent, lib.H5Dwrite_chunk, lib.H5Dclose
        size = (ctypes.c_uint64 * 1)(resize or 0)
        offset = (ctypes.c_uint64 * 1)(coord or 0)
        base, stride, nbytes = chunks.ctypes.data, chunks.strides[0], chunks.shape[1]
        fid = self.fid
        for i, name in enumerate(names):
            d = op(fid, name, H5P_DEFAULT)
            if d < 0:
                return i
            ok = (
                (resize is None or extent(d, size) >= 0)
                and (coord is None or write(d, H5P_DEFAULT, 0, offset, nbytes, base + i * stride) >= 0)
                and (attrs is None or self._attributes(d, attrs[i], *text))
            )
            if close(d) < 0 or not ok:
                return i
        return -1
