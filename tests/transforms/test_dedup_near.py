"""``--dedup near``: MinHash over word or character n-grams (transforms/near.py) through ``convert``,
measured against exact Jaccard similarities the test computes from the source's text with Python
sets, and its flags' mistakes (exact messages and exit codes)."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from lovecraft_convert import convert, shard
from lovecraft_convert import errors as lc_errors
from lovecraft_convert.schema import VarColumn
from lovecraft_convert.transforms.near import Hasher, NearParams, candidate_probability
from tests.conftest import lovecraft
from tests.readback import manifest

pl = pytest.importorskip("polars")
THRESHOLD = 0.8


def _grams(tokens, n: int) -> set:
    if len(tokens) < n:
        return {tuple(tokens)}
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b)


def _edit(rng: random.Random, words: list[str], edits: int, vocab: list[str]) -> list[str]:
    """``edits`` word edits at random places: substitutions, insertions and deletions in turn."""
    w = list(words)
    for k in range(edits):
        i = rng.randrange(len(w))
        kind = k % 3
        if kind == 0:
            w[i] = rng.choice(vocab)
        elif kind == 1:
            w.insert(i, rng.choice(vocab))
        elif len(w) > 2:
            del w[i]
    return w


def _corpus(path, docs: int, seed: int):
    """``docs`` texts of 100-300 words from a seeded vocabulary of 4,000 words. About one in five
    is a planted copy of an earlier original: "near" copies with edits of 0.4-1.2% of their words
    (at least one: exact word-5-gram Jaccard about 0.88-0.97 with their original), "far" copies with
    edits of 8-20% (Jaccard below 0.5). Returns the texts' words and the planted (original, copy)
    row pairs."""
    rng = random.Random(seed)
    vocab = [f"w{k}" for k in range(4_000)]
    texts: list[list[str]] = []
    originals: list[int] = []
    planted = []
    for i in range(docs):
        if len(originals) > 20 and rng.random() < 0.2:
            o = rng.choice(originals)
            near = rng.random() < 0.7
            frac = rng.uniform(0.004, 0.012) if near else rng.uniform(0.08, 0.2)
            texts.append(_edit(rng, texts[o], max(1, round(frac * len(texts[o]))), vocab))
            planted.append((o, i))
        else:
            texts.append([rng.choice(vocab) for _ in range(rng.randint(100, 300))])
            originals.append(i)
    with open(path, "w") as f:
        for i, w in enumerate(texts):
            f.write(json.dumps({"id": i, "text": " ".join(w)}) + "\n")
    return texts, planted


def _components(report: str, rows: int) -> np.ndarray:
    """Each row's component: the row kept for it (itself when kept), from ``--dedup-report``."""
    comp = np.arange(rows)
    with open(report) as f:
        for line in f:
            d = json.loads(line)
            comp[d["row"]] = d["kept_row"]
    return comp


def _lsh_pairs(texts: list[str], p: NearParams) -> set[tuple[int, int]]:
    """Every pair of rows sharing a band key (the candidates of the scan's LSH)."""
    raw = [t.encode() for t in texts]
    offs = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in raw], out=offs[1:])
    h = Hasher(p)
    hi, lo = h.band_keys(h.signatures(np.frombuffer(b"".join(raw), dtype=np.uint8), offs))
    buckets: dict[tuple, list[int]] = {}
    for i in range(len(texts)):
        for b in range(p.bands):
            buckets.setdefault((b, int(hi[i, b]), int(lo[i, b])), []).append(i)
    return {(a, c) for rows in buckets.values() for k, a in enumerate(rows) for c in rows[k + 1 :]}


