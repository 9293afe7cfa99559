"""The sidecar table of a files input (``--metadata meta.csv|jsonl``): more columns (captions,
transcripts, splits) joined to each file by its relative path or stem.

The sidecar is read by the CSV or JSON Lines reader (its types inferred over the whole file,
``--column-type`` applying to its columns). Its key column is the first of :data:`KEYS` it has
(``file_name`` as Hugging Face's ImageFolder writes it, ``path``, ...), always read as text. A file
``cat/001.jpg`` takes the row keyed ``cat/001.jpg``, else ``cat/001``, else ``001.jpg``, else
``001`` (a WebDataset sample: its key, else the key's last component), but not a shorter key that
is another file's relative path, and a row is one file's (:class:`Lookup`).

Memory: a sidecar up to :func:`whole_limit` of ``--max-memory`` is held whole (one pass, a dict
of its keys); a larger one is joined a window of files at a time, each window's keys looked up in
one more pass that keeps only the rows they name, so memory stays bounded by the window whatever
the sidecar's size (at the cost of one pass over the sidecar per window).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

from ..errors import InputError, SchemaError
from ..schema import Batch, Schema

KEYS = ("file_name", "path", "filename", "file", "key", "__key__")
SUFFIXES = {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def whole_limit(budget: int) -> int:
    """The largest sidecar (bytes on disk) held whole in memory: a sixteenth of the budget."""
    return budget // 16


def candidates(rel: str) -> tuple[str, ...]:
    """The keys a file at relative path ``rel`` may have in a sidecar, in the order tried."""
    stem_rel = os.path.splitext(rel)[0]
    base = rel.rsplit("/", 1)[-1]
    stem = os.path.splitext(base)[0]
    return tuple(dict.fromkeys((rel, stem_rel, base, stem)))


class Lookup:
    """Rows of the sidecar by key: ``rows`` (a Batch of the kept rows) and ``index`` (key -> row).
    A row is one file's: a file takes it by its own path, or by a shorter key no other file of the
    input has as its path (``taken``); a second file that would take a row already taken is an
    error naming both keys' files (stems repeated across folders), not a silent copy."""

    def __init__(self, rows: Batch | None, index: dict[str, int], path: str = "") -> None:
        self.rows = rows
        self.index = index
        self.path = path
        self.owner: dict[int, str] = {}  # row -> the file that took it (rows held: bounded by them)

    def find(self, keys: tuple[str, ...], taken=None, who: str | None = None) -> int:
        """The row of the file whose candidate keys are ``keys`` (its own relative path first), or
        -1; ``taken(key)``: is ``key`` the relative path of another file of the input? ``who``:
        the file (default: its relative path)."""
        who = who or keys[0]
        for j, k in enumerate(keys):
            i = self.index.get(k)
            if i is None or (j and taken is not None and taken(k)):
                continue  # (a shorter key that is another file's path is that file's row)
            first = self.owner.setdefault(i, who)
            if first != who:
                raise InputError(
                    f"--metadata {self.path}: the row keyed '{k}' matches both {first} and {who}",
                    hint="key the sidecar by each file's relative path (cat/001.jpg), or give each a row",
                )
            return i
        return -1


