"""Arrow IPC input: files (Feather v2, compressed too) and streams, record batches as parts,
fixed-shape tensors, dictionaries, string views, damaged files; read back with independent readers
against values built here."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pytest

from lovecraft_convert import shard
from lovecraft_convert.inputs import open_reader
from tests.conftest import leftovers, lovecraft
from tests.inputs.columnar import NAN, assert_columns, digest, plain
from tests.readback import manifest, read_back

N = 5_000


def _table() -> tuple[pa.Table, dict]:
    ids = list(range(N))
    text = [f"t{i}" * (i % 5) for i in range(N)]
    score = [None if i % 7 == 0 else i / 4 for i in range(N)]
    tags = [["a", "b", "c"][i % 3] for i in range(N)]
    t = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "text": pa.array(text, pa.large_string()),
            "score": pa.array(score, pa.float64()),
            "tag": pa.array(tags).dictionary_encode(),
            "vec": pa.array([[i, -i, i * 2] for i in range(N)], pa.list_(pa.int16(), 3)),
        }
    )
    want = {
        "id": ids,
        "text": text,
        "score": [NAN if v is None else v for v in score],
        "tag": tags,
        "vec": [[i, -i, i * 2] for i in range(N)],
    }
    return t, want


def _file(tmp_path, kind: str) -> str:
    t, _ = _table()
    if kind == "file":
        p = str(tmp_path / "t.arrow")
        feather.write_feather(t, p, chunksize=700, compression="uncompressed")
    elif kind == "lz4":
        p = str(tmp_path / "t.feather")
        feather.write_feather(t, p, chunksize=700, compression="lz4")
    else:
        p = str(tmp_path / "t.arrows")
        with ipc.new_stream(p, t.schema) as w:
            for b in t.to_batches(max_chunksize=900):
                w.write_batch(b)
    return p


@pytest.mark.parametrize("kind", ["file", "lz4", "stream"])
@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet"])
def test_files_and_streams_to_formats(tmp_path, kind, fmt):
    src = _file(tmp_path, kind)
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", fmt, "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    _, want = _table()
    assert_columns(read_back(out, fmt), want)
    assert manifest(out)["sources"][0]["columns"]["tag"]["decoded"] == "dictionary"


def test_stream_to_tfrecord_read_by_tf_data(tmp_path):
    pytest.importorskip("tensorflow")
    src = _file(tmp_path, "stream")
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "tfrecord", "-q", "--columns", "id,vec,score")
    assert (r.exit_code, r.stderr) == (0, "")
    _, want = _table()
    got = read_back(out, "tfrecord")
    assert list(got) == ["id", "vec", "score"]
    assert_columns(got, {k: want[k] for k in ("id", "vec", "score")}, f32=True)


def test_record_batches_are_the_parts_and_workers_do_not_change_bytes(tmp_path):
    src = _file(tmp_path, "stream")
    reader = open_reader([src], budget=64 << 20)
    parts = reader.partitions(1)
    assert [p.rows for p in parts] == [(a, min(a + 900, N)) for a in range(0, N, 900)]
    outs = []
    for w in (1, 2):
        out = str(tmp_path / f"w{w}")
        shard(src, out, to="parquet", num_shards=2, shuffle=True, seed=3, workers=w, progress=False, part_bytes=1)
        outs.append(digest(out))
    assert outs[0] == outs[1]
    r = lovecraft("verify", str(tmp_path / "w1"), "--against", src)
    assert r.exit_code == 0, r.stdout


def _tensor(phys: np.ndarray, permutation: list[int] | None):
    """A fixed-shape tensor column storing ``phys`` row-major: ``shape`` is the stored (physical)
    shape and logical dimension i is physical dimension ``permutation[i]`` (the canonical
    extension's definition)."""
    t = pa.fixed_shape_tensor(pa.float32(), phys.shape[1:], permutation=permutation)
    storage = pa.FixedSizeListArray.from_arrays(pa.array(phys.reshape(-1)), int(np.prod(phys.shape[1:])))
    return pa.ExtensionArray.from_storage(t, storage)


def test_fixed_shape_tensors_in_any_dimension_order(tmp_path):
    """Tensor columns become fixed-shape columns in their logical order: rows stored transposed
    (``permutation``) come out as the spec defines them and as pyarrow's ``to_numpy_ndarray``
    gives them where it can (it fails on cyclic permutations)."""
    rng = np.random.default_rng(0)
    logical = rng.normal(size=(6, 2, 3, 4)).astype(np.float32)
    plain_t = _tensor(logical, None)
    swapped = _tensor(np.ascontiguousarray(logical.transpose(0, 1, 3, 2)), [0, 2, 1])
    np.testing.assert_array_equal(swapped.to_numpy_ndarray(), logical)
    # physical (4, 2, 3), permutation [1, 2, 0]: logical shape (phys[1], phys[2], phys[0]) = (2, 3, 4)
    cyclic = _tensor(np.ascontiguousarray(logical.transpose(0, 3, 1, 2)), [1, 2, 0])
    src = str(tmp_path / "t.arrow")
    feather.write_feather(pa.table({"a": plain_t, "b": swapped, "c": cyclic}), src)
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "memmap", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    for name in "abc":
        np.testing.assert_array_equal(np.load(os.path.join(out, f"{name}.npy")), logical)
    assert manifest(out)["schema"][2] == {"name": "c", "kind": "fixed", "dtype": "<f4", "shape": [2, 3, 4]}


def test_string_views_and_nulls(tmp_path):
    t = pa.table(
        {
            "s": pa.array(["x", None, "yz"]).cast(pa.string_view()),
            "n": pa.array([None, 2, 3], pa.int8()),
            "fb": pa.array([b"ab", None, b"cd"], pa.binary(2)),
        }
    )
    src = str(tmp_path / "v.arrow")
    feather.write_feather(t, src)
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "hdf5", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    assert_columns(read_back(out, "hdf5"), {"s": ["x", "", "yz"], "n": [NAN, 2.0, 3.0], "fb": [b"ab", b"", b"cd"]})


def _bad_utf8(tmp_path) -> str:
    data = b"okfine\xffbad"
    offsets = np.array([0, 2, 6, 10], dtype=np.int32)
    arr = pa.Array.from_buffers(pa.string(), 3, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)])
    p = str(tmp_path / "u.arrow")
    with ipc.new_file(p, pa.schema([("s", pa.string())])) as w:
        w.write_batch(pa.record_batch([arr], names=["s"]))
    return p


