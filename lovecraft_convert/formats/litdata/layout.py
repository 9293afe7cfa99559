"""How lovecraft's columns are litdata leaves, and the bytes of litdata chunks and their ``index.json``.

litdata's chunk, as its ``PyTreeLoader`` reads it (``litdata.streaming.item_loader``): a table of
items (:mod:`..itemfile`, no preamble); an item (a row, one dict) is the uint32 size of each leaf,
then the leaves, in the schema's order; little-endian. ``index.json`` lists the chunks (file name,
bytes, items) and the configuration they share: one serializer name per leaf (``data_format``), the
dict's keys (``data_spec``, a pytree spec as JSON), the item loader. Its ``updated_at`` (which
litdata makes a cache directory of) is a digest of the chunks', so a dataset rewritten in place is
fetched again and the same files give the same index.

Each column kind maps to the serializer whose ``deserialize`` gives the values back as they were:

=====================================  ===============================  ==============================
lovecraft column                       litdata serializer               ``StreamingDataset`` gives
=====================================  ===============================  ==============================
fixed int64 / float64 / bool           ``int`` / ``float`` / ``bool``   ``int`` / ``float`` / ``bool``
other fixed numbers (float16, uint8..)  ``numpy`` (a 0-d array)          a 0-d array of that dtype
fixed number of shape ``(d,)``          ``no_header_numpy:<k>``          a 1-d array of that dtype
fixed number of shape ``(d1, d2, ..)``  ``numpy`` (dtype, dims in item)  an array of that shape
string (and fixed unicode)             ``str``                          ``str``
binary                                 ``bytes``                        the bytes (a memoryview)
sequence of numbers                    ``no_header_numpy:<k>``          a 1-d array of that dtype
list of strings                        ``json``                         a ``list`` of ``str``
=====================================  ===============================  ==============================

``k`` is the dtype's place in litdata's table (int8 0 .. float64 10, complex64 11, complex128 12,
bool 13). A chunk's last eight bytes equal to litdata's Arrow footer magic (``LDARW01\\0``) would
make its reader try them as Arrow first; only a binary value that ends so can cause it.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from ...errors import SchemaError
from ...schema import BINARY, FIXED, SEQUENCE, STRING, STRING_LIST, Batch, Field, Schema, VarColumn
from ..items import Const, Fixed, Piece, Var, fixed_bytes, gather, gather_fixed, uint32_at, var_bytes

# litdata's numpy dtype table (litdata.constants._NUMPY_SCTYPES), as far as fixed-size numbers go
DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64", "complex64", "complex128", "bool")  # fmt: skip
INDEX_NAME = "index.json"
SCALARS = {"int64": "int", "float64": "float", "bool": "bool"}


def code(dt: np.dtype) -> int:
    return DTYPES.index(np.dtype(dt).name)


def leaf_format(f: Field, source: str = "") -> str:
    """The serializer of column ``f``; SchemaError (one line naming it) when litdata cannot hold it."""
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
            f"{where}: rows of {f.describe()} text; litdata holds one text value per row, not arrays of them",
            hint="leave the column out with --columns, or write another format",
        )
    if dt.name not in DTYPES:
        raise SchemaError(
            f"{where}: litdata has no {dt.name} values (its arrays are {', '.join(DTYPES)})",
            hint="leave the column out with --columns, or write another format",
        )
    if f.kind == SEQUENCE or (f.kind == FIXED and len(f.shape) == 1):
        return f"no_header_numpy:{code(dt)}"
    if not f.shape and dt.name in SCALARS:
        return SCALARS[dt.name]
    return "numpy"


def array_head(f: Field) -> bytes:
    """The header litdata's ``numpy`` serializer puts before the values: uint32 dtype code, ndim, dims."""
    return np.array([code(f.np_dtype), len(f.shape), *f.shape], dtype="<u4").tobytes()


def config(schema: Schema) -> dict:
    names = schema.names
    leaf = {"type": None, "context": None, "children_spec": []}
    spec = [1, {"type": "builtins.dict", "context": json.dumps(names), "children_spec": [leaf] * len(names)}]
    return {
        "chunk_bytes": None,
        "chunk_size": None,
        "compression": None,
        "compression_batch_size": None,
        "compression_level": None,
        "data_format": [leaf_format(f) for f in schema],
        "data_spec": json.dumps(spec),
        "encryption": None,
        "ipc_compression": None,
        "item_loader": "PyTreeLoader",
        "types": None,
    }


def index_bytes(schema: Schema, files: list[dict]) -> bytes:
    """``index.json`` for the chunk files ``files`` (manifest entries, in the dataset's order)."""
    chunks, h = [], hashlib.sha256()
    for f in files:
        name = f["path"].rsplit("/", 1)[-1]
        chunks.append({"chunk_bytes": f["bytes"], "chunk_size": f["rows"], "dim": None, "filename": name})
        h.update(json.dumps([name, f["bytes"], f.get("blake3") or f.get("sha256")]).encode())
    index = {"chunks": chunks, "config": config(schema), "updated_at": h.hexdigest()[:16]}
    return json.dumps(index, sort_keys=True).encode("utf-8")


# --------------------------------------------------------------------------------------------
# items
# --------------------------------------------------------------------------------------------


