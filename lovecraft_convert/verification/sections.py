"""``verify`` of the manifest sections that describe token data: ``tokenizer`` (``convert
--tokenizer``), ``bucketing`` (``bucket``) and ``packing`` (``bucket --layout packed``), each field
against the schema, the rest of the manifest and the rows themselves, as every unit is decoded.

What is checked, field by field (a problem names the field):

* ``tokenizer``: its ``dtype`` is the token column's; a built-in's ``vocab_size`` is its own
  (``bytes``: 256); every token id lies below ``vocab_size`` (the markers and the pad value aside);
  every document starts with ``bos_id`` and ends with ``eos_id`` when they are set (for buckets,
  when nothing was truncated; for packed rows, ``bos_id`` at every document start). What a
  ``tokenizer.json`` would make of the source is ``verify --against``'s to say.
* ``bucketing``: ``layout`` and ``dtype`` are the buckets' and the schema's; the buckets' bounds are
  consecutive ``boundaries``; ``rows``, ``tokens``, ``longest``, ``padded_tokens``,
  ``single_bucket_padded_tokens``, ``padded_tokens_saved``, ``padding_efficiency`` and
  ``length_histogram`` are those of the lengths stored, and each bucket's ``tokens``,
  ``padded_tokens`` and ``padding_efficiency`` its own; ``input_sequences`` is the rows kept plus
  those dropped; padded rows hold ``pad_id`` past their length.
* ``packing``: ``seq_len``, ``dtype`` and ``rows`` are the schema's and the manifest's; ``tokens``,
  ``dropped_tokens``, ``padding_tokens``, ``pad_last``, ``dropped_partial_row`` and
  ``padding_efficiency`` add up as ``bucket`` makes them; the last row ends in ``padding_tokens``
  of ``pad_id``; ``documents`` is at least the document starts stored; ``order`` is what
  ``shuffle`` says.
"""

from __future__ import annotations

import numpy as np

from ..formats.checking import Unit
from ..schema import FIXED, SEQUENCE, Batch, Schema, VarColumn

BUILTIN_VOCAB = {"bytes": 256}
LENGTH = "length"


def _eff(num: int, den: int) -> float:
    return round(num / den, 6) if den else 1.0


