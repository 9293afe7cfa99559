"""Reading a WebDataset part for ``open_dataset`` and ``verify``: the tar's headers walked once (each
header read, the data skipped) into an index of every sample's members, then any rows decoded from
the mapped file by their members' offsets, so rows can be read in any order. A tar of a remote
dataset is read through the node's cache: its headers as the walk asks for them, a batch's members
gathered into a local buffer (:func:`lovecraft_convert.formats.items.compact`)."""

from __future__ import annotations

import os
import re
from array import array

import numpy as np

from ...errors import DatasetError
from ...schema import FIXED, Batch, Schema, VarColumn
from ...storage import is_remote
from ..items import compact, gather, gather_fixed
from ..reading import CORRUPT, PartReader
from .layout import (
    CLS,
    EXT_RE,
    JSON,
    KEY_RE,
    RAW,
    DecodeProblem,
    Plan,
    json_columns,
    key,
    npy_dtype,
    npy_header,
    optional,
    plan,
)
from .tar import Scan, TarProblem

INT_RE = re.compile(rb"-?[0-9]+")
SHAPE_RE = re.compile(r"'shape': \((\d+),\)")


class TarIndex:
    """The samples of one tar: ``offsets[j]`` and ``sizes[j]`` (int64[rows]) of member ``j`` of
    every sample, in the plan's order (0 and 0 for an optional member the sample does not hold);
    ``starts``: where each sample's first member's data lies; ``first``: the first sample's key as
    a number.

    A sample's members follow the plan's order. A binary column's member is optional (the writer
    leaves out an empty value, as a WebDataset of mixed extensions holds ``.jpg`` in some samples
    and ``.png`` in others: :func:`.layout.optional`); every other member must be there."""

    def __init__(self, path: str, plan: Plan, rows: int, strict: bool = False, first: int | None = None) -> None:
        self.path = path
        self.plan = plan
        self.rf = None
        if is_remote(path):
            from ...storage.remote import registered
            from ...storage.remote_array import RemoteArray

            self.rf = registered(path)
            if self.rf is None:
                raise ValueError("not a file of a dataset opened here (open it with open_dataset)")
            self.buf = RemoteArray(self.rf, np.uint8, (self.rf.size,), 0)
        else:
            self.buf = np.memmap(path, dtype=np.uint8, mode="r") if os.path.getsize(path) else np.zeros(0, np.uint8)
        m = len(plan.members)
        exts = plan.extensions()
        per_file = [mem.per_file for mem in plan.members]
        skip = [optional(mem) for mem in plan.members]
        self.first = 0
        # 16 bytes a member (its data's offset and size), no object kept per member
        offsets, sizes, starts = array("q"), array("q"), array("q")
        zeros = array("q", [0]) * m
        scan = Scan(self.buf, strict)
        samples, j, base = 0, m, -m  # samples begun; the next member's place in the current one
        here = after = ""  # the current sample's key, the next one's
        for i, mem in enumerate(scan):
            k, _, ext = mem.name.partition(".")
            if i == 0:
                if not KEY_RE.match(k):
                    raise DecodeProblem(f"its first member {mem.name!r} has no key of {len(key(0))} digits or more")
                self.first = int(k)
                if first is not None and self.first != first:
                    raise DecodeProblem(f"its first sample's key is {k}, the rows before it say {key(first)}")
                after = key(self.first)
            if k != here or i == 0:
                if k != after:
                    want = f"{here}.{exts[j]}" if j < m else f"{after}.{exts[0]}"
                    raise DecodeProblem(f"member {i} is named {mem.name!r}, expected {want!r}")
                self._missing(here, j, exts, skip)
                if samples >= rows:
                    raise DecodeProblem(f"holds more than the {rows} samples of its rows")
                here, after = k, key(self.first + samples + 1)
                samples, j, base = samples + 1, 0, len(offsets)
                offsets.extend(zeros)
                sizes.extend(zeros)
                starts.append(mem.offset)
            while j < m and skip[j] and ext != exts[j]:
                j += 1
            if j >= m or not (ext == exts[j] or (per_file[j] and EXT_RE.match(ext))):
                want = f"{here}.{exts[j]}" if j < m else f"{after}.{exts[0]}"
                raise DecodeProblem(f"member {i} is named {mem.name!r}, expected {want!r}")
            offsets[base + j] = mem.offset
            sizes[base + j] = mem.size
            j += 1
        self.end = scan.end
        if samples:
            self._missing(here, j, exts, skip)
        if samples != rows:
            raise DecodeProblem(f"holds {samples} samples; its rows say {rows}")
        offs = np.frombuffer(offsets, np.int64).reshape(rows, m) if rows * m else np.zeros((rows, m), np.int64)
        lens = np.frombuffer(sizes, np.int64).reshape(rows, m) if rows * m else np.zeros((rows, m), np.int64)
        self.offsets = [offs[:, j].copy() for j in range(m)]
        self.sizes = [lens[:, j].copy() for j in range(m)]
        self.starts = np.frombuffer(starts, np.int64).copy() if rows else np.zeros(0, np.int64)

    @staticmethod
    def _missing(here: str, j: int, exts: list[str], skip: list[bool]) -> None:
        """A sample ended at member ``j``: every member after it must be optional."""
        for jj in range(j, len(exts)):
            if not skip[jj]:
                raise DecodeProblem(f"sample {here} has no .{exts[jj]} member")

    def decode(self, idx: np.ndarray, names: list[str]) -> Batch:
        """Rows ``idx`` (int64), the columns ``names``."""
        idx = np.asarray(idx, dtype=np.int64)
        n = len(idx)
        offs = [o[idx] for o in self.offsets]
        sizes = [s[idx] for s in self.sizes]
        buf = self.buf
        if self.rf is not None and offs:  # these rows' members only, read through the cache
            buf, at = compact(self.rf, np.concatenate(offs), np.concatenate(sizes))
            offs = [at[j * n : (j + 1) * n] for j in range(len(offs))]
        out: dict = {}
        for j, mem in enumerate(self.plan.members):
            off, size = offs[j], sizes[j]
            if mem.kind == JSON:
                fields = [f for f in self.plan.json if f.name in names]
                if fields:
                    texts = [bytes(buf[o : o + s]) for o, s in zip(off.tolist(), size.tolist(), strict=True)]
                    out.update(json_columns(self.plan.json, texts, self.first + (int(idx[0]) if n else 0)))
                continue
            f = mem.field
            if f.name not in names:
                continue
            if mem.kind == RAW:
                values, voffs = gather(buf, off, size)
                if f.kind == FIXED:
                    out[f.name] = np.array(
                        [values[voffs[i] : voffs[i + 1]].tobytes() for i in range(n)], dtype=f.np_dtype
                    )
                else:
                    out[f.name] = VarColumn(values, voffs)
            elif mem.kind == CLS:
                vals = []
                for i, (o, s) in enumerate(zip(off.tolist(), size.tolist(), strict=True)):
                    text = bytes(buf[o : o + s])
                    if not INT_RE.fullmatch(text):
                        raise DecodeProblem(f"sample {int(idx[i])}: its .cls member {text[:20]!r} is not an integer")
                    vals.append(int(text))
                try:
                    out[f.name] = np.array(vals, dtype=f.np_dtype) if vals else np.zeros(0, f.np_dtype)
                except OverflowError:
                    raise DecodeProblem(f"a .cls member is outside {f.np_dtype.name}") from None
            elif f.kind == FIXED:
                out[f.name] = self._npy_fixed(buf, f, off, size, idx)
            else:
                out[f.name] = self._npy_sequence(buf, f, off, size, idx)
        return Batch({name: out[name] for name in names}, n)

    def _npy_fixed(self, buf, f, off, size, idx):
        dt = npy_dtype(f)
        head = npy_header(np.lib.format.dtype_to_descr(dt), tuple(f.shape))
        width = dt.itemsize * f.row_size
        n = len(off)
        if n and (size != len(head) + width).any():
            bad = int(idx[np.flatnonzero(size != len(head) + width)[0]])
            raise DecodeProblem(f"sample {bad}: its .{f.name}.npy member is not a {list(f.shape)} {dt.name} array")
        got = gather_fixed(buf, off, len(head))
        if n and (got != np.frombuffer(head, np.uint8)).any():
            bad = int(idx[np.flatnonzero((got != np.frombuffer(head, np.uint8)).any(axis=1))[0]])
            raise DecodeProblem(f"sample {bad}: its .{f.name}.npy member has another header than its column's")
        values = gather_fixed(buf, off + len(head), width).view(dt).reshape((n, *f.shape))
        return self._bools(f, values)

    def _npy_sequence(self, buf, f, off, size, idx):
        dt = npy_dtype(f)
        descr = np.lib.format.dtype_to_descr(dt)
        n = len(off)
        heads = np.empty(n, np.int64)
        lens = np.empty(n, np.int64)
        for i, (o, s) in enumerate(zip(off.tolist(), size.tolist(), strict=True)):
            hl = 10 + int(buf[o + 8 : o + 10].view("<u2")[0]) if s >= 10 else s + 1
            text = bytes(buf[o : o + min(hl, s)])
            m = SHAPE_RE.search(text.decode("latin1"))
            k = int(m.group(1)) if m else -1
            if k < 0 or hl > s or text != npy_header(descr, (k,)) or s != hl + k * dt.itemsize:
                raise DecodeProblem(f"sample {int(idx[i])}: its .{f.name}.npy member is not a 1-d {dt.name} array")
            heads[i], lens[i] = hl, k
        values, offs = gather(buf, off + heads, lens * dt.itemsize)
        return VarColumn(self._bools(f, values.view(dt)), offs // dt.itemsize)

    @staticmethod
    def _bools(f, values):
        if f.np_dtype.kind == "b" and values.size and int(values.view(np.uint8).max()) > 1:
            raise DecodeProblem(f"column '{f.name}' holds a byte that is not a bool (0 or 1)")
        return values

    def close(self) -> None:
        self.buf = None


class WebdatasetReader(PartReader):
    """One part's ``.tar``; random access through its index, built on first use."""

    random_access = True

    def __init__(self, rows: int, schema: Schema, full: Schema, path: str, file_member: str | None = None) -> None:
        super().__init__(rows, schema)
        self.full = full
        self.path = path
        self.file_member = file_member
        self._index: TarIndex | None = None
        self._pid = None

    def _open(self) -> TarIndex:
        if self._index is None or self._pid != os.getpid():
            try:
                self._index = TarIndex(self.path, plan(self.full, file_member=self.file_member), self.rows)
            except (TarProblem, DecodeProblem, ValueError) as e:
                raise DatasetError(f"{self.path}: {e}", hint=CORRUPT) from None
            except OSError as e:
                raise DatasetError(f"{self.path}: cannot open ({e})", hint=CORRUPT) from None
            self._pid = os.getpid()
        return self._index

    def block_starts(self) -> np.ndarray:
        """Runs of samples of about 1 MiB (from where each sample's first member lies)."""
        index = self._open()
        if self.rows == 0 or not index.offsets:
            return np.array([0, self.rows], np.int64)
        at = index.starts
        marks = np.arange(int(at[0]), int(at[-1]) + 1, 1 << 20, dtype=np.int64)
        cuts = np.unique(np.searchsorted(at, marks, side="left"))
        cuts = cuts[(cuts > 0) & (cuts < self.rows)]
        return np.concatenate([[0], cuts, [self.rows]]).astype(np.int64)

    def read(self, start: int, stop: int) -> Batch:
        return self.take(np.arange(start, stop, dtype=np.int64))

    def take(self, idx: np.ndarray) -> Batch:
        index = self._open()
        try:
            return index.decode(np.asarray(idx, dtype=np.int64), self.schema.names)
        except (DecodeProblem, ValueError) as e:
            raise DatasetError(f"{self.path}: {e}", hint=CORRUPT) from None

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
        self._index = None
