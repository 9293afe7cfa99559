"""Small datasets for the loader tests: written by ``lovecraft_convert.convert``/``shard``/``bucket``,
or by hand (a plain sequence dataset, which no command writes) as NumPy files plus a manifest."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

import lovecraft_convert as lc

FORMATS = ("memmap", "hdf5", "parquet", "tfrecord")


def arrays(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``id`` (0..n-1, to count records), ``x`` float32 [n, 4], ``h`` float16 [n, 3], ``label`` int64."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    return {
        "id": np.arange(n, dtype=np.int64),
        "x": x,
        "h": rng.standard_normal((n, 3)).astype(np.float16),
        "label": (x[:, 0] + x[:, 1] > 0).astype(np.int64),
    }


def write_npy(directory, cols: dict[str, np.ndarray]) -> list[str]:
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, a in cols.items():
        p = os.path.join(str(directory), f"{name}.npy")
        np.save(p, a)
        paths.append(p)
    return paths


def build(tmp_path, fmt: str, n: int = 1000, shards: int = 1, seed: int = 0, **options) -> tuple[str, dict]:
    """A dataset of :func:`arrays` in ``fmt``, in ``shards`` shards; returns (path, arrays)."""
    cols = arrays(n, seed)
    src = tmp_path / f"src-{n}-{seed}"
    inputs = write_npy(src, cols)
    out = str(tmp_path / f"ds-{fmt}-{n}-{shards}-{seed}")
    if shards == 1:
        lc.convert(inputs, out, to=fmt, progress=False, **options)
    else:
        lc.shard(inputs, out, to=fmt, num_shards=shards, workers=1, progress=False, **options)
    return out, cols


def build_all(tmp_path, n: int) -> dict:
    """One single-shard and one 4-shard dataset per format, of the same arrays (``out["cols"]``)."""
    out: dict = {}
    for fmt in FORMATS:
        out[fmt], cols = build(tmp_path, fmt, n)
        out[fmt, 4], _ = build(tmp_path, fmt, n, shards=4)
    out["cols"] = cols
    return out


def build_text(tmp_path, fmt: str, lines: list[str]) -> str:
    src = tmp_path / "corpus.txt"
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out = str(tmp_path / f"text-{fmt}")
    lc.convert([str(src)], out, to=fmt, progress=False)
    return out


def _file_entry(directory: str, name: str, rows: int, column: str, role: str) -> dict:
    path = os.path.join(directory, name)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return {
        "path": name,
        "rows": rows,
        "bytes": os.path.getsize(path),
        "sha256": digest,
        "column": column,
        "role": role,
    }


def _manifest(directory: str, schema: list, rows: int, files: list, **extra) -> dict:
    m = {
        "format": "lovecraft-dataset",
        "version": 1,
        "complete": True,
        "command": "test",
        "output_format": "memmap",
        "rows": rows,
        "schema": schema,
        "files": files,
        **extra,
    }
    with open(os.path.join(directory, "_manifest.json"), "w") as f:
        json.dump(m, f)
    return m


def random_sequences(n: int, lo: int, hi: int, seed: int) -> list[np.ndarray]:
    """``n`` rows of random token ids (1..999), of random lengths in ``[lo, hi]``."""
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 1000, size=int(k)).astype(np.int32) for k in rng.integers(lo, hi + 1, size=n)]


def build_sequences(directory, n: int = 50, seed: int = 0) -> tuple[str, list[np.ndarray]]:
    """A memmap dataset with a ``tokens`` sequence column (values + offsets) and an ``id`` column."""
    directory = str(directory)
    os.makedirs(directory)
    seqs = random_sequences(n, 0, 9, seed)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=offs[1:])
    np.save(os.path.join(directory, "tokens.values.npy"), np.concatenate(seqs).astype(np.int32))
    np.save(os.path.join(directory, "tokens.offsets.npy"), offs)
    np.save(os.path.join(directory, "id.npy"), np.arange(n, dtype=np.int64))
    files = [
        _file_entry(directory, "tokens.values.npy", n, "tokens", "values"),
        _file_entry(directory, "tokens.offsets.npy", n, "tokens", "offsets"),
        _file_entry(directory, "id.npy", n, "id", "data"),
    ]
    schema = [
        {"name": "tokens", "kind": "sequence", "dtype": "<i4", "shape": []},
        {"name": "id", "kind": "fixed", "dtype": "<i8", "shape": []},
    ]
    shards = [{"index": 0, "rows": n, "files": [f["path"] for f in files], "stats": {}}]
    _manifest(directory, schema, n, files, shards=shards)
    return directory, seqs


BOUNDARIES = (8, 16, 32, 48)  # given to ``bucket``: the test knows each bucket's range without its manifest
RANGES = tuple(zip((0, *(b + 1 for b in BOUNDARIES[:-1])), BOUNDARIES, strict=True))  # (min, max) per bucket


def bucket_of(length: int) -> int:
    return next(k for k, (lo, hi) in enumerate(RANGES) if lo <= length <= hi)


def bucket_lines(n: int = 320, seed: int = 0) -> list[str]:
    """``n`` distinct lines (a unique three-letter prefix, then letters), of lengths spread evenly
    over each bucket's range (3..48 bytes), so every bucket and shard holds several lengths."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lines = []
    for i in range(n):
        lo, hi = RANGES[i % len(RANGES)]
        length = int(rng.integers(max(lo, 3), hi + 1))
        prefix = "".join(letters[[i // 676 % 26, i // 26 % 26, i % 26]])
        lines.append(prefix + "".join(rng.choice(letters, length - 3)))
    return lines


def build_bucketed(
    directory, fmt: str = "memmap", layout: str = "padded", shuffle: bool = False, seed: int = 0
) -> tuple[str, dict[bytes, int]]:
    """A dataset written by ``lovecraft_convert.bucket`` itself (bytes tokenizer: uint8 tokens and
    an int32 ``length``; two shards per bucket; ``--shuffle`` when ``shuffle``) from
    :func:`bucket_lines`. Returns its path and ``{line bytes: line number}``: a row is known by its
    tokens, as real bucketed datasets have no id column."""
    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    lines = bucket_lines(seed=seed)
    src = os.path.join(directory, "corpus.txt")
    with open(src, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    out = os.path.join(directory, f"bucketed-{fmt}-{layout}-{'shuffled' if shuffle else 'ordered'}")
    lc.bucket(
        src,
        out,
        to=fmt,
        boundaries=list(BOUNDARIES),
        layout=layout,
        num_shards=2,
        shuffle=shuffle,
        seed=seed + 1 if shuffle else None,
        workers=1,
        progress=False,
    )
    return out, {line.encode(): i for i, line in enumerate(lines)}


def row_ids(batch, truth: dict[bytes, int]) -> np.ndarray:
    """The line number of each row of a bucketed batch, from its tokens up to its length."""
    tokens, lengths = np.asarray(batch["tokens"]), np.asarray(batch["length"]).reshape(-1)
    return np.array([truth[bytes(row[:n].astype(np.uint8))] for row, n in zip(tokens, lengths, strict=True)])


def ids_of(batches) -> np.ndarray:
    """Every ``id`` of an iterable of batches, in order."""
    parts = [np.asarray(b["id"]).reshape(-1) for b in batches]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def assert_each_once(ids, n: int) -> None:
    ids = np.asarray(ids)
    assert len(ids) == n, f"{len(ids)} records seen, expected {n}"
    counts = np.bincount(ids, minlength=n)
    assert (counts == 1).all(), (
        f"records seen twice: {np.flatnonzero(counts > 1)[:10]}, never: {np.flatnonzero(counts == 0)[:10]}"
    )
