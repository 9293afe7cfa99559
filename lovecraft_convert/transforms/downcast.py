"""Downcasting floating columns (float16/float32), with a per-column report of what it cost.

float16 holds at most 65504: NumPy turns larger values into inf silently and tiny ones into 0. We
count both, per column, and either refuse (naming the column and the row) or clip.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import OverflowErrorF16
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


def downcast_array(src: np.ndarray, target: np.dtype, st: DowncastStats, on_overflow: str, where) -> np.ndarray:
    """Cast ``src`` to ``target``, updating ``st``; ``where(index)`` names a flat index for errors."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        out = src.astype(target)
        finite_src = np.isfinite(src)
        bad = np.isinf(out) & finite_src
        n_over = int(np.count_nonzero(bad))
        if n_over:
            if on_overflow != "clip":
                i = int(np.flatnonzero(bad.reshape(-1))[0])
                big = src.reshape(-1)[i]
                raise OverflowErrorF16(
                    f"{where(i)}: value {float(big)!r} overflows {np.dtype(target).name} (max {float(np.finfo(target).max)})",
                    hint="scale the data, keep a wider type, or pass --on-overflow clip",
                )
            lim = np.finfo(target).max
            np.clip(out, -lim, lim, out=out, where=bad)
            st.clipped += n_over
        st.overflow += n_over
        st.values += src.size
        st.nan += int(np.count_nonzero(np.isnan(src)))
        st.flushed_to_zero += int(np.count_nonzero((out == 0) & (src != 0)))
        ok = finite_src & ~bad
        if ok.any():
            diff = np.abs(out.astype(src.dtype) - src)
            diff = np.where(ok, diff, 0)
            m = float(diff.max())
            if m > st.max_abs_error:
                st.max_abs_error = m
            denom = np.abs(src)
            rel = np.divide(diff, denom, out=np.zeros_like(diff), where=ok & (denom > 0))
            r = float(rel.max())
            if r > st.max_rel_error:
                st.max_rel_error = r
    return out


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

    @classmethod
    def for_dtype(cls, schema: Schema, dtype: str | None, per_column: dict[str, str], on_overflow: str) -> Downcast | None:
        targets = {}
        for f in schema:
            floating = f.kind in (FIXED, SEQUENCE) and f.np_dtype.kind == "f"
            if f.name in per_column:
                targets[f.name] = per_column[f.name]
            elif dtype and floating and f.np_dtype.itemsize > np.dtype(dtype).itemsize:
                targets[f.name] = dtype
        return cls(schema, targets, on_overflow) if targets else None

    def __call__(self, batch: Batch) -> Batch:
        cols = dict(batch.columns)
        for name, target in self.targets.items():
            col = cols[name]
            st = self.stats[name]
            row0 = self.rows_done
            if isinstance(col, VarColumn):
                offs = col.offsets

                def where(i, offs=offs, name=name, row0=row0):
                    return f"{self.source}, row {row0 + int(np.searchsorted(offs, i, side='right'))}, column '{name}'"

                cols[name] = VarColumn(downcast_array(col.values, target, st, self.on_overflow, where), col.offsets)
            else:
                per_row = max(1, int(np.prod(col.shape[1:], dtype=np.int64)))

                def where(i, per_row=per_row, name=name, row0=row0):
                    return f"{self.source}, row {row0 + i // per_row + 1}, column '{name}'"

                cols[name] = downcast_array(col, target, st, self.on_overflow, where)
        self.rows_done += batch.num_rows
        return Batch(cols, batch.num_rows)

    def report(self) -> dict:
        return {k: v.to_dict() for k, v in self.stats.items()}
