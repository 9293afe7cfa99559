"""Reading our outputs back with the independent clients (np.load, h5py, pyarrow, polars, tf.data)."""

from __future__ import annotations

import glob
import hashlib
import json
import os

import numpy as np


def manifest(out: str) -> dict:
    with open(os.path.join(out, "_manifest.json")) as f:
        return json.load(f)


def disk_digest(out: str) -> dict[str, str]:
    """The sha256 of every file in the dataset directory, hashed here from the bytes on disk (the
    manifest is left out: it records times). Byte-identity is checked on these, never on the
    manifest's own ``sha256`` values."""
    digests = {}
    for name in sorted(os.listdir(out)):
        p = os.path.join(out, name)
        if name != "_manifest.json" and os.path.isfile(p):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda f=f: f.read(1 << 20), b""):
                    h.update(block)
            digests[name] = h.hexdigest()
    return digests


def assert_manifest_matches_disk(out: str) -> dict[str, str]:
    """The manifest lists exactly the files on disk, with their real sizes and hashes; returns the hashes."""
    m = manifest(out)
    digests = disk_digest(out)
    listed = {f["path"]: f for f in m["files"]}
    if "hdf5_index" in m:
        listed[m["hdf5_index"]["path"]] = m["hdf5_index"]
    assert set(listed) == set(digests), (sorted(listed), sorted(digests))
    for path, f in listed.items():
        assert f["sha256"] == digests[path], path
        if "bytes" in f:
            assert f["bytes"] == os.path.getsize(os.path.join(out, path)), path
    return digests


def read_memmap(out: str) -> dict[str, object]:
    m = manifest(out)
    cols: dict[str, object] = {}
    for f in m["schema"]:
        name = f["name"]
        if f["kind"] == "fixed":
            cols[name] = np.load(os.path.join(out, f"{name}.npy"), mmap_mode="r")
        else:
            values = np.load(os.path.join(out, f"{name}.values.npy"), mmap_mode="r")
            offsets = np.load(os.path.join(out, f"{name}.offsets.npy")).tolist()
            if f["kind"] == "string":
                raw = values.tobytes()
                cols[name] = [raw[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(len(offsets) - 1)]
            else:
                cols[name] = [values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
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


def _head(path: str, n: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def tf_spec(columns: dict[str, tuple[str, object, tuple]]) -> dict:
    """A ``tf.io.parse_example`` spec written here, not the project's ``to_tf_feature_spec``: from
    ``{name: (kind, numpy dtype, shape)}`` as the caller knows them. Floating columns are float_list
    (float32), integer and bool ones int64_list, text and bytes bytes_list, sequences VarLen."""
    import tensorflow as tf

    spec = {}
    for name, (kind, dtype, shape) in columns.items():
        if kind in ("string", "binary"):
            spec[name] = tf.io.FixedLenFeature([], tf.string)
            continue
        tf_dtype = tf.float32 if np.dtype(dtype).kind == "f" else tf.int64
        if kind == "sequence":
            spec[name] = tf.io.VarLenFeature(tf_dtype)
        else:
            spec[name] = tf.io.FixedLenFeature(list(shape), tf_dtype)
    return spec


def _schema_columns(m: dict) -> dict[str, tuple[str, object, tuple]]:
    return {f["name"]: (f["kind"], np.dtype(f["dtype"]), tuple(f["shape"])) for f in m["schema"]}


def read_tfrecord(out: str, spec: dict | None = None) -> dict[str, object]:
    """Every TFRecord file of ``out`` through tf.data and ``tf.io.parse_example`` with ``spec`` (a
    :func:`tf_spec` of the columns the caller expects; by default one written here from the
    manifest's schema, after checking the manifest's own feature spec says the same)."""
    import tensorflow as tf

    m = manifest(out)
    if spec is None:
        spec = tf_spec(_schema_columns(m))
        claimed = m["tfrecord"]["feature_spec"]
        assert set(claimed) == set(spec), (claimed, spec)
        for name, s in spec.items():
            c = claimed[name]
            if isinstance(s, tf.io.VarLenFeature):
                assert (c["type"], c["dtype"]) == ("VarLenFeature", s.dtype.name), (name, c)
            else:
                assert (c["type"], c["shape"], c["dtype"]) == ("FixedLenFeature", list(s.shape), s.dtype.name), (
                    name,
                    c,
                )
    files = sorted(glob.glob(os.path.join(out, "*.tfrecord*")))
    assert files, f"no TFRecord file in {out}"
    gz = {_head(p, 2) == b"\x1f\x8b" for p in files}  # the compression, from the bytes themselves
    assert len(gz) == 1
    comp = "GZIP" if gz.pop() else ""
    assert (m["tfrecord"]["compression"] or "") == comp
    parts: dict[str, list] = {name: [] for name in spec}
    kinds = {f["name"]: f["kind"] for f in m["schema"]}
    for records in tf.data.TFRecordDataset(files, compression_type=comp).batch(1 << 16):
        batch = tf.io.parse_example(records, spec)  # eagerly: no function to trace for every dataset read
        for name in spec:
            v = batch[name]
            if isinstance(v, tf.sparse.SparseTensor):
                v = tf.RaggedTensor.from_sparse(v)
                parts[name].extend(r.numpy().tolist() for r in v)
            elif kinds.get(name) in ("string", "binary") or v.dtype == tf.string:
                parts[name].extend(x.decode("utf-8") if kinds.get(name) == "string" else x for x in v.numpy())
            else:
                parts[name].append(v.numpy())
    cols: dict[str, object] = {}
    for name, p in parts.items():
        fixed = isinstance(spec[name], tf.io.FixedLenFeature) and spec[name].dtype != tf.string
        cols[name] = (np.concatenate(p) if p else np.zeros(0)) if fixed else p
    return cols


READERS = {"memmap": read_memmap, "hdf5": read_hdf5, "parquet": read_parquet, "tfrecord": read_tfrecord}


def read_back(out: str, fmt: str, tf_columns: dict | None = None) -> dict[str, object]:
    """The columns of ``out`` through the format's own reader; ``tf_columns`` (``{name: (kind,
    dtype, shape)}`` as the test knows them) gives TFRecord's parse spec."""
    if fmt == "tfrecord":
        return read_tfrecord(out, tf_spec(tf_columns) if tf_columns is not None else None)
    return READERS[fmt](out)
