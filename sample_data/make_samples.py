"""Regenerate the small sample inputs in sample_data/ (deterministic; run from the repo root)."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os

import numpy as np
import zstandard

HERE = os.path.dirname(os.path.abspath(__file__))
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "it",
    "an",
    "be",
    "are",
    "this",
    "which",
    "or",
]


def main() -> None:
    rng = np.random.default_rng(20261122)
    n = 500
    feats = rng.normal(size=(n, 8)).astype(np.float32)
    labels = rng.integers(0, 5, size=n).astype(np.int64)
    np.save(os.path.join(HERE, "features.npy"), feats)
    np.save(os.path.join(HERE, "labels.npy"), labels)
    np.save(os.path.join(HERE, "images.npy"), rng.integers(0, 256, size=(64, 8, 8), dtype=np.uint8))
    with open(os.path.join(HERE, "data.csv"), "w", newline="") as f:
        f.write("id,x1,x2,x3,city,zip,label\n")
        cities = ["Providence", "Arkham", "Innsmouth", 'Dunwich "old"', "Kingsport, MA"]
        for i in range(n):
            city = cities[i % len(cities)]
            if '"' in city or "," in city:
                city = '"' + city.replace('"', '""') + '"'
            f.write(
                f"{i},{feats[i, 0]:.6g},{feats[i, 1]:.6g},{feats[i, 2]:.6g},{city},{(i * 7919) % 100000:05d},{labels[i]}\n"
            )
    lines = []
    for _ in range(400):
        k = int(rng.zipf(1.6)) % 60 + 1
        lines.append(" ".join(rng.choice(WORDS, size=k)))
    text = ("\n".join(lines) + "\n").encode()
    with open(os.path.join(HERE, "corpus.txt"), "wb") as f:
        f.write(text)
    with open(os.path.join(HERE, "corpus.txt.zst"), "wb") as f:
        f.write(zstandard.ZstdCompressor(level=10, write_checksum=True).compress(text))
    with open(os.path.join(HERE, "data.csv"), "rb") as f:
        csv = f.read()
    with open(os.path.join(HERE, "data.csv.gz"), "wb") as f:
        f.write(gzip.compress(csv, mtime=0))
    with open(os.path.join(HERE, "data.csv.bz2"), "wb") as f:
        f.write(bz2.compress(csv))
    with open(os.path.join(HERE, "corpus.txt.xz"), "wb") as f:
        f.write(lzma.compress(text))
    # The same documents as JSON Lines, with a nested key (the README's quickstart tokenizes them)
    with open(os.path.join(HERE, "docs.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for i, line in enumerate(lines):
            f.write(json.dumps({"id": i, "text": line, "meta": {"lang": "en", "words": len(line.split())}}) + "\n")


if __name__ == "__main__":
    main()
