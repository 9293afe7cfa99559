"""``verify`` of a memmap dataset's unit: every ``.npy`` header checked against the file size and
the schema before anything is mapped; offsets that start at 0, never decrease and end at the
values' length; text that is valid UTF-8."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import InputError
from ...inputs.npy import read_header
from ...schema import FIXED, SEQUENCE, STRING, Batch, Schema, VarColumn
from ..checking import CheckContext, ColumnFiles, FileProblem, Unit

ROLES = ("data", "values", "offsets")


def mapped(ctx: CheckContext, p: str, want_dtype, want_shape: tuple[int, ...]):
    """Map one .npy file after checking its header against the file size and the schema
    (``want_shape[0] == -1``: any number of rows)."""
    full = ctx.full(p)
    size = os.path.getsize(full)
    try:
        with open(full, "rb") as f:
            h = read_header(f, p)
    except InputError as e:
        raise FileProblem.of(p, e) from None
    expect = h.offset + h.data_bytes
    if size < expect:
        raise FileProblem(
            p,
            f"truncated: the header declares shape {h.shape} {h.dtype} ({h.data_bytes} data bytes) "
            f"but the file holds {size - h.offset}",
        )
    if size > expect:
        raise FileProblem(p, f"{size - expect} bytes of trailing garbage after the data the header declares")
    if h.fortran_order and len(h.shape) > 1:
        raise FileProblem(p, "stored in Fortran order; lovecraft writes C order", "schema")
    if h.dtype != want_dtype:
        raise FileProblem(p, f"holds {h.dtype}, the schema says {want_dtype}", "schema")
    if tuple(h.shape) != tuple(want_shape) and not (want_shape and want_shape[0] == -1):
        if h.shape[1:] == tuple(want_shape[1:]):
            raise FileProblem(p, f"holds {h.shape[0]} rows, the manifest says {want_shape[0]}", "rows")
        raise FileProblem(p, f"has shape {h.shape}, the schema says {tuple(want_shape)}", "schema")
    if want_shape and want_shape[0] == -1 and tuple(h.shape[1:]) != tuple(want_shape[1:]):
        raise FileProblem(p, f"has shape {h.shape}, expected {tuple(want_shape)}", "schema")
    if h.data_bytes == 0:
        return np.empty(h.shape, dtype=h.dtype)
    return np.memmap(full, dtype=h.dtype, mode="r", offset=h.offset, shape=h.shape)


def roles_of(ctx: CheckContext, unit: Unit, schema: Schema) -> dict[str, dict[str, str]]:
    """column -> role -> file, from the manifest's entries of the unit's files."""
    roles: dict[str, dict[str, str]] = {}
    for p in unit.files:
        info = ctx.info[p]
        col = info.get("column")
        if col not in schema.names:
            raise FileProblem(p, f"the manifest gives no column of the schema for it (column {col!r})", "manifest")
        role = info.get("role") or "data"
        if role not in ROLES:
            raise FileProblem(p, f"the manifest gives it no valid role ({role!r})", "manifest")
        roles.setdefault(col, {})[role] = p
    return roles


def check_unit(ctx: CheckContext, unit: Unit, schema: Schema) -> Iterator[tuple[Batch, str]]:
    roles = roles_of(ctx, unit, schema)
    cols: dict[str, Any] = {}
    first: dict[str, str] = {}
    for f in schema:
        r = roles.get(f.name, {})
        if f.kind == FIXED:
            if "data" not in r:
                raise FileProblem(unit.first, f"{unit.label} has no file for column '{f.name}'", "manifest")
            cols[f.name] = mapped(ctx, r["data"], f.np_dtype, (unit.rows, *f.shape))
            first[f.name] = r["data"]
            continue
        if "values" not in r or "offsets" not in r:
            raise FileProblem(unit.first, f"{unit.label} has no values/offsets files for column '{f.name}'", "manifest")
        vdt = f.np_dtype if f.kind == SEQUENCE else np.dtype(np.uint8)
        values = mapped(ctx, r["values"], vdt, (-1,))
        offsets = mapped(ctx, r["offsets"], np.dtype("<i8"), (unit.rows + 1,))
        if offsets[0] != 0:
            raise FileProblem(r["offsets"], f"starts at {int(offsets[0])}, not 0")
        if int(offsets[-1]) != len(values):
            raise FileProblem(r["offsets"], f"ends at {int(offsets[-1])}, but {r['values']} holds {len(values)} values")
        cols[f.name] = (values, offsets, r)
        first[f.name] = r["values"]
    step = ctx.step_rows(schema)
    for a in range(0, unit.rows, step):
        b = min(unit.rows, a + step)
        out: dict[str, Any] = {}
        for name, c in cols.items():
            if isinstance(c, tuple):
                values, offsets, r = c
                offs = np.asarray(offsets[a : b + 1])
                d = np.diff(offs)
                if (d < 0).any():
                    i = a + int(np.flatnonzero(d < 0)[0])
                    raise FileProblem(r["offsets"], f"offsets decrease at row {i + 1} (corrupt)")
                out[name] = VarColumn(values[offs[0] : offs[-1]], offs - offs[0])
                if schema[name].kind == STRING:
                    check_utf8(out[name], a, name, r["values"])
            else:
                out[name] = c[a:b]
        yield Batch(out, b - a), ColumnFiles(first[next(iter(cols))], first)


def check_utf8(col: VarColumn, row0: int, name: str, path: str) -> None:
    """Every row of a text column is valid UTF-8: the rows' concatenation decodes, and no row starts
    inside a character (so no row can borrow the end of a character from the last)."""
    values, offs = np.asarray(col.values), np.asarray(col.offsets)
    starts = offs[:-1][np.diff(offs) > 0]
    bad = np.flatnonzero((values[starts] & 0xC0) == 0x80) if len(starts) else []
    at = int(starts[bad[0]]) if len(bad) else None
    try:
        values.tobytes().decode("utf-8")
    except UnicodeDecodeError as e:
        at = e.start if at is None else min(at, e.start)
    if at is not None:
        row = row0 + int(np.searchsorted(offs, at, side="right")) - 1
        raise FileProblem(path, f"row {row + 1}: column '{name}' is not valid UTF-8 (corrupt)")


def stat_file(ctx: CheckContext, unit: Unit, column: str, key: str) -> str:
    """A length statistic is reported on the offsets file, any other on the data or values file."""
    roles = {}
    for p in unit.files:
        info = ctx.info[p]
        if info.get("column") == column and isinstance(info.get("role") or "data", str):
            roles[info.get("role") or "data"] = p
    if key.startswith("length"):
        return roles.get("offsets") or roles.get("data") or unit.first
    return roles.get("data") or roles.get("values") or unit.first
