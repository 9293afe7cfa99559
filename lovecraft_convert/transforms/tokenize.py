"""Text to token ids: the tokenizers, the document markers, and the transform that applies them.

A *tokenizer* takes a text column (a :class:`VarColumn` of UTF-8 bytes, one row per document) and
returns a :class:`VarColumn` of token ids, one row per document:

* ``bytes``: the UTF-8 bytes themselves (ids 0-255): no copy at all.
* ``chars``: Unicode code points, decoded for the whole batch at once.
* a path to a Hugging Face ``tokenizer.json``: loaded from that file with the ``tokenizers``
  package (an optional extra), never from a hub; ids from ``encode_batch_fast``, whose own threads
  use every core. The batch is encoded in pieces, the next piece on a helper thread while this one
  turns the previous piece's encodings into an array (the library releases the GIL while it
  encodes), so the Python half of the work overlaps the tokenizer's.

:class:`Tokens` adds the document markers (``--bos`` before, ``--eos`` after every document) and
gives the ids in the smallest dtype that holds the vocabulary and the markers (uint8, uint16 or
int32). :class:`Tokenize` is the transform (batch in, batch out) that ``convert``, ``shard`` and
``verify --against`` apply through their output plan: the text column ``--column`` (``text`` when
there is one) becomes the column ``tokens``; ``bucket`` encodes its text through the same
:class:`Tokens`.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from ..errors import InputError, OptionsError, SchemaError
from ..runtime.interrupts import result
from ..schema import BINARY, SEQUENCE, STRING, Batch, Field, Schema, VarColumn

BUILTIN = ("bytes", "chars")
TOKENS = "tokens"  # the name of the token column
TOKEN_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.int32))
MAX_ID = (1 << 31) - 1
PIECE_ROWS = 4096  # documents per encode call of a tokenizer.json (pieces overlap with the Python half)


class Tokenizer:
    name = ""
    spill_dtype = np.dtype(np.int32)  # the dtype ids have before the output dtype is chosen
    vocab_size: int | None = None  # None: the vocabulary is what the data holds

    def encode(self, lines: VarColumn) -> VarColumn:
        raise NotImplementedError

    def token_id(self, token: str) -> int | None:
        """The id of a token string (None when it is not one token of this tokenizer)."""
        return None

    def special_tokens(self) -> list[str]:
        """The tokenizer's own special tokens (what a document marker usually is), in id order."""
        return []

    ignored: list[str] = []  # settings the file asks for that are not applied (HfTokenizer)

    def describe(self) -> dict:
        return {"name": self.name, "vocab_size": self.vocab_size}

    def note(self) -> str | None:
        """The note of a tokenizer.json saved with padding or truncation, which are not applied."""
        if not self.ignored:
            return None
        return (
            f"{self.name} asks for {' and '.join(self.ignored)}, which is not applied: each document is "
            "tokenized whole (bucket --truncate cuts sequences, and counts them)"
        )


class BytesTokenizer(Tokenizer):
    name = "bytes"
    spill_dtype = np.dtype(np.uint8)
    vocab_size = 256

    def encode(self, lines: VarColumn) -> VarColumn:
        return VarColumn(lines.values.view(np.uint8), lines.offsets)

    def token_id(self, token: str) -> int | None:
        raw = token.encode("utf-8")
        return raw[0] if len(raw) == 1 else None


