"""Per-column statistics gathered while writing (min, max, NaN and length figures)."""

from __future__ import annotations

import math

import numpy as np

from .schema import FIXED, Batch, Schema, VarColumn


class ColumnStats:
    def __init__(self, kind: str, dtype: np.dtype) -> None:
        self.kind = kind
        self.dtype = dtype
        self.count = 0
        self.min = None
        self.max = None
        self.nan = 0
        self.sum = 0.0
        self.len_min = None
        self.len_max = None
        self.len_sum = 0

    def _numeric(self, a: np.ndarray, cast: np.dtype | None = None) -> None:
        if a.size == 0 or self.dtype.kind not in "biuf":
            return
        with np.errstate(all="ignore"):
            if a.dtype == np.float16:  # NumPy reduces float16 element by element: widen in blocks
                flat = a.reshape(-1)
                for i in range(0, flat.size, 1 << 20):
                    self._reduce(flat[i : i + (1 << 20)].astype(np.float32), np.dtype(np.float16))
            else:
                self._reduce(a, cast)

    def _reduce(self, a: np.ndarray, cast: np.dtype | None = None) -> None:
        lo, hi = a.min(), a.max()
        if self.dtype.kind == "f" and (np.isnan(lo) or np.isnan(hi)):  # NaN propagates: count it
            nan = int(np.count_nonzero(np.isnan(a)))
            self.nan += nan
            if nan == a.size:
                return
            lo, hi = np.nanmin(a), np.nanmax(a)
        if cast is not None:
            # rounding (and clipping) to a narrower float is monotonic: the extremes of the
            # narrowed values are the narrowed extremes, so they are computed on the wide source.
            # Only finite values are clipped (an overflow); an infinity stays one (it was 65504)
            lim = float(np.finfo(cast).max)
            lo, hi = (np.asarray(np.clip(x, -lim, lim) if np.isfinite(x) else x).astype(cast) for x in (lo, hi))
        lo, hi = lo.item(), hi.item()
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)

    def update(self, col, cast: np.dtype | None = None) -> None:
        """Add a column's batch; ``cast``: the values are the wide source of a downcast column."""
        if isinstance(col, VarColumn):
            lens = col.lengths()
            if len(lens):
                lo, hi = int(lens.min()), int(lens.max())
                self.len_min = lo if self.len_min is None else min(self.len_min, lo)
                self.len_max = hi if self.len_max is None else max(self.len_max, hi)
                self.len_sum += int(lens.sum())
            self.count += len(col)
            if self.kind == "sequence":
                self._numeric(col.values, cast)
        else:
            self.count += len(col)
            self._numeric(col, cast)

    def to_dict(self) -> dict:
        d: dict = {"count": self.count}
        if self.kind == FIXED or self.kind == "sequence":
            d["min"] = _clean(self.min)
            d["max"] = _clean(self.max)
            if self.dtype.kind == "f":
                d["nan"] = self.nan
        if self.len_min is not None or self.kind != FIXED:
            d["length_min"] = self.len_min
            d["length_max"] = self.len_max
            d["length_mean"] = self.len_sum / self.count if self.count else None
        return d

    def merge(self, other: ColumnStats) -> None:
        self.count += other.count
        self.nan += other.nan
        self.sum += other.sum
        self.len_sum += other.len_sum
        for a in ("min", "len_min"):
            o = getattr(other, a)
            if o is not None:
                s = getattr(self, a)
                setattr(self, a, o if s is None else min(s, o))
        for a in ("max", "len_max"):
            o = getattr(other, a)
            if o is not None:
                s = getattr(self, a)
                setattr(self, a, o if s is None else max(s, o))


WIDE = 16  # columns of one dtype from which a batch's extremes are taken as one array


def _plain(st: ColumnStats, col) -> bool:
    """A 1-D numeric column (not float16, which is reduced in widened blocks) of the stats' dtype."""
    return (
        st.kind == FIXED
        and isinstance(col, np.ndarray)
        and col.ndim == 1
        and col.size > 0
        and col.dtype == st.dtype
        and col.dtype.kind in "biuf"
        and col.dtype != np.float16
    )


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


