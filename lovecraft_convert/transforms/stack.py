"""``--stack-columns NAME=SELECTION``: many numeric columns become one fixed-shape column
``[rows, k]`` (``k`` the number of columns selected), the shape users of wide numeric tables
usually want: one ``.npy``, one HDF5 dataset, one Parquet fixed-size list, one TFRecord feature,
instead of thousands of them.

A selection is ``first:last`` (every column from ``first`` to ``last`` inclusive, in the input's
order) or a shell pattern (``c*``, ``pixel_??``), in the input's order (:mod:`..selection`, which
``--column-type`` shares). The stacked column takes the
place of its first member; its dtype is the common type of its members (NumPy's promotion: ints
and floats together become float64).
"""

from __future__ import annotations

import numpy as np

from ..errors import OptionsError, SchemaError
from ..schema import FIXED, Batch, Field, Schema
from ..selection import select, some


def parse(spec: str) -> tuple[str, str]:
    """``NAME=SELECTION`` -> (name, selection); OptionsError when it is not of that form."""
    name, sep, sel = spec.partition("=")
    if not sep or not name or not sel:
        raise OptionsError(f"--stack-columns {spec!r}: give NAME=FIRST:LAST or NAME=PATTERN", hint="e.g. x=c0:c1999")
    return name, sel


class Stack:
    """Batch -> batch with the selected columns replaced by their stack."""

    def __init__(self, schema: Schema, specs: list[str], source: str) -> None:
        names = schema.names
        self.groups: list[tuple[str, list[str], np.dtype, tuple[int, ...]]] = []
        used: dict[str, str] = {}
        for spec in specs:
            name, sel = parse(spec)
            members = select(names, sel)
            if not members:
                raise OptionsError(
                    f"--stack-columns {spec}: no column matches {sel!r}", hint=f"columns are {some(names)}"
                )
            for m in members:
                if m in used:
                    raise OptionsError(f"--stack-columns: column '{m}' is in both {used[m]} and {name}")
                used[m] = name
                f = schema[m]
                if f.kind != FIXED or f.np_dtype.kind not in "biuf":
                    raise SchemaError(
                        f"{source}, column '{m}': {f.describe()} cannot be stacked into '{name}'",
                        hint="stack numeric columns only (give it a numeric --column-type, or leave it out)",
                    )
            shapes = {schema[m].shape for m in members}
            if len(shapes) > 1:
                raise SchemaError(
                    f"{source}: the columns stacked into '{name}' have different shapes ({', '.join(map(str, shapes))})"
                )
            dtype = np.result_type(*{schema[m].np_dtype for m in members})
            self.groups.append((name, members, dtype, shapes.pop()))
        firsts = {members[0]: (name, members, dtype, shape) for name, members, dtype, shape in self.groups}
        out: list[Field] = []
        for f in schema:
            if f.name not in used:
                out.append(f)
            elif f.name in firsts:
                name, members, dtype, shape = firsts[f.name]
                out.append(Field(name, FIXED, dtype.str, (len(members), *shape)))
        if len({f.name for f in out}) != len(out):
            dup = next(f.name for f in out if sum(g.name == f.name for g in out) > 1)
            raise OptionsError(f"--stack-columns: '{dup}' would name two columns", hint="choose another name")
        self.schema = Schema(tuple(out))
        # members that are a run of the input's columns: taken from a wide table's matrix in one
        # copy (see Batch.from_matrix), not column by column
        pos = schema.index
        self.runs = {}
        for name, members, _dtype, _shape in self.groups:
            a = pos[members[0]]
            if pos[members[-1]] - a == len(members) - 1 and all(pos[m] == a + i for i, m in enumerate(members)):
                self.runs[name] = (a, a + len(members))
        self.names = schema.names

    def __call__(self, batch: Batch) -> Batch:
        matrix = batch.whole_matrix if self.runs and list(batch.columns) == self.names else None
        cols = dict(batch.columns)
        for name, members, dtype, _shape in self.groups:
            run = self.runs.get(name)
            if matrix is not None and run is not None:
                stacked = np.ascontiguousarray(matrix[run[0] : run[1]].T, dtype=dtype)
                for m in members:
                    del cols[m]
            else:
                stacked = np.empty((batch.num_rows, len(members), *np.shape(cols[members[0]])[1:]), dtype=dtype)
                for i, m in enumerate(members):
                    stacked[:, i] = cols.pop(m)
            cols[name] = stacked
        return Batch({f.name: cols[f.name] for f in self.schema}, batch.num_rows)
