"""Inputs of ``dedup_bench.py``: JSON Lines corpora with planted duplicates, generated with fixed
seeds and cached (a file is written to a temporary name and renamed; its facts go to a ``.json``
beside it, written last, so a cached input is whole and its planted counts known).

* **exact**: ``{"id", "url", "lang", "score", "text"}`` records; ``text`` a slice of a generated
  corpus (a 5,000-word vocabulary with accents, CJK, emoji, quotes, tabs and newlines; lengths
  log-normal, median ~1.5 KB, 20 B to 60 KB). About a quarter of the records repeat the text of an
  earlier record, drawn at random from all before it (the URL and id differ, as in a crawl that
  reached the same page by several addresses); one record in 2,000 has a ``null`` text. Every
  other record has ``ensure_ascii`` on, so the same text occurs both escaped and as raw UTF-8. No
  text is empty: lovecraft compares a null text as ``""`` where polars and DuckDB keep the two
  apart, and with no empty text all three keep the same rows (the nulls form one group in each).
* **near**: ``{"id", "text"}`` records in two files (the two tasks of datatrove's executor read a
  file each), text of lower-case words of letters (20,000 words, Zipf-weighted, 50 to 3,000 words
  a document, median 300) separated by single spaces, so datatrove's normalisation and spaCy's
  tokenizer and a whitespace split see the same words. 15% of the documents are near-duplicates of
  an earlier original (one in four edit rates: 0.5%, 1%, 2% or 4% of the words substituted,
  inserted or deleted: word 5-gram Jaccard about 0.95, 0.9, 0.82 and 0.67, computed exactly for
  each pair and kept), 3% exact copies of one.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
from jsonl_inputs import word_corpus

EXACT_DUP_SHARE = 0.25
NULL_SHARE = 1 / 2000
NEAR_SHARE = 0.15
NEAR_EXACT_SHARE = 0.03
EDIT_RATES = (0.005, 0.01, 0.02, 0.04)
NGRAM = 5


def _facts(path: str) -> dict | None:
    try:
        with open(path + ".json", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _save_facts(path: str, facts: dict) -> dict:
    with open(path + ".json.tmp", "w", encoding="utf-8") as f:
        json.dump(facts, f)
    os.rename(path + ".json.tmp", path + ".json")
    return facts


def make_exact(path: str, target: int) -> dict:
    """~``target`` bytes of records with exact duplicates (see the module's docstring); returns the
    file's facts: ``rows``, ``distinct`` (distinct texts, the null counted once), ``nulls``,
    ``bytes``."""
    facts = _facts(path)
    if facts and os.path.exists(path) and os.path.getsize(path) == facts["bytes"]:
        return facts
    rng = np.random.default_rng(20261128)
    corpus = word_corpus(rng)
    langs = ["en", "de", "fr", "es", "ja", "ru"]
    starts: list[int] = []
    lens: list[int] = []
    seen: set[bytes] = set()
    nulls = written = i = 0
    with open(path + ".tmp", "wb") as f:
        while written < target:
            n = 1000
            new_len = np.clip(rng.lognormal(7.3, 0.9, n).astype(int), 20, 60000)
            new_start = rng.integers(0, len(corpus) - 60001, n)
            dup = rng.random(n) < EXACT_DUP_SHARE
            null = rng.random(n) < NULL_SHARE
            pick = rng.random(n)
            scores = rng.random(n)
            lines = []
            for k in range(n):
                if null[k]:
                    text = None
                    nulls += 1
                else:
                    if dup[k] and starts:
                        j = int(pick[k] * len(starts))
                        s, ln = starts[j], lens[j]
                    else:
                        s, ln = int(new_start[k]), int(new_len[k])
                    starts.append(s)
                    lens.append(ln)
                    text = corpus[s : s + ln]
                    seen.add(hashlib.blake2b(text.encode(), digest_size=12).digest())
                rec = {
                    "id": i,
                    "url": f"https://example{i % 977}.com/page/{i}",
                    "lang": langs[i % 6],
                    "score": round(float(scores[k]), 6),
                    "text": text,
                }
                lines.append(json.dumps(rec, ensure_ascii=bool(i % 2)))
                i += 1
            chunk = ("\n".join(lines) + "\n").encode()
            f.write(chunk)
            written += len(chunk)
    os.rename(path + ".tmp", path)
    return _save_facts(path, {"rows": i, "distinct": len(seen) + (1 if nulls else 0), "nulls": nulls, "bytes": written})


def _shingles(words: np.ndarray) -> set[bytes]:
    w = np.ascontiguousarray(words, dtype=np.int32)
    return {w[k : k + NGRAM].tobytes() for k in range(len(w) - NGRAM + 1)}


def make_near(prefix: str, target: int) -> dict:
    """~``target`` bytes of documents with planted near-duplicates in ``prefix-00.jsonl`` and
    ``prefix-01.jsonl`` (see the module's docstring); returns the facts: ``files``, ``rows``,
    ``bytes``, and ``planted``: one ``[dup_row, source_row, jaccard]`` per planted copy (rows
    counted over both files, in order; the id of row r is ``d%09d`` % r)."""
    facts = _facts(prefix)
    files = [f"{prefix}-{k:02d}.jsonl" for k in range(2)]
    if facts and all(os.path.exists(p) for p in files) and sum(map(os.path.getsize, files)) == facts["bytes"]:
        return facts
    seed = 20261129
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    vocab = np.array(["".join(rng.choice(letters, size=int(n))) for n in rng.integers(2, 11, 20000)], dtype=object)
    weights = 1 / np.arange(1, len(vocab) + 1) ** 0.9
    cdf = np.cumsum(weights / weights.sum())

    def original(r: int) -> np.ndarray:  # the words of original row r, made again from its own seed
        g = np.random.default_rng([seed, r])
        n = int(np.clip(g.lognormal(np.log(300), 0.7), 50, 3000))
        return np.minimum(np.searchsorted(cdf, g.random(n)), len(vocab) - 1).astype(np.int32)

    originals: list[int] = []
    planted: list[list] = []
    half = target // 2
    written = [0, 0]
    r = 0
    for k, path in enumerate(files):
        with open(path + ".tmp", "wb") as out:
            while written[k] < half:
                lines = []
                for _ in range(500):
                    u = rng.random()
                    if originals and u < NEAR_SHARE + NEAR_EXACT_SHARE:
                        src = originals[int(rng.random() * len(originals))]
                        words = original(src)
                        if u < NEAR_SHARE:
                            rate = EDIT_RATES[int(rng.integers(len(EDIT_RATES)))]
                            edits = max(1, round(rate * len(words)))
                            for pos in sorted(rng.choice(len(words), size=edits, replace=False))[::-1]:
                                op = rng.integers(3)
                                new = np.int32(rng.integers(len(vocab)))
                                if op == 0:
                                    words[pos] = new
                                elif op == 1:
                                    words = np.insert(words, pos, new)
                                else:
                                    words = np.delete(words, pos)
                            a, b = _shingles(words), _shingles(original(src))
                            jac = len(a & b) / len(a | b)
                        else:
                            jac = 1.0
                        planted.append([r, src, round(jac, 4)])
                    else:
                        words = original(r)
                        originals.append(r)
                    lines.append(json.dumps({"id": f"d{r:09d}", "text": " ".join(vocab[words])}))
                    r += 1
                chunk = ("\n".join(lines) + "\n").encode()
                out.write(chunk)
                written[k] += len(chunk)
    for p in files:
        os.rename(p + ".tmp", p)
    return _save_facts(prefix, {"files": files, "rows": r, "bytes": sum(written), "planted": planted})