def test_invalid_utf8_names_the_row_or_is_replaced(tmp_path):
    src = _bad_utf8(tmp_path)
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q")
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == (
        f"Error: {src}, row 3, column 's': invalid UTF-8 (invalid start byte at byte 1); "
        "fix the file or pass --errors replace\n"
    )
    assert not os.path.exists(out) and leftovers(tmp_path) == []
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q", "--errors", "replace")
    assert (r.exit_code, r.stderr) == (0, "")
    assert read_back(out, "parquet")["s"] == ["ok", "fine", "\ufffdbad"]


def test_damaged_files_are_one_line(tmp_path):
    src = _file(tmp_path, "file")
    with open(src, "rb") as f:
        data = f.read()
    with open(_file(tmp_path, "stream"), "rb") as f:
        stream = f.read()
    cases = {
        "cut.arrow": data[: len(data) // 2],
        "cut.arrows": stream[:3000],
        "empty.arrow": b"",
        "garbage.arrow": b"ARROW1\x00\x00" + bytes(range(256)) * 4,
    }
    for name, content in cases.items():
        p = str(tmp_path / name)
        with open(p, "wb") as f:
            f.write(content)
        out = str(tmp_path / "out")
        r = lovecraft("convert", p, "-o", out, "--to", "parquet", "-q")
        assert r.exit_code == 1 and r.stdout == "", (name, r.stderr)
        assert r.stderr.startswith(f"Error: {p}") and r.stderr.count("\n") == 1, (name, r.stderr)
        assert not os.path.exists(out) and leftovers(tmp_path) == []
    assert lovecraft("convert", str(tmp_path / "empty.arrow"), "-o", str(tmp_path / "o"), "--to", "hdf5").stderr == (
        f"Error: {tmp_path}/empty.arrow: empty input (0 bytes, not an Arrow file); check the file\n"
    )


def test_feather_version_1_is_refused(tmp_path):
    pd = pytest.importorskip("pandas")
    src = str(tmp_path / "old.feather")
    with pytest.warns(DeprecationWarning):
        feather.write_feather(pd.DataFrame({"x": [1, 2]}), src, version=1)
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert r.stderr == (
        f"Error: {src}: a Feather version 1 file (a format Arrow retired), which is not read; "
        "re-save it with pyarrow.feather.write_feather (version 2)\n"
    )


def test_inspect_arrow_stream(tmp_path):
    import json

    src = _file(tmp_path, "stream")
    r = lovecraft("inspect", src, "--json", "-q")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    cols = {c["name"]: c for c in rep["columns"]}
    assert cols["score"]["nulls"] == len(range(0, N, 7)) and cols["tag"]["decoded"] == "dictionary"
    assert cols["vec"]["input_type"] == "fixed_size_list<item: int16>[3]"
    assert rep["inputs"][0]["ipc"] == "stream" and plain(rep["columns"][0]["shape"]) == []


def test_columns_of_a_compressed_file_read_only_those_fields(tmp_path):
    """--columns on an lz4 Feather file: the reader asks Arrow for those fields only
    (``IpcReadOptions.included_fields``), so the others are not decompressed."""
    from lovecraft_convert.inputs import open_reader

    src = _file(tmp_path, "lz4")
    reader = open_reader([src], budget=64 << 20, columns=["text"])
    batches = list(reader.batches())
    assert all(list(b.columns) == ["text"] for b in batches)
    assert sum(b.num_rows for b in batches) == N
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "memmap", "-q", "--columns", "text")
    assert (r.exit_code, r.stderr) == (0, "")
    assert read_back(out, "memmap")["text"] == _table()[1]["text"]


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord"])
def test_list_views_are_read_row_by_row(tmp_path, fmt):
    """A list_view row is an offset and a size into the values, in any order and possibly
    overlapping. pyarrow's cast to a list gave an invalid array when the last view was empty
    (memmap wrote offsets [0, 1, 3, 0], HDF5 empty rows, Parquet crashed): each row is gathered."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from lovecraft_convert.inputs.arrowtypes import as_list

    values = pa.array([10, 11, 12, 13, 14], pa.int64())
    # out of order, overlapping, a null row, an empty last view at the end of the values
    lv = pa.ListViewArray.from_arrays(
        [3, 0, 1, 0, 5], [2, 2, 3, 0, 0], values, mask=pa.array([False, False, False, True, False])
    )
    want = [[13, 14], [10, 11], [11, 12, 13], None, []]
    assert as_list(lv).to_pylist() == want
    words = pa.ListViewArray.from_arrays([1, 0, 2, 0, 3], [2, 1, 0, 3, 0], pa.array(["a", "b", "c"]))
    src = tmp_path / "lv.arrow"
    feather.write_feather(pa.table({"k": lv.cast(pa.list_view(pa.int64())), "w": words}), str(src))
    out = str(tmp_path / "o")
    cols = ["k"] if fmt in ("memmap", "hdf5", "tfrecord") else ["k", "w"]  # lists of text: Parquet only
    r = lovecraft("convert", str(src), "-o", out, "--to", fmt, "--columns", ",".join(cols), "-q")
    assert r.exit_code == 0, r.stderr
    got = read_back(out, fmt, {"k": ("sequence", "int64", ())})
    rows = [list(np.asarray(x)) for x in got["k"]]
    assert rows == [[13, 14], [10, 11], [11, 12, 13], [], []]  # a null list is empty, counted as a null
    if "w" in cols:
        assert [list(x) for x in got["w"]] == [["b", "c"], ["a"], [], ["a", "b", "c"], []]
    r = lovecraft("verify", out, "--against", str(src))
    assert r.exit_code == 0, r.stdout + r.stderr

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.booleans()), max_size=12))
    def rows_equal(views):
        vals = pa.array(range(12), pa.int64())
        offs = [min(o, 12) for o, _, _ in views]
        sizes = [min(s, 12 - o) for o, (_, s, _) in zip(offs, views, strict=True)]
        mask = pa.array([n for _, _, n in views], pa.bool_())
        arr = pa.ListViewArray.from_arrays(pa.array(offs, pa.int32()), pa.array(sizes, pa.int32()), vals, mask=mask)
        assert as_list(arr).to_pylist() == arr.to_pylist()

    rows_equal()
