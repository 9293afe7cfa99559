"""How lovecraft's columns are MDS columns, and the bytes of MDS shards and their ``index.json``.

MosaicML Streaming's MDS, as its reader (``streaming.base.format.mds``) takes it: a shard file is a
table of items (:mod:`..itemfile`) whose preamble is the shard's configuration as JSON (keys
sorted); an item (a sample) is the uint32 sizes of its variable-size columns, then every column's
bytes, both in the order of the columns' sorted names; little-endian throughout. ``index.json``
lists every shard: its configuration plus ``samples``, ``raw_data`` (file name, bytes, digests) and
``zip_data`` (null: lovecraft writes MDS uncompressed).

Each column kind maps to the encoding whose decoder gives the values back as they were written:

=====================================  ==========================  =================================
lovecraft column                       MDS encoding                ``StreamingDataset`` gives
=====================================  ==========================  =================================
fixed number (int8..uint64, float16..)  its dtype (``int64``, ...)  a NumPy scalar of that dtype
fixed bool                             ``uint8``                   a NumPy uint8, 0 or 1
fixed number of shape ``(d1, d2, ..)``  ``ndarray:<dtype>:d1,d2``   an array of that dtype and shape
string (and fixed unicode)             ``str``                     ``str``
binary                                 ``bytes``                   ``bytes``
sequence of numbers                    ``ndarray:<dtype>``         a 1-d array (its length in the
                                                                   item: one byte 6, a uint32)
list of strings                        ``json``                    a ``list`` of ``str``
=====================================  ==========================  =================================

MDS has no complex numbers and no dimension of length 0; such columns are refused in one line.
"""

from __future__ import annotations

import json

import numpy as np

from ...errors import SchemaError
from ...schema import BINARY, FIXED, SEQUENCE, STRING, STRING_LIST, Batch, Field, Schema, VarColumn
from ..items import Const, Fixed, Piece, Var, fixed_bytes, gather, gather_fixed, uint32_at, var_bytes

DTYPES = ("uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32", "uint64", "int64", "float64")
SEQ_HEAD = 1 << 2 | 2  # a 1-d array whose shape follows as uint32 (MDS: ndim << 2 | shape dtype 2)
INDEX_NAME = "index.json"
VERSION = 2


def stored_dtype(f: Field) -> str:
    """The MDS dtype name of a numeric column's values (bool as uint8)."""
    dt = f.np_dtype
    return "uint8" if dt.kind == "b" else dt.name


def encoding(f: Field, source: str = "") -> str:
    """The MDS encoding of column ``f``; SchemaError (one line naming it) when MDS cannot hold it."""
    where = f"{source}, column '{f.name}'" if source else f"column '{f.name}'"
    dt = f.np_dtype
    if f.kind in (STRING, BINARY):
        return "str" if f.kind == STRING else "bytes"
    if f.kind == STRING_LIST:
        return "json"
    if f.kind == FIXED and dt.kind in "US" and not f.shape:
        return "str" if dt.kind == "U" else "bytes"
    if dt.kind in "US":
        raise SchemaError(
            f"{where}: rows of {f.describe()} text; MDS holds one text value per row, not arrays of them",
            hint="leave the column out with --columns, or write another format",
        )
    if dt.kind not in "biuf" or stored_dtype(f) not in DTYPES:
        raise SchemaError(
            f"{where}: MDS has no {dt.name} values (its numbers are {', '.join(DTYPES)})",
            hint="leave the column out with --columns, or write another format",
        )
    if f.kind == SEQUENCE:
        return f"ndarray:{stored_dtype(f)}"
    if not f.shape:
        return stored_dtype(f)
    if min(f.shape) < 1:
        raise SchemaError(
            f"{where}: rows of shape {list(f.shape)}; an MDS ndarray column has no dimension of length 0",
            hint="leave the column out with --columns, or write another format",
        )
    return f"ndarray:{stored_dtype(f)}:{','.join(map(str, f.shape))}"


def size_of(f: Field) -> int | None:
    """The fixed size of the column's bytes in every sample, or None (variable: its size is in the sample)."""
    if f.kind != FIXED or f.np_dtype.kind in "US":
        return None
    return int(np.dtype(stored_dtype(f)).itemsize * f.row_size)


def columns(schema: Schema) -> list[Field]:
    """The columns in MDS order: sorted by name."""
    return sorted(schema.fields, key=lambda f: f.name)


