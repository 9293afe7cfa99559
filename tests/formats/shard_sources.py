"""Inputs holding every column kind lovecraft has, for the tests of the shard formats (webdataset,
mds, litdata), with the values each row holds as parsed here from the source (csv, np.load,
pyarrow, json), not by lovecraft:

* CSV: integers, floats, text (quotes, commas, non-ASCII), a column read as float16;
* NPY: uint8 images ``[rows, 4, 4, 3]``, float16 rows of 5, int32 and bool scalars;
* Parquet: binary (empty values too), int32 sequences (empty ones too), fixed-size float32 lists,
  halffloat, bool, uint8 and text;
* JSON Lines: lists of strings (empty and non-ASCII too), float sequences, integers, text.

``SOURCES[name] = (inputs, extra convert flags, {column: [row values]})``.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

ROWS = 60


def make_sources(d) -> dict[str, tuple[list[str], list[str], dict[str, list]]]:
    d = str(d)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(44)
    out = {}

    # CSV
    path = os.path.join(d, "kinds.csv")
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "score", "name", "half"])
        for i in range(ROWS):
            w.writerow([i * 7 - 100, f"{rng.normal():.6f}", f'name "{i}", é ✓' if i % 3 else "", f"{i / 8:.3f}"])
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out["csv"] = (
        [path],
        ["--column-type", "half=float16"],
        {
            "id": [int(r["id"]) for r in rows],
            "score": [float(r["score"]) for r in rows],
            "name": [r["name"] for r in rows],
            "half": [float(np.float16(r["half"])) for r in rows],
        },
    )

    # NPY
    arrays = {
        "img": rng.integers(0, 256, size=(ROWS, 4, 4, 3), dtype=np.uint8),
        "emb": rng.normal(size=(ROWS, 5)).astype(np.float16),
        "lab": rng.integers(-5, 1000, size=ROWS, dtype=np.int32),
        "flag": rng.random(ROWS) < 0.5,
    }
    paths = []
    for name, arr in arrays.items():
        paths.append(os.path.join(d, f"{name}.npy"))
        np.save(paths[-1], arr)
    out["npy"] = (
        paths,
        [],
        {name: [np.load(p)[i] for i in range(ROWS)] for name, p in zip(arrays, paths, strict=True)},
    )

    # Parquet
    import pyarrow as pa
    import pyarrow.parquet as pq

    vec = rng.normal(size=(ROWS, 3)).astype(np.float32)
    table = pa.table(
        {
            "jpg": pa.array([rng.bytes(int(rng.integers(0, 300))) if i % 7 else b"" for i in range(ROWS)], pa.binary()),
            "tokens": pa.array([rng.integers(-9, 9, size=i % 6).tolist() for i in range(ROWS)], pa.list_(pa.int32())),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), 3),
            "f16": pa.array(rng.normal(size=ROWS).astype(np.float16)),
            "ok": pa.array([bool(i % 3) for i in range(ROWS)]),
            "u8": pa.array((np.arange(ROWS) * 5 % 256).astype(np.uint8)),
            "text": pa.array([f"row {i} ü" * (i % 4) for i in range(ROWS)]),
        }
    )
    path = os.path.join(d, "kinds.parquet")
    pq.write_table(table, path)
    back = pq.read_table(path)
    want = {c: back.column(c).to_pylist() for c in back.column_names}
    want["f16"] = [float(x) for x in back.column("f16").to_numpy()]
    out["parquet"] = ([path], [], want)

    # JSON Lines
    path = os.path.join(d, "kinds.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for i in range(ROWS):
            row = {
                "id": i,
                "tags": [f"t{j}é" for j in range(i % 4)],
                "seq": [j / 4 for j in range(i % 5)],
                "t": "x" * i,
            }
            f.write(json.dumps(row) + "\n")
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    out["jsonl"] = ([path], [], {k: [r[k] for r in rows] for k in rows[0]})
    return out


def assert_same(got: list, want: list, name: str) -> None:
    """Row values equal: arrays by value and shape (any dtype), numbers exactly, text and bytes as they are."""
    assert len(got) == len(want), (name, len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if isinstance(w, (np.ndarray, np.generic)) or isinstance(g, np.ndarray):
            ga, wa = np.asarray(g), np.asarray(w)
            assert ga.shape == wa.shape and np.array_equal(ga, wa), (name, i, g, w)
        elif isinstance(w, list) and w and not isinstance(w[0], str):
            assert np.asarray(g).tolist() == w, (name, i, g, w)
        elif isinstance(w, list):
            assert list(g) == w, (name, i, g, w)
        else:
            assert g == w, (name, i, g, w)


# --------------------------------------------------------------------------------------------
# shard, killed once a shard is journalled, then resumed
# --------------------------------------------------------------------------------------------


def blobs_parquet(path, rows: int = 3000, seed: int = 5) -> str:
    """Image-like rows (random bytes of 1..8 KB, a label, a caption) as Parquet, for shard runs
    long enough to be killed in the middle."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    table = pa.table(
        {
            "jpg": pa.array([rng.bytes(int(rng.integers(1000, 8000))) for _ in range(rows)], pa.binary()),
            "label": pa.array(rng.integers(0, 10, size=rows)),
            "caption": pa.array([f"caption {i}" for i in range(rows)]),
        }
    )
    pq.write_table(table, str(path), row_group_size=100, compression="none")
    return str(path)


def disk_bytes(out: str) -> dict[str, str]:
    """sha256 of every file of ``out`` but the manifest (which records times)."""
    import hashlib

    return {
        n: hashlib.sha256(Path(out, n).read_bytes()).hexdigest()
        for n in sorted(os.listdir(out))
        if n != "_manifest.json"
    }


def killed_then_resumed(src: str, parent, fmt: str, **kw) -> str:
    """``shard`` in a subprocess, SIGKILLed once its first shard is journalled, then ``--resume``d;
    returns the output path."""
    import signal
    import subprocess
    import sys
    import time

    out = os.path.join(str(parent), "out")
    args = dict(to=fmt, progress=False, part_bytes=1 << 20, max_memory="32MiB", workers=2, **kw)
    code = f"from lovecraft_convert import shard; shard([{src!r}], {out!r}, **{args!r})"
    journal = os.path.join(str(parent), ".out.partial", "journal.jsonl")
    p = subprocess.Popen([sys.executable, "-c", code])
    t0 = time.time()
    while time.time() - t0 < 120 and p.poll() is None:
        if os.path.exists(journal) and '"phase": 2' in Path(journal).read_text():
            break
        time.sleep(0.005)
    assert p.poll() is None, "the run finished before a shard was journalled"
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not os.path.exists(out)
    code = f"from lovecraft_convert import shard; shard([{src!r}], {out!r}, resume=True, **{args!r})"
    subprocess.run([sys.executable, "-c", code], check=True)
    return out