class BatchStats:
    def __init__(self, schema: Schema) -> None:
        self._columns = {f.name: ColumnStats(f.kind, f.np_dtype) for f in schema}
        # a table of one plain numeric dtype (a feature matrix): its batches that are one matrix
        # are folded into per-column arrays (_fold), with no Python step per column and batch
        dt = schema.matrix_dtype()
        self._matrix = len(schema) >= WIDE and dt is not None and dt.kind in "biuf" and dt != np.float16
        self._names = list(self._columns)
        self._lo = self._hi = self._count = None  # folded extremes and row counts, per column

    @property
    def columns(self) -> dict[str, ColumnStats]:
        """Each column's statistics, with what was folded (:meth:`_fold`) added in."""
        if self._count is not None:
            lo, hi, n = self._lo.tolist(), self._hi.tolist(), self._count
            self._lo = self._hi = self._count = None
            for st, a, b in zip(self._columns.values(), lo, hi, strict=True):
                st.count += n
                if a == a:  # not NaN: a column of NaNs only has no extremes
                    st.min = a if st.min is None else min(st.min, a)
                    st.max = b if st.max is None else max(st.max, b)
        return self._columns

    def _fold(self, m: np.ndarray) -> None:
        """A batch that is one ``[columns, rows]`` matrix of every column: its extremes folded
        into arrays as :meth:`ColumnStats.update` folds them (an earlier extreme kept on a tie, so
        -0.0 and 0.0 come out as column by column). A column holding a NaN is reduced on its own
        (NaNs counted, the extremes of the rest); NaN in the arrays: no value yet."""
        with np.errstate(all="ignore"):
            lo, hi = m.min(axis=1), m.max(axis=1)
            if lo.dtype.kind == "f":
                for i in np.flatnonzero(np.isnan(lo) | np.isnan(hi)).tolist():
                    st = self._columns[self._names[i]]
                    part = ColumnStats(st.kind, st.dtype)
                    part.update(m[i])
                    st.nan += part.nan
                    lo[i] = np.nan if part.min is None else part.min
                    hi[i] = np.nan if part.max is None else part.max
            if self._count is None:
                self._lo, self._hi, self._count = lo, hi, m.shape[1]
                return
            lower, higher = lo < self._lo, hi > self._hi
            if lo.dtype.kind == "f":
                lower |= np.isnan(self._lo)
                higher |= np.isnan(self._hi)
        np.copyto(self._lo, lo, where=lower)
        np.copyto(self._hi, hi, where=higher)
        self._count += m.shape[1]

    def update(self, batch: Batch, casts: dict[str, np.dtype] | None = None) -> None:
        """Add a batch. ``casts``: columns given as the wide source of a downcast to that dtype.

        Plain numeric columns of one dtype are reduced together, as the rows of one array: a table
        thousands of columns wide costs two NumPy calls per dtype and batch, not two per column,
        and a batch that is one matrix of them all (a wide CSV's) no Python step per column."""
        if self._matrix and not casts and batch.num_rows and batch.matrix is not None:
            m = batch.matrix_of(self._names)
            if m is not None:
                self._fold(m)
                return
        casts = casts or {}
        groups: dict[np.dtype, list] = {}
        for name, st in self.columns.items():
            col = batch.columns[name]
            if name not in casts and _plain(st, col):
                groups.setdefault(col.dtype, []).append((name, st, col))
            else:
                st.update(col, casts.get(name))
        for items in groups.values():
            if len(items) < WIDE:
                for _, st, col in items:
                    st.update(col)
                continue
            rows = batch.matrix_of([name for name, _, _ in items])  # a wide table's, as it is
            if rows is None:
                rows = np.stack([col for _, _, col in items])  # [columns, rows]: each column contiguous
            with np.errstate(all="ignore"):
                lows, highs = rows.min(axis=1), rows.max(axis=1)
            nans = (np.isnan(lows) | np.isnan(highs)).tolist() if lows.dtype.kind == "f" else [False] * len(items)
            for (_, st, col), lo, hi, nan in zip(items, lows.tolist(), highs.tolist(), nans, strict=True):
                if nan:
                    st.update(col)  # NaNs: counted and skipped column by column
                    continue
                st.count += len(col)
                st.min = lo if st.min is None else min(st.min, lo)
                st.max = hi if st.max is None else max(st.max, hi)

    def merge(self, other: BatchStats) -> None:
        for name, st in self.columns.items():
            st.merge(other.columns[name])

    def to_dict(self) -> dict:
        return {k: v.to_dict() for k, v in self.columns.items()}


RAW_KEYS = ("count", "min", "max", "nan", "sum", "len_min", "len_max", "len_sum")


def raw(stats: BatchStats) -> dict:
    """A unit's statistics as JSON (its journal entry), to be merged by :func:`merged`."""
    return {k: {a: getattr(v, a) for a in RAW_KEYS} for k, v in stats.columns.items()}


def merged(schema: Schema, frags: list[dict]) -> dict:
    """The dataset's statistics from its units' :func:`raw` ones (``stats_raw`` of each fragment)."""
    overall = {}
    for fd in schema:
        st = ColumnStats(fd.kind, fd.np_dtype)
        for fr in frags:
            part = ColumnStats(fd.kind, fd.np_dtype)
            for k, v in fr["stats_raw"][fd.name].items():
                setattr(part, k, v)
            st.merge(part)
        overall[fd.name] = st.to_dict()
    return overall
