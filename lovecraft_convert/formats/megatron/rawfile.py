"""``inspect`` of Megatron indexed datasets, ours or anyone's (``lovecraft inspect data.idx`` or
``data.bin``): the header, the sequences, documents and tokens, the length distribution, whether the
``.bin`` is as long as the index says and the pointers follow the lengths, and the first sequences'
first token ids. The index is read in bounded pieces; a damaged one is one line naming it."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ...errors import InputError
from ...util import format_size, number
from .idx import MAGIC, PIECE, IndexProblem, index_bytes, read_index

PREVIEW = 5  # sequences shown
PREVIEW_TOKENS = 16


def prefix_of(path: str) -> str | None:
    """The ``<prefix>`` of ``<prefix>.idx`` or ``<prefix>.bin`` when ``<prefix>.idx`` is a Megatron index."""
    for ext in (".idx", ".bin"):
        if path.endswith(ext):
            idx = path[: -len(ext)] + ".idx"
            try:
                with open(idx, "rb") as f:
                    return path[: -len(ext)] if f.read(len(MAGIC)) == MAGIC else None
            except OSError:
                return None
    return None


def inspect_megatron(inputs: list[str], sample: int | None = None) -> dict[str, Any]:
    prefixes: list[str] = []
    for p in inputs:
        pre = prefix_of(p)
        if pre is None:
            raise InputError(f"{p}: not a Megatron .idx/.bin pair", hint="inspect Megatron files separately")
        if pre not in prefixes:
            prefixes.append(pre)
    files = [_one(pre) for pre in prefixes]
    return {
        "kind": "megatron",
        "files": files,
        "sequences": sum(f["sequences"] for f in files),
        "documents": sum(f["documents"] for f in files),
        "tokens": sum(f["tokens"] for f in files),
    }


def _one(prefix: str) -> dict[str, Any]:
    idx, binp = prefix + ".idx", prefix + ".bin"
    try:
        index = read_index(idx)
    except IndexProblem as e:
        raise InputError(f"{idx}: {e}", hint="the file is damaged or not a Megatron index") from None
    S, D = index.sequences, index.documents
    need = index_bytes(S, D)
    modes = index.size == index_bytes(S, D, modes=True) and S > 0
    if index.size != need and not modes:
        raise InputError(f"{idx}: holds {index.size - need} bytes after its document index", hint="the file is damaged")
    lengths, pointers, docs = index.arrays()
    isz = index.dtype.itemsize
    tokens, lo, hi, follows, expect = 0, None, None, True, 0
    for a in range(0, S, PIECE):
        lens = np.asarray(lengths[a : a + PIECE], dtype=np.int64)
        tokens += int(lens.sum())
        lo = int(lens.min()) if lo is None else min(lo, int(lens.min()))
        hi = int(lens.max()) if hi is None else max(hi, int(lens.max()))
        want = expect + np.concatenate(([0], np.cumsum(lens[:-1]))) * isz
        follows = follows and bool(np.array_equal(pointers[a : a + PIECE], want))
        expect = int(want[-1]) + int(lens[-1]) * isz
    bin_size = os.path.getsize(binp) if os.path.exists(binp) else None
    preview = []
    if bin_size is not None and bin_size >= tokens * isz:
        m = np.memmap(binp, dtype=index.dtype, mode="r") if bin_size else np.zeros(0, index.dtype)
        for i in range(min(PREVIEW, S)):
            start = int(pointers[i]) // isz
            n = min(int(lengths[i]), PREVIEW_TOKENS)
            preview.append({"sequence": i, "length": int(lengths[i]), "ids": m[start : start + n].tolist()})
    return {
        "prefix": prefix,
        "idx": os.path.abspath(idx),
        "bin": os.path.abspath(binp) if bin_size is not None else None,
        "dtype": index.dtype.name,
        "dtype_code": index.code,
        "sequences": S,
        "documents": max(0, D - 1),
        "one_sequence_per_document": D == S + 1
        and bool(np.array_equal(docs[: min(D, PIECE)], np.arange(min(D, PIECE)))),
        "multimodal": modes,
        "tokens": tokens,
        "length": {"min": lo, "mean": tokens / S if S else None, "max": hi},
        "pointers_follow_lengths": follows,
        "bin_bytes": bin_size,
        "bin_matches": bin_size == tokens * isz if bin_size is not None else None,
        "idx_bytes": index.size,
        "preview": preview,
    }


def format_report(r: dict[str, Any]) -> str:
    out = []
    for f in r["files"]:
        ln = f["length"]
        out.append(
            f"{f['prefix']}: Megatron indexed dataset, {f['dtype']} tokens (code {f['dtype_code']}), "
            f"{number(f['sequences'])} sequences in {number(f['documents'])} documents, {number(f['tokens'])} tokens"
        )
        if f["sequences"]:
            out.append(f"  sequence lengths {number(ln['min'])}..{number(ln['max'])}, mean {ln['mean']:.1f}")
        if f["bin"] is None:
            out.append(f"  {f['prefix']}.bin: missing")
        else:
            ok = "as long as the index says" if f["bin_matches"] else "NOT as long as the index says"
            out.append(f"  .bin {format_size(f['bin_bytes'])}: {ok}; .idx {format_size(f['idx_bytes'])}")
        if not f["pointers_follow_lengths"]:
            out.append("  pointers do not follow the lengths (sequences are not stored back to back)")
        if f["multimodal"]:
            out.append("  multimodal (the index holds sequence modes)")
        for p in f["preview"]:
            more = ", ..." if p["length"] > len(p["ids"]) else ""
            out.append(f"  sequence {p['sequence']}: {p['length']} tokens: {', '.join(map(str, p['ids']))}{more}")
    if len(r["files"]) > 1:
        out.append(
            f"in all: {number(r['sequences'])} sequences, {number(r['documents'])} documents, {number(r['tokens'])} tokens"
        )
    return "\n".join(out) + "\n"