def _measure(grams: list[set], comp: np.ndarray, pairs: set[tuple[int, int]]) -> tuple[float, float, int]:
    """Recall: among ``pairs`` whose exact Jaccard reaches the threshold, the fraction whose two rows
    ended in one component (one kept for both). Precision: among the rows dropped, the fraction
    with a partner in their component (its kept row or another row dropped for it) whose exact
    Jaccard with them reaches the threshold. Returns both and the number of pairs recall counts."""
    similar = [(a, b) for a, b in pairs if _jaccard(grams[a], grams[b]) >= THRESHOLD]
    recall = sum(comp[a] == comp[b] for a, b in similar) / len(similar)
    members: dict[int, list[int]] = {}
    for r, c in enumerate(comp.tolist()):
        members.setdefault(c, []).append(r)
    dropped = [r for r, c in enumerate(comp.tolist()) if c != r]
    good = sum(any(_jaccard(grams[r], grams[m]) >= THRESHOLD for m in members[comp[r]] if m != r) for r in dropped)
    return recall, good / max(1, len(dropped)), len(similar)


def test_planted_near_duplicates_recall_and_precision(tmp_path):
    """Planted near-duplicates (``_corpus``) are found with recall and precision >= 0.95 against the
    exact Jaccard of word-5-gram sets computed here, over the planted pairs, 3,000 random pairs and
    every pair sharing an LSH band key. The Jaccard the run compares is *estimated* from 112 MinHash
    values (standard deviation about 0.04 at 0.8), so a pair within a few hundredths of the threshold
    falls either way: the planted edits keep the pairs clear of it (a near copy is at 0.88 or
    more, a far one below 0.5), which makes these figures measure the pipeline (LSH, verification,
    components), not the estimator's coin flips at the threshold."""
    src = str(tmp_path / "docs.jsonl")
    words, planted = _corpus(src, 3_000, seed=7)
    report = str(tmp_path / "r.jsonl")
    m = convert(src, str(tmp_path / "out"), to="parquet", dedup="near", dedup_columns=["text"], dedup_report=report,
                max_memory="32MiB")  # fmt: skip
    grams = [_grams(w, 5) for w in words]
    comp = _components(report, len(words))
    rng = random.Random(1)
    sample = {tuple(sorted(rng.sample(range(len(words)), 2))) for _ in range(3_000)}
    lsh = _lsh_pairs([" ".join(w) for w in words], NearParams())
    recall, precision, counted = _measure(grams, comp, set(planted) | sample | lsh)
    assert counted >= 300
    print(f"recall {recall:.4f} precision {precision:.4f} over {counted} pairs")
    assert recall >= 0.95, (recall, counted)
    assert precision >= 0.95, precision
    # the rows written are the rows kept, in input order
    got = pl.read_parquet(os.path.join(tmp_path / "out", "*.parquet"))["id"].to_list()
    assert got == [r for r in range(len(words)) if comp[r] == r]
    dup = m["removed"]["duplicate"]
    assert dup["rows"] == len(words) - len(got)
    assert dup["minhash"] == {"threshold": 0.8, "ngram": 5, "ngram_unit": "word", "bands": 14, "band_rows": 8,
                              "seed": 0}  # fmt: skip


def test_character_ngrams_find_typos(tmp_path):
    """``--ngram-unit char``: texts retyped with a few character typos (0.3% of characters, at least
    one) are found, copies with 15% of their characters changed are kept, against the exact Jaccard
    of character-5-gram sets; word 5-grams, which one typo per word breaks, would not find them."""
    rng = random.Random(3)
    letters = "abcdefghijklmnopqrstuvwxyz éü"
    texts: list[str] = []
    near = []
    for i in range(600):
        if i > 10 and rng.random() < 0.3:
            o = rng.randrange(i)
            t = list(texts[o])
            rate = 0.003 if rng.random() < 0.6 else 0.15
            for _ in range(max(1, round(rate * len(t)))):
                t[rng.randrange(len(t))] = rng.choice(letters)
            texts.append("".join(t))
            near.append((o, i))
        else:
            texts.append("".join(rng.choice(letters) for _ in range(rng.randint(300, 900))))
    src = str(tmp_path / "c.jsonl")
    with open(src, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "body": t}) + "\n")
    report = str(tmp_path / "r.jsonl")
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet", "--dedup", "near", "--dedup-columns",
                  "body", "--ngram-unit", "char", "--ngram", "5", "--dedup-report", report, "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    grams = [_grams(t, 5) for t in texts]
    comp = _components(report, len(texts))
    recall, precision, counted = _measure(grams, comp, set(near))
    assert counted >= 50
    print(f"char: recall {recall:.4f} precision {precision:.4f} over {counted} pairs")
    assert recall >= 0.95 and precision >= 0.95, (recall, precision)
    # the same texts as words: a typo in most words leaves few word 5-grams in common
    wgrams = [_grams(t.split(), 5) for t in texts]
    assert sum(_jaccard(wgrams[a], wgrams[b]) >= THRESHOLD for a, b in near) < counted


