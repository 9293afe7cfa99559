"""Reading our outputs back with the independent clients (np.load, h5py, pyarrow, polars, tf.data)."""

from __future__ import annotations

import glob
import hashlib
import json
import os

import numpy as np

HASHES = ("blake3", "sha256")


def digest_of(data: bytes, algorithm: str) -> str:
    """The hex digest the manifest would record, computed here (hashlib, or the blake3 package)."""
    if algorithm == "sha256":
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


def disk_digest(out: str) -> dict[str, str]:
    """The sha256 of every file in the dataset directory, hashed here from the bytes on disk (the
    manifest is left out: it records times). Byte-identity is checked on these, never on the
    manifest's own digests."""
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
    for index in ("hdf5_index", "mds_index", "litdata_index"):  # a format's file that lists the others
        if index in m:
            listed[m[index]["path"]] = m[index]
    assert set(listed) == set(digests), (sorted(listed), sorted(digests))
    for path, f in listed.items():
        assert file_matches(os.path.join(out, path), f), path  # hashed here with the entry's algorithm
        if "bytes" in f:
            assert f["bytes"] == os.path.getsize(os.path.join(out, path)), path
    return digests


def read_memmap(out: str) -> dict[str, object]:
    """Each column from its files, found by the manifest's ``column`` and ``role`` of each file
    (a name that could not be a file name, or could collide, is escaped)."""
    m = manifest(out)
    files = {(f["column"], f.get("role") or "data"): os.path.join(out, f["path"]) for f in m["files"]}
    cols: dict[str, object] = {}
    for f in m["schema"]:
        name = f["name"]
        if f["kind"] == "fixed":
            cols[name] = np.load(files[name, "data"], mmap_mode="r")
        else:
            values = np.load(files[name, "values"], mmap_mode="r")
            offsets = np.load(files[name, "offsets"]).tolist()
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


def _is_f64(dtype) -> bool:
    return dtype is not None and np.dtype(dtype).kind == "f" and np.dtype(dtype).itemsize == 8


def tf_spec(columns: dict[str, tuple[str, object, tuple]]) -> dict:
    """A ``tf.io.parse_example`` spec written here, not the project's ``to_tf_feature_spec``: from
    ``{name: (kind, numpy dtype, shape)}`` as the caller knows them. float16/float32 columns are
    float_list, float64 ones one bytes value per row (their little-endian values, exact), integer
    and bool ones int64_list, text and bytes bytes_list, other sequences VarLen."""
    import pytest

    tf = pytest.importorskip("tensorflow", reason="the tf extra is not installed (pip install 'lovecraft-convert[tf]')")

    spec = {}
    for name, (kind, dtype, shape) in columns.items():
        if kind in ("string", "binary") or _is_f64(dtype):
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


def read_tfrecord(out: str, columns: dict | None = None) -> dict[str, object]:
    """Every TFRecord file of ``out`` through tf.data and ``tf.io.parse_example`` with a
    :func:`tf_spec` of ``columns`` (``{name: (kind, dtype, shape)}`` as the caller expects them; by
    default from the manifest's schema, after checking the manifest's own feature spec says the same)."""
    import pytest

    tf = pytest.importorskip("tensorflow", reason="the tf extra is not installed (pip install 'lovecraft-convert[tf]')")

    m = manifest(out)
    if columns is None:
        columns = _schema_columns(m)
        spec = tf_spec(columns)
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
                assert (c.get("encoding") == "float64le") == _is_f64(columns[name][1]), (name, c)
    spec = tf_spec(columns)
    files = sorted(glob.glob(os.path.join(out, "*.tfrecord*")))
    assert files, f"no TFRecord file in {out}"
    gz = {_head(p, 2) == b"\x1f\x8b" for p in files}  # the compression, from the bytes themselves
    assert len(gz) == 1
    comp = "GZIP" if gz.pop() else ""
    assert (m["tfrecord"]["compression"] or "") == comp
    parts: dict[str, list] = {name: [] for name in spec}
    for records in tf.data.TFRecordDataset(files, compression_type=comp).batch(1 << 16):
        batch = tf.io.parse_example(records, spec)  # eagerly: no function to trace for every dataset read
        for name in spec:
            kind, dtype, shape = columns[name]
            v = batch[name]
            if _is_f64(dtype) and kind == "sequence":
                parts[name].extend(np.frombuffer(x, "<f8").tolist() for x in v.numpy())
            elif _is_f64(dtype):
                raw = tf.io.decode_raw(v, tf.float64).numpy()
                parts[name].append(raw.reshape((len(raw), *shape)))
            elif isinstance(v, tf.sparse.SparseTensor):
                v = tf.RaggedTensor.from_sparse(v)
                parts[name].extend(r.numpy().tolist() for r in v)
            elif kind in ("string", "binary"):
                parts[name].extend(x.decode("utf-8") if kind == "string" else x for x in v.numpy())
            else:
                parts[name].append(v.numpy())
    cols: dict[str, object] = {}
    for name, p in parts.items():
        kind = columns[name][0]
        cols[name] = (np.concatenate(p) if p else np.zeros(0)) if kind == "fixed" else p
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