def leaf_pieces(f: Field, col, n: int) -> list[Piece]:
    """The bytes of column ``f``'s leaf in each of ``n`` items."""
    fmt = leaf_format(f)
    if f.kind == FIXED and f.np_dtype.kind in "US":
        data = [v.encode("utf-8") if isinstance(v, str) else v for v in np.asarray(col).reshape(n).tolist()]
        vc = VarColumn.from_pylist(data, np.uint8) if data else VarColumn(np.zeros(0, np.uint8), np.zeros(1, np.int64))
        return [Var(vc.values, vc.offsets)]
    if f.kind == FIXED:
        values = fixed_bytes(np.asarray(col), f.np_dtype)
        return [Const(array_head(f)), values] if fmt == "numpy" else [values]
    if f.kind == STRING_LIST:
        rows = col.to_pylist(STRING_LIST)
        data = [json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode("utf-8") for r in rows]
        vc = VarColumn.from_pylist(data, np.uint8) if data else VarColumn(np.zeros(0, np.uint8), np.zeros(1, np.int64))
        return [Var(vc.values, vc.offsets)]
    if f.kind == SEQUENCE:
        dt = f.np_dtype
        return [var_bytes(np.asarray(col.values).astype(dt.newbyteorder("<"), copy=False), col.offsets, dt.itemsize)]
    return [Var(np.asarray(col.values, dtype=np.uint8), np.asarray(col.offsets, dtype=np.int64))]


def item_pieces(schema: Schema, batch: Batch) -> list[Piece]:
    """The pieces of every item of ``batch``: the size of each leaf, then the leaves."""
    from ..items import lengths

    n = batch.num_rows
    per = [leaf_pieces(f, batch.columns[f.name], n) for f in schema]
    sizes = np.stack([lengths(p, n) for p in per], axis=1).astype("<u4")
    out: list[Piece] = [Fixed(sizes.view(np.uint8).reshape(n, -1))]
    for p in per:
        out.extend(p)
    return out


class DecodeProblem(Exception):
    """Items that are not what the configuration says (sizes, an array's header, JSON)."""


def decode(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, schema: Schema, wanted: list[str]) -> Batch:
    """The columns ``wanted`` of the items at ``starts`` (of lengths ``lens``) in the mapped chunk ``buf``."""
    n = len(starts)
    k = len(schema)
    sizes = uint32_at(buf, starts, k).astype(np.int64)
    if n and not np.array_equal(4 * k + sizes.sum(axis=1), lens):
        bad = int(np.flatnonzero(4 * k + sizes.sum(axis=1) != lens)[0])
        raise DecodeProblem(f"item {bad}: its leaf sizes do not add up to its {int(lens[bad])} bytes")
    prefix = np.concatenate([np.zeros((n, 1), np.int64), np.cumsum(sizes, axis=1)], axis=1)[:, :-1]
    at = (starts[:, None] + 4 * k + prefix).T
    out = {}
    for i, f in enumerate(schema):
        if f.name in wanted:
            out[f.name] = _leaf(buf, at[i], sizes[:, i], f, n)
    return Batch({name: out[name] for name in wanted}, n)


def _leaf(buf: np.ndarray, at: np.ndarray, size: np.ndarray, f: Field, n: int):
    fmt = leaf_format(f)
    if f.kind == FIXED and f.np_dtype.kind not in "US":
        head = array_head(f) if fmt == "numpy" else b""
        width = len(head) + f.np_dtype.itemsize * f.row_size
        if n and (size != width).any():
            bad = int(np.flatnonzero(size != width)[0])
            raise DecodeProblem(f"item {bad}: leaf '{f.name}' is {int(size[bad])} bytes, not {width}")
        raw = gather_fixed(buf, at, width)
        if head and n and not (raw[:, : len(head)] == np.frombuffer(head, np.uint8)).all():
            bad = int(np.flatnonzero((raw[:, : len(head)] != np.frombuffer(head, np.uint8)).any(axis=1))[0])
            raise DecodeProblem(f"item {bad}: leaf '{f.name}' has another array header than its column's")
        dt = f.np_dtype.newbyteorder("<") if f.np_dtype.itemsize > 1 else f.np_dtype
        values = np.ascontiguousarray(raw[:, len(head) :]).view(dt).reshape((n, *f.shape))
        if dt.kind == "b" and values.size and int(values.view(np.uint8).max()) > 1:
            raise DecodeProblem(f"leaf '{f.name}' holds a byte that is not a bool (0 or 1)")
        return values
    values, offs = gather(buf, at, size)
    if f.kind == SEQUENCE:
        dt = f.np_dtype.newbyteorder("<") if f.np_dtype.itemsize > 1 else f.np_dtype
        if n and (size % dt.itemsize).any():
            bad = int(np.flatnonzero(size % dt.itemsize)[0])
            raise DecodeProblem(f"item {bad}: leaf '{f.name}' is {int(size[bad])} bytes, not whole {dt.name} values")
        if dt.kind == "b" and len(values) and int(values.max()) > 1:
            raise DecodeProblem(f"leaf '{f.name}' holds a byte that is not a bool (0 or 1)")
        return VarColumn(values.view(dt), offs // dt.itemsize)
    if f.kind == STRING_LIST:
        rows = []
        for i in range(n):
            try:
                v = json.loads(values[offs[i] : offs[i + 1]].tobytes().decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise DecodeProblem(f"item {i}: leaf '{f.name}' is not JSON ({e})") from None
            if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                raise DecodeProblem(f"item {i}: leaf '{f.name}' is not a JSON list of strings")
            rows.append(v)
        return VarColumn.from_string_lists(rows)
    if f.kind == FIXED:  # fixed-width text, as str (or bytes) leaves
        text = [values[offs[i] : offs[i + 1]].tobytes() for i in range(n)]
        return np.array([t.decode("utf-8") for t in text] if f.np_dtype.kind == "U" else text, dtype=f.np_dtype)
    return VarColumn(values, offs)
