"""The ``.idx`` file of Megatron-LM's indexed dataset, written and read by us.

Layout (little-endian), as Megatron-LM's ``megatron/core/datasets/indexed_dataset.py`` reads it:

====================  =========================================================================
9 bytes               ``MMIDIDX\\x00\\x00``
uint64                version, 1
uint8                 dtype code of the tokens in ``.bin`` (:data:`CODES`)
uint64                sequence count ``S``
uint64                document count ``D`` (entries of the document index, one more than documents)
int32 x S             sequence lengths, in tokens
int64 x S             sequence pointers: byte offsets into ``.bin``
int64 x D             document index: the sequence where each document starts, then ``S``
int8 x S              (only in multimodal datasets) sequence modes
====================  =========================================================================

The ``.bin`` file holds the tokens of every sequence back to back. lovecraft writes one sequence
per document (as Megatron-LM's ``preprocess_data.py`` does without ``--split-sentences``), so the
document index is ``0, 1, ..., S``, and the pointers are the running sums of the lengths times the
token size. Everything here works in bounded pieces: an index holds 20 bytes per document, more
than memory for large corpora.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ...errors import DatasetError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequences, documents: 34 bytes
CODES = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("<f8"),
    7: np.dtype("<f4"),
    8: np.dtype("<u2"),
}
PIECE = 1 << 20  # index entries handled at a time


def code_of(dtype: np.dtype) -> int | None:
    """Megatron's code of a token dtype (None when it has none)."""
    dt = np.dtype(dtype)
    dt = dt.newbyteorder("<") if dt.byteorder == ">" else dt
    for code, d in CODES.items():
        if d == dt:
            return code
    return None


def dtype_names() -> str:
    return ", ".join(d.name for d in CODES.values())


def header(code: int, sequences: int, documents: int) -> bytes:
    return HEADER.pack(MAGIC, VERSION, code, sequences, documents)


def index_bytes(sequences: int, documents: int, modes: bool = False) -> int:
    """The size of an index of ``sequences`` sequences and ``documents`` document-index entries."""
    return HEADER.size + sequences * (4 + 8 + (1 if modes else 0)) + documents * 8


@dataclass
class Index:
    """A parsed ``.idx`` header and where its arrays are."""

    path: str
    code: int
    dtype: np.dtype
    sequences: int
    documents: int
    size: int  # bytes of the file

    @property
    def lengths_at(self) -> int:
        return HEADER.size

    @property
    def pointers_at(self) -> int:
        return HEADER.size + 4 * self.sequences

    @property
    def documents_at(self) -> int:
        return HEADER.size + 12 * self.sequences

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lengths, pointers, document index) mapped from the file (page cache, not memory)."""
        if self.sequences == 0 and self.documents == 0:
            return np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64)
        from ...storage import is_remote

        if is_remote(self.path):  # a remote dataset's: read by rows through the node's cache
            from ...storage.remote import registered
            from ...storage.remote_array import RemoteArray

            rf = registered(self.path)
            return (
                RemoteArray(rf, "<i4", (self.sequences,), self.lengths_at),
                RemoteArray(rf, "<i8", (self.sequences,), self.pointers_at),
                RemoteArray(rf, "<i8", (self.documents,), self.documents_at),
            )
        m = np.memmap(self.path, dtype=np.uint8, mode="r")
        lengths = np.frombuffer(m, dtype="<i4", count=self.sequences, offset=self.lengths_at)
        pointers = np.frombuffer(m, dtype="<i8", count=self.sequences, offset=self.pointers_at)
        docs = np.frombuffer(m, dtype="<i8", count=self.documents, offset=self.documents_at)
        return lengths, pointers, docs


class IndexProblem(Exception):
    """What is wrong with an ``.idx`` file, in words (the caller names the file)."""


def read_index(path: str) -> Index:
    """The header of ``path``, checked against the file's size; :class:`IndexProblem` otherwise."""
    from ...storage import input_size, open_input

    size = input_size(path)
    with open_input(path, buffering=0) as f:
        head = f.read(HEADER.size)
    if len(head) < HEADER.size:
        raise IndexProblem(f"holds {size} bytes, less than the {HEADER.size}-byte header of a Megatron index")
    magic, version, code, sequences, documents = HEADER.unpack(head)
    if magic != MAGIC:
        raise IndexProblem(f"does not start with the Megatron index header MMIDIDX (it starts with {magic[:9]!r})")
    if version != VERSION:
        raise IndexProblem(f"is Megatron index version {version}; version 1 is the one there is")
    if code not in CODES:
        raise IndexProblem(f"has dtype code {code}, which is none of Megatron's ({', '.join(map(str, CODES))})")
    need = index_bytes(sequences, documents)
    if need > size:
        raise IndexProblem(
            f"claims {sequences} sequences and {documents} document entries ({need} bytes), "
            f"but holds {size} bytes (truncated?)"
        )
    return Index(path, code, CODES[code], sequences, documents, size)


def open_index(path: str, where: str) -> Index:
    """:func:`read_index` for the loaders: a DatasetError naming the file."""
    try:
        return read_index(path)
    except IndexProblem as e:
        raise DatasetError(f"{where}: {e}", hint="the dataset is damaged; run `lovecraft verify`") from None
    except OSError as e:
        raise DatasetError(f"{where}: cannot read ({e.strerror})", hint="the dataset is damaged") from None


def pieces(n: int, step: int = PIECE) -> Iterator[tuple[int, int]]:
    for a in range(0, n, step):
        yield a, min(n, a + step)
