"""The output plan: what is written from a reader's batches, in one place.

keep (``--filter``, and the rows ``--dedup`` dropped) -> select (``--columns``) -> tokenize (``--tokenizer`` over ``--column``) -> stack (``--stack-columns``)
-> downcast (``--dtype``, a ``float16`` ``--column-type``), with a statistics hook before the
downcast (statistics of a narrowed column are taken from its wide source, which is cheaper and
the same). ``convert``, ``shard`` (reading parts and rows), ``bucket`` (the statistics of its units),
``verify --against`` (redoing what convert did to compare) and ``inspect`` (the columns kept, the
sizes float16 would give) all build it with :meth:`OutputPlan.build` and run it with
:meth:`OutputPlan.__call__`. The keep step comes first, on the reader's batches as read (the rows'
positions in the input are counted there): :meth:`OutputPlan.keep_rows`, which counts the rows
removed per reason (:attr:`OutputPlan.removed`, the manifest's ``removed``).

A caller that gathers a wide table's small batches between the steps (``convert``, where reading
and writing run in two threads) runs :meth:`~OutputPlan.prepare` before gathering and
:meth:`~OutputPlan.finish` after; ``plan(batch)`` is ``finish(prepare(batch))``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import OptionsError
from ..schema import Batch, Schema
from ..stats import BatchStats
from .downcast import Downcast
from .filter import Filter
from .keep import Keep
from .stack import Stack
from .tokenize import Tokenize


@dataclass
class OutputPlan:
    """The steps from a reader's columns (``source``: the ones kept) to the written ``schema``."""

    schema: Schema
    source: Schema  # the reader's columns that are kept, before tokenizing and stacking
    tokenize: Tokenize | None = None
    stack: Stack | None = None
    down: Downcast | None = None
    notes: list[str] = field(default_factory=list)  # what the manifest's notes say of these choices
    keep: Keep = field(default_factory=Keep)  # --filter (checked against the reader's columns), counts

    @classmethod
    def build(
        cls,
        schema: Schema,
        where: str,
        *,
        columns: list[str] | None = None,
        stack_columns: list[str] | None = None,
        stacked: bool = False,
        tokenizer: str | None = None,
        column: str | None = None,
        eos: str | int | None = None,
        bos: str | int | None = None,
        dtype: str | None = None,
        column_types: dict[str, str] | None = None,
        on_overflow: str = "error",
        filter: str | None = None,
        takes_column_types: bool = True,
    ) -> OutputPlan:
        """The plan of a reader's ``schema`` (``where``: its inputs, for messages) for the options
        of the same names (the CLI's flags); ``stacked``: the reader stacked the ``stack_columns``
        as it read (a table too wide to read column by column), so there is no stack step;
        ``takes_column_types``: the input takes ``--column-type`` (a note may suggest it)."""
        tokenize = None
        if tokenizer is not None:
            from .tokenize import Tokens

            tokenize = Tokenize(schema, Tokens(tokenizer, eos, bos), column, columns, where)
            source = Schema(tuple(schema[n] for n in tokenize.source_names))
            out = tokenize.schema
        else:
            source = select_columns(schema, columns, stack_columns)
            out = source
        stack = None
        if stack_columns and not stacked:
            stack = Stack(source, list(stack_columns), where)
            out = stack.schema
        per_col = {}
        if "float16" in (column_types or {}).values():  # read as float32, then narrowed with the float16 report
            from ..selection import ColumnTypes

            typed = ColumnTypes(dict(column_types or {})).resolve(schema.names, where, strict=False)
            per_col = {k: v for k, v in typed.items() if v == "float16"}
        note = Downcast.left_alone(out, dtype, per_col, takes_column_types)
        down = Downcast.for_dtype(out, dtype, per_col, on_overflow)
        if down is not None:
            down.source = where
            out = down.schema
        keep = Filter(filter).check(schema) if filter else None
        notes = [note] if note else []
        ignored = tokenize.tokens.note() if tokenize is not None else None
        if ignored:
            notes.append(ignored)
        return cls(out, source, tokenize, stack, down, notes, Keep(keep))

    @classmethod
    def identity(cls, schema: Schema) -> OutputPlan:
        """The plan of batches that are already what is written (spilled, bucketed): only the
        statistics hook runs."""
        return cls(schema, schema)

    # -- running it ---------------------------------------------------------------------------

    # -- the keep step (transforms/keep.py) ------------------------------------------------------

    @property
    def filter(self) -> Filter | None:
        return self.keep.filter

    @property
    def removed(self) -> dict[str, int]:
        """Rows the keep step removed, per reason."""
        return self.keep.removed

    @property
    def rows_read(self) -> int:
        """Rows the keep step saw (every row read)."""
        return self.keep.rows_read

    def keep_rows(self, batches: Iterator[Batch], drops=None, part: int = 0) -> Iterator[Batch]:
        """:class:`~.keep.Keep`: the rows of ``batches`` (part ``part``) the filter keeps and
        ``drops`` does not hold. A row a later step names in an error is then the row read."""
        if self.down is not None and (self.keep.filter is not None or drops is not None):
            self.down.translate = self.keep.read_row
        return self.keep(batches, drops, part)

    def removed_extra(self, removed: dict[str, int], read: int, dedup: dict | None = None) -> dict[str, Any]:
        """The manifest's ``removed`` section (:meth:`~.keep.Keep.extra`)."""
        return self.keep.extra(removed, read, dedup)

    def __call__(self, batch: Batch, stats: BatchStats | None = None) -> Batch:
        """Every step on one batch; ``stats`` (the hook) is updated with the batch as written."""
        return self.finish(self.prepare(batch), stats)

    def prepare(self, batch: Batch) -> Batch:
        """select -> tokenize -> stack."""
        names = self.source.names
        if list(batch.columns) != names:
            batch = Batch({n: batch.columns[n] for n in names}, batch.num_rows)
        if self.tokenize is not None:
            batch = self.tokenize(batch)
        return self.stack(batch) if self.stack is not None else batch

    def finish(self, batch: Batch, stats: BatchStats | None = None) -> Batch:
        """The statistics hook, then the downcast, of a prepared batch."""
        if stats is not None:
            stats.update(batch, self.down.targets if self.down is not None else None)
        return self.down(batch) if self.down is not None else batch

    def at_row(self, row: int | None) -> OutputPlan:
        """Number the rows of the batches to come from ``row`` (0-based) in messages (a worker's
        part of the input); returns the plan."""
        if self.down is not None:
            self.down.row_offset = row
        return self

    # -- what the manifest says of it ---------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """The manifest's ``float16`` section: what the downcast cost, per column."""
        return self.down.report() if self.down is not None else {}

    def extra(self) -> dict[str, Any]:
        """The manifest's ``notes`` (what the run noticed and did not refuse), when there are any."""
        return {"notes": list(self.notes)} if self.notes else {}

    def tokens_extra(self) -> dict[str, Any]:
        """The manifest's ``tokenizer`` section of a tokenized dataset: which tokenizer, the text
        column, the markers' ids and the token dtype (nothing when nothing was tokenized)."""
        if self.tokenize is None:
            return {}
        return {"tokenizer": {**self.tokenize.tokens.describe(), "column": self.tokenize.column}}


def select_columns(schema: Schema, columns: list[str] | None, stack_columns: list[str] | None = None) -> Schema:
    """``schema`` with only ``columns`` (in that order); a column that ``stack_columns`` makes
    stands for its members, in their order (the stack then takes their place)."""
    if not columns:
        return schema
    if stack_columns:
        columns = _stack_members(columns, stack_columns, schema.names)
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise OptionsError(f"--columns: no column '{missing[0]}'", hint=f"columns are {', '.join(schema.names)}")
    return Schema(tuple(schema[c] for c in columns))


def _stack_members(columns: list[str], stack_columns: list[str], names: list[str]) -> list[str]:
    from ..selection import select
    from .stack import parse

    stacks = dict(parse(spec) for spec in stack_columns)
    out: list[str] = []
    owner: dict[str, str] = {}
    for c in columns:
        if c not in stacks or c in names:
            out.append(c)
            continue
        members = select(names, stacks[c])
        for m in members:
            owner[m] = c
        out.extend(members)
    both = next((c for c in columns if c in owner), None)
    if both is not None:
        raise OptionsError(
            f"--columns names '{both}', which is stacked into '{owner[both]}'", hint=f"name '{owner[both]}' alone"
        )
    return out