def config(schema: Schema, hash: str) -> dict:
    """A shard's configuration, the same for every shard (MDS repeats it in each file and entry).
    With ``--hash sha256`` the index carries each file's digest under ``sha256``, which
    ``StreamingDataset(validate_hash="sha256")`` checks; BLAKE3 is not one of its algorithms."""
    cols = columns(schema)
    return {
        "column_encodings": [encoding(f) for f in cols],
        "column_names": [f.name for f in cols],
        "column_sizes": [size_of(f) for f in cols],
        "compression": None,
        "format": "mds",
        "hashes": ["sha256"] if hash == "sha256" else [],
        "size_limit": None,
        "version": VERSION,
    }


def preamble(schema: Schema, hash: str) -> bytes:
    """The configuration as each shard file holds it (JSON, keys sorted)."""
    return json.dumps(config(schema, hash), sort_keys=True).encode("utf-8")


def index_bytes(schema: Schema, files: list[dict]) -> bytes:
    """``index.json`` for the shard files ``files`` (manifest entries, in the dataset's order)."""
    shards = []
    for f in files:
        hash = "sha256" if "sha256" in f else "blake3"
        entry = config(schema, hash)
        name = f["path"].rsplit("/", 1)[-1]
        digests = {"sha256": f["sha256"]} if hash == "sha256" else {}
        entry.update(samples=f["rows"], raw_data={"basename": name, "bytes": f["bytes"], "hashes": digests})
        entry["zip_data"] = None
        shards.append(entry)
    return json.dumps({"shards": shards, "version": VERSION}, sort_keys=True).encode("utf-8")


# --------------------------------------------------------------------------------------------
# samples
# --------------------------------------------------------------------------------------------


def column_pieces(f: Field, col, n: int) -> list[Piece]:
    """The bytes of column ``f`` in each of ``n`` samples."""
    if f.kind == FIXED and f.np_dtype.kind in "US":
        data = [v.encode("utf-8") if isinstance(v, str) else v for v in np.asarray(col).reshape(n).tolist()]
        vc = VarColumn.from_pylist(data, np.uint8) if data else VarColumn(np.zeros(0, np.uint8), np.zeros(1, np.int64))
        return [Var(vc.values, vc.offsets)]
    if f.kind == FIXED:
        arr = np.asarray(col)
        return [fixed_bytes(arr.astype(np.uint8) if arr.dtype.kind == "b" else arr, stored_dtype(f))]
    if f.kind == STRING_LIST:
        rows = col.to_pylist(STRING_LIST)
        data = [json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode("utf-8") for r in rows]
        vc = VarColumn.from_pylist(data, np.uint8) if data else VarColumn(np.zeros(0, np.uint8), np.zeros(1, np.int64))
        return [Var(vc.values, vc.offsets)]
    offs = np.asarray(col.offsets, dtype=np.int64)
    if f.kind == SEQUENCE:
        dt = np.dtype(stored_dtype(f))
        head = np.empty((n, 5), dtype=np.uint8)
        head[:, 0] = SEQ_HEAD
        head[:, 1:] = np.diff(offs).astype("<u4").view(np.uint8).reshape(n, 4)
        values = np.asarray(col.values)
        values = (
            values.astype(np.uint8) if values.dtype.kind == "b" else values.astype(dt.newbyteorder("<"), copy=False)
        )
        return [Fixed(head), var_bytes(values, offs, dt.itemsize)]
    return [Var(np.asarray(col.values, dtype=np.uint8), offs)]


def sample_pieces(schema: Schema, batch: Batch) -> list[Piece]:
    """The pieces of every sample of ``batch``: the sizes of its variable columns, then its columns."""
    from ..items import lengths

    n = batch.num_rows
    cols = columns(schema)
    per = [column_pieces(f, batch.columns[f.name], n) for f in cols]
    sizes = [lengths(p, n) for f, p in zip(cols, per, strict=True) if size_of(f) is None]
    out: list[Piece] = []
    if sizes:
        out.append(Fixed(np.stack(sizes, axis=1).astype("<u4").view(np.uint8).reshape(n, -1)))
    for p in per:
        out.extend(p)
    return out or [Const(b"")]


class DecodeProblem(Exception):
    """Samples that are not what the configuration says (sizes, a sequence's header, JSON)."""