def test_tokens_are_whitespace_words_or_code_points():
    texts = ["a  b\tc\n", "", "  ", "héllo wörld", "x"]
    col = VarColumn.from_pylist(texts, np.uint8)
    v = np.asarray(col.values).view(np.uint8)
    _, words = Hasher(NearParams()).tokens(v, col.offsets)
    assert words.tolist() == [len(t.split()) for t in texts]
    _, chars = Hasher(NearParams(unit="char")).tokens(v, col.offsets)
    assert chars.tolist() == [len(t) for t in texts]


def test_same_shingle_sets_same_signature_and_seed_changes_it():
    texts = ["a b c d e f", "a b c d e f", "a b c d e g", "b c d e f a b c d e f"]
    col = VarColumn.from_pylist(texts, np.uint8)
    v = np.asarray(col.values).view(np.uint8)
    s = Hasher(NearParams(), chunk=16).signatures(v, col.offsets)  # one row at a time
    assert (s[0] == s[1]).all() and not (s[0] == s[2]).all()
    assert (Hasher(NearParams()).signatures(v, col.offsets) == s).all()
    assert not (Hasher(NearParams(seed=1)).signatures(v, col.offsets) == s).all()
    assert candidate_probability(0.8, 14, 8) == pytest.approx(1 - (1 - 0.8**8) ** 14)


# -- mistakes ---------------------------------------------------------------------------------------


@pytest.fixture
def small(tmp_path) -> str:
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps({"id": i, "text": f"t {i}", "title": "x"}) + "\n" for i in range(5)))
    return str(p)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--dedup-columns", "id"], "Error: --dedup near: column 'id' is int64, not text; name a text column with "
                                    "--dedup-columns, or use --dedup exact"),
        (["--dedup-columns", "text,title"], "Error: --dedup near compares one text column: --dedup-columns names 2; "
                                            "e.g. --dedup-columns text"),
        ([], "Error: --dedup near compares one text column: name it with --dedup-columns; e.g. --dedup-columns text"),
        (["--dedup-columns", "text", "--threshold", "1.5"], "Error: --threshold 1.5: give a Jaccard similarity in "
                                                            "(0, 1], e.g. 0.8"),
        (["--dedup-columns", "text", "--threshold", "0"], "Error: --threshold 0.0: give a Jaccard similarity in "
                                                          "(0, 1], e.g. 0.8"),
        (["--dedup-columns", "text", "--ngram", "0"], "Error: --ngram 0: give a whole number from 1 to 1024"),
        (["--dedup-columns", "text", "--bands", "0"], "Error: --bands 0: give a whole number from 1 to 1024"),
    ],
    ids=["not-text", "two-columns", "no-column", "threshold-over-1", "threshold-0", "ngram-0", "bands-0"],
)  # fmt: skip
def test_bad_flags_are_one_line(tmp_path, small, flags, message):
    out = str(tmp_path / "o")
    r = lovecraft("convert", small, "-o", out, "--to", "parquet", "--dedup", "near", *flags)
    assert (r.exit_code, r.stderr.strip()) == (2, message)
    assert not os.path.exists(out)