class CharsTokenizer(Tokenizer):
    name = "chars"

    def encode(self, lines: VarColumn) -> VarColumn:
        raw = lines.values.view(np.uint8)
        try:
            text = raw.tobytes().decode("utf-8")  # a text column's bytes are checked by the reader
        except UnicodeDecodeError:  # a binary column: each row decoded alone, a bad byte one U+FFFD
            return self._each_row(lines)
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int32)
        starts = (raw & 0xC0) != 0x80  # the first byte of every character (valid UTF-8 only)
        before = np.zeros(len(raw) + 1, dtype=np.int64)
        np.cumsum(starts, out=before[1:])
        return VarColumn(codes, before[lines.offsets])

    @staticmethod
    def _each_row(lines: VarColumn) -> VarColumn:
        """Rows that are not all UTF-8, decoded one by one as the tokenizer.json path decodes them
        (counting the first bytes of characters, as the fast path does, moved characters across
        documents: a lone 0x93 is one U+FFFD and no first byte)."""
        data = lines.values.tobytes()
        o = lines.offsets.tolist()
        texts = [data[o[i] : o[i + 1]].decode("utf-8", errors="replace") for i in range(len(o) - 1)]
        offs = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in texts], out=offs[1:])
        codes = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32).astype(np.int32)
        return VarColumn(codes, offs)

    def token_id(self, token: str) -> int | None:
        return ord(token) if len(token) == 1 else None


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
            self.tok, self.ignored = _loaded(_T, path)
        except OSError as e:
            raise InputError(f"{path}: cannot read the tokenizer ({e.strerror})", hint="check the path") from None
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

    def __getstate__(self) -> dict:  # a worker loads the file (once per process: _loaded)
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])

    def token_id(self, token: str) -> int | None:
        i = self.tok.token_to_id(token)
        return None if i is None else int(i)

    def special_tokens(self) -> list[str]:
        """The added tokens marked special in the tokenizer.json (``added_tokens``, ``special: true``)."""
        added = self.tok.get_added_tokens_decoder()
        return [added[i].content for i in sorted(added) if added[i].special]

    def encode(self, lines: VarColumn) -> VarColumn:
        data = lines.values.tobytes()
        o = lines.offsets.tolist()
        n = len(o) - 1
        texts = [data[o[i] : o[i + 1]].decode("utf-8", errors="replace") for i in range(n)]
        del data
        pieces = [texts[a : a + PIECE_ROWS] for a in range(0, n, PIECE_ROWS)] or [[]]
        parts = [_ids(self._fast(pieces[0]))] if len(pieces) == 1 else self._overlapped(pieces)
        lens = np.concatenate([p[1] for p in parts])
        offs = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        values = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
        return VarColumn(values, offs)

    def _overlapped(self, pieces: list[list[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Encode piece k+1 on the helper thread while the encodings of piece k become arrays."""
        pool = _helper()
        ahead = pool.submit(self._fast, pieces[0])
        out = []
        for k in range(len(pieces)):
            encs = result(ahead)
            if k + 1 < len(pieces):
                ahead = pool.submit(self._fast, pieces[k + 1])
            out.append(_ids(encs))
            del encs
        return out

    def describe(self) -> dict:
        d = {"name": "tokenizer.json", "path": os.path.abspath(self.path), "vocab_size": self.vocab_size}
        if self.ignored:
            d["settings_not_applied"] = self.ignored  # the file's padding/truncation: documents whole
        return d


_LOADED: dict[tuple, tuple] = {}  # (path, size, mtime) -> (the library's Tokenizer, settings not applied)


def _loaded(cls, path: str):
    """The library's tokenizer of ``path``, loaded once per process while the file is unchanged.

    Every unit a worker runs opens its own reader, and so its own tokenizer; each instance of the
    library's tokenizer that has encoded keeps about 1.3 MiB after it is dropped (tokenizers
    0.23; measured: 16 units of a 1 GiB corpus grew a worker by 21 MiB). One instance per file is
    also faster: a unit does not parse the file again.

    Returns it with the settings it was saved with that are not applied (``padding``,
    ``truncation``): what the file says of them is a setting for a model's batches, not for a
    corpus (padded, every document took the pads of its piece's longest, and their EOS came after
    them; truncated, it was cut without a word), so documents are tokenized whole (bucket
    --truncate cuts, and counts). They are read before the shared instance is changed, so every
    load of the file says them (a second job of the process said nothing, and its manifest lost
    them).
    """
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    got = _LOADED.get(key)
    if got is None:
        tok = cls.from_file(path)
        ignored = [k for k, v in (("padding", tok.padding), ("truncation", tok.truncation)) if v]
        if ignored:
            tok.no_padding()
            tok.no_truncation()
        if len(_LOADED) >= 4:
            _LOADED.pop(next(iter(_LOADED)))
        got = _LOADED[key] = (tok, ignored)
    return got


@functools.cache
def _helper():
    """The one helper thread of this process."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(1, thread_name_prefix="lovecraft-tokenize")


def _ids(encs) -> tuple[np.ndarray, np.ndarray]:
    """(every id, as int32; the number of ids of each encoding)."""
    from itertools import chain

    ids = [e.ids for e in encs]
    lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    values = np.fromiter(chain.from_iterable(ids), dtype=np.int32, count=int(lens.sum()))
    return values, lens


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
    if os.path.isdir(spec):
        raise InputError(f"--tokenizer {spec}: is a directory", hint="give the path of its tokenizer.json")
    return HfTokenizer(spec)


def token_dtype(top: int | None) -> np.dtype:
    """The smallest of uint8, uint16, int32 holding ids 0..top (int32 when the top is not known)."""
    if top is None:
        return TOKEN_DTYPES[-1]
    for dt in TOKEN_DTYPES:
        if top <= np.iinfo(dt).max:
            return dt
    raise OptionsError(f"token ids up to {top} do not fit int32")


def ids_dtype(lo: int, hi: int, vocab_size: int | None, pad: float | int = 0) -> np.dtype:
    """The smallest token dtype (uint8, uint16, int32) for ids ``lo..hi``, the vocabulary's and the
    pad id (``bucket``'s padded and packed layouts), which must be an integer."""
    import math

    p = float(pad)
    if not math.isfinite(p) or p != int(p):
        raise SchemaError(f"--pad-id {pad}: token ids are integers")
    need_lo = min(lo, int(p), 0)
    need_hi = max(hi, (vocab_size or (hi + 1)) - 1, int(p))
    for dt in TOKEN_DTYPES:
        if np.iinfo(dt).min <= need_lo and need_hi <= np.iinfo(dt).max:
            return dt
    raise SchemaError(f"token ids from {need_lo} to {need_hi} do not fit int32")


def marker_id(tokenizer: Tokenizer, spec: str | int | None, flag: str) -> int | None:
    """The id of a document marker: an integer (or decimal digits) is an id, any other string a
    token looked up in the tokenizer's vocabulary."""
    if spec is None:
        return None
    if isinstance(spec, bool):
        raise OptionsError(f"{flag} {spec!r}: give a token of the vocabulary or an integer id")
    number = isinstance(spec, str) and spec.isascii() and spec.removeprefix("-").isdigit() and spec != "-"
    if isinstance(spec, (int, np.integer)) or number:
        i = int(spec)
        if not 0 <= i <= MAX_ID:
            raise OptionsError(f"{flag} {spec}: token ids are 0 to {MAX_ID}")
        vocab = tokenizer.vocab_size
        if isinstance(tokenizer, HfTokenizer) and vocab and i >= vocab:  # (a typo: no embedding row has it)
            special = ", ".join(f"{t!r} ({tokenizer.token_id(t)})" for t in tokenizer.special_tokens()[:8])
            raise OptionsError(
                f"{flag} {i}: beyond the vocabulary of {tokenizer.name} (ids 0 to {vocab - 1})",
                hint=f"give a token or an id of it{': its special tokens are ' + special if special else ''}",
            )
        return i
    if not isinstance(spec, str) or not spec:
        raise OptionsError(f"{flag} {spec!r}: give a token of the vocabulary or an integer id")
    i = tokenizer.token_id(spec)
    if i is None and isinstance(tokenizer, BytesTokenizer):
        raise OptionsError(f"{flag} {spec!r}: the bytes tokenizer's tokens are single bytes", hint=BYTES_HINT)
    if i is None and isinstance(tokenizer, CharsTokenizer):
        raise OptionsError(f"{flag} {spec!r}: the chars tokenizer's tokens are single characters", hint=CHARS_HINT)
    if i is None:
        special = tokenizer.special_tokens()
        shown = ", ".join(repr(t) for t in special[:8]) + (f" and {len(special) - 8} more" if len(special) > 8 else "")
        raise OptionsError(
            f"{flag} {spec!r}: not in the vocabulary of {tokenizer.name}",
            hint=f"its special tokens are {shown}; give one of them or an integer id"
            if special
            else "it has no special tokens; give a token of its vocabulary or an integer id",
        )
    return i


BYTES_HINT = "give one ASCII character or an integer id (256 or more for a token beyond the bytes)"
CHARS_HINT = "give one character or an integer id (a code point, or beyond them for a token of your own)"


class Tokens:
    """A tokenizer and the document markers: a text column to a column of token ids, one row per
    document (``bos``, the document's tokens, ``eos``), in :attr:`dtype`: the smallest of uint8,
    uint16, int32 that holds the vocabulary and the markers."""

    def __init__(self, spec: str, eos: str | int | None = None, bos: str | int | None = None) -> None:
        self.tokenizer = load_tokenizer(spec)
        self.spec = spec
        self.eos = marker_id(self.tokenizer, eos, "--eos")
        self.bos = marker_id(self.tokenizer, bos, "--bos")
        self.name = self.tokenizer.name
        vocab = self.tokenizer.vocab_size
        markers = [m for m in (self.eos, self.bos) if m is not None]
        self.top = None if vocab is None else max([vocab - 1, *markers])
        self.dtype = token_dtype(self.top)
        self.vocab_size = vocab
        self.spill_dtype = np.promote_types(self.tokenizer.spill_dtype, self.dtype)

    def encode(self, lines: VarColumn) -> VarColumn:
        ids = self.tokenizer.encode(lines)
        values = np.asarray(ids.values)
        if values.dtype != self.dtype:
            if values.size and values.dtype.itemsize > self.dtype.itemsize:
                top = int(values.max())
                if top > np.iinfo(self.dtype).max:
                    raise SchemaError(
                        f"--tokenizer {self.spec}: gave token id {top}, beyond its vocabulary of {self.vocab_size}",
                        hint="check the tokenizer file",
                    )
            values = values.astype(self.dtype)
        if self.eos is None and self.bos is None:
            return VarColumn(values, ids.offsets)
        return with_markers(VarColumn(values, ids.offsets), self.bos, self.eos)

    def describe(self) -> dict:
        d = self.tokenizer.describe()
        d.update({"dtype": self.dtype.name, "eos_id": self.eos, "bos_id": self.bos})
        return d

    def note(self) -> str | None:
        return self.tokenizer.note()


def notes_of(tokens: Tokens | Tokenizer | None) -> dict:
    """The manifest's ``notes`` about ``tokens`` (bucket's: convert's come with its plan's)."""
    note = tokens.note() if tokens is not None else None
    return {"notes": [note]} if note else {}


def token_description(tokens: Tokens | None, dtype: str) -> dict | None:
    """The manifest's ``tokenizer`` of a dataset whose token column holds ``dtype``: ``bucket``
    narrows ids to the smallest type holding those it met (a ``chars`` tokenizer, which has no
    vocabulary size, gives int32 ids that ASCII text keeps in uint8), and the section says so
    (``verify`` holds it to the column's)."""
    if tokens is None:
        return None
    return {**tokens.describe(), "dtype": dtype}


def with_markers(col: VarColumn, bos: int | None, eos: int | None) -> VarColumn:
    """Every row with ``bos`` before it and ``eos`` after it (either may be None)."""
    nb, ne = int(bos is not None), int(eos is not None)
    offs = np.asarray(col.offsets, dtype=np.int64) - int(col.offsets[0])
    n = len(offs) - 1
    new = offs + np.arange(n + 1, dtype=np.int64) * (nb + ne)
    out = np.empty(int(new[-1]), dtype=col.values.dtype)
    body = np.ones(len(out), dtype=bool)
    if nb:
        body[new[:-1]] = False
    if ne:
        body[new[1:] - 1] = False
    out[body] = col.values[int(col.offsets[0]) : int(col.offsets[-1])]
    if nb:
        out[new[:-1]] = bos
    if ne:
        out[new[1:] - 1] = eos
    return VarColumn(out, new)


class Tokenize:
    """Batch -> batch: the text column ``column`` (when None: ``text``, else the only text column)
    becomes the
    token column ``tokens`` (in its place among ``keep``, first when ``keep`` does not name it); the
    other columns are those of ``keep``."""

    def __init__(self, schema: Schema, tokens: Tokens, column: str | None, keep: list[str] | None, source: str):
        if column is None:
            strings = [f.name for f in schema if f.kind in (STRING, BINARY)]
            if "text" in schema.names:
                column = "text"
            elif len(strings) == 1:  # the only text column (the docs' default; id columns beside it)
                column = strings[0]
            else:
                raise SchemaError(
                    f"{source}: say which column holds the text to tokenize (columns: {', '.join(schema.names)})",
                    hint="pass --column NAME",
                )
        if column not in schema.names:
            raise SchemaError(
                f"{source}: no column '{column}' to tokenize", hint=f"columns are {', '.join(schema.names)}"
            )
        f = schema[column]
        if f.kind not in (STRING, BINARY):
            raise SchemaError(
                f"{source}, column '{column}': holds {f.describe()}, not text; --tokenizer reads a text column",
                hint="give the text column with --column NAME (CSV: --column-type NAME=string keeps numbers as text)",
            )
        keep = list(keep) if keep else []
        for name in keep:
            if name not in schema.names:
                raise OptionsError(f"--columns: no column '{name}'", hint=f"columns are {', '.join(schema.names)}")
        if TOKENS in keep and column != TOKENS:
            raise OptionsError(
                f"--columns keeps a column named '{TOKENS}', the name of the token column",
                hint="leave it out, or tokenize that column with --column tokens",
            )
        self.column = column
        self.tokens = tokens
        names = keep if column in keep else [column, *keep]
        self.source_names = names  # the input columns read
        token_field = Field(TOKENS, SEQUENCE, tokens.dtype.str)
        self.schema = Schema(tuple(token_field if n == column else schema[n] for n in names))

    def __call__(self, batch: Batch) -> Batch:
        cols = {}
        for f in self.schema:
            cols[f.name] = self.tokens.encode(batch.columns[self.column]) if f.name == TOKENS else batch.columns[f.name]
        return Batch(cols, batch.num_rows)
