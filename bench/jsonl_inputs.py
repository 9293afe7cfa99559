"""Inputs and peers of the JSON Lines rows of ``lovecraft_bench.py``.

C4-like records: ``{"text": ..., "url": ..., "timestamp": ..., "meta": {"lang": ..., "score": ...}}``,
text a slice of a generated corpus (words from a 5,000-word vocabulary with accents, CJK, emoji,
quotes, tabs and newlines, so that both escaped and raw UTF-8 occur), lengths log-normal (median
~1.5 KB, a tail to 60 KB). Every record is distinct (no repeated block a Parquet dictionary could
fold). Generated once with a fixed seed and cached.
"""

from __future__ import annotations

import json
import os

import numpy as np

PEERS = {
    "polars_ndjson": (
        "import polars as pl, sys\npl.scan_ndjson(sys.argv[1]).sink_parquet(sys.argv[2] + '/data.parquet')\n"
    ),
    "polars_ndjson_text": (
        "import polars as pl, sys\n"
        "pl.scan_ndjson(sys.argv[1]).select('text').sink_parquet(sys.argv[2] + '/data.parquet')\n"
    ),
    "pyarrow_json": (
        "import pyarrow.json as pj, pyarrow.parquet as pq, sys\n"
        "pq.write_table(pj.read_json(sys.argv[1]), sys.argv[2] + '/data.parquet', compression='zstd')\n"
    ),
}


def word_corpus(rng: np.random.Generator) -> str:
    """8,000,000 Zipf-weighted words of a 5,000-word vocabulary (with accents, CJK, emoji, quotes,
    tabs and newlines), joined by spaces: the text the generated documents are slices of."""
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    vocab = ["".join(rng.choice(letters, size=int(n))) for n in rng.integers(2, 10, 5000)]
    vocab += ["café", "naïve", "Zürich", "東京", "данные", "emoji😀", '"quoted"', "tab\there", "back\\slash", "end.\n"]
    weights = 1 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    return " ".join(vocab[w] for w in rng.choice(len(vocab), size=8_000_000, p=weights))


def make_jsonl(path: str, target: int) -> str:
    """~target bytes of C4-like JSON Lines (see the module's docstring)."""
    if os.path.exists(path) and os.path.getsize(path) >= target * 0.95:
        return path
    rng = np.random.default_rng(20261124)
    corpus = word_corpus(rng)
    langs = ["en", "de", "fr", "es", "ja", "ru"]
    written = i = 0
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        while written < target:
            n = 5000
            lens = np.clip(rng.lognormal(7.3, 0.9, n).astype(int), 20, 60000)
            starts = rng.integers(0, len(corpus) - 60001, n)
            scores = rng.random(n)
            lines = []
            for k in range(n):
                rec = {
                    "text": corpus[starts[k] : starts[k] + lens[k]],
                    "url": f"https://example{i % 977}.com/page/{i}",
                    "timestamp": f"2019-04-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}Z",
                    "meta": {"lang": langs[i % 6], "score": round(float(scores[k]), 6)},
                }
                lines.append(json.dumps(rec, ensure_ascii=bool(i % 2)))
                i += 1
            chunk = ("\n".join(lines) + "\n").encode()
            f.buffer.write(chunk)
            written += len(chunk)
    os.rename(path + ".tmp", path)
    return path


def make_repeated(path: str, source: str, times: int) -> str:
    """``source`` written ``times`` times over (a large input for the memory rows)."""
    want = os.path.getsize(source) * times
    if os.path.exists(path) and os.path.getsize(path) == want:
        return path
    with open(path + ".tmp", "wb") as out:
        for _ in range(times):
            with open(source, "rb") as f:
                while block := f.read(64 << 20):
                    out.write(block)
    os.rename(path + ".tmp", path)
    return path


def make_long_line(path: str, size: int) -> str:
    """A record, then one JSON line of ``size`` bytes (a text value), then a record."""
    if os.path.exists(path) and os.path.getsize(path) > size:
        return path
    with open(path + ".tmp", "wb") as f:
        f.write(b'{"text": "short"}\n{"text": "')
        block = b"lorem ipsum " * (1 << 16)
        left = size
        while left > 0:
            f.write(block[:left])
            left -= len(block)
        f.write(b'"}\n{"text": "short"}\n')
    os.rename(path + ".tmp", path)
    return path
