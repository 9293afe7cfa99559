"""lovecraft verify: intact datasets pass; every kind of damage, in every format, is caught and the
problem line names the file; --against proves the records equal the source's; hostile files give
one clean problem each."""

from __future__ import annotations

import gzip
import io
import json
import os
import pathlib
import shutil

import h5py
import numpy as np
import pytest

import lovecraft_convert as lc
from lovecraft_convert import verify as verify_fn
from lovecraft_convert.errors import DatasetError
from tests.conftest import lovecraft
from tests.readback import digest_of, entry_digest, manifest

FORMATS = ("memmap", "hdf5", "parquet", "tfrecord")


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("verify_src")
    rng = np.random.default_rng(5)
    x = rng.normal(scale=100, size=(3000, 4)).astype(np.float32)
    x[7, 1] = np.nan
    np.save(d / "x.npy", x)
    np.save(d / "label.npy", rng.integers(-5, 1000, size=3000).astype(np.int64))
    lines = [("w" * int(n)) + ("é" if i % 3 == 0 else "") for i, n in enumerate(rng.integers(0, 120, size=2000))]
    (d / "lines.txt").write_bytes(("\n".join(lines) + "\n").encode())
    with open(d / "table.csv", "w") as f:
        f.write("id,value,name\n")
        for i in range(2500):
            f.write(f"{i},{rng.normal() * 1000:.6g},n{i % 97}\n")
    return {
        "npy": [str(d / "x.npy"), str(d / "label.npy")],
        "text": [str(d / "lines.txt")],
        "csv": [str(d / "table.csv")],
    }


# (name, source kind, convert options)
DATASETS = {
    "memmap-npy": ("npy", {"to": "memmap"}),
    "memmap-text": ("text", {"to": "memmap"}),
    "hdf5-npy": ("npy", {"to": "hdf5"}),
    "hdf5-csv": ("csv", {"to": "hdf5", "compression": "gzip"}),
    "parquet-npy": ("npy", {"to": "parquet"}),
    "parquet-csv": ("csv", {"to": "parquet", "dtype": "float16"}),
    "tfrecord-npy": ("npy", {"to": "tfrecord"}),
    "tfrecord-text-gzip": ("text", {"to": "tfrecord", "compression": "gzip"}),
    "tfrecord-csv": ("csv", {"to": "tfrecord"}),
}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory, sources):
    d = tmp_path_factory.mktemp("verify_ds")
    out = {}
    for name, (kind, opts) in DATASETS.items():
        path = str(d / name)
        lc.convert(sources[kind], path, progress=False, **opts)
        out[name] = path
    return out


def _copy(src: str, tmp_path, name: str = "ds") -> str:
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


def _digest(path: str, alg: str) -> str:
    return digest_of(pathlib.Path(path).read_bytes(), alg)


def _flip(path: str, pos: int | None = None) -> None:
    data = bytearray(pathlib.Path(path).read_bytes())
    i = len(data) // 2 if pos is None else pos
    data[i] ^= 0x10
    with open(path, "wb") as f:
        f.write(data)


def _write_manifest(ds: str, m: dict) -> None:
    with open(os.path.join(ds, "_manifest.json"), "w") as f:
        json.dump(m, f, indent=1)


# --------------------------------------------------------------------------------------------
# intact datasets
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DATASETS))
def test_intact_dataset_passes(datasets, name):
    r = lc.verify(datasets[name])
    assert r.ok, r.lines()
    assert r.problems == []
    assert r.rows == manifest(datasets[name])["rows"]
    assert r.files == len(manifest(datasets[name])["files"])


@pytest.mark.parametrize("name", list(DATASETS))
def test_intact_dataset_matches_its_source(datasets, sources, name):
    r = lc.verify(datasets[name], against=sources[DATASETS[name][0]])
    assert r.ok, r.lines()
    assert r.against["mode"] == "rows"
    assert r.against["rows_compared"] == r.rows == r.against["source_rows"]
    assert r.against["differing_rows"] == 0


def test_callable_twice_and_imported_by_name(datasets):
    """``lovecraft_convert.verify`` is a submodule and the function: both spellings call it."""
    assert lc.verify(datasets["memmap-npy"]).ok
    assert lc.verify(datasets["memmap-npy"]).ok
    assert verify_fn(datasets["memmap-npy"]).ok


# --------------------------------------------------------------------------------------------
# damage: every data file, every way
# --------------------------------------------------------------------------------------------