class Sections:
    """The checks of the token sections of manifest ``m``: fed every decoded batch (with its unit
    and file), then :meth:`finish`; every problem goes to ``add(field, message)``."""

    def __init__(self, m: dict, schema: Schema, add) -> None:
        self.m, self.schema, self.add = m, schema, add
        self.active = False
        self.tok = self.bucketing = self.packing = None
        seq = [f for f in schema if f.kind == SEQUENCE]
        packed = m.get("packing") if isinstance(m.get("packing"), dict) else None
        bucketing = m.get("bucketing") if isinstance(m.get("bucketing"), dict) else None
        if packed is not None and "tokens" in schema.names and schema["tokens"].kind == FIXED:
            self.packing, self.col = packed, schema["tokens"]
            self.tok, self.tok_field = packed.get("tokenizer"), "packing.tokenizer"
        elif bucketing is not None and seq:
            self.bucketing, self.col = bucketing, seq[0]
            self.tok, self.tok_field = bucketing.get("tokenizer"), "bucketing.tokenizer"
        elif isinstance(m.get("tokenizer"), dict) and seq:
            self.col = next((f for f in seq if f.name == "tokens"), seq[0])
            self.tok, self.tok_field = m["tokenizer"], "tokenizer"
        else:
            return
        self.active = True
        self.tok = self.tok if isinstance(self.tok, dict) else None
        self.top = None  # the largest token id seen
        self.marks = {"bos_id": 0, "eos_id": 0}  # documents without their marker
        self.lengths: list[np.ndarray] = []  # bucketing: every row's length, by unit
        self.by_unit: dict[str, tuple[dict, list]] = {}
        self.pad_bad = 0
        self.starts = 0  # packing: document starts stored
        self.last_row: np.ndarray | None = None

    # -- fed --------------------------------------------------------------------------------------

    def feed(self, batch: Batch, u: Unit) -> None:
        if not self.active or not batch.num_rows:
            return
        col = batch.columns[self.col.name]
        values = np.asarray(col.values if isinstance(col, VarColumn) else col)
        lens = None
        if self.bucketing is not None:
            if not isinstance(col, VarColumn) and LENGTH not in batch.columns:
                self.add("schema", f"the padded column '{self.col.name}' has no '{LENGTH}' column beside it")
                self.active = False  # nothing about the lengths can be checked
                return
            lens = self._lengths(batch, col)
            self.by_unit.setdefault(u.label, (u.bucket or {}, []))[1].append(lens)
            self.lengths.append(lens)
            if not isinstance(col, VarColumn):  # padded: the values that count, and the padding
                width = col.shape[1]
                inside = np.arange(width)[None, :] < lens[:, None]
                pad = self.bucketing.get("pad_id")
                if isinstance(pad, (int, float)) and not isinstance(pad, bool):
                    self.pad_bad += int(np.count_nonzero(col[~inside] != pad))
                values = col[inside]
        if self.packing is not None:
            starts = batch.columns.get("doc_starts")
            if isinstance(starts, VarColumn):
                self.starts += len(starts.values)
                self._packed_bos(col, starts)
            self.last_row = np.asarray(col[-1])
        if values.size:
            top = int(values.max())
            self.top = top if self.top is None else max(self.top, top)
        if self.packing is None:
            self._markers(col, lens)

    def _lengths(self, batch: Batch, col) -> np.ndarray:
        if isinstance(col, VarColumn):
            return np.diff(np.asarray(col.offsets, dtype=np.int64))
        return np.asarray(batch.columns[LENGTH], dtype=np.int64).reshape(-1)

    def _markers(self, col, lens) -> None:
        """Every document starts with ``bos_id`` and ends with ``eos_id`` (when set)."""
        if self.tok is None or (self.bucketing is not None and self.bucketing.get("truncated")):
            return
        if isinstance(col, VarColumn):
            offs = np.asarray(col.offsets, dtype=np.int64)
            vals = np.asarray(col.values)
            nz = np.flatnonzero(np.diff(offs) > 0)
            firsts, lasts = vals[offs[:-1][nz]], vals[offs[1:][nz] - 1]
            empty = len(offs) - 1 - len(nz)
        else:
            nz = np.flatnonzero(lens > 0)
            firsts, lasts = col[nz, 0], col[nz, lens[nz] - 1]
            empty = len(lens) - len(nz)
        for key, got in (("bos_id", firsts), ("eos_id", lasts)):
            want = self.tok.get(key)
            if isinstance(want, int) and not isinstance(want, bool):
                self.marks[key] += int(np.count_nonzero(got != want)) + empty

    def _packed_bos(self, col: np.ndarray, starts: VarColumn) -> None:
        want = self.tok.get("bos_id") if self.tok is not None else None
        if not isinstance(want, int) or isinstance(want, bool) or not len(starts.values):
            return
        rows = np.repeat(np.arange(len(starts)), np.diff(np.asarray(starts.offsets, dtype=np.int64)))
        self.marks["bos_id"] += int(np.count_nonzero(col[rows, np.asarray(starts.values)] != want))

    # -- judged -----------------------------------------------------------------------------------

    def finish(self, complete: bool) -> None:
        """Static checks always; those of the data only when every unit was decoded (``complete``)."""
        if not self.active:
            return
        self._tokenizer(complete)
        if self.bucketing is not None:
            self._bucketing(complete)
        if self.packing is not None:
            self._packing(complete)

    def _say(self, field: str, got, want, why: str = "") -> None:
        """``field`` is ``got``; ``why`` (what says otherwise) ``want`` (a string is shown as it is)."""
        shown = want if isinstance(want, str) and " " in want else repr(want)
        self.add(field, f"{field} is {got!r}; {why or 'the data gives'} {shown}")

    def _tokenizer(self, complete: bool) -> None:
        t, f = self.tok, self.tok_field
        if t is None:
            return
        dt = self.col.np_dtype
        if "dtype" in t and np.dtype(t["dtype"]) != dt:
            self._say(f"{f}.dtype", t["dtype"], dt.name, "the token column holds")
        name, vocab = t.get("name"), t.get("vocab_size")
        if name in BUILTIN_VOCAB and vocab != BUILTIN_VOCAB[name]:
            self._say(f"{f}.vocab_size", vocab, BUILTIN_VOCAB[name], f"the {name} tokenizer has")
        if not complete:
            return
        if isinstance(vocab, int) and self.top is not None:
            allowed = max([vocab - 1] + [v for v in (t.get("eos_id"), t.get("bos_id"), self._pad()) if _is_int(v)])
            if self.top > allowed:
                self.add(f"{f}.vocab_size", f"{f}.vocab_size is {vocab}; the data holds token id {self.top}")
        for key in ("bos_id", "eos_id"):
            if self.marks[key]:
                where = "start" if key == "bos_id" else "end"
                self.add(
                    f"{f}.{key}",
                    f"{f}.{key} is {t.get(key)!r}; {self.marks[key]} documents do not {where} with it",
                )

    def _pad(self):
        sec = self.bucketing if self.bucketing is not None else self.packing
        return sec.get("pad_id") if sec is not None else None

    def _bucketing(self, complete: bool) -> None:
        b = self.bucketing
        buckets = [x for x in self.m.get("buckets") or [] if isinstance(x, dict)]
        bounds = b.get("boundaries") or []
        if sorted(set(bounds)) != list(bounds):
            self.add("bucketing.boundaries", f"bucketing.boundaries {bounds} do not ascend")
        for i, x in enumerate(buckets):
            hi = x.get("max_length")
            if hi not in bounds:
                self._say("bucketing.boundaries", bounds, hi, f"buckets[{i}].max_length is")
                continue
            k = bounds.index(hi)
            lo = 0 if k == 0 else bounds[k - 1] + 1
            if x.get("min_length") != lo:
                self._say(f"buckets[{i}].min_length", x.get("min_length"), lo, "bucketing.boundaries give")
            if x.get("layout", "padded") != b.get("layout"):
                self._say("bucketing.layout", b.get("layout"), x.get("layout", "padded"), f"buckets[{i}].layout is")
        if "dtype" in b and np.dtype(b["dtype"]) != self.col.np_dtype:
            self._say("bucketing.dtype", b["dtype"], self.col.np_dtype.name, "the token column holds")
        counted = ("rows", "dropped_shorter", "dropped_longer")
        if all(_is_int(b.get(k)) for k in (*counted, "input_sequences")):
            kept = b["rows"] + b["dropped_shorter"] + b["dropped_longer"]
            if b["input_sequences"] != kept:
                self._say(
                    "bucketing.input_sequences", b["input_sequences"], kept, "the rows kept and dropped add up to"
                )
        if self.pad_bad:
            self.add(
                "bucketing.pad_id", f"bucketing.pad_id is {b.get('pad_id')!r}; {self.pad_bad} padding values differ"
            )
        if not complete:
            return
        lens = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        values, counts = np.unique(lens, return_counts=True)
        rows, tokens = len(lens), int(lens.sum())
        longest = int(lens.max()) if rows else 0
        padded = sum(int(x.get("rows", 0)) * int(x.get("max_length", 0)) for x in buckets)
        want = {
            "rows": rows,
            "tokens": tokens,
            "longest": longest,
            "padded_tokens": padded,
            "single_bucket_padded_tokens": rows * longest,
            "padded_tokens_saved": rows * longest - padded,
            "padding_efficiency": _eff(tokens, padded),
            "length_histogram": [values.tolist(), counts.tolist()],
        }
        for key, w in want.items():
            if key in b and b[key] != w:
                self._say(f"bucketing.{key}", b[key], w)
        for i, x in enumerate(buckets):
            mine = [a for label, (bk, arrs) in self.by_unit.items() if bk is x for a in arrs]
            bl = np.concatenate(mine) if mine else np.zeros(0, np.int64)
            n, t = len(bl), int(bl.sum())
            for key, w in (("tokens", t), ("padded_tokens", n * int(x.get("max_length", 0))),
                           ("padding_efficiency", _eff(t, n * int(x.get("max_length", 0))))):  # fmt: skip
                if key in x and x[key] != w:
                    self._say(f"buckets[{i}].{key}", x[key], w)

    def _packing(self, complete: bool) -> None:
        p = self.packing
        L = self.col.shape[0] if self.col.shape else None
        if p.get("seq_len") != L:
            self._say("packing.seq_len", p.get("seq_len"), L, "the token rows hold")
        if "dtype" in p and np.dtype(p["dtype"]) != self.col.np_dtype:
            self._say("packing.dtype", p["dtype"], self.col.np_dtype.name, "the token column holds")
        rows = self.m.get("rows")
        if p.get("rows") != rows:
            self._say("packing.rows", p.get("rows"), rows, "the manifest's rows are")
        order = "shuffled" if self.m.get("shuffle") else "input"
        if "order" in p and p["order"] != order:
            self._say("packing.order", p["order"], order, "the manifest's shuffle says")
        if not all(_is_int(p.get(k)) for k in ("seq_len", "rows", "tokens", "dropped_tokens", "padding_tokens")):
            return
        L, n = p["seq_len"], p["rows"]
        pad_last, drop, padding = bool(p.get("pad_last")), p["dropped_tokens"], p["padding_tokens"]
        if p["tokens"] != n * L - padding + drop:
            self._say(
                "packing.tokens", p["tokens"], n * L - padding + drop, "the rows, padding and dropped tokens give"
            )
        if drop >= L or (pad_last and drop):
            self._say("packing.dropped_tokens", drop, 0 if pad_last else f"less than {L}", "pad_last and seq_len allow")
        if padding >= L or (padding and not pad_last):
            self._say("packing.padding_tokens", padding, 0 if not pad_last else f"less than {L}", "pad_last allows")
        if "dropped_partial_row" in p and p["dropped_partial_row"] != (drop > 0):
            self._say("packing.dropped_partial_row", p["dropped_partial_row"], drop > 0, "dropped_tokens gives")
        if "padding_efficiency" in p and n and p["padding_efficiency"] != _eff(n * L - padding, n * L):
            self._say("packing.padding_efficiency", p["padding_efficiency"], _eff(n * L - padding, n * L))
        if not complete:
            return
        docs = p.get("documents")
        if _is_int(docs) and docs < self.starts:
            self._say("packing.documents", docs, f"at least {self.starts}", "the document starts stored give")
        pad = p.get("pad_id")
        if padding and self.last_row is not None and _is_int(pad):
            tail = self.last_row[L - padding :]
            if (tail != pad).any():
                self.add(
                    "packing.pad_id",
                    f"packing.pad_id is {pad}; the last row's {padding} padding tokens are not all {pad}",
                )


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
