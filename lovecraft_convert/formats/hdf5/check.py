"""``verify`` of an HDF5 dataset's unit: the file's structure (no external links, external storage
or virtual datasets: reported, never followed), every dataset's shape, type and chunk size, and every
row read (fletcher32 checked where written); and of a bucketed dataset's ``buckets.h5`` index."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from ...schema import BINARY, FIXED, STRING, Batch, Field, Schema, VarColumn
from ..checking import CheckContext, FileProblem, Unit, short
from .links import STRAY, survey

MAX_CHUNK_BYTES = 64 << 20  # an HDF5 chunk larger than this is refused (we write ~1 MiB chunks)


def check_unit(ctx: CheckContext, unit: Unit, schema: Schema, p: str) -> Iterator[tuple[Batch, str]]:
    full = ctx.full(p)
    try:
        f = h5py.File(full, "r", rdcc_nbytes=4 << 20)
    except (OSError, ValueError) as e:
        raise FileProblem(p, f"cannot be opened as HDF5 ({short(e)})") from None
    with f:
        try:
            dsets = _datasets(p, f, unit, schema)
        except (KeyError, OSError, RuntimeError, ValueError, TypeError, AttributeError) as e:
            raise FileProblem(p, f"damaged HDF5 structure ({short(e)})") from None
        step = ctx.step_rows(schema)
        chunk0 = min((ds.chunks[0] for ds in dsets.values() if ds.chunks), default=1)
        if step > chunk0:
            step -= step % chunk0
        for a in range(0, unit.rows, step):
            b = min(unit.rows, a + step)
            cols: dict[str, Any] = {}
            for fd in schema:
                ds = dsets[fd.name]
                try:
                    if fd.kind == FIXED and fd.np_dtype.kind == "U":
                        cols[fd.name] = np.array(ds.asstr()[a:b].tolist(), dtype=fd.np_dtype).reshape(
                            (b - a, *fd.shape)
                        )
                    elif fd.kind == FIXED:
                        out = np.empty((b - a, *fd.shape), dtype=fd.np_dtype)
                        if b > a:
                            ds.read_direct(out, np.s_[a:b])
                        cols[fd.name] = out
                    else:
                        raw = ds[a:b]
                        cols[fd.name] = var_from_objects(raw, fd)
                except (OSError, KeyError, ValueError, RuntimeError, TypeError, UnicodeError) as e:
                    raise FileProblem(
                        p, f"dataset '{fd.name}', rows {a + 1}-{b}: cannot be read ({short(e)})"
                    ) from None
            yield Batch(cols, b - a), p


def _datasets(p: str, f, unit: Unit, schema: Schema) -> dict:
    """The schema's datasets, after checking the file's structure, shapes, types and chunks."""
    _links(p, f, schema)
    dsets = {}
    for fd in schema:
        ds = f[fd.name]
        if not isinstance(ds, h5py.Dataset):
            raise FileProblem(p, f"'{fd.name}' is not a dataset", "schema")
        want = (unit.rows, *fd.shape) if fd.kind == FIXED else (unit.rows,)
        if ds.shape != want:
            if ds.shape[:1] != want[:1] and ds.shape[1:] == want[1:]:
                raise FileProblem(
                    p, f"dataset '{fd.name}' holds {ds.shape[0]} rows, the manifest says {unit.rows}", "rows"
                )
            raise FileProblem(p, f"dataset '{fd.name}' has shape {ds.shape}, the schema says {want}", "schema")
        if fd.kind == FIXED and fd.np_dtype.kind == "U":
            if h5py.check_string_dtype(ds.dtype) is None:
                raise FileProblem(p, f"dataset '{fd.name}' holds {ds.dtype}, not text", "schema")
        elif fd.kind == FIXED:
            if ds.dtype != fd.np_dtype:
                raise FileProblem(p, f"dataset '{fd.name}' holds {ds.dtype}, the schema says {fd.np_dtype}", "schema")
        elif fd.kind == STRING:
            if h5py.check_string_dtype(ds.dtype) is None:
                raise FileProblem(p, f"dataset '{fd.name}' holds {ds.dtype}, not text", "schema")
        else:
            base = h5py.check_vlen_dtype(ds.dtype)
            want_dt = np.dtype(np.uint8) if fd.kind == BINARY else fd.np_dtype
            if base is None or np.dtype(base) != want_dt:
                raise FileProblem(p, f"dataset '{fd.name}' holds {ds.dtype}, the schema says {fd.describe()}", "schema")
        if ds.chunks is not None:
            chunk_bytes = ds.dtype.itemsize * int(np.prod(ds.chunks, dtype=np.int64))
            # one row, whatever its size, is a chunk lovecraft writes (a row of 100 MB: its own
            # output was refused); more than 64 MiB of rows is not
            row_bytes = ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64))
            if chunk_bytes > max(MAX_CHUNK_BYTES, row_bytes):
                raise FileProblem(p, f"dataset '{fd.name}' has chunks of {chunk_bytes} bytes (refused: over 64 MiB)")
        dsets[fd.name] = ds
    return dsets


def _links(p: str, f, schema: Schema) -> None:
    """External and soft links, external storage, virtual datasets and objects other than the
    schema's datasets are problems (:func:`.links.survey`); none of them is followed. The worst is
    reported."""
    found = survey(f, set(schema.names))
    if found:
        rank, message = found[0]
        raise FileProblem(p, message, "schema" if rank == STRAY else "decode")
    missing = [n for n in schema.names if n not in f]
    if missing:
        raise FileProblem(p, f"has no dataset '{missing[0]}'", "schema")


def var_from_objects(raw, fd: Field) -> VarColumn:
    """An HDF5 object array of bytes (text) or arrays (sequences, binary) as a VarColumn."""
    n = len(raw)
    if fd.kind in ("string", "binary") and (n == 0 or isinstance(raw[0], (bytes, str))):
        try:  # h5py gives bytes objects: joined as they are
            values = np.frombuffer(b"".join(raw), dtype=np.uint8)
            items = raw
        except TypeError:
            items = [x.encode("utf-8") if isinstance(x, str) else bytes(x) for x in raw]
            values = np.frombuffer(b"".join(items), dtype=np.uint8)
        lens = np.fromiter(map(len, items), dtype=np.int64, count=n)
    else:
        dt = np.dtype(np.uint8) if fd.kind in ("string", "binary") else fd.np_dtype
        arrays = [np.asarray(x, dtype=dt).reshape(-1) for x in raw]
        lens = np.fromiter(map(len, arrays), dtype=np.int64, count=n)
        values = np.concatenate(arrays) if arrays else np.zeros(0, dt)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    return VarColumn(values, offs)
