"""Text to token sequences, a batch of lines at a time.

Every tokenizer takes the text reader's column (a :class:`VarColumn` of UTF-8 bytes, one row per
line) and returns a :class:`VarColumn` of token ids, one row per line:

* ``bytes``: the UTF-8 bytes themselves (ids 0-255): no copy at all.
* ``chars``: Unicode code points, decoded for the whole batch at once.
* a path to a Hugging Face ``tokenizer.json``: loaded from that file with the ``tokenizers``
  package (an optional extra), never from a hub; ids from ``encode_batch_fast``.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import InputError, SchemaError
from ..schema import VarColumn

BUILTIN = ("bytes", "chars")


class Tokenizer:
    name = ""
    spill_dtype = np.dtype(np.int32)  # the dtype ids have before the output dtype is chosen
    vocab_size: int | None = None  # None: the vocabulary is what the data holds

    def encode(self, lines: VarColumn) -> VarColumn:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.name, "vocab_size": self.vocab_size}


class BytesTokenizer(Tokenizer):
    name = "bytes"
    spill_dtype = np.dtype(np.uint8)
    vocab_size = 256

    def encode(self, lines: VarColumn) -> VarColumn:
        return VarColumn(lines.values.view(np.uint8), lines.offsets)


class CharsTokenizer(Tokenizer):
    name = "chars"

    def encode(self, lines: VarColumn) -> VarColumn:
        raw = lines.values.view(np.uint8)
        text = raw.tobytes().decode("utf-8", errors="replace")  # the reader has checked the bytes
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int32)
        starts = (raw & 0xC0) != 0x80  # the first byte of every character
        before = np.zeros(len(raw) + 1, dtype=np.int64)
        np.cumsum(starts, out=before[1:])
        return VarColumn(codes, before[lines.offsets])


class HfTokenizer(Tokenizer):
    spill_dtype = np.dtype(np.int32)

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer as _T
        except ImportError:
            raise SchemaError(
                f"--tokenizer {path}: the 'tokenizers' package is not installed",
                hint="pip install 'lovecraft-convert[tokenizers]'",
            ) from None
        try:
            self.tok = _T.from_file(path)
        except Exception as e:  # noqa: BLE001 - the library's own error types vary
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise InputError(
                f"{path}: not a tokenizer.json the tokenizers package can load ({first})",
                hint="save one with Tokenizer.save(path)",
            ) from None
        self.path = path
        self.name = os.path.basename(path)
        self.vocab_size = int(self.tok.get_vocab_size(with_added_tokens=True))
        self._fast = getattr(self.tok, "encode_batch_fast", None) or self.tok.encode_batch

    def encode(self, lines: VarColumn) -> VarColumn:
        data = lines.values.tobytes()
        o = lines.offsets.tolist()
        texts = [data[o[i] : o[i + 1]].decode("utf-8", errors="replace") for i in range(len(o) - 1)]
        encs = self._fast(texts)
        ids = [e.ids for e in encs]
        lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        offs = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        from itertools import chain

        values = np.fromiter(chain.from_iterable(ids), dtype=np.int32, count=int(offs[-1]))
        return VarColumn(values, offs)

    def describe(self) -> dict:
        return {"name": "tokenizer.json", "path": os.path.abspath(self.path), "vocab_size": self.vocab_size}


def load_tokenizer(spec: str) -> Tokenizer:
    if spec == "bytes":
        return BytesTokenizer()
    if spec == "chars":
        return CharsTokenizer()
    if not os.path.exists(spec):
        raise InputError(
            f"--tokenizer {spec}: no such file",
            hint="give bytes, chars, or the path of a Hugging Face tokenizer.json",
        )
    return HfTokenizer(spec)