def decode(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, schema: Schema, wanted: list[str]) -> Batch:
    """The columns ``wanted`` of the samples at ``starts`` (of lengths ``lens``) in the mapped shard ``buf``."""
    n = len(starts)
    cols = columns(schema)
    nvar = sum(size_of(f) is None for f in cols)
    var_sizes = uint32_at(buf, starts, nvar).astype(np.int64) if nvar else np.zeros((n, 0), np.int64)
    sizes = np.empty((n, len(cols)), dtype=np.int64)
    j = 0
    for i, f in enumerate(cols):
        fixed = size_of(f)
        if fixed is None:
            sizes[:, i] = var_sizes[:, j]
            j += 1
        else:
            sizes[:, i] = fixed
    if n and not np.array_equal(4 * nvar + sizes.sum(axis=1), lens):
        bad = int(np.flatnonzero(4 * nvar + sizes.sum(axis=1) != lens)[0])
        raise DecodeProblem(f"sample {bad}: its column sizes do not add up to its {int(lens[bad])} bytes")
    at = starts + 4 * nvar + np.concatenate([np.zeros((n, 1), np.int64), np.cumsum(sizes, axis=1)], axis=1)[:, :-1].T
    out = {}
    for i, f in enumerate(cols):
        if f.name in wanted:
            out[f.name] = _column(buf, at[i], sizes[:, i], f, n)
    return Batch({name: out[name] for name in wanted}, n)


def _column(buf: np.ndarray, at: np.ndarray, size: np.ndarray, f: Field, n: int):
    if f.kind == FIXED and f.np_dtype.kind not in "US":
        dt = np.dtype(stored_dtype(f)).newbyteorder("<")
        raw = gather_fixed(buf, at, int(size_of(f))).view(dt).reshape((n, *f.shape))
        if f.np_dtype.kind == "b":
            if raw.size and int(raw.max()) > 1:
                bad = int(np.flatnonzero(raw.reshape(n, -1).max(axis=1) > 1)[0])
                raise DecodeProblem(
                    f"sample {bad}: column '{f.name}' holds {int(raw.reshape(n, -1)[bad].max())}, not 0 or 1"
                )
            return raw.astype(np.bool_)
        return raw
    if f.kind == SEQUENCE:
        if n and (size < 5).any():
            raise DecodeProblem(f"sample {int(np.flatnonzero(size < 5)[0])}: column '{f.name}' has no array header")
        head = gather_fixed(buf, at, 5)
        if n and (head[:, 0] != SEQ_HEAD).any():
            bad = int(np.flatnonzero(head[:, 0] != SEQ_HEAD)[0])
            raise DecodeProblem(
                f"sample {bad}: column '{f.name}' starts with byte {int(head[bad, 0])}, not {SEQ_HEAD} (a 1-d array "
                "whose length is a uint32)"
            )
        dt = np.dtype(stored_dtype(f)).newbyteorder("<")
        length = head[:, 1:].copy().view("<u4").reshape(n).astype(np.int64)
        if n and not np.array_equal(length * dt.itemsize, size - 5):
            bad = int(np.flatnonzero(length * dt.itemsize != size - 5)[0])
            raise DecodeProblem(
                f"sample {bad}: column '{f.name}' says {int(length[bad])} values in {int(size[bad]) - 5} bytes"
            )
        values, offs = gather(buf, at + 5, size - 5)
        values = values.view(dt)
        if f.np_dtype.kind == "b":
            values = values.astype(np.bool_)
        return VarColumn(values, offs // dt.itemsize)
    values, offs = gather(buf, at, size)
    if f.kind == STRING_LIST:
        rows = []
        for i in range(n):
            try:
                v = json.loads(values[offs[i] : offs[i + 1]].tobytes().decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise DecodeProblem(f"sample {i}: column '{f.name}' is not JSON ({e})") from None
            if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                raise DecodeProblem(f"sample {i}: column '{f.name}' is not a JSON list of strings")
            rows.append(v)
        return VarColumn.from_string_lists(rows)
    if f.kind == FIXED:  # fixed-width text, as str (or bytes) values
        text = [values[offs[i] : offs[i + 1]].tobytes() for i in range(n)]
        return np.array([t.decode("utf-8") for t in text] if f.np_dtype.kind == "U" else text, dtype=f.np_dtype)
    return VarColumn(values, offs)
