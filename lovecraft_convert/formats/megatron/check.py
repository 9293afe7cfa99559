"""``verify`` of a Megatron dataset's unit: the ``.idx`` against its ``.bin``.

The header (magic, version 1, a dtype code that is the schema's dtype, the sequence count the
manifest gives, one document entry more than sequences), the index's exact size, lengths that are
not negative, pointers that start at 0 and each start where the previous sequence ends, a document
index of ``0..S`` (one document per sequence, as lovecraft writes), lengths that add up to the
``.bin``'s size; then every sequence is decoded for the statistics (and ``--against``). The index
is read in bounded pieces.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from ...schema import Batch, Schema, VarColumn
from ..base import CheckContext, FileProblem, Unit
from .idx import PIECE, IndexProblem, index_bytes, read_index


def manifest_problems(m: dict) -> list[str]:
    """What in the ``megatron`` section contradicts the schema: the dtype and its Megatron code
    (every ``.idx`` holds that code; verify reads it)."""
    from ...errors import DatasetError
    from ...manifest import schema_of
    from .idx import code_of

    info = m.get("megatron")
    if not isinstance(info, dict):
        return []
    try:
        schema = schema_of(m, "")
    except DatasetError:
        return []
    dt = schema.fields[0].np_dtype
    out = []
    if "dtype" in info and np.dtype(info["dtype"]) != dt.newbyteorder("=") and np.dtype(info["dtype"]) != dt:
        out.append(f"megatron.dtype is {info['dtype']!r}; the schema says {dt.name}")
    if "dtype_code" in info and info["dtype_code"] != code_of(dt):
        out.append(f"megatron.dtype_code is {info['dtype_code']}; the code of the schema's {dt.name} is {code_of(dt)}")
    return out


def unit_files(unit: Unit) -> tuple[str, str]:
    """The unit's ``.bin`` and ``.idx`` (a FileProblem when it does not list exactly one of each)."""
    bins = [p for p in unit.files if p.endswith(".bin")]
    idxs = [p for p in unit.files if p.endswith(".idx")]
    if len(bins) != 1 or len(idxs) != 1 or len(unit.files) != 2:
        others = ", ".join(unit.files) or "none"
        raise FileProblem(unit.first, f"{unit.label} lists {others}; expected one .bin and one .idx", "manifest")
    if bins[0][: -len(".bin")] != idxs[0][: -len(".idx")]:
        raise FileProblem(idxs[0], f"is not the index of {bins[0]} (Megatron pairs <prefix>.bin with <prefix>.idx)")
    return bins[0], idxs[0]


def check_unit(ctx: CheckContext, unit: Unit, schema: Schema) -> Iterator[tuple[Batch, str]]:
    b, p = unit_files(unit)
    try:
        index = read_index(ctx.full(p))
    except IndexProblem as e:
        raise FileProblem(p, str(e)) from None
    want = np.dtype(schema.fields[0].dtype)
    if index.dtype != want.newbyteorder("<"):
        raise FileProblem(p, f"has dtype code {index.code} ({index.dtype.name}), the schema says {want.name}", "schema")
    S, D = index.sequences, index.documents
    if unit.rows != S:
        raise FileProblem(p, f"holds {S} sequences, the manifest says {unit.rows}", "rows")
    if D != S + 1:
        raise FileProblem(
            p, f"has {D} document index entries for {S} sequences; lovecraft writes one per sequence and one more"
        )
    need = index_bytes(S, D)
    if index.size != need:
        extra = index.size - need
        what = " (sequence modes: a multimodal index, which lovecraft does not write)" if extra == S and S else ""
        raise FileProblem(p, f"holds {extra} bytes after its document index{what}")
    isz = index.dtype.itemsize
    bin_size = os.path.getsize(ctx.full(b))
    lengths, pointers, docs = index.arrays()
    expect = 0  # where the next sequence starts in .bin (bytes)
    for a, z in _pieces(S):
        lens = np.asarray(lengths[a:z], dtype=np.int64)
        neg = np.flatnonzero(lens < 0)
        if len(neg):
            raise FileProblem(p, f"sequence {a + int(neg[0])} has length {int(lens[neg[0]])}")
        want_ptr = expect + np.concatenate(([0], np.cumsum(lens[:-1]))) * isz
        bad = np.flatnonzero(np.asarray(pointers[a:z]) != want_ptr)
        if len(bad):
            i = int(bad[0])
            if a + i == 0:
                raise FileProblem(p, f"its first pointer is {int(pointers[0])}, not 0")
            raise FileProblem(
                p,
                f"sequence {a + i} points at byte {int(pointers[a + i])}, not at {int(want_ptr[i])} where sequence "
                f"{a + i - 1} ends (pointers must follow the lengths)",
            )
        expect = int(want_ptr[-1]) + int(lens[-1]) * isz if z > a else expect
    for a, z in _pieces(D):
        bad = np.flatnonzero(np.asarray(docs[a:z]) != np.arange(a, z))
        if len(bad):
            i = a + int(bad[0])
            raise FileProblem(p, f"document index entry {i} is {int(docs[i])}, not {i} (one document per sequence)")
    if expect != bin_size:
        raise FileProblem(
            b,
            f"holds {bin_size} bytes, but the lengths in {p} add up to {expect // isz} tokens ({expect} bytes)",
            "rows",
        )
    yield from _batches(ctx, schema, b, lengths, index.dtype, S)


def _pieces(n: int) -> Iterator[tuple[int, int]]:
    for a in range(0, n, PIECE):
        yield a, min(n, a + PIECE)


def _batches(
    ctx: CheckContext, schema: Schema, b: str, lengths, dtype: np.dtype, S: int
) -> Iterator[tuple[Batch, str]]:
    name = schema.fields[0].name
    step = ctx.step_rows(schema)
    with open(ctx.full(b), "rb", buffering=0) as f:
        for a in range(0, S, step):
            z = min(S, a + step)
            lens = np.asarray(lengths[a:z], dtype=np.int64)
            offs = np.zeros(len(lens) + 1, dtype=np.int64)
            np.cumsum(lens, out=offs[1:])
            values = np.fromfile(f, dtype=dtype, count=int(offs[-1]))
            if len(values) != offs[-1]:
                raise FileProblem(b, f"ends inside sequence {a} (shorter than its index says)", "rows")
            yield Batch({name: VarColumn(values, offs)}, z - a), b