class Sidecar:
    """The sidecar table of ``path``: its columns (``schema``, the key left out) and lookups."""

    def __init__(self, path: str, budget: int, column_types: dict[str, str], errors: str, taken: Iterable[str]) -> None:
        from . import open_reader

        self.path = path
        if not os.path.isfile(path):
            raise InputError(f"--metadata {path}: no such file", hint="check the path")
        kind = SUFFIXES.get(os.path.splitext(path)[1].lower())
        if kind is None:
            raise InputError(
                f"--metadata {path}: not a .csv, .tsv or .jsonl file", hint="give a CSV or JSON Lines file"
            )
        self.kind = kind
        self.budget = budget
        self.errors = errors
        probe = open_reader([path], budget=budget, input_format=kind, errors=errors)
        names = probe.schema.names
        self.key = next((k for k in KEYS if k in names), None)
        if self.key is None:
            raise SchemaError(
                f"--metadata {path}: no key column (columns are {', '.join(names)})",
                hint=f"name the column of file paths one of {', '.join(KEYS)}",
            )
        from ..selection import ColumnTypes

        # float16 is read as float32, then narrowed with the float16 report (as for other inputs)
        types = ColumnTypes(column_types).resolve(names, f"--metadata {path}", strict=False)
        types = {k: ("float32" if v == "float16" else v) for k, v in types.items()}
        self.column_types = {**types, self.key: "string"}
        self.reader = open_reader(
            [path], budget=budget, input_format=kind, errors=errors, column_types=self.column_types
        )
        clash = [n for n in self.schema.names if n in set(taken)]
        if clash:
            raise SchemaError(
                f"--metadata {path}: column '{clash[0]}' is also a column of the files input",
                hint="rename it in the sidecar",
            )
        self.size = os.path.getsize(path)
        self._whole: Lookup | None = None

    @property
    def schema(self) -> Schema:
        return Schema(tuple(f for f in self.reader.schema if f.name != self.key))

    @property
    def whole(self) -> bool:
        """Is the sidecar held whole (small enough), or joined a window at a time?"""
        return self.size <= whole_limit(self.budget)

    def widen(self, widened: dict[str, str]) -> None:
        self.reader.widen({k: v for k, v in widened.items() if k in self.reader.schema.names})

    def lookup(self, wanted: set[str] | None) -> Lookup:
        """The rows whose key is in ``wanted`` (None: every row; held once, the sidecar being small)."""
        if wanted is None and self._whole is not None:
            return self._whole
        index: dict[str, int] = {}
        pieces: list[Batch] = []
        kept = 0
        names = self.schema.names
        line = 0
        for batch in self.reader.batches():  # SchemaChanged (a type widened) starts the job over
            keys = batch.columns[self.key].to_pylist("string")
            take = []
            for j, k in enumerate(keys):
                k = k[2:] if k.startswith("./") else k
                if wanted is not None and k not in wanted:
                    continue
                if k in index:
                    raise InputError(
                        f"--metadata {self.path}, row {line + j + 1}: key '{k}' given twice",
                        hint="keep one row per file",
                    )
                index[k] = kept + len(take)
                take.append(j)
            line += batch.num_rows
            if take:
                sub = batch.take(np.asarray(take, dtype=np.int64))
                pieces.append(Batch({n: sub.columns[n] for n in names}, len(take)))
                kept += len(take)
        rows = Batch.concat(pieces) if pieces else None
        out = Lookup(rows, index, self.path)
        if wanted is None:
            self._whole = out
        return out


def check_column_types(
    column_types: dict[str, str], own: list[str], sidecar: Sidecar | None, kind: str, names: str
) -> None:
    """Refuse a ``--column-type`` a files or webdataset input would ignore. It types the sidecar's
    columns; the input's ``own`` columns (path, bytes, image, label, a member's extension) keep
    their types and only narrow to float16 (the output plan does it): any other selection is one
    line naming it, never a flag silently left out."""
    from ..selection import select

    side = list(sidecar.reader.schema.names) if sidecar is not None else []
    for sel, t in column_types.items():
        if select(side, sel, "--column-type"):
            continue
        mine = select(own, sel, "--column-type")
        if mine and t == "float16":
            continue
        if mine:
            raise SchemaError(
                f"--column-type {sel}={t}: '{mine[0]}' is a column of the {kind} input {names} itself, "
                "whose type is fixed",
                hint="only float16 narrows it; --column-type types the columns of a --metadata sidecar",
            )
        if sidecar is None:
            raise SchemaError(
                f"--column-type {sel}=...: no column '{sel}' in the {kind} input {names} (columns {', '.join(own)})",
                hint="--column-type types the columns of a --metadata sidecar",
            )
        raise SchemaError(
            f"--column-type {sel}=...: no column '{sel}' in --metadata {sidecar.path}",
            hint=f"its columns are {', '.join(side)}",
        )
