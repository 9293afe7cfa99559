"""Reading our outputs back with the independent clients (np.load, h5py, pyarrow, polars, tf.data)."""

from __future__ import annotations

import glob
import json
import os

import numpy as np

HASHES = ("blake3", "sha256")


def digest_of(data: bytes, algorithm: str) -> str:
    """The hex digest the manifest would record, computed here (hashlib, or the blake3 package)."""
    if algorithm == "sha256":
        import hashlib

        return hashlib.sha256(data).hexdigest()
    import blake3

    return blake3.blake3(data).hexdigest()


def entry_digest(entry: dict) -> tuple[str, str]:
    """(algorithm, digest) a manifest file entry records."""
    alg = next(a for a in HASHES if a in entry)
    return alg, entry[alg]


def file_matches(path: str, entry: dict) -> bool:
    """Does the file hash to what its manifest entry says (hashed here, not by the package)?"""
    alg, want = entry_digest(entry)
    with open(path, "rb") as f:
        return digest_of(f.read(), alg) == want


def manifest(out: str) -> dict:
    with open(os.path.join(out, "_manifest.json")) as f:
        return json.load(f)


def read_memmap(out: str) -> dict[str, object]:
    m = manifest(out)
    cols: dict[str, object] = {}
    for f in m["schema"]:
        name = f["name"]
        if f["kind"] == "fixed":
            cols[name] = np.load(os.path.join(out, f"{name}.npy"), mmap_mode="r")
        else:
            values = np.load(os.path.join(out, f"{name}.values.npy"), mmap_mode="r")
            offsets = np.load(os.path.join(out, f"{name}.offsets.npy"), mmap_mode="r")
            rows = [values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
            if f["kind"] == "string":
                rows = [r.tobytes().decode("utf-8") for r in rows]
            cols[name] = rows
    return cols


def read_hdf5(out: str) -> dict[str, object]:
    import h5py

    m = manifest(out)
    cols: dict[str, object] = {}
    with h5py.File(os.path.join(out, "data.h5"), "r") as h:
        for f in m["schema"]:
            ds = h[f["name"]]
            if f["kind"] == "string":
                cols[f["name"]] = [x.decode("utf-8") for x in ds[:]]
            elif f["kind"] == "fixed":
                cols[f["name"]] = ds[:]
            else:
                cols[f["name"]] = list(ds[:])
    return cols


def read_parquet(out: str) -> dict[str, object]:
    """pyarrow reads the directory (the manifest's leading underscore keeps it out)."""
    import pyarrow.parquet as pq

    t = pq.read_table(out)
    m = manifest(out)
    cols: dict[str, object] = {}
    for f in m["schema"]:
        col = t.column(f["name"])
        if f["kind"] == "fixed":
            a = col.combine_chunks()
            while hasattr(a, "flatten") and a.type.num_fields == 1 and str(a.type).startswith("fixed_size_list"):
                a = a.flatten()
            cols[f["name"]] = a.to_numpy(zero_copy_only=False).reshape((t.num_rows, *f["shape"]))
        else:
            cols[f["name"]] = col.to_pylist()
    return cols


def read_polars(out: str) -> dict[str, object]:
    import polars as pl

    df = pl.read_parquet(os.path.join(out, "*.parquet"))
    return {c: df[c] for c in df.columns}


def tf_spec_for(schema: list[dict]):
    """The ``tf.io.parse_example`` spec of our TFRecord layout, written out here from the schema
    (not taken from the package): float16/float32 in float_list, float64 as one bytes value of its
    little-endian values, integers in int64_list, text and bytes as one bytes value."""
    import tensorflow as tf

    spec = {}
    for f in schema:
        dt = np.dtype(f["dtype"])
        if f["kind"] in ("string", "binary") or (dt.kind == "f" and dt.itemsize == 8):
            spec[f["name"]] = tf.io.FixedLenFeature([], tf.string)
        elif f["kind"] == "sequence":
            spec[f["name"]] = tf.io.VarLenFeature(tf.float32 if dt.kind == "f" else tf.int64)
        else:
            spec[f["name"]] = tf.io.FixedLenFeature(f["shape"], tf.float32 if dt.kind == "f" else tf.int64)
    return spec


def read_tfrecord(out: str) -> dict[str, object]:
    """tf.data reads every file with the spec written out in :func:`tf_spec_for`."""
    import tensorflow as tf

    m = manifest(out)
    spec = tf_spec_for(m["schema"])
    files = sorted(glob.glob(os.path.join(out, "*.tfrecord*")))
    comp = m["tfrecord"]["compression"] or ""
    ds = (
        tf.data.TFRecordDataset(files, compression_type=comp).batch(1 << 16).map(lambda x: tf.io.parse_example(x, spec))
    )
    parts: dict[str, list] = {f["name"]: [] for f in m["schema"]}
    for batch in ds:
        for f in m["schema"]:
            v = batch[f["name"]]
            f64 = np.dtype(f["dtype"]).kind == "f" and np.dtype(f["dtype"]).itemsize == 8
            if f64 and f["kind"] == "sequence":
                parts[f["name"]].extend(np.frombuffer(x, "<f8").tolist() for x in v.numpy())
            elif f64:
                raw = tf.io.decode_raw(v, tf.float64).numpy()
                parts[f["name"]].append(raw.reshape((len(raw), *f["shape"])))
            elif isinstance(v, tf.sparse.SparseTensor):
                v = tf.RaggedTensor.from_sparse(v)
                parts[f["name"]].extend(r.numpy().tolist() for r in v)
            elif f["kind"] in ("string", "binary"):
                parts[f["name"]].extend(x.decode("utf-8") if f["kind"] == "string" else x for x in v.numpy())
            else:
                parts[f["name"]].append(v.numpy())
    cols: dict[str, object] = {}
    for f in m["schema"]:
        p = parts[f["name"]]
        cols[f["name"]] = np.concatenate(p) if f["kind"] == "fixed" else p
    return cols


def megatron_core():
    """megatron-core's ``IndexedDataset`` class, or a skip with the reason it cannot be imported here."""
    import warnings

    import pytest

    try:
        with warnings.catch_warnings():  # "Transformer Engine and Apex are not installed": not needed to read
            warnings.simplefilter("ignore")
            from megatron.core.datasets.indexed_dataset import IndexedDataset
    except Exception as e:  # noqa: BLE001 - megatron-core needs torch and more; any failure is a skip
        pytest.skip(f"megatron-core cannot be imported here ({type(e).__name__}: {e})")
    return IndexedDataset


def read_megatron(out: str) -> dict[str, object]:
    """megatron-core's own ``IndexedDataset`` reads each ``.bin``/``.idx`` pair, in the manifest's order;
    one sequence per document (its document index is 0..N)."""
    IndexedDataset = megatron_core()
    m = manifest(out)
    (f,) = m["schema"]
    rows: list = []
    for entry in m["files"]:
        if entry["path"].endswith(".idx"):
            ds = IndexedDataset(os.path.join(out, entry["path"][: -len(".idx")]))
            assert list(ds.document_indices) == list(range(len(ds) + 1))
            rows.extend(np.array(ds[i]) for i in range(len(ds)))
    return {f["name"]: rows}


READERS = {
    "memmap": read_memmap,
    "hdf5": read_hdf5,
    "parquet": read_parquet,
    "tfrecord": read_tfrecord,
    "megatron": read_megatron,
}


def read_back(out: str, fmt: str) -> dict[str, object]:
    return READERS[fmt](out)
