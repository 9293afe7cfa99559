"""Small datasets for the loader tests: written by ``lovecraft_convert.convert``/``shard``, or by hand
(bucketed and sequence datasets, whose writers do not exist yet) as NumPy files plus a manifest."""

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


BUCKETS = ((1, 8, 37, "padded"), (9, 16, 50, "padded"), (17, 32, 23, "padded"), (33, 48, 11, "ragged"))


def build_bucketed(directory, buckets=BUCKETS, seed: int = 0) -> tuple[str, dict[int, np.ndarray]]:
    """A bucketed memmap dataset in the shape the ``bucket`` command is to write: per bucket
    (min_length, max_length, rows, layout), a dense ``[rows, max_length]`` ``tokens`` file plus
    ``length`` (padded) or values + offsets (ragged), and an ``id`` column. Returns the path and
    ``{id: tokens}``."""
    directory = str(directory)
    os.makedirs(directory)
    files, entries, truth = [], [], {}
    next_id = 0
    total = 0
    for b, (lo, hi, rows, layout) in enumerate(buckets):
        seqs = random_sequences(rows, lo, hi, seed + b)
        ids = np.arange(next_id, next_id + rows, dtype=np.int64)
        next_id += rows
        for i, s in zip(ids.tolist(), seqs, strict=True):
            truth[i] = s
        lengths = np.array([len(s) for s in seqs], dtype=np.int64)
        stem = f"bucket-{b:05d}"
        names = []
        if layout == "padded":
            dense = np.zeros((rows, hi), dtype=np.int32)
            for i, s in enumerate(seqs):
                dense[i, : len(s)] = s
            np.save(os.path.join(directory, f"{stem}.tokens.npy"), dense)
            names.append((f"{stem}.tokens.npy", "tokens", "data"))
        else:
            offs = np.zeros(rows + 1, dtype=np.int64)
            np.cumsum(lengths, out=offs[1:])
            np.save(os.path.join(directory, f"{stem}.tokens.values.npy"), np.concatenate(seqs).astype(np.int32))
            np.save(os.path.join(directory, f"{stem}.tokens.offsets.npy"), offs)
            names += [
                (f"{stem}.tokens.values.npy", "tokens", "values"),
                (f"{stem}.tokens.offsets.npy", "tokens", "offsets"),
            ]
        np.save(os.path.join(directory, f"{stem}.length.npy"), lengths)
        np.save(os.path.join(directory, f"{stem}.id.npy"), ids)
        names += [(f"{stem}.length.npy", "length", "data"), (f"{stem}.id.npy", "id", "data")]
        bucket_files = [_file_entry(directory, name, rows, col, role) for name, col, role in names]
        files += bucket_files
        entries.append(
            {
                "index": b,
                "min_length": lo,
                "max_length": hi,
                "rows": rows,
                "files": [f["path"] for f in bucket_files],
                "layout": layout,
            }
        )
        total += rows
    schema = [
        {"name": "tokens", "kind": "sequence", "dtype": "<i4", "shape": []},
        {"name": "length", "kind": "fixed", "dtype": "<i8", "shape": []},
        {"name": "id", "kind": "fixed", "dtype": "<i8", "shape": []},
    ]
    _manifest(directory, schema, total, files, buckets=entries)
    return directory, truth


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