def read_webdataset_tar(out: str) -> dict[str, object]:
    """Python's own tarfile reads every ``.tar`` (in the manifest's order): members grouped by key,
    each decoded by its extension as WebDataset's ``decode()`` does (``json`` by json, ``cls`` as an
    integer, ``*.npy`` by np.load, anything else its bytes), then the columns of the schema taken
    from them: a column's own member, else its field in the ``.json`` member (the manifest's
    ``webdataset.file_member``: each sample's first member, named by the file's extension; a
    binary column's member is left out where its value is empty)."""
    import io
    import tarfile

    m = manifest(out)
    samples: list[dict] = []
    for entry in m["files"]:
        with tarfile.open(os.path.join(out, entry["path"])) as tar:
            for member in tar:
                assert member.isreg(), member.name
                key, ext = member.name.split(".", 1)
                data = tar.extractfile(member).read()
                if not samples or samples[-1]["__key__"] != key:
                    samples.append({"__key__": key, "__first__": ext})
                if ext == "json":
                    data = json.loads(data)
                elif ext == "cls":
                    data = int(data)
                elif ext.endswith(".npy"):
                    data = np.load(io.BytesIO(data), allow_pickle=False)
                samples[-1][ext] = data
    cols: dict[str, object] = {}
    file_member = (m.get("webdataset") or {}).get("file_member")  # named by each file's extension, first
    for f in m["schema"]:
        name = f["name"]
        got = []
        for s in samples:
            if name == file_member:
                got.append(s[s["__first__"]])
            elif name in s:
                got.append(s[name])
            elif f"{name}.npy" in s:
                got.append(s[f"{name}.npy"])
            elif name in ("cls", "label") and "cls" in s and name not in s.get("json", {}):
                got.append(s["cls"])
            elif f["kind"] == "binary":  # an empty value is no member
                got.append(b"")
            else:
                got.append(s["json"][name])
        # a number in the .json member is a Python int or float: cast back to the declared dtype
        cols[name] = np.array(got, dtype=np.dtype(f["dtype"])) if f["kind"] == "fixed" else got
    return cols


PEER_ROWS = """
import json, sys
import numpy as np

def plain(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (bytes, memoryview)):
        return {"bytes": bytes(v).hex()}
    return v

def columns(rows):
    cols, types = {}, {}
    for row in rows:
        for k, v in row.items():
            cols.setdefault(k, []).append(plain(v))
            types.setdefault(k, [type(v).__name__, str(getattr(v, "dtype", "")), list(getattr(v, "shape", []))])
    return {"columns": cols, "types": types}
"""

READ_MDS = (
    PEER_ROWS
    + """
from streaming import StreamingDataset

out = []
for d in json.loads(sys.argv[1]):
    ds = StreamingDataset(local=d, shuffle=False, batch_size=1)
    out.append(columns(ds[i] for i in range(len(ds))))
print(json.dumps(out))
"""
)

READ_LITDATA = (
    PEER_ROWS
    + """
import litdata

out = []
for d in json.loads(sys.argv[1]):
    ds = litdata.StreamingDataset(d)
    out.append(columns(ds[i] for i in range(len(ds))))
print(json.dumps(out))
"""
)

READ_WEBDATASET = (
    PEER_ROWS
    + """
import webdataset as wds

out = []
for files in json.loads(sys.argv[1]):
    ds = wds.WebDataset(files, shardshuffle=False).decode()
    rows = [{k: v for k, v in s.items() if k not in ("__url__", "__local_path__")} for s in ds]
    keys = list(dict.fromkeys(k for r in rows for k in r))  # a member some samples lack: None there
    out.append(columns({k: r.get(k) for k in keys} for r in rows))
print(json.dumps(out))
"""
)


def peer_read(fmt: str, outs: list[str]) -> list[tuple[dict[str, list], dict[str, list]]]:
    """Every row of each dataset of ``outs`` through the peer's own reader, in one process of the
    peers' venv (the test is skipped, saying how to build it, where it is missing): per dataset
    ``(columns, types)``, types as ``[type name, dtype, shape]`` of the first row's value; bytes
    values are bytes again."""
    from tests.peers import require_peers, run_peer

    if fmt == "mds":
        require_peers("streaming")
        got = run_peer(READ_MDS, json.dumps(outs))
    elif fmt == "litdata":
        require_peers("litdata")
        got = run_peer(READ_LITDATA, json.dumps(outs))
    else:
        require_peers("webdataset")
        files = [[os.path.join(out, f["path"]) for f in manifest(out)["files"]] for out in outs]
        got = run_peer(READ_WEBDATASET, json.dumps(files))
    result = []
    for one in got:
        cols = {
            k: [bytes.fromhex(v["bytes"]) if isinstance(v, dict) and set(v) == {"bytes"} else v for v in vals]
            for k, vals in one["columns"].items()
        }
        result.append((cols, one["types"]))
    return result


def read_mds(out: str) -> dict[str, object]:
    return peer_read("mds", [out])[0][0]


def read_litdata(out: str) -> dict[str, object]:
    return peer_read("litdata", [out])[0][0]


READERS = {
    "memmap": read_memmap,
    "hdf5": read_hdf5,
    "parquet": read_parquet,
    "tfrecord": read_tfrecord,
    "megatron": read_megatron,
    "mds": read_mds,
    "litdata": read_litdata,
    "webdataset": read_webdataset_tar,
}


def read_back(out: str, fmt: str, tf_columns: dict | None = None) -> dict[str, object]:
    """The columns of ``out`` through the format's own reader; ``tf_columns`` (``{name: (kind,
    dtype, shape)}`` as the test knows them) gives TFRecord's parse spec."""
    if fmt == "tfrecord":
        return read_tfrecord(out, tf_columns)
    return READERS[fmt](out)
