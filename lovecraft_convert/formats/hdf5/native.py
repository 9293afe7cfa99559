"""A wide table's chunk writes made through the HDF5 library h5py has loaded, called with ctypes.

h5py holds the GIL through every HDF5 call; ctypes releases it for the length of each foreign
call. A table of 2,000 columns makes ~20,000 dataset opens, chunk writes and closes per 250 MB
(~45 us each inside HDF5), and held, the GIL stalls the reading thread for all of them (~1 s of
a ~4 s run). The calls are the ones h5py makes (``H5Dopen2``, ``H5Dset_extent``,
``H5Dwrite_chunk``, ``H5Dclose``) on the same library instance (the path h5py's extension
loaded, from ``/proc/self/maps``) and under h5py's own lock, so the file is the one h5py would
write, byte for byte. Where the library cannot be found (not Linux, say) ``calls()`` is None and
the writer uses h5py. A call that fails is made again through h5py, for its error.
"""

from __future__ import annotations

import ctypes
import functools
import os

hid_t = ctypes.c_int64
herr_t = ctypes.c_int
hsize_p = ctypes.POINTER(ctypes.c_uint64)
H5P_DEFAULT = 0


def _loaded_library() -> str | None:
    """The path of the libhdf5 mapped into this process (h5py's, once h5py is imported)."""
    import h5py  # noqa: F401 - loads the library

    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                base = os.path.basename(path)
                if base.startswith("libhdf5") and not base.startswith("libhdf5_") and ".so" in base:
                    return path
    except OSError:
        return None
    return None


@functools.cache
def calls():
    """The four HDF5 functions, typed, or None when the library cannot be reached."""
    if os.environ.get("LOVECRAFT_HDF5_NATIVE") == "0":
        return None
    path = _loaded_library()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)  # the same instance: dlopen of a loaded path adds a reference
        fns = (lib.H5Dopen2, lib.H5Dset_extent, lib.H5Dwrite_chunk, lib.H5Dclose)
    except (OSError, AttributeError):
        return None
    op, extent, write, close = fns
    op.argtypes, op.restype = [hid_t, ctypes.c_char_p, hid_t], hid_t
    extent.argtypes, extent.restype = [hid_t, hsize_p], herr_t
    write.argtypes = [hid_t, hid_t, ctypes.c_uint32, hsize_p, ctypes.c_size_t, ctypes.c_void_p]
    write.restype = herr_t
    close.argtypes, close.restype = [hid_t], herr_t
    return fns


def attribute_calls() -> bool:
    """Whether :func:`write_chunks` can write attributes (the library's ``H5Acreate2``,
    ``H5Awrite`` and ``H5Aclose`` found)."""
    return calls() is not None and _function_set("H5Acreate2", "H5Awrite", "H5Aclose") is not None


def create_closed(fid: int, name: bytes, tid: int, space: int, dcpl: int) -> bool:
    """Dataset ``name`` of file ``fid`` created (type ``tid``, dataspace ``space``, creation
    properties ``dcpl``; links and access as h5py's ``h5d.create`` makes them) and closed at once:
    whether it was. False when the library cannot be reached or the call failed (nothing left
    open): make it with h5py, for its error. The caller holds h5py's lock."""
    base = calls()
    fns = None if base is None else _function_set("H5Dcreate2")
    if fns is None:
        return False
    d = fns[0](fid, name, tid, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)
    return d >= 0 and base[3](d) >= 0


_SIGNATURES = {
    "H5Acreate2": ([hid_t, ctypes.c_char_p, hid_t, hid_t, hid_t, hid_t], hid_t),
    "H5Awrite": ([hid_t, hid_t, ctypes.c_void_p], herr_t),
    "H5Aclose": ([hid_t], herr_t),
    "H5Dcreate2": ([hid_t, ctypes.c_char_p, hid_t, hid_t, hid_t, hid_t, hid_t], hid_t),
}


@functools.cache
def _function_set(*names: str):
    """The library's functions ``names``, typed, or None (call only once :func:`calls` found it)."""
    try:
        lib = ctypes.CDLL(_loaded_library())
        fns = tuple(getattr(lib, n) for n in names)
    except (OSError, AttributeError, TypeError):
        return None
    for n, fn in zip(names, fns, strict=True):
        fn.argtypes, fn.restype = _SIGNATURES[n]
    return fns


def _attributes(d: int, pairs: list[tuple[bytes, bytes]], tid: int, space: int) -> bool:
    """Dataset ``d``'s attributes ``pairs`` ((name, UTF-8 value)) created as ``tid`` (a
    variable-length string type) over ``space`` (scalar) and written, as h5py's
    ``h5a.create(...).write(...)`` does: whether all were (nothing left open)."""
    create, write, aclose = _function_set("H5Acreate2", "H5Awrite", "H5Aclose")
    for aname, value in pairs:
        a = create(d, aname, tid, space, H5P_DEFAULT, H5P_DEFAULT)
        if a < 0:
            return False
        text = ctypes.c_char_p(value)
        ok = write(a, tid, ctypes.byref(text)) >= 0
        if aclose(a) < 0 or not ok:
            return False
    return True


def write_chunks(
    fid: int,
    names: list[bytes],
    chunks,
    coord: int | None,
    resize: int | None,
    attrs: list[list[tuple[bytes, bytes]]] | None = None,
    text: tuple[int, int] = (0, 0),
) -> int:
    """For each dataset ``names[i]`` of file ``fid``: opened, resized to ``resize`` rows (None:
    left), its chunk at row ``coord`` written from ``chunks[i]`` (None: none), its attributes
    ``attrs[i]`` written (None: none; ``text``: their type and space, see :func:`_attributes`),
    closed. Returns the index of the first dataset whose call failed (its dataset closed), or -1
    when all were done. The caller holds h5py's lock."""
    op, extent, write, close = calls()
    size = (ctypes.c_uint64 * 1)(resize or 0)
    offset = (ctypes.c_uint64 * 1)(coord or 0)
    base, stride, nbytes = chunks.ctypes.data, chunks.strides[0], chunks.shape[1]
    for i, name in enumerate(names):
        d = op(fid, name, H5P_DEFAULT)
        if d < 0:
            return i
        ok = (
            (resize is None or extent(d, size) >= 0)
            and (coord is None or write(d, H5P_DEFAULT, 0, offset, nbytes, base + i * stride) >= 0)
            and (attrs is None or _attributes(d, attrs[i], *text))
        )
        if close(d) < 0 or not ok:
            return i
    return -1