def test_near_flags_need_dedup_near(tmp_path, small):
    r = lovecraft(
        "convert", small, "-o", str(tmp_path / "o"), "--to", "parquet", "--dedup", "exact", "--threshold", "0.9"
    )
    assert (r.exit_code, r.stderr.strip()) == (2, "Error: --threshold goes with --dedup near; add --dedup near")


def test_shard_seeds_the_hashes_with_seed_and_convert_with_dedup_seed(tmp_path, small):
    m = manifest_of(tmp_path, small, ["shard", "--num-shards", "1", "--seed", "9", "--workers", "1"])
    assert m["removed"]["duplicate"]["minhash"]["seed"] == 9
    m = manifest_of(tmp_path / "c", small, ["convert", "--dedup-seed", "4"])
    assert m["removed"]["duplicate"]["minhash"]["seed"] == 4
    with pytest.raises(lc_errors.OptionsError) as e:
        shard(small, str(tmp_path / "x"), to="parquet", num_shards=1, dedup="near", dedup_columns=["text"], seed=1,
              dedup_seed=2)  # fmt: skip
    assert e.value.one_line() == "dedup_seed 2 differs from seed 1: give one"  # spelled as Python called it


def manifest_of(tmp_path, src: str, command: list[str]) -> dict:
    out = str(tmp_path / "m")
    r = lovecraft(*command, src, "-o", out, "--to", "parquet", "--dedup", "near", "--dedup-columns", "text", "-q")
    assert r.exit_code == 0, r.stderr
    return manifest(out)


@pytest.mark.parametrize("unit", ["word", "char"])
def test_a_row_longer_than_the_chunk_is_hashed_in_pieces_to_the_same_signature(unit):
    """A row of 40 KB hashed 4 KiB at a time (pieces cut where a token ends, the last n-1 tokens
    carried over) has the signature it has hashed whole, short rows beside it too."""
    rng = random.Random(2)
    words = [f"wörd{k}" for k in range(500)]
    texts = [" ".join(rng.choice(words) for _ in range(n)) for n in (6_000, 3, 0, 40, 2_500)]
    texts.append("x" * 9_000 + " " + "tail words here and more")  # a word longer than a piece: cut
    col = VarColumn.from_pylist(texts, np.uint8)
    v = np.asarray(col.values).view(np.uint8)
    p = NearParams(unit=unit)
    whole = Hasher(p, chunk=1 << 20).signatures(v, col.offsets)
    pieces = Hasher(p, chunk=1 << 12).signatures(v, col.offsets)
    same = (whole == pieces).all(axis=1).tolist()
    assert same[:5] == [True] * 5
    assert same[5] == (unit == "char")  # words: the 9,000-byte word, with no whitespace to cut at, was cut


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="no /proc/self/smaps (not Linux)")
def test_signatures_are_mapped_for_random_reads(tmp_path):
    """The decide step looks up a signature per candidate at random: its maps are advised
    MADV_RANDOM (VmFlags 'rr'), or each lookup that misses the page cache reads ~128 KiB around it
    (a 400,000-row corpus under a 120 MiB memory cap read 331 GB in 5 minutes, unfinished; 7 GB and
    103 s advised)."""
    from lovecraft_convert.engine.near import Signatures

    hashes = 8
    path = tmp_path / "s00000.bin"
    np.arange(1000 * hashes, dtype="<u4").tofile(path)
    sigs = Signatures(str(tmp_path), [{"part": 0, "read": 1000}], hashes)
    assert sigs.get(np.array([3, 999]))[:, 0].tolist() == [3 * hashes, 999 * hashes]
    with open("/proc/self/smaps") as f:
        blocks = f.read().split("\n")
    i = next(k for k, line in enumerate(blocks) if line.endswith(str(path)))
    flags = next(line for line in blocks[i:] if line.startswith("VmFlags:"))
    assert " rr" in flags, flags