def _all_files():
    # the file names of each dataset do not depend on the data: list them from the options
    names = {
        "memmap-npy": ["x.npy", "label.npy"],
        "memmap-text": ["text.values.npy", "text.offsets.npy"],
        "hdf5-npy": ["data.h5"],
        "hdf5-csv": ["data.h5"],
        "parquet-npy": ["data.parquet"],
        "parquet-csv": ["data.parquet"],
        "tfrecord-npy": ["data.tfrecord"],
        "tfrecord-text-gzip": ["data.tfrecord.gz"],
        "tfrecord-csv": ["data.tfrecord"],
    }
    return [(ds, f) for ds, files in names.items() for f in files]


@pytest.mark.parametrize("name,rel", _all_files())
def test_flipped_byte_is_caught(datasets, tmp_path, name, rel):
    ds = _copy(datasets[name], tmp_path)
    entry = next(f for f in manifest(ds)["files"] if f["path"] == rel)
    p = os.path.join(ds, rel)
    _flip(p)
    r = lc.verify(ds)
    assert not r.ok
    alg, want = entry_digest(entry)
    assert f"{ds}/{rel}: {alg} {_digest(p, alg)} differs from the manifest's {want}" in r.lines()
    assert all(pr.file == rel for pr in r.problems), r.lines()


