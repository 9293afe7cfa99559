"""What the loaders share (a leaf module: it imports no other loader module): the groups and
parts a dataset's rows are read in, and the conversion of stored columns to output arrays."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..errors import DatasetError
from ..formats.reading import PartReader
from ..schema import BINARY, SEQUENCE, STRING, STRING_LIST, Batch, Field, Schema, VarColumn

DENSE_PERMUTATION_MAX = 1 << 25  # rows; above, a keyed bijection replaces the stored permutation


def to_object_rows(c, kind: str) -> np.ndarray:
    """A variable-length column as an object array: ``str`` (string), ``bytes`` (binary), arrays,
    lists of ``str`` (string_list)."""
    if kind == STRING_LIST and isinstance(c, VarColumn):
        strings = to_object_rows(c.values, STRING)
        o = c.offsets.tolist()
        out = np.empty(len(c), dtype=object)
        out[:] = [strings[o[i] : o[i + 1]].tolist() for i in range(len(c))] if len(c) else []
        return out
    if not isinstance(c, VarColumn):
        if kind == BINARY and len(c) and not isinstance(c[0], bytes):
            out = np.empty(len(c), dtype=object)
            out[:] = [bytes(x) for x in c]
            return out
        return c
    if kind in (STRING, BINARY):
        return _strings(c, kind == STRING)
    n = len(c)
    out = np.empty(n, dtype=object)
    o = c.offsets.tolist()
    out[:] = [c.values[o[i] : o[i + 1]] for i in range(n)] if n else []
    return out


def text_as_objects(b: Batch, schema: Schema) -> Batch:
    """``b`` with its text and bytes columns as object arrays (``str``, ``bytes``), made once for a
    whole chunk or window that many batches are then cut from (cutting object arrays costs
    nothing; making their objects a batch at a time costs Arrow's overhead per call)."""
    cols = None
    for f in schema:
        c = b.columns.get(f.name)
        if f.kind in (STRING, BINARY) and isinstance(c, VarColumn):
            cols = dict(b.columns) if cols is None else cols
            cols[f.name] = _strings(c, f.kind == STRING)
    return b if cols is None else Batch(cols, b.num_rows)


def _strings(c: VarColumn, text: bool) -> np.ndarray:
    """Text (``str``, UTF-8 checked) or bytes rows as an object array, made by Arrow (its objects
    are made in C: several times faster than slicing and decoding row by row in Python)."""
    return _arrow_rows(c, text).to_numpy(zero_copy_only=False)


def text_arrays(b: Batch, schema: Schema) -> dict:
    """The text and bytes columns of ``b`` (those held as values and offsets) as Arrow arrays over
    the same buffers (no copy), text checked as UTF-8 once: a window's, which many batches are then
    taken from with :func:`take_rows_of` (its rows' objects made a batch at a time: made for a
    whole window, they would take several times the bytes the window is sized by)."""
    out = {}
    for f in schema:
        c = b.columns.get(f.name)
        if f.kind in (STRING, BINARY) and isinstance(c, VarColumn):
            out[f.name] = _arrow_rows(c, f.kind == STRING)

    return out


def take_rows_of(arr, idx: np.ndarray) -> np.ndarray:
    """Rows ``idx`` of an Arrow text or bytes array (from :func:`text_arrays`) as an object array of
    ``str`` or ``bytes``: one Arrow ``take`` and one conversion, both in C."""
    import pyarrow as pa

    idx = np.ascontiguousarray(idx, dtype=np.int64)
    # the indices as a buffer: pa.array of a NumPy array imports pandas
    taken = arr.take(pa.Array.from_buffers(pa.int64(), len(idx), [None, pa.py_buffer(idx)]))
    return taken.to_numpy(zero_copy_only=False)


def _arrow_rows(c: VarColumn, text: bool):
    """A text (UTF-8 checked) or bytes VarColumn as an Arrow ``large_string``/``large_binary``
    array over its buffers; DatasetError naming the problem when the text is not UTF-8."""
    import pyarrow as pa

    offs = np.ascontiguousarray(c.offsets, dtype=np.int64)
    if len(offs) and (offs[0] < 0 or offs[-1] > len(c.values) or bool((offs[1:] < offs[:-1]).any())):
        raise DatasetError(
            "a text or bytes column's offsets point outside its values",
            hint="the dataset is damaged; run `lovecraft verify` or re-create it",
        )
    values = np.ascontiguousarray(c.values[int(offs[0]) : int(offs[-1])] if len(offs) else c.values[:0])
    if len(offs) and offs[0]:
        offs = offs - offs[0]
    kind = pa.large_string() if text else pa.large_binary()
    arr = pa.Array.from_buffers(kind, len(c), [None, pa.py_buffer(offs), pa.py_buffer(values.view(np.uint8))])
    if text:
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid:
            data = values.tobytes()  # the first row that is not UTF-8, for the message
            for a, b in zip(offs[:-1].tolist(), offs[1:].tolist(), strict=True):
                try:
                    data[a:b].decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DatasetError(
                        f"a text column holds invalid UTF-8 ({e.reason})",
                        hint="the dataset is damaged; run `lovecraft verify` or re-create it",
                    ) from None
            raise
    return arr


def pad_rows(c, dtype: np.dtype, length: int | None, pad_value=0) -> tuple[np.ndarray, np.ndarray]:
    """A sequence column (VarColumn or object array of arrays) as ``(padded [n, L], lengths)``.

    ``L`` is ``length`` when given (rows longer than it are an error), else the longest row.
    """
    if isinstance(c, VarColumn):
        lens = np.diff(c.offsets)
    else:
        lens = np.fromiter((len(r) for r in c), dtype=np.int64, count=len(c))
    longest = int(lens.max()) if len(lens) else 0
    L = longest if length is None else int(length)
    if longest > L:
        raise DatasetError(f"a sequence of length {longest} does not fit the padded length {L}", hint="re-create it")
    out = np.full((len(lens), L), pad_value, dtype=dtype)
    if isinstance(c, VarColumn):
        total = int(c.offsets[-1])
        if total:
            rows = np.repeat(np.arange(len(lens)), lens)
            cols = np.arange(total, dtype=np.int64) - np.repeat(c.offsets[:-1], lens)
            out[rows, cols] = c.values
    else:
        for i, r in enumerate(c):
            out[i, : len(r)] = r
    return out, lens


class Part:
    """One shard or bucket file set: ``rows`` rows at ``start`` within its group."""

    __slots__ = ("key", "rows", "start", "files")

    def __init__(self, key: tuple, rows: int, start: int, files: list[str]) -> None:
        self.key, self.rows, self.start, self.files = key, rows, start, files


class Group:
    """Rows read and batched together: the whole dataset, or one bucket of a bucketed dataset."""

    def __init__(self, index: int, parts: list[Part], schema: Schema, bucket: dict | None = None) -> None:
        self.index = index
        self.parts = parts
        self.schema = schema  # the columns as the files hold them
        self.bucket = bucket  # the manifest's bucket entry (None when not bucketed)
        self.starts = np.array([p.start for p in parts] + [sum(p.rows for p in parts)], dtype=np.int64)
        self.rows = int(self.starts[-1])


def convert_column(name: str, kind: str, target: np.dtype, col, pad_value, length: int | None = None) -> dict:
    """One column of an internal batch as output entries (sequences add ``<name>_length``)."""
    if kind == "fixed":
        if target.kind == "U" and col.dtype == object:
            return {name: np.asarray(col.tolist(), dtype=target)}
        return {name: col if col.dtype == target else col.astype(target)}
    if kind in (STRING, BINARY, STRING_LIST):
        return {name: to_object_rows(col, kind)}
    padded, lens = pad_rows(col, target, length, pad_value)
    return {name: padded, f"{name}_length": lens}


INDEX_DTYPE = np.dtype(np.int64)
# integer dtypes PyTorch takes as they are: int64 (indices, targets) and uint8 (pixels, raw bytes;
# a valid cross-entropy target). Every other integer dtype is refused by nn.Embedding or
# F.cross_entropy (int8/16/32, uint16/32/64), so a framework gets it as int64.
FRAMEWORK_INTS = (np.dtype(np.int64), np.dtype(np.uint8))


def int64_columns(ds) -> frozenset[str]:
    """The columns of ``ds`` (a dataset or a mixture) that ``to_torch``/``to_tf_dataset`` hand over
    as int64 unless told to keep the stored dtypes (``keep_dtype=True``): token ids, whatever their
    stored dtype (integer sequences, and a packed dataset's token rows), and every other integer
    column of a dtype the frameworks' index and target arguments refuse (all but int64 and uint8).
    Storage stays compact: the widening is per batch, at the framework's door."""
    members = getattr(ds, "members", None)
    first = members[0] if members else ds
    packed = "packing" in first.manifest
    out = set()
    for f in first.schema:
        dt = f.np_dtype
        if dt.kind not in "iu" or dt == INDEX_DTYPE:
            continue
        if f.kind == SEQUENCE or packed or dt not in FRAMEWORK_INTS:
            out.add(f.name)
    return frozenset(out)


def widen(batch: dict, names: frozenset[str]) -> dict:
    """``batch`` with the integer columns ``names`` as int64 (a copy of those columns only)."""
    if not names:
        return batch
    return {
        k: v.astype(INDEX_DTYPE) if k in names and isinstance(v, np.ndarray) and v.dtype != INDEX_DTYPE else v
        for k, v in batch.items()
    }


def target_dtype(f: Field, float32: bool) -> np.dtype:
    dt = f.np_dtype
    if float32 and dt == np.float16:
        return np.dtype(np.float32)
    return dt


class Permutation:
    """A seeded exact permutation of ``range(n)``, sliced as ``perm[a:b]`` (int64).

    Up to :data:`DENSE_PERMUTATION_MAX` rows it is ``rng.permutation(n)``; above, it is computed on
    the fly (a keyed 6-round Feistel bijection on the next even power of two, cycle-walked into
    ``range(n)``), so memory does not grow with the dataset.
    """

    ROUNDS = 6

    def __init__(self, n: int, rng: np.random.Generator, dense_max: int = DENSE_PERMUTATION_MAX) -> None:
        self.n = n
        if n <= dense_max:
            self.dense = rng.permutation(n)
            return
        self.dense = None
        bits = max(2, (n - 1).bit_length())
        bits += bits % 2
        self.half = np.uint64(bits // 2)
        self.mask = np.uint64((1 << (bits // 2)) - 1)
        self.keys = rng.integers(0, 1 << 63, size=self.ROUNDS, dtype=np.uint64)

    def __getitem__(self, sl: slice) -> np.ndarray:
        if self.dense is not None:
            return self.dense[sl]
        i = np.arange(*sl.indices(self.n), dtype=np.uint64)
        y = self._f(i)
        bad = np.flatnonzero(y >= np.uint64(self.n))
        while bad.size:
            y[bad] = self._f(y[bad])
            bad = bad[y[bad] >= np.uint64(self.n)]
        return y.astype(np.int64)

    def _f(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self.half, x & self.mask
        for k in self.keys:
            z = (right ^ k) * np.uint64(0xBF58476D1CE4E5B9)
            z ^= z >> np.uint64(31)
            z *= np.uint64(0x94D049BB133111EB)
            z ^= z >> np.uint64(29)
            left, right = right, left ^ (z & self.mask)
        return (left << self.half) | right


# --------------------------------------------------------------------------------------------
# what the orders, the plan and the buffer see of each other
# --------------------------------------------------------------------------------------------


class Parts(Protocol):
    """What the orders of an epoch (:mod:`.order`) and the plan (:mod:`.plan`) read from a dataset:
    its groups of parts and a part's reader. :class:`~.dataset.Dataset` is one; naming it here
    keeps ``order.py`` and ``plan.py`` from importing ``dataset.py``, which imports them."""

    path: str
    format: str
    schema: Schema
    groups: list[Group]
    remote: Any  # a remote dataset read through the node's cache (storage/dataset.py), or None

    @property
    def random_access(self) -> bool: ...
    @property
    def fingerprint(self) -> str: ...
    def storage_dtype(self, f: Field) -> np.dtype: ...
    def reader(self, group: Group, part: Part, own: bool = False) -> PartReader: ...
    def take_rows(self, g: Group, idx: np.ndarray) -> Batch: ...


class BatchPlan(Protocol):
    """What the shuffle buffer (:mod:`.buffer`) reads from the plan of a dataset's batches
    (:class:`~.plan.Plan` is one, and runs the buffer): named here so the two do not import each
    other."""

    ds: Parts
    batch_size: int
    drop_remainder: bool
    shuffle_buffer: int

    def nbatches(self, rows: int) -> int: ...
    def rng(self, *key: int) -> np.random.Generator: ...
    def row_bytes(self, g: Group) -> int: ...
