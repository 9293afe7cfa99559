"""``verify --against`` of a bucketed dataset: does it hold the sequences ``bucket`` makes of its
source?

The source is re-read as ``bucket`` read it (:class:`~lovecraft_convert.jobs.sequences.Sequences`
with the options the manifest records: the tokenizer and its markers, ``--ragged``, ``--column``),
and the same sequences are dropped or truncated (``--min-length``, ``--max-length``/``--boundaries``
with ``--truncate`` or ``--drop-longer``). Each kept sequence is compared with the dataset's rows,
each taken as its first ``length`` values (padding and bucket order do not matter), as multisets:
the sum of the rows' 128-bit hashes and the row count must agree. Memory stays bounded: the source
is read in the batches ``bucket`` reads.

A packed layout (rows cut from the concatenated token stream) has no row per source sequence: its
comparison is :mod:`.packedsource`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .. import manifest as mf
from ..errors import InputError, LovecraftError
from ..schema import SEQUENCE, Batch, Field, Schema, VarColumn
from .source import removed_problem, row_hashes

MANIFEST = mf.MANIFEST_NAME
MASK = (1 << 64) - 1
# bucket's options that say how the source becomes sequences (the rest are output or run options)
READ_OPTIONS = (
    "to",
    "input_format",
    "delimiter",
    "header",
    "skip_rows",
    "comment",
    "errors",
    "max_expansion",
    "tokenizer",
    "column",
    "eos",
    "bos",
    "ragged",
    "num_buckets",
    "boundaries",
    "max_length",
    "truncate",
    "drop_longer",
    "min_length",
    "layout",
    "seq_len",
    "pad_last",
    "filter",  # the rows kept: the filter applied again, the duplicates decided again
    "dedup",
    "dedup_columns",
    "threshold",
    "ngram",
    "ngram_unit",
    "bands",
    "band_rows",
    "dedup_seed",
)


class BucketComparer:
    """The source of a bucketed dataset against its rows; the interface of ``SourceComparer``."""

    def __init__(self, verifier, inputs: list[str], manifest: dict, schema: Schema) -> None:
        from ..jobs.options import BucketOptions
        from ..jobs.sequences import Sequences

        self.v = verifier
        self.inputs = inputs
        self.manifest = manifest
        self.usable = True
        self.stopped: str | None = None
        self.result: dict[str, Any] = {}
        self.d1 = self.d2 = self.d_rows = 0
        self.src_rows = 0
        self.differ = 0
        seqs = [f for f in schema if f.kind == SEQUENCE]
        if len(seqs) != 1:
            self._problem(f"lists {len(seqs)} sequence columns in its schema, a bucketed dataset one", MANIFEST)
            self.usable = False
            return
        self.field = seqs[0]
        self.dtype = np.dtype(verifier.storage(self.field)).newbyteorder("=")
        self.schema = Schema((Field(self.field.name, SEQUENCE, self.dtype.str),))
        try:
            self.o = BucketOptions(**read_options(manifest))
            self.o.validate()
        except (TypeError, ValueError, LovecraftError) as e:
            self._problem(f"the manifest's options cannot be used to read the source ({one_line(e)})", MANIFEST)
            self.usable = False
            return
        try:
            self.src = Sequences(inputs, self.o, verifier.budget)
        except InputError:
            raise  # a source that cannot be found or opened is the caller's mistake
        except (LovecraftError, TypeError, ValueError, AttributeError, KeyError, UnicodeError) as e:
            self._problem(f"cannot be read with the manifest's options ({one_line(e)})")
            self.usable = False

    def _problem(self, message: str, file: str | None = None) -> None:
        if file == MANIFEST:
            self.v.add(MANIFEST, "source", message)
        else:
            self.v.add(", ".join(self.inputs), "source", message, source=True)

    # -- fed by the verifier, in dataset order ------------------------------------------------

    def feed(self, batch: Batch, unit, file: str, row0: int) -> None:
        if self.stopped:
            return
        col = batch.columns[self.field.name]
        lengths = batch.columns.get("length")
        if not isinstance(col, VarColumn) and np.asarray(col).dtype == object:  # rows as Python objects
            rows = [np.asarray(r).reshape(-1) for r in col]
            offs = np.zeros(len(rows) + 1, dtype=np.int64)
            np.cumsum([len(r) for r in rows], out=offs[1:])
            col = VarColumn(np.concatenate(rows) if rows else np.zeros(0, self.dtype), offs)
        if isinstance(col, VarColumn):
            values, offsets = np.asarray(col.values), np.asarray(col.offsets, dtype=np.int64)
            lens = np.diff(offsets) if lengths is None else np.asarray(lengths, dtype=np.int64)
            if lengths is not None and (lens > np.diff(offsets)).any():
                return  # verify reports the bad lengths; the digest then differs
            seq = _heads(values, offsets[:-1], lens)
        else:
            dense = np.asarray(col).reshape(batch.num_rows, -1)
            lens = np.minimum(np.asarray(lengths, dtype=np.int64), dense.shape[1])
            mask = np.arange(dense.shape[1]) < lens[:, None]
            offs = np.zeros(len(lens) + 1, dtype=np.int64)
            np.cumsum(lens, out=offs[1:])
            seq = VarColumn(dense[mask], offs)
        self._add(seq, dataset=True)

    def _add(self, seq: VarColumn, dataset: bool) -> None:
        seq = VarColumn(np.asarray(seq.values).astype(self.dtype, copy=False), seq.offsets)
        n = len(seq.offsets) - 1
        h1, h2 = row_hashes(Batch({self.field.name: seq}, n), self.schema)
        s1, s2 = int(h1.sum(dtype=np.uint64)), int(h2.sum(dtype=np.uint64))
        if dataset:
            self.d1, self.d2, self.d_rows = (self.d1 + s1) & MASK, (self.d2 + s2) & MASK, self.d_rows + n
        else:
            self.s1, self.s2, self.src_rows = (self.s1 + s1) & MASK, (self.s2 + s2) & MASK, self.src_rows + n

    def broken(self, unit) -> None:
        if not self.stopped:
            self.stopped = f"not compared past {unit.label}: its files cannot be read"

    # -- at the end -----------------------------------------------------------------------------

    def finish(self) -> None:
        if self.stopped:
            return
        self.s1 = self.s2 = 0
        o = self.o
        limit = o.limit()
        try:
            for col, _first, _where in self.src.each(o.part_bytes):
                offsets = np.asarray(col.offsets, dtype=np.int64)
                lens = np.diff(offsets)
                keep = lens >= o.min_length
                if limit is not None:
                    if o.truncate:
                        lens = np.minimum(lens, limit)
                    else:
                        keep &= lens <= limit
                idx = np.flatnonzero(keep)
                self._add(_heads(np.asarray(col.values), offsets[:-1][idx], lens[idx]), dataset=False)
        except LovecraftError as e:
            self.stopped = e.one_line()
            self._problem(self.stopped)
            return
        self.result = {
            "source_digest": f"{self.s1:016x}{self.s2:016x}",
            "dataset_digest": f"{self.d1:016x}{self.d2:016x}",
        }
        if self.src_rows != self.d_rows:
            self._problem(f"gives {self.src_rows} sequences to bucket, the dataset holds {self.d_rows}")
        elif (self.s1, self.s2) != (self.d1, self.d2):
            self._problem(
                "the dataset does not hold the same sequences (their order-independent digests differ: "
                f"source {self.result['source_digest']}, dataset {self.result['dataset_digest']})"
            )
            self.differ = -1
        problem = removed_problem(self.manifest, self.src.keep.removed)
        if problem:
            self._problem(problem, MANIFEST)

    def summary(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "mode": "multiset",
            "rows_compared": self.d_rows,
            "source_rows": self.src_rows,
            "differing_rows": self.differ if self.differ >= 0 else None,
            "complete": self.stopped is None,
            "note": self.stopped,
            **self.result,
        }


def _heads(values: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> VarColumn:
    """The first ``lens[i]`` values from ``starts[i]`` of every row, as one VarColumn."""
    offs = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    at = np.repeat(np.asarray(starts, dtype=np.int64) - offs[:-1], lens) + np.arange(int(offs[-1]), dtype=np.int64)
    return VarColumn(values[at], offs)


def read_options(manifest: dict) -> dict[str, Any]:
    """The manifest's options that say how ``bucket`` read its source; a tokenizer file at the
    absolute path the manifest records."""
    from ..jobs.options import BucketOptions

    raw = manifest.get("options")
    if not isinstance(raw, dict):
        raise TypeError("options is not a mapping")
    names = {f.name for f in dataclasses.fields(BucketOptions)}
    out = {k: v for k, v in raw.items() if k in READ_OPTIONS and k in names}
    info = manifest.get("tokenizer")
    for section in ("bucketing", "packing"):  # where bucket records its tokenizer
        if not isinstance(info, dict) and isinstance(manifest.get(section), dict):
            info = manifest[section].get("tokenizer")
    if (
        isinstance(info, dict)
        and isinstance(info.get("path"), str)
        and out.get("tokenizer") not in (None, "bytes", "chars")
    ):
        out["tokenizer"] = info["path"]
    if isinstance(raw.get("max_memory"), int):
        out["max_memory"] = raw["max_memory"]
    out.update(progress=False, workers=1)
    return out


def one_line(e: BaseException) -> str:
    return e.one_line() if isinstance(e, LovecraftError) else " ".join(str(e).split())[:300]
