"""Downcasting floating columns (float16/float32), with a per-column report of what it cost.

float16 holds at most 65504: NumPy turns larger values into inf silently and tiny ones into 0. We
count both, per column, and either refuse (naming the column and the row) or clip.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import OverflowErrorF16
from ..runtime.interrupts import join
from ..schema import FIXED, SEQUENCE, Batch, Field, Schema, VarColumn


@dataclass
class DowncastStats:
    target: str
    values: int = 0
    overflow: int = 0
    clipped: int = 0
    flushed_to_zero: int = 0
    nan: int = 0
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "values": self.values,
            "overflow": self.overflow,
            "clipped": self.clipped,
            "flushed_to_zero": self.flushed_to_zero,
            "nan": self.nan,
            "max_abs_error": self.max_abs_error,
            "max_rel_error": self.max_rel_error,
        }


SUB = 1 << 18  # elements per step: temporaries stay small (cache-resident) whatever the batch size


def downcast_array(src: np.ndarray, target: np.dtype, st: DowncastStats, on_overflow: str, where) -> np.ndarray:
    """Cast ``src`` to ``target``, updating ``st``; ``where(index)`` names a flat index for errors.

    A large array is cast in two halves at once, the second by a thread started for this call (NumPy
    releases the GIL, so both cores work) and joined before it returns, also on an error or an
    interrupt: no thread outlives the call."""
    out = np.empty(src.shape, dtype=target)
    flat_src = src.reshape(-1)
    flat_out = out.reshape(-1)

    def span(a: int, b: int, s: DowncastStats) -> DowncastStats:
        for i in range(a, b, SUB):
            _step(flat_src[i : min(i + SUB, b)], flat_out[i : min(i + SUB, b)], i, s, on_overflow, where)
        return s

    n = flat_src.size
    if n < 4 * SUB:
        span(0, n, st)
        return out
    mid = (n // 2 // SUB) * SUB
    halves = [DowncastStats(st.target), DowncastStats(st.target)]
    errors: list[BaseException | None] = [None, None]

    def second() -> None:
        try:
            span(mid, n, halves[1])
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            errors[1] = e

    t = threading.Thread(target=second, name="lovecraft-downcast", daemon=True)
    t.start()
    try:
        try:
            span(0, mid, halves[0])
        except OverflowErrorF16 as e:
            errors[0] = e
    finally:
        join(t)  # in held slices: an interrupt is raised once the thread is done
    for e in errors:  # in order: the first half's error is the earlier one
        if e is not None:
            raise e
    for part in halves:
        for k in ("values", "overflow", "clipped", "flushed_to_zero", "nan"):
            setattr(st, k, getattr(st, k) + getattr(part, k))
        st.max_abs_error = max(st.max_abs_error, part.max_abs_error)
        st.max_rel_error = max(st.max_rel_error, part.max_rel_error)
    return out


def _step(src: np.ndarray, out: np.ndarray, base: int, st: DowncastStats, on_overflow: str, where) -> None:
    """One cache-sized step. The common case (finite values, all within range) takes a fast path
    of a few light passes; NaN, infinities or overflow take the careful one."""
    lim = float(np.finfo(out.dtype).max)
    if src.size == 0:
        return
    if src.dtype.kind != "f":
        # an integer column narrowed by --column-type NAME=float16 (a decoded image's uint8
        # pixels): measured in float64, where the errors below cannot wrap around
        src = src.astype(np.float64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        lo, hi = float(src.min()), float(src.max())  # NaN propagates into both
        if not (np.isfinite(lo) and np.isfinite(hi) and max(-lo, hi) <= lim):
            return _step_careful(src, out, base, st, on_overflow, where)
        st.values += src.size
        denom = np.abs(src)
        if src.dtype == np.float32 and out.dtype == np.float16:
            return _f32_to_f16(src, denom, out, st)
        np.copyto(out, src, casting="unsafe")
        zeros_src = int(np.count_nonzero(denom == 0))
        # a value flushes to zero iff it is at most half the smallest subnormal (ties to even)
        tiny = float(np.finfo(out.dtype).smallest_subnormal) / 2
        st.flushed_to_zero += int(np.count_nonzero(denom <= tiny)) - zeros_src
        diff = out.astype(src.dtype)
        np.subtract(diff, src, out=diff)
        _record_errors(np.abs(diff, out=diff), denom, bool(zeros_src), st)


_F16_MIN_NORMAL = 2.0**-14


def _f32_to_f16(src: np.ndarray, denom: np.ndarray, out: np.ndarray, st: DowncastStats) -> None:
    """float32 -> float16 (no value beyond float16's range) with integer SIMD operations: NumPy's
    own cast goes element by element. Rounds to nearest, ties to even, exactly as the cast does,
    and measures the rounding errors from the same bits. Zeros and values in float16's subnormal
    range (usually few) are patched in with NumPy's cast."""
    bits = src.view(np.uint32)
    absb = bits & np.uint32(0x7FFFFFFF)
    # add half an ulp of float16 (minus one when the kept bit is even: ties go to even)
    rounded = absb + np.uint32(0x0FFF)
    rounded += (absb >> np.uint32(13)) & np.uint32(1)
    rounded &= np.uint32(0xFFFFE000)  # the float32 bits of the rounded value
    half = (rounded >> np.uint32(13)) - np.uint32((127 - 15) << 10)  # rebias the exponent
    small = np.flatnonzero(denom < _F16_MIN_NORMAL)
    if len(small):
        exact = np.abs(src[small]).astype(np.float16)
        half[small] = exact.view(np.uint16)
        rounded[small] = exact.astype(np.float32).view(np.uint32)
        d = denom[small]
        st.flushed_to_zero += int(np.count_nonzero((exact == 0) & (d != 0)))
    half |= (bits >> np.uint32(16)) & np.uint32(0x8000)
    out.view(np.uint16)[...] = half
    diff = rounded.view(np.float32)
    np.subtract(diff, denom, out=diff)
    _record_errors(np.abs(diff, out=diff), denom, bool(len(small)), st)


def _record_errors(diff: np.ndarray, denom: np.ndarray, has_zeros: bool, st: DowncastStats) -> None:
    """Largest absolute and relative error of a step (``diff`` = |narrowed - source|, overwritten)."""
    m = float(diff.max())
    if m > st.max_abs_error:
        st.max_abs_error = m
    if has_zeros:
        np.divide(diff, denom, out=diff, where=denom > 0)
        diff[denom == 0] = 0
    else:
        np.divide(diff, denom, out=diff)
    r = float(diff.max())
    if r > st.max_rel_error:
        st.max_rel_error = r


def _step_careful(src: np.ndarray, out: np.ndarray, base: int, st: DowncastStats, on_overflow: str, where) -> None:
    lim = np.finfo(out.dtype).max
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        out[...] = src
        st.values += src.size
        nan = np.isnan(src)
        st.nan += int(np.count_nonzero(nan))
        inf_out = np.isinf(out)
        bad = None
        if inf_out.any():
            bad = inf_out & np.isfinite(src)
            n_over = int(np.count_nonzero(bad))
            if n_over:
                if on_overflow != "clip":
                    i = int(np.flatnonzero(bad)[0])
                    source, column, row, local_row = where(base + i)
                    raise OverflowErrorF16(
                        source=source,
                        column=column,
                        row=row,
                        local_row=local_row,
                        value=float(src[i]),
                        target=out.dtype.name,
                        limit=float(lim),
                    )
                np.copyto(out, np.where(src > 0, lim, -lim).astype(out.dtype), where=bad)
                st.clipped += n_over
                st.overflow += n_over
            else:
                bad = None
        st.flushed_to_zero += int(np.count_nonzero((out == 0) & (src != 0)))
        diff = out.astype(src.dtype)
        diff -= src
        np.abs(diff, out=diff)
        # NaN and +-inf in the source, and clipped values, are not rounding errors
        skip = nan | np.isinf(src)
        if bad is not None:
            skip |= bad
        diff[skip] = 0
        m = float(diff.max()) if diff.size else 0.0
        if m > st.max_abs_error:
            st.max_abs_error = m
        denom = np.abs(src)
        np.divide(diff, denom, out=diff, where=denom > 0)
        diff[denom == 0] = 0
        r = float(diff.max()) if diff.size else 0.0
        if r > st.max_rel_error:
            st.max_rel_error = r


class Downcast:
    """Casts the chosen floating columns to a narrower float type."""

    def __init__(self, schema: Schema, targets: dict[str, str], on_overflow: str = "error") -> None:
        self.targets = {k: np.dtype(v) for k, v in targets.items()}
        self.on_overflow = on_overflow
        self.stats = {k: DowncastStats(v) for k, v in targets.items()}
        fields = []
        for f in schema:
            if f.name in self.targets:
                fields.append(Field(f.name, f.kind, self.targets[f.name].str, f.shape))
            else:
                fields.append(f)
        self.schema = Schema(tuple(fields))
        self.source = ""
        self.rows_done = 0
        self.row_offset: int | None = 0
        # where rows were removed before (--filter, --dedup): a row of this stream -> its row in the
        # part read (None: no longer known); None: none removed (the same numbers)
        self.translate = None

    @classmethod
    def for_dtype(
        cls, schema: Schema, dtype: str | None, per_column: dict[str, str], on_overflow: str
    ) -> Downcast | None:
        targets = {}
        for f in schema:
            floating = f.kind in (FIXED, SEQUENCE) and f.np_dtype.kind == "f"
            if f.name in per_column:
                targets[f.name] = per_column[f.name]
            elif dtype and floating and f.np_dtype.itemsize > np.dtype(dtype).itemsize:
                targets[f.name] = dtype
        return cls(schema, targets, on_overflow) if targets else None

    @staticmethod
    def left_alone(schema: Schema, dtype: str | None, per_column: dict[str, str], typed: bool = True) -> str | None:
        """A note naming the integer columns ``--dtype`` leaves as they are (it narrows floating
        columns: an integer's exactness is its point, unless the user says otherwise), and the way
        to narrow them too where the input takes ``--column-type`` (``typed``); None when there are
        none."""
        if not dtype:
            return None
        names = [
            f.name
            for f in schema
            if f.kind in (FIXED, SEQUENCE) and f.np_dtype.kind in "iu" and f.name not in per_column
        ]
        if not names:
            return None
        shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
        prefix = os.path.commonprefix(names)
        sel = f"'{prefix}*'" if len(names) > 1 and prefix else names[0]
        note = f"--dtype {dtype} narrows floating columns; integer columns are kept as they are: {shown}"
        return note + (f" (to narrow them too: --column-type {sel}={dtype})" if typed else "")

    def _where(self, row: int, name: str) -> tuple[str, str, int | None, int]:
        """Where a (0-based, within this transform's stream) row is, for an error: (source, column,
        1-based global row or None, local row). With ``row_offset`` None the global row is not known
        here (a part of the input read by a worker): the error carries the local row, and the caller
        that knows the rows before the part places it (:meth:`OverflowErrorF16.at_row`)."""
        if self.translate is not None:
            read = self.translate(row)
            row = read if read is not None else row
        row_g = None if self.row_offset is None else self.row_offset + row + 1
        return self.source, name, row_g, row

    def __call__(self, batch: Batch) -> Batch:
        cols = dict(batch.columns)
        for name, target in self.targets.items():
            col = cols[name]
            st = self.stats[name]
            row0 = self.rows_done
            if isinstance(col, VarColumn):
                offs = col.offsets

                def where(i, offs=offs, name=name, row0=row0):
                    return self._where(row0 + int(np.searchsorted(offs, i, side="right")) - 1, name)

                cols[name] = VarColumn(downcast_array(col.values, target, st, self.on_overflow, where), col.offsets)
            else:
                per_row = max(1, int(np.prod(col.shape[1:], dtype=np.int64)))

                def where(i, per_row=per_row, name=name, row0=row0):
                    return self._where(row0 + i // per_row, name)

                cols[name] = downcast_array(col, target, st, self.on_overflow, where)
        self.rows_done += batch.num_rows
        return Batch(cols, batch.num_rows)

    def merge(self, report: dict) -> None:
        """Add another part's report (same targets) to this one."""
        for name, r in report.items():
            st = self.stats[name]
            for k in ("values", "overflow", "clipped", "flushed_to_zero", "nan"):
                setattr(st, k, getattr(st, k) + r[k])
            st.max_abs_error = max(st.max_abs_error, r["max_abs_error"])
            st.max_rel_error = max(st.max_rel_error, r["max_rel_error"])

    def report(self) -> dict:
        return {k: v.to_dict() for k, v in self.stats.items()}
