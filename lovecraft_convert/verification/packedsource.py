"""``verify --against`` of a packed dataset (``bucket --layout packed``): does it hold the rows that
packing its source makes?

The source is re-read as ``bucket`` read it (the manifest's options: tokenizer, markers, column),
every document's tokens concatenated in input order and cut into rows of ``seq_len`` tokens, each
with the positions where its documents start (empty documents start nowhere), the last partial row
dropped or padded with the pad id as the manifest says. Each row is hashed with its index, so the
order counts; the sums of the hashes and the row counts of the source's rows and the dataset's must
agree. Memory stays bounded: the source is cut a batch at a time (less than a row is carried over).

A dataset packed in a shuffled document order (``--shuffle``) is compared by its tokens: every
token id occurs in the dataset at most as often as in the source (padding aside), and the tokens
missing are exactly the ones the manifest says were dropped with the last partial row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import manifest as mf
from ..errors import InputError, LovecraftError
from ..schema import FIXED, SEQUENCE, Batch, Field, Schema, VarColumn
from .bucketsource import MASK, one_line, read_options
from .source import removed_problem, row_hashes

MANIFEST = mf.MANIFEST_NAME
TOKENS, DOC_STARTS = "tokens", "doc_starts"


class PackedComparer:
    """The source of a packed dataset against its rows; the interface of ``SourceComparer``."""

    def __init__(self, verifier, inputs: list[str], manifest: dict, schema: Schema) -> None:
        from ..jobs.options import BucketOptions
        from ..jobs.sequences import Sequences

        self.v = verifier
        self.inputs = inputs
        self.manifest = manifest
        self.stopped: str | None = None
        self.result: dict[str, Any] = {}
        self.d = [0, 0, 0]  # the dataset's rows: hash sums and count
        self.s = [0, 0, 0]  # the source's
        self.d_hist: dict[int, int] = {}
        self.differ = 0
        p = manifest.get("packing") if isinstance(manifest.get("packing"), dict) else {}
        self.shuffled = p.get("order") == "shuffled"
        self.pad_last, self.pad_id = bool(p.get("pad_last")), p.get("pad_id", 0)
        self.dropped = p.get("dropped_tokens", 0)
        self.padding = p.get("padding_tokens", 0)
        self.unit_start: dict[str, int] = {}
        start = 0
        for u in verifier.st.units:  # a row's index in the dataset: its unit's start and its place in it
            self.unit_start[u.label] = start
            start += u.rows
        try:
            tokens, starts = schema[TOKENS], schema[DOC_STARTS]
            self.L = int(tokens.shape[0])
            self.dtype = np.dtype(verifier.storage(tokens)).newbyteorder("=")
            self.o = BucketOptions(**read_options(manifest))
            self.o.validate()
        except (KeyError, IndexError, TypeError, ValueError, LovecraftError) as e:
            self._problem(f"the manifest's options cannot be used to read the source ({one_line(e)})", MANIFEST)
            self.stopped = "the manifest cannot be used"
            return
        self.schema = Schema(
            (
                Field("row", FIXED, "<i8"),
                Field(TOKENS, FIXED, self.dtype.str, (self.L,)),
                Field(DOC_STARTS, SEQUENCE, "<i4"),
            )
        )
        del starts
        try:
            self.src = Sequences(inputs, self.o, verifier.budget)
        except InputError:
            raise  # a source that cannot be found or opened is the caller's mistake
        except (LovecraftError, TypeError, ValueError, AttributeError, KeyError, UnicodeError) as e:
            self._problem(f"cannot be read with the manifest's options ({one_line(e)})")
            self.stopped = "the source cannot be read"

    def _problem(self, message: str, file: str | None = None) -> None:
        if file == MANIFEST:
            self.v.add(MANIFEST, "source", message)
        else:
            self.v.add(", ".join(self.inputs), "source", message, source=True)

    # -- fed by the verifier ------------------------------------------------------------------

    def feed(self, batch: Batch, unit, file: str, row0: int) -> None:
        if self.stopped:
            return
        tokens = np.asarray(batch.columns[TOKENS]).reshape(batch.num_rows, -1).astype(self.dtype, copy=False)
        if self.shuffled:
            u, c = np.unique(tokens, return_counts=True)
            for k, n in zip(u.tolist(), c.tolist(), strict=True):
                self.d_hist[k] = self.d_hist.get(k, 0) + n
            self.d[2] += batch.num_rows
            return
        starts = batch.columns[DOC_STARTS]
        if not isinstance(starts, VarColumn):  # rows as Python objects (HDF5, TFRecord)
            rows = [np.asarray(r, dtype=np.int32).reshape(-1) for r in starts]
            offs = np.zeros(len(rows) + 1, dtype=np.int64)
            np.cumsum([len(r) for r in rows], out=offs[1:])
            starts = VarColumn(np.concatenate(rows) if rows else np.zeros(0, np.int32), offs)
        first = self.unit_start.get(unit.label, 0) + row0
        self._add(self.d, first, tokens, starts)

    def _add(self, into: list[int], first: int, tokens: np.ndarray, starts: VarColumn) -> None:
        n = len(tokens)
        offs = np.asarray(starts.offsets, dtype=np.int64)
        starts = VarColumn(np.asarray(starts.values)[offs[0] : offs[-1]].astype(np.int32, copy=False), offs - offs[0])
        rows = np.arange(first, first + n, dtype=np.int64)
        h1, h2 = row_hashes(Batch({"row": rows, TOKENS: tokens, DOC_STARTS: starts}, n), self.schema)
        into[0] = (into[0] + int(h1.sum(dtype=np.uint64))) & MASK
        into[1] = (into[1] + int(h2.sum(dtype=np.uint64))) & MASK
        into[2] += n

    def broken(self, unit) -> None:
        if not self.stopped:
            self.stopped = f"not compared past {unit.label}: its files cannot be read"

    # -- at the end ---------------------------------------------------------------------------

    def finish(self) -> None:
        if self.stopped:
            return
        try:
            if self.shuffled:
                self._finish_tokens()
            else:
                self._finish_rows()
        except LovecraftError as e:
            self.stopped = e.one_line()
            self._problem(self.stopped)
            return
        problem = removed_problem(self.manifest, self.src.keep.removed)
        if problem:
            self._problem(problem, MANIFEST)

    def _documents(self):
        for col, _first, _where in self.src.each(self.o.part_bytes):
            offs = np.asarray(col.offsets, dtype=np.int64)
            yield np.asarray(col.values)[offs[0] : offs[-1]].astype(self.dtype, copy=False), offs - offs[0]

    def _finish_rows(self) -> None:
        L = self.L
        carry = np.zeros(0, self.dtype)
        carry_starts = np.zeros(0, np.int64)
        row = 0
        for values, offs in self._documents():
            both = np.concatenate([carry, values])
            starts = np.concatenate([carry_starts, len(carry) + offs[:-1][np.diff(offs) > 0]])
            k = len(both) // L
            if k:
                self._rows(row, both[: k * L], starts[starts < k * L])
                row += k
            carry, carry_starts = both[k * L :], starts[starts >= k * L] - k * L
        if len(carry) and self.pad_last:
            padded = np.full(L, self.pad_id, dtype=self.dtype)
            padded[: len(carry)] = carry
            self._rows(row, padded, carry_starts)
        elif len(carry) != self.dropped:
            self._problem(
                f"leaves {len(carry)} tokens after the last whole row, the manifest says {self.dropped} were dropped"
            )
        self.result = {"source_digest": _hex(self.s), "dataset_digest": _hex(self.d)}
        if self.s[2] != self.d[2]:
            self._problem(f"packs into {self.s[2]} rows of {L} tokens, the dataset holds {self.d[2]}")
        elif self.s[:2] != self.d[:2]:
            self._problem(
                "the dataset's rows are not the source's tokens packed in order (their digests differ: "
                f"source {self.result['source_digest']}, dataset {self.result['dataset_digest']})"
            )
            self.differ = -1

    def _rows(self, first: int, flat: np.ndarray, starts: np.ndarray) -> None:
        L = self.L
        k = len(flat) // L
        bounds = np.searchsorted(starts, np.arange(k + 1, dtype=np.int64) * L)
        col = VarColumn((starts % L).astype(np.int32), bounds - bounds[0])
        self._add(self.s, first, flat.reshape(k, L), col)

    def _finish_tokens(self) -> None:
        src: dict[int, int] = {}
        total = 0
        for values, _offs in self._documents():
            u, c = np.unique(values, return_counts=True)
            for k, n in zip(u.tolist(), c.tolist(), strict=True):
                src[k] = src.get(k, 0) + n
            total += len(values)
        have = dict(self.d_hist)
        if self.padding:
            have[self.pad_id] = have.get(self.pad_id, 0) - self.padding
        over = sorted(k for k, n in have.items() if n > src.get(k, 0))
        missing = total - sum(have.values())
        self.result = {"source_tokens": total, "dataset_tokens": sum(have.values())}
        if over:
            self._problem(
                f"holds fewer of token {over[0]} than the dataset ({src.get(over[0], 0)} against {have[over[0]]}): "
                "the dataset does not hold the source's tokens"
            )
            self.differ = -1
        elif missing != self.dropped:
            self._problem(
                f"gives {total} tokens, the dataset holds {total - missing} and says {self.dropped} were dropped"
            )
            self.differ = -1

    def summary(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "mode": "tokens" if self.shuffled else "packed rows",
            "rows_compared": self.d[2],
            "source_rows": None if self.shuffled else self.s[2],
            "differing_rows": self.differ if self.differ >= 0 else None,
            "complete": self.stopped is None,
            "note": self.stopped,
            **self.result,
        }


def _hex(s: list[int]) -> str:
    return f"{s[0]:016x}{s[1]:016x}"
