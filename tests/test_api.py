"""The public API: every error class exported, a typed frozen result, data held in memory as an
input, and hints that name options as the caller spelled them."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lovecraft_convert as lc
from lovecraft_convert.errors import LovecraftError
from tests.conftest import lovecraft

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lovecraft_convert")


def _error_classes() -> dict[str, str]:
    """Every class of the package deriving (through the package's own classes) from LovecraftError:
    name -> module, found in the source (nothing imported)."""
    found: dict[str, str] = {}
    bases: dict[str, tuple[str, list[str]]] = {}
    for dirpath, _dirs, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    tree = ast.parse(fh.read())
                mod = os.path.relpath(path[:-3], os.path.dirname(PKG)).replace(os.sep, ".").removesuffix(".__init__")
                for node in ast.walk(tree):
                    if isinstance(node, ast.ClassDef):
                        names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                        bases[node.name] = (mod, names)
    changed = True
    found["LovecraftError"] = "lovecraft_convert.errors"
    while changed:
        changed = False
        for name, (mod, parents) in bases.items():
            if name not in found and any(p in found for p in parents):
                found[name] = mod
                changed = True
    return found


def test_every_error_class_is_exported():
    classes = _error_classes()
    assert {"OptionsError", "InputError", "OverflowErrorF16", "Interrupted", "StorageError"} <= set(classes)
    for name, mod in classes.items():
        assert name in lc.__all__, f"{mod}.{name} is not exported from lovecraft_convert"
        exported = getattr(lc, name)
        assert exported.__module__ == mod and issubclass(exported, LovecraftError)


def test_the_error_scan_finds_a_subclass_of_a_subclass():
    assert _error_classes()["OverflowErrorF16"] == "lovecraft_convert.errors"  # SchemaError's subclass


# --------------------------------------------------------------------------------------------
# the typed result
# --------------------------------------------------------------------------------------------


@pytest.fixture
def csv_file(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("x,k,t\n" + "".join(f"{i * 0.5},{i},w{i % 3}\n" for i in range(100)))
    return str(p)


def test_convert_returns_the_manifest_typed_and_frozen(csv_file, tmp_path):
    out = str(tmp_path / "o")
    m = lc.convert(csv_file, out, to="parquet", progress=False)
    assert isinstance(m, lc.Manifest)
    assert (m.path, m.output_format, m.command, m.rows) == (out, "parquet", "convert", 100)
    assert m.schema.names == ["x", "k", "t"] and m.nothing_to_do is False
    assert [type(f) for f in m.files] == [lc.FileEntry] and m.files[0].path == "data.parquet"
    assert m.files[0].bytes == os.path.getsize(os.path.join(out, "data.parquet")) == m.bytes
    assert m.files[0].hash == "blake3" and len(m.files[0].digest) == 64
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.rows = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        m["rows"] = 3  # type: ignore[index]
    # the mapping is the document on disk, exactly
    with open(os.path.join(out, "_manifest.json")) as f:
        on_disk = json.load(f)
    assert m.to_dict() == on_disk == dict(m) and m == on_disk
    assert m["rows"] == 100 and "buckets" not in m and m.get("notes") is None
    assert lc.Manifest.read(out) == m and lc.Manifest.read(out).schema == m.schema
    assert inspect.signature(lc.convert).return_annotation == "Manifest"


def test_keyword_arguments_are_checked_as_the_flags_are(csv_file, tmp_path):
    """The API's keywords, as an outside trial gave them: a list option as one string was read a
    character at a time (columns="xk": columns x and k); seed="7" failed deep in the shuffle;
    num_shards=2.5 was "more than the records"; a misspelled keyword, a Path output, inputs=None or
    5 were TypeError or AttributeError, not OptionsError; get_type_hints could not resolve the
    return annotation."""
    import pathlib
    import typing

    out = str(tmp_path / "o")
    m = lc.convert(csv_file, out, to="parquet", columns="x,k", progress=False)
    assert m.schema.names == ["x", "k"]
    m = lc.convert(csv_file, pathlib.Path(out), to="parquet", columns=("t",), overwrite=True, progress=False)
    assert m.schema.names == ["t"] and m.path == out
    cases = [
        (lc.convert, {"columns": "xk"}, "columns: no column 'xk'; columns are x, k, t"),
        (lc.shard, {"shuffle": True, "seed": "7", "num_shards": 2}, "seed='7': give an integer"),
        (lc.shard, {"num_shards": 2.5}, "num_shards=2.5: give an integer"),
        (
            lc.shard,
            {"num_shard": 2},
            "shard() got an unexpected keyword argument 'num_shard'; did you mean num_shards?",
        ),
        (lc.convert, {"overwrite": "yes"}, "overwrite='yes': give True or False"),
    ]
    for fn, kw, message in cases:
        with pytest.raises(lc.OptionsError) as e:
            fn(csv_file, str(tmp_path / "x"), to="parquet", progress=False, **kw)
        assert e.value.one_line() == message
    for inputs, message in [
        (None, "inputs=None: give a path, a list of paths or data"),
        (5, "inputs=5: give a path, a list of paths, or data (an Arrow stream, a dict of arrays)"),
    ]:
        with pytest.raises(lc.OptionsError) as e:
            lc.convert(inputs, str(tmp_path / "x"), to="parquet")
        assert e.value.one_line() == message
    with pytest.raises(lc.OptionsError) as e:
        lc.convert(csv_file, 7, to="parquet")  # type: ignore[arg-type]
    assert e.value.one_line() == "output=7: give the path of the output directory"
    assert not os.path.exists(tmp_path / "x")
    for fn in (lc.convert, lc.shard, lc.bucket):
        assert typing.get_type_hints(fn)["return"] is lc.Manifest


def test_the_loader_methods_show_their_keywords(csv_file, tmp_path):
    """ds.to_torch and ds.to_tf_dataset showed (batch_size, **kwargs) and one line of doc in
    help() (an outside trial): they show the functions' keywords and docstrings."""
    out = str(tmp_path / "o")
    lc.convert(csv_file, out, to="parquet", progress=False)
    ds = lc.open_dataset(out)
    for method in (ds.to_torch, ds.to_tf_dataset):
        params = inspect.signature(method).parameters
        assert {"batch_size", "shuffle", "seed", "state", "keep_dtype"} <= set(params), params
        assert "self" not in params and len((method.__doc__ or "").splitlines()) > 3


def test_shard_and_bucket_return_the_manifest_typed(tmp_path, csv_file):
    s = lc.shard(csv_file, str(tmp_path / "s"), to="memmap", num_shards=2, workers=1, progress=False)
    assert isinstance(s, lc.Manifest) and s.command == "shard" and len(s["shards"]) == 2 and s.rows == 100
    txt = tmp_path / "t.txt"
    txt.write_text("".join("a" * (i % 17 + 1) + "\n" for i in range(200)))
    b = lc.bucket(str(txt), str(tmp_path / "b"), to="parquet", num_buckets=3, workers=1, progress=False)
    assert isinstance(b, lc.Manifest) and b.command == "bucket" and len(b["buckets"]) == 3
    # --resume on a complete dataset: nothing written, and the result says so (not in the document)
    again = lc.shard(csv_file, str(tmp_path / "s"), to="memmap", num_shards=2, workers=1, progress=False, resume=True)
    assert again.nothing_to_do is True and "nothing_to_do" not in again and again.rows == 100


# --------------------------------------------------------------------------------------------
# data held in memory
# --------------------------------------------------------------------------------------------


def _table(n: int = 1000) -> pa.Table:
    rng = np.random.default_rng(5)
    return pa.table(
        {
            "x": rng.normal(size=n),
            "k": rng.integers(-9, 9, size=n, dtype=np.int32),
            "t": [f"w{i % 11}" for i in range(n)],
            "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=n * 4).astype(np.float32)), 4),
        }
    )


def test_a_record_batch_reader_round_trips(tmp_path):
    pl = pytest.importorskip("polars")
    t = _table()
    out = str(tmp_path / "o")
    m = lc.convert(t.to_reader(max_chunksize=64), out, to="parquet", progress=False)
    assert isinstance(m, lc.Manifest) and m.rows == 1000 and m.schema.names == ["x", "k", "t", "v"]
    got = pq.read_table(out)  # read by pyarrow, from the directory
    assert got.column("x").to_pylist() == t.column("x").to_pylist()
    assert got.column("k").to_pylist() == t.column("k").to_pylist()
    assert got.column("t").to_pylist() == t.column("t").to_pylist()
    assert got.column("v").to_pylist() == t.column("v").to_pylist()
    df = pl.read_parquet(os.path.join(out, "*.parquet"))  # and by polars
    assert df["x"].to_list() == t.column("x").to_pylist() and df["t"].to_list() == t.column("t").to_pylist()
    src = m["sources"][0]
    assert src["name"] == "<in-memory pyarrow.RecordBatchReader>" and src["path"] is None and src["format"] == "memory"
    assert lovecraft("verify", out).exit_code == 0


def test_anything_with_an_arrow_stream_is_read(tmp_path):
    pl = pytest.importorskip("polars")
    df = pl.DataFrame({"a": [1, 2, 3], "s": ["x", "yy", None]})
    m = lc.convert(df, str(tmp_path / "p"), to="parquet", progress=False)
    got = pl.read_parquet(str(tmp_path / "p" / "*.parquet")).to_dict(as_series=False)
    assert m.rows == 3 and got == {"a": [1, 2, 3], "s": ["x", "yy", ""]}  # a null string is empty, as from a file
    m = lc.convert(_table(50), str(tmp_path / "t"), to="parquet", progress=False)  # a pyarrow Table
    assert pq.read_table(str(tmp_path / "t")).column("x").to_pylist() == _table(50).column("x").to_pylist()


def test_an_iterable_of_dicts_of_arrays(tmp_path):
    def batches():
        for i in range(3):
            yield {"id": np.arange(5) + 5 * i, "emb": np.full((5, 2, 3), i, dtype=np.float32), "w": ["a"] * 5}

    out = str(tmp_path / "m")
    m = lc.convert(batches(), out, to="memmap", progress=False)
    assert m.rows == 15 and [f.shape for f in m.schema] == [(), (2, 3), ()]
    assert np.load(os.path.join(out, "id.npy")).tolist() == list(range(15))
    emb = np.load(os.path.join(out, "emb.npy"))
    assert emb.shape == (15, 2, 3) and emb[::5, 0, 0].tolist() == [0, 1, 2]
    one = lc.convert({"a": np.arange(4.0)}, str(tmp_path / "one"), to="parquet", progress=False)  # one dict
    assert one.rows == 4
    # a generator of paths is still paths
    src = tmp_path / "x.csv"
    src.write_text("a\n1\n2\n")
    assert lc.convert((p for p in [str(src)]), str(tmp_path / "g"), to="parquet", progress=False).rows == 2


def test_what_a_one_pass_read_cannot_do_is_refused(tmp_path):
    with pytest.raises(lc.OptionsError) as e:
        lc.shard(_table(10), str(tmp_path / "s"), to="parquet", num_shards=2)
    assert str(e.value) == (
        "this job reads its inputs in parts, in parallel; data held in memory is read once, in order; "
        "convert it first (lovecraft_convert.convert), then give the dataset directory it wrote"
    )
    # a null in an int column after the first batch: a file is read again, a stream cannot be
    rb1 = pa.record_batch({"a": pa.array([1, 2], pa.int64())})
    rb2 = pa.record_batch({"a": pa.array([3, None], pa.int64())})
    reader = pa.RecordBatchReader.from_batches(rb1.schema, [rb1, rb2])
    with pytest.raises(lc.SchemaError) as e:
        lc.convert(reader, str(tmp_path / "n"), to="parquet", progress=False)
    assert "column 'a': an integer or boolean column holds a null" in str(e.value)
    assert str(e.value).endswith("give the column a float type: column_types={'a': 'float64'}")
    assert not os.path.exists(tmp_path / "n")
    ok = pa.RecordBatchReader.from_batches(rb1.schema, [rb1, rb2])
    m = lc.convert(ok, str(tmp_path / "f"), to="parquet", column_types={"a": "float64"}, progress=False)
    assert pq.read_table(str(tmp_path / "f")).column("a").to_pylist()[:3] == [1.0, 2.0, 3.0] and m.rows == 4
    # batches that disagree
    with pytest.raises(lc.SchemaError, match=r"batch 2: columns \['b'\] differ from the first batch's \['a'\]"):
        lc.convert([{"a": np.arange(2)}, {"b": np.arange(2)}], str(tmp_path / "d"), to="parquet", progress=False)
    with pytest.raises(lc.InputError, match=r"batch 1: columns of different lengths \(a: 2, b: 3\)"):
        lc.convert([{"a": np.arange(2), "b": np.arange(3)}], str(tmp_path / "l"), to="parquet", progress=False)


# --------------------------------------------------------------------------------------------
# hints in the caller's spelling
# --------------------------------------------------------------------------------------------


def test_hints_name_keywords_for_python_and_flags_for_the_cli(tmp_path):
    src = str(tmp_path / "big.npy")
    np.save(src, np.array([1.0, 7e4], dtype=np.float32))
    with pytest.raises(lc.OverflowErrorF16) as e:
        lc.convert(src, str(tmp_path / "o"), to="parquet", dtype="float16", progress=False)
    assert str(e.value).endswith("scale the data, keep a wider type, or pass on_overflow='clip'")
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet", "--dtype", "float16")
    assert r.exit_code == 1 and r.stderr.strip().endswith("or pass --on-overflow clip")
    with pytest.raises(lc.OptionsError) as e:
        lc.shard(src, str(tmp_path / "s"), to="parquet", shuffle=True)
    assert str(e.value) == "give exactly one of shard_size, rows_per_shard, num_shards"
    r = lovecraft("shard", src, "-o", str(tmp_path / "s"), "--to", "parquet", "--shuffle")
    assert r.exit_code == 2 and r.stderr == "Error: give exactly one of --shard-size, --rows-per-shard, --num-shards\n"


def test_rendering_keeps_command_lines_and_quoted_values():
    from lovecraft_convert.errors import DatasetError, flag, surface

    e = DatasetError("incomplete", hint="run it again (`lovecraft shard ... --resume` resumes) or pass --overwrite")
    assert str(e) == "incomplete; run it again (`lovecraft shard ... --resume` resumes) or pass overwrite=True"
    e = lc.OptionsError(f"--column-type x: '--y' is no type; {flag('errors', 'replace')}; --no-header")
    assert str(e) == "column_types x: '--y' is no type; errors='replace'; header=False"
    with surface("cli"):
        assert str(e) == "--column-type x: '--y' is no type; --errors replace; --no-header"