@pytest.mark.parametrize("name,rel", _all_files())
def test_truncated_file_is_caught(datasets, tmp_path, name, rel):
    ds = _copy(datasets[name], tmp_path)
    p = os.path.join(ds, rel)
    size = os.path.getsize(p)
    os.truncate(p, size * 2 // 3)
    r = lc.verify(ds)
    lines = r.lines()
    assert f"{ds}/{rel}: {size * 2 // 3} bytes on disk, the manifest says {size} (truncated?)" in lines
    # the format's own reader says what is cut short, naming the same file
    decode = [p for p in r.problems if p.kind in ("decode", "rows")]
    assert decode and all(p.file == rel for p in decode), lines


@pytest.mark.parametrize("name,rel", _all_files())
def test_deleted_file_is_caught(datasets, tmp_path, name, rel):
    ds = _copy(datasets[name], tmp_path)
    os.remove(os.path.join(ds, rel))
    r = lc.verify(ds)
    assert r.lines() == [f"{ds}/{rel}: listed in the manifest but missing"]


STRAY_DATA = {  # a file of the format's own kind, which its readers (or a glob) would take
    "memmap": ("extra.npy", "a .npy file: a glob of the dataset's files would take it"),
    "hdf5": ("extra.h5", "a .h5 file: a glob of the dataset's files would take it"),
    "parquet": (
        "notes.txt",
        "pyarrow, pandas and dask read every file whose name does not start with _ or . as Parquet",
    ),
    "tfrecord": ("extra.tfrecord", "a .tfrecord file: a glob of the dataset's files would take it"),
}


@pytest.mark.parametrize("name", list(DATASETS))
def test_stray_and_temporary_files_are_caught(datasets, tmp_path, name):
    ds = _copy(datasets[name], tmp_path)
    stray, why = STRAY_DATA[name.split("-")[0]]
    (tmp_path / "ds" / stray).write_text("hello")
    (tmp_path / "ds" / "data.parquet.tmp").write_bytes(b"PAR1")
    os.mkdir(tmp_path / "ds" / "leftover")
    r = lc.verify(ds)
    assert sorted(r.lines()) == sorted(
        [
            f"{ds}/{stray}: not listed in the manifest ({why})",
            f"{ds}/data.parquet.tmp: a temporary file (of an interrupted run?), not listed in the manifest",
            f"{ds}/leftover: a directory not listed in the manifest (stray or temporary)",
        ]
    )


@pytest.mark.parametrize("name", list(DATASETS))
def test_a_readme_or_ds_store_is_a_warning(datasets, tmp_path, name):
    """A README or the Finder's .DS_Store beside the data changes nothing a reader reads: verify
    passes and says so on stderr (a README in a Parquet directory is read by pyarrow: an error)."""
    ds = _copy(datasets[name], tmp_path)
    (tmp_path / "ds" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (tmp_path / "ds" / "_README.txt").write_text("made with lovecraft")
    if not name.startswith("parquet"):
        (tmp_path / "ds" / "README.txt").write_text("made with lovecraft")
    r = lc.verify(ds)
    assert r.ok and r.lines() == []
    why = "not listed in the manifest (left alone: no reader of the dataset reads it)"
    names = [".DS_Store", "_README.txt"] + ([] if name.startswith("parquet") else ["README.txt"])
    assert sorted(r.warning_lines()) == sorted(f"{ds}/{n}: {why}" for n in names)
    cli = lovecraft("verify", ds)
    assert cli.exit_code == 0
    assert sorted(cli.stderr.splitlines()) == sorted(f"warning: {ds}/{n}: {why}" for n in names)
    assert cli.stdout.startswith(f"ok: {ds}: ")


@pytest.mark.parametrize("name", list(DATASETS))
def test_edited_numbers_in_the_manifest_are_caught(datasets, tmp_path, name):
    src = datasets[name]
    m = manifest(src)
    rows = m["rows"]
    # rows
    ds = _copy(src, tmp_path, "rows")
    _write_manifest(ds, {**m, "rows": rows + 1})
    assert lc.verify(ds).lines() == [f"{ds}/_manifest.json: rows is {rows + 1}, its shards add up to {rows}"]
    # a file's size
    ds = _copy(src, tmp_path, "bytes")
    m2 = json.loads(json.dumps(m))
    m2["files"][0]["bytes"] += 5
    _write_manifest(ds, m2)
    f0 = m["files"][0]
    assert lc.verify(ds).lines() == [
        f"{ds}/{f0['path']}: {f0['bytes']} bytes on disk, the manifest says {f0['bytes'] + 5} (truncated?)"
    ]
    # a statistic of the whole dataset
    ds = _copy(src, tmp_path, "stats")
    m3 = json.loads(json.dumps(m))
    col = next(k for k, v in m3["stats"].items() if "max" in v or "length_max" in v)
    key = "max" if "max" in m3["stats"][col] else "length_max"
    old = m3["stats"][col][key]
    m3["stats"][col][key] = old + 1000
    _write_manifest(ds, m3)
    got = m3["stats"][col][key]
    assert lc.verify(ds).lines() == [
        f"{ds}/_manifest.json: column '{col}' {key}: the manifest says {got!r}, the data holds {old!r}"
    ]
    # a shard's rows
    ds = _copy(src, tmp_path, "shard")
    m4 = json.loads(json.dumps(m))
    m4["shards"][0]["rows"] -= 1
    _write_manifest(ds, m4)
    lines = lc.verify(ds).lines()
    assert f"{ds}/_manifest.json: rows is {rows}, its shards add up to {rows - 1}" in lines
    assert all(line.startswith(f"{ds}/") for line in lines)


@pytest.mark.parametrize("to", ["tfrecord", "parquet", "hdf5", "memmap"])
def test_an_int_dtype_narrowed_in_the_manifest_is_caught(tmp_path, to):
    """TFRecord stores integers as int64_list whatever the schema's dtype: a schema edited from
    int64 to int32 verified ok, and every loader read 5000000000 back as 705032704 (found by an
    outside trial). The others hold the dtype in their files and caught it already."""
    src = tmp_path / "a.csv"
    src.write_text("a,f\n1,0.5\n5000000000,1.25\n")
    ds = str(tmp_path / "ds")
    assert lovecraft("convert", str(src), "-o", ds, "--to", to, "-q").exit_code == 0
    m = manifest(ds)
    m["schema"][0]["dtype"] = "<i4"
    _write_manifest(ds, m)
    r = lovecraft("verify", ds)
    assert r.exit_code == 1, r.stdout
    if to == "tfrecord":
        assert (
            f"{ds}/data.tfrecord: column 'a' holds 5000000000, beyond int32, the dtype the manifest's schema gives it (the loaders would read it changed)"
            in r.stdout.splitlines()
        )


@pytest.mark.parametrize("name", ["tfrecord-npy", "tfrecord-csv", "hdf5-npy", "parquet-npy", "parquet-csv"])
def test_flip_is_located_by_the_formats_own_checksums(datasets, tmp_path, name):
    """Not only the digest: TFRecord CRCs, HDF5 fletcher32 and Parquet page checksums catch it."""
    ds = _copy(datasets[name], tmp_path)
    rel = manifest(ds)["files"][0]["path"]
    pos = None
    if name.startswith("parquet"):  # the middle of a column chunk (pages), not the footer
        import pyarrow.parquet as pq

        col = pq.ParquetFile(os.path.join(ds, rel)).metadata.row_group(0).column(1)
        pos = col.data_page_offset + col.total_compressed_size // 2
    _flip(os.path.join(ds, rel), pos)
    decode = [p.message for p in lc.verify(ds).problems if p.kind == "decode"]
    expected = {
        "tfrecord": "CRC mismatch",
        "hdf5": "filter returned failure",
        "parquet": "CRC checksum verification failed",
    }[name.split("-")[0]]
    assert len(decode) == 1 and expected in decode[0], decode


def test_memmap_value_flip_changes_statistics_or_hash_only(datasets, tmp_path):
    ds = _copy(datasets["memmap-npy"], tmp_path)
    p = os.path.join(ds, "label.npy")
    arr = np.load(p, mmap_mode="r+")
    arr[10] = 10**9  # a new maximum
    arr.flush()
    del arr
    lines = lc.verify(ds).lines()
    assert f"{ds}/label.npy: column 'label' max: the manifest says 999, the file holds 1000000000 (shard 0)" in lines
    assert any(line.startswith(f"{ds}/label.npy: blake3 ") for line in lines)


def test_memmap_broken_offsets(datasets, tmp_path):
    ds = _copy(datasets["memmap-text"], tmp_path)
    p = os.path.join(ds, "text.offsets.npy")
    off = np.load(p, mmap_mode="r+")
    off[100] = off[99] - 1
    off.flush()
    del off
    problems = [x.line() for x in lc.verify(ds).problems if x.kind == "decode"]
    assert problems == [f"{ds}/text.offsets.npy: offsets decrease at row 100 (corrupt)"]


def test_memmap_text_with_invalid_utf8_is_caught(datasets, tmp_path):
    ds = _copy(datasets["memmap-text"], tmp_path)
    off = np.load(os.path.join(ds, "text.offsets.npy"))
    values = os.path.join(ds, "text.values.npy")
    v = np.load(values, mmap_mode="r+")
    i = next(i for i in range(len(off) - 1) if off[i + 1] - off[i] >= 2)
    v[off[i] + 1] = 0xFF  # never valid in UTF-8
    v.flush()
    del v
    problems = [x.line() for x in lc.verify(ds).problems if x.kind == "decode"]
    assert problems == [f"{values}: row {i + 1}: column 'text' is not valid UTF-8 (corrupt)"]


def test_memmap_text_row_starting_inside_a_character_is_caught(datasets, tmp_path):
    """The values still decode as a whole; only a row boundary moved into a two-byte character."""
    ds = _copy(datasets["memmap-text"], tmp_path)
    p = os.path.join(ds, "text.offsets.npy")
    off = np.load(p, mmap_mode="r+")
    values = np.load(os.path.join(ds, "text.values.npy"))
    i = next(i for i in range(len(off) - 2) if values[off[i + 1] - 1] == 0xA9 and off[i + 2] > off[i + 1])
    off[i + 1] -= 1  # row i ends with half of "é", row i + 1 starts with the other half
    off.flush()
    del off
    problems = [x.line() for x in lc.verify(ds).problems if x.kind == "decode"]
    assert problems == [f"{ds}/text.values.npy: row {i + 2}: column 'text' is not valid UTF-8 (corrupt)"]


# --------------------------------------------------------------------------------------------
# sharded and shuffled datasets
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, sources):
    d = tmp_path_factory.mktemp("verify_shards")
    out = {}
    for fmt in FORMATS:
        src = sources["npy"]
        out[fmt] = str(d / fmt)
        lc.shard(src, out[fmt], to=fmt, num_shards=3, shuffle=True, seed=11, progress=False, workers=1)
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_shuffled_shards_pass_and_match_the_source_as_a_multiset(sharded, sources, fmt):
    r = lc.verify(sharded[fmt], against=sources["npy"])
    assert r.ok, r.lines()
    assert r.against["mode"] == "multiset"
    assert r.against["source_digest"] == r.against["dataset_digest"]
    assert len(manifest(sharded[fmt])["shards"]) == 3


@pytest.mark.parametrize("fmt", FORMATS)
def test_damage_in_one_shard_names_that_file(sharded, tmp_path, fmt):
    ds = _copy(sharded[fmt], tmp_path)
    m = manifest(ds)
    rel = m["shards"][1]["files"][0]
    _flip(os.path.join(ds, rel))
    r = lc.verify(ds)
    assert r.problems and {p.file for p in r.problems} == {rel}, r.lines()
    ds2 = _copy(sharded[fmt], tmp_path, "ds2")
    os.remove(os.path.join(ds2, m["shards"][2]["files"][-1]))
    assert lc.verify(ds2).lines() == [f"{ds2}/{m['shards'][2]['files'][-1]}: listed in the manifest but missing"]


def test_shuffled_dataset_against_a_changed_source(sharded, sources, tmp_path):
    x = np.load(sources["npy"][0])
    x[1234, 2] += 1.0
    changed = str(tmp_path / "x.npy")
    np.save(changed, x)
    r = lc.verify(sharded["parquet"], against=[changed, sources["npy"][1]])
    assert not r.ok
    (p,) = r.problems
    assert p.kind == "source" and p.file == f"{changed}, {sources['npy'][1]}"
    assert "the dataset does not hold the same records (their order-independent digests differ" in p.message


# --------------------------------------------------------------------------------------------
# --against: one changed value among a million rows
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def million(tmp_path_factory):
    d = tmp_path_factory.mktemp("million")
    rng = np.random.default_rng(9)
    np.save(d / "value.npy", rng.normal(size=1_000_000))
    np.save(d / "key.npy", np.arange(1_000_000, dtype=np.int64))
    src = [str(d / "value.npy"), str(d / "key.npy")]
    out = {}
    for fmt in FORMATS:
        out[fmt] = str(d / f"ds_{fmt}")
        lc.convert(src, out[fmt], to=fmt, progress=False)
    return src, out


@pytest.mark.parametrize("fmt", FORMATS)
def test_against_catches_one_changed_value_among_a_million_rows(million, tmp_path, fmt):
    src, out = million
    value = np.load(src[0])
    old = float(value[654_321])
    value[654_321] = old + 0.5
    changed = str(tmp_path / "value.npy")
    np.save(changed, value)
    r = lc.verify(out[fmt], against=[changed, src[1]])
    stored, new = old, old + 0.5  # float64 is stored exactly in every format (TFRecord: as bytes)
    rel = manifest(out[fmt])["files"][0]["path"] if fmt != "memmap" else "value.npy"
    assert r.lines() == [
        f"{changed}: row 654322, column 'value': {new!r} in the source, {stored!r} in the dataset ({rel}, row 654322)"
    ]
    assert r.against["differing_rows"] == 1


def test_against_a_source_with_a_row_less(million, tmp_path):
    src, out = million
    np.save(tmp_path / "value.npy", np.load(src[0])[:-1])
    np.save(tmp_path / "key.npy", np.load(src[1])[:-1])
    r = lc.verify(out["memmap"], against=[str(tmp_path / "value.npy"), str(tmp_path / "key.npy")])
    assert r.lines() == [f"{tmp_path}/value.npy, {tmp_path}/key.npy: holds 999999 rows, the dataset more (1000000)"]


def test_against_float16_dataset_is_exact_and_checks_the_report(sources, tmp_path):
    out = str(tmp_path / "f16")
    lc.convert(sources["npy"], out, to="parquet", dtype="float16", progress=False)
    assert lc.verify(out, against=sources["npy"]).ok
    # a change below float16's resolution is invisible; one above it is caught
    x = np.load(sources["npy"][0])
    x[100, 0] = np.float32(np.float16(x[100, 0])) + 8.0
    np.save(tmp_path / "x.npy", x)
    r = lc.verify(out, against=[str(tmp_path / "x.npy"), sources["npy"][1]])
    assert len(r.problems) == 1 and "row 101, column 'x'" in r.problems[0].message
    # a doctored float16 report is caught against the source
    m = manifest(out)
    m["float16"]["x"]["max_abs_error"] *= 2
    _write_manifest(out, m)
    r = lc.verify(out, against=sources["npy"])
    assert [p.kind for p in r.problems] == ["float16"]
    assert r.problems[0].line().startswith(f"{out}/_manifest.json: float16 report of 'x': max_abs_error is ")


def test_against_changed_text_and_csv(datasets, sources, tmp_path):
    lines = pathlib.Path(sources["text"][0]).read_text(encoding="utf-8").splitlines()
    lines[500] = lines[500] + "!"
    p = tmp_path / "lines.txt"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for name in ("memmap-text", "tfrecord-text-gzip"):
        r = lc.verify(datasets[name], against=[str(p)])
        (prob,) = r.problems
        assert prob.file == str(p) and prob.message.startswith("row 501, column 'text': "), prob.line()
    rows = pathlib.Path(sources["csv"][0]).read_text().splitlines()
    rows[10] = rows[10].replace(f"n{9 % 97}", "changed")
    c = tmp_path / "table.csv"
    c.write_text("\n".join(rows) + "\n")
    for name in ("hdf5-csv", "parquet-csv", "tfrecord-csv"):
        r = lc.verify(datasets[name], against=[str(c)])
        (prob,) = r.problems
        assert prob.message.startswith("row 10, column 'name': 'changed' in the source, 'n9' in the dataset"), prob


def test_against_a_source_with_other_columns(datasets, sources):
    r = lc.verify(datasets["memmap-npy"], against=sources["npy"][:1])
    (p,) = r.problems
    assert p.kind == "source"
    assert p.message.startswith(
        "its columns differ from the dataset's: source columns ['x'], dataset columns ['x', 'label']"
    )


# --------------------------------------------------------------------------------------------
# buckets
# --------------------------------------------------------------------------------------------


def test_bucket_invariants(datasets, tmp_path):
    ds = _copy(datasets["memmap-text"], tmp_path)
    m = manifest(ds)
    lengths = np.diff(np.load(os.path.join(ds, "text.offsets.npy")))
    lo, hi = int(lengths.min()), int(lengths.max())
    bucket = {"index": 0, "rows": m["rows"], "files": m["shards"][0]["files"], "layout": "ragged"}
    _write_manifest(ds, {**m, "buckets": [{**bucket, "min_length": lo, "max_length": hi}]})
    assert lc.verify(ds).ok
    _write_manifest(ds, {**m, "buckets": [{**bucket, "min_length": lo, "max_length": 40}]})
    assert lc.verify(ds).lines() == [
        f"{ds}/text.values.npy: column 'text' has lengths {lo}..{hi}, outside bucket 0's {lo}..40"
    ]


# --------------------------------------------------------------------------------------------
# hostile files and manifests: one clean problem each, no crash, nothing followed
# --------------------------------------------------------------------------------------------


def test_npy_header_claiming_terabytes(datasets, tmp_path):
    ds = _copy(datasets["memmap-npy"], tmp_path)
    p = os.path.join(ds, "x.npy")
    data = pathlib.Path(p).read_bytes()
    claim = io.BytesIO()
    np.lib.format.write_array_header_1_0(claim, {"descr": "<f4", "fortran_order": False, "shape": (10**13, 4)})
    with open(p, "wb") as f:
        f.write(claim.getvalue() + data[128:])
    r = lc.verify(ds)
    decode = [x for x in r.problems if x.kind == "decode"]
    assert len(decode) == 1 and decode[0].file == "x.npy"
    assert "truncated: the header declares shape (10000000000000, 4) float32" in decode[0].message


def test_hdf5_external_link_and_external_storage_are_not_followed(datasets, tmp_path):
    ds = _copy(datasets["hdf5-npy"], tmp_path, "link")
    secret = tmp_path / "secret.h5"
    with h5py.File(secret, "w") as f:
        f["x"] = np.zeros((3000, 4), np.float32)
    with h5py.File(os.path.join(ds, "data.h5"), "r+") as f:
        f["ext"] = h5py.ExternalLink(str(secret), "/x")
    decode = [p.line() for p in lc.verify(ds).problems if p.kind == "decode"]
    assert decode == [f"{ds}/data.h5: 'ext' is an external link to {secret}:/x (not followed)"]

    ds = _copy(datasets["hdf5-npy"], tmp_path, "external")
    raw = tmp_path / "raw.bin"
    with h5py.File(os.path.join(ds, "data.h5"), "r+") as f:
        x = f["x"][:]
        x.tofile(raw)
        del f["x"]
        f.create_dataset("x", shape=x.shape, dtype=x.dtype, external=[(str(raw), 0, x.nbytes)])
    decode = [p.line() for p in lc.verify(ds).problems if p.kind == "decode"]
    assert decode == [f"{ds}/data.h5: dataset 'x' keeps its data in external raw files (not followed)"]

    ds = _copy(datasets["hdf5-npy"], tmp_path, "virtual")
    with h5py.File(os.path.join(ds, "data.h5"), "r+") as f:
        layout = h5py.VirtualLayout(shape=(3000,), dtype="<i8")
        layout[:] = h5py.VirtualSource(str(secret), "y", shape=(3000,))
        del f["label"]
        f.create_virtual_dataset("label", layout)
    decode = [p.line() for p in lc.verify(ds).problems if p.kind == "decode"]
    assert decode == [f"{ds}/data.h5: dataset 'label' is a virtual dataset mapping other files (not followed)"]


def test_hdf5_chunk_bomb_is_refused(datasets, tmp_path):
    """A chunk that inflates far beyond what lovecraft writes is refused before it is read."""
    ds = _copy(datasets["hdf5-npy"], tmp_path)
    m = manifest(ds)
    rows = 4_500_000  # one gzip chunk of zeros: a few hundred KiB on disk, 72 MB inflated
    with h5py.File(os.path.join(ds, "data.h5"), "w") as f:
        f.create_dataset("x", shape=(rows, 4), dtype="<f4", chunks=(rows, 4), compression="gzip", fillvalue=0)
        f["x"][:1] = 0
        f.create_dataset("label", shape=(rows,), dtype="<i8", chunks=(1 << 16,), compression="gzip", fillvalue=0)
    m["rows"] = m["shards"][0]["rows"] = m["files"][0]["rows"] = rows
    _write_manifest(ds, m)
    decode = [p.line() for p in lc.verify(ds).problems if p.kind == "decode"]
    assert decode == [f"{ds}/data.h5: dataset 'x' has chunks of {rows * 16} bytes (refused: over 64 MiB)"]


def test_tfrecord_gzip_bomb_stops_at_the_manifest_rows(datasets, tmp_path):
    ds = _copy(datasets["tfrecord-text-gzip"], tmp_path)
    p = os.path.join(ds, "data.tfrecord.gz")
    one = gzip.decompress(pathlib.Path(p).read_bytes())
    first_len = int.from_bytes(one[:8], "little") + 16
    with gzip.open(p, "wb", compresslevel=1) as f:  # a valid record repeated far beyond the manifest's rows
        block = one[:first_len] * 10_000
        for _ in range(100):
            f.write(block)
    r = lc.verify(ds)
    rows = manifest(ds)["rows"]
    assert f"{ds}/data.tfrecord.gz: holds more than the {rows} records the manifest says" in r.lines()


def test_manifest_paths_outside_the_directory_are_refused(datasets, tmp_path):
    ds = _copy(datasets["parquet-npy"], tmp_path)
    m = manifest(ds)
    for bad in ("../outside.parquet", "/etc/passwd"):
        m2 = json.loads(json.dumps(m))
        m2["files"][0]["path"] = bad
        m2["shards"][0]["files"] = [bad]
        _write_manifest(ds, m2)
        lines = lc.verify(ds).lines()
        assert f"{ds}/_manifest.json: files[0]: path {bad!r} points outside the dataset directory" in lines
        assert f"{ds}/data.parquet: not listed in the manifest ({STRAY_DATA['parquet'][1]})" in lines


def test_unreadable_or_missing_manifest(datasets, tmp_path):
    ds = _copy(datasets["parquet-npy"], tmp_path)
    mp = os.path.join(ds, "_manifest.json")
    with open(mp, "r+") as f:
        f.truncate(100)
    (p,) = lc.verify(ds).problems
    assert p.file == "_manifest.json" and p.message.startswith("unreadable (")
    os.remove(mp)
    r = lc.verify(ds)
    assert (
        r.lines()[0]
        == f"{ds}/_manifest.json: missing: not a lovecraft dataset, or the run that wrote it did not finish"
    )
    with pytest.raises(DatasetError, match="no such dataset directory"):
        lc.verify(str(tmp_path / "nope"))


def test_symlinks_are_reported_not_followed(datasets, tmp_path):
    ds = _copy(datasets["memmap-npy"], tmp_path)
    os.symlink("/etc/passwd", os.path.join(ds, "passwd"))
    os.remove(os.path.join(ds, "label.npy"))
    os.symlink("/etc/passwd", os.path.join(ds, "label.npy"))
    assert sorted(lc.verify(ds).lines()) == sorted(
        [
            f"{ds}/passwd: a symbolic link, not listed in the manifest (not followed)",
            f"{ds}/label.npy: a symbolic link (not followed: a dataset holds plain files)",
        ]
    )


def test_an_incomplete_manifest(datasets, tmp_path):
    ds = _copy(datasets["memmap-npy"], tmp_path)
    m = manifest(ds)
    _write_manifest(ds, {**m, "complete": False})
    assert lc.verify(ds).lines() == [
        f"{ds}/_manifest.json: does not say complete: true (the run that wrote it did not finish)"
    ]


def test_a_schema_claiming_huge_rows_is_refused(datasets, tmp_path):
    ds = _copy(datasets["hdf5-npy"], tmp_path)
    m = manifest(ds)
    m["schema"][0]["shape"] = [10**12]
    _write_manifest(ds, m)
    assert lc.verify(ds).lines() == [
        f"{ds}/_manifest.json: unreadable schema (column 'x': one row of {4 * 10**12} bytes (refused))"
    ]


@pytest.mark.parametrize("fmt", ["memmap", "tfrecord", "parquet", "hdf5"])
def test_float16_infinities_are_infinities_in_the_statistics(tmp_path, fmt):
    """The manifest's min and max of a float16 column holding -inf and inf said -65504 and 65504
    (the extremes were clipped to float16's range as an overflow is), and verify of the TFRecord
    dataset then failed on the file it had just written. A --dtype float16 clip still clips."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "h.parquet"
    pq.write_table(pa.table({"h": pa.array(np.array([1.0, np.inf, -np.inf, 2.0], np.float16))}), src)
    out = tmp_path / "o"
    assert lovecraft("convert", str(src), "-o", str(out), "--to", fmt, "-q").exit_code == 0
    st = json.loads((out / "_manifest.json").read_text())["stats"]["h"]
    assert (st["min"], st["max"]) == ("-inf", "inf")
    r = lovecraft("verify", str(out))
    assert r.exit_code == 0, r.stdout
    wide = tmp_path / "f.parquet"
    pq.write_table(pa.table({"f": pa.array([1.0, 7e4, -np.inf], pa.float32())}), wide)
    out = tmp_path / "c"
    r = lovecraft(
        "convert", str(wide), "-o", str(out), "--to", fmt, "--dtype", "float16", "--on-overflow", "clip", "-q"
    )
    assert r.exit_code == 0, r.stderr
    st = json.loads((out / "_manifest.json").read_text())["stats"]["f"]
    assert (st["min"], st["max"]) == ("-inf", 65504.0)
    assert lovecraft("verify", str(out)).exit_code == 0


@pytest.mark.parametrize("fmt", ["parquet", "memmap", "hdf5", "tfrecord"])
def test_against_a_csv_whose_booleans_miss_a_value(tmp_path, fmt):
    """A CSV column of true/false with an empty field is float64 (1, 0, NaN) in the dataset; read
    again as float64 for --against, 'true' is no number: a traceback (SchemaChanged), stdout
    empty under --json. Found by an outside trial."""
    src = tmp_path / "b.csv"
    src.write_text("id,flag\n1,true\n2,\n3,false\n")
    out = str(tmp_path / "o")
    assert lovecraft("convert", str(src), "-o", out, "--to", fmt, "-q").exit_code == 0
    r = lovecraft("verify", out, "--against", str(src), "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["ok"] is True
    src.write_text("id,flag\n1,true\n2,\n3,true\n")  # one value changed: found, named
    r = lovecraft("verify", out, "--against", str(src))
    assert r.exit_code == 1
    assert f"{src}: row 3, column 'flag': 1.0 in the source, 0.0 in the dataset" in r.stderr + r.stdout


def test_a_shards_rows_edited_in_a_memmap_manifest_names_each_column_file(tmp_path):
    """Each of a memmap shard's column files holds every row of the shard: with the shard's rows
    edited, verify said its files 'add up to' 6x the rows (it summed them, as for files that split
    a shard's rows). Found by an outside trial."""
    np.save(tmp_path / "a.npy", np.arange(100, dtype=np.int64))
    np.save(tmp_path / "b.npy", np.ones((100, 2), np.float32))
    out = tmp_path / "o"
    r = lovecraft("shard", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "-o", str(out), "--to", "memmap",
                  "--num-shards", "2", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    m = json.loads((out / "_manifest.json").read_text())
    m["shards"][0]["rows"] -= 1
    m["rows"] -= 1
    (out / "_manifest.json").write_text(json.dumps(m))
    r = lovecraft("verify", str(out))
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert lines[:2] == [
        f"{out}/part-00000-of-00002.a.npy: the manifest says 50 rows for this file, 49 for its shard 0",
        f"{out}/part-00000-of-00002.b.npy: the manifest says 50 rows for this file, 49 for its shard 0",
    ]
    assert "add up to" not in r.stdout + r.stderr
