"""A manifest is input: every reader of a dataset directory (``verify``, ``inspect``, ``open_dataset``
and its batches, ``convert``/``shard``/``bucket`` reading the dataset) given a manifest that was
edited in any one place (a key deleted, a value nulled, of another type, huge, negative, nested one
level deeper or shallower) answers with a report or one line of its own error
(:class:`~lovecraft_convert.errors.LovecraftError`), never another exception, a traceback or an
allocation sized from the number it was given: the process's address space is capped to 1 GiB above
what it uses (``RLIMIT_AS``), so an allocation of a declared count would be a MemoryError here.

Each dataset keeps its files; only the manifest is edited (its own digests are not, so ``verify``
also reports the edit where it changes nothing a reader uses).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lovecraft_convert as lc
from lovecraft_convert.errors import LovecraftError

HEADROOM = 1 << 30
EDITED = "the manifest was edited or damaged; re-create the dataset"


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, str]:
    """One small dataset per format and kind of column, and a bucketed and a packed one."""
    d = tmp_path_factory.mktemp("mutations")
    np.save(d / "x.npy", np.arange(600, dtype=np.float32).reshape(300, 2))
    (d / "lines.txt").write_text("".join(f"line {i} {'w' * (i % 23)}\n" for i in range(300)))
    (d / "t.csv").write_text("a,b,s\n" + "".join(f"{i},{i / 3:.4f},s{i % 11}\n" for i in range(200)))
    made = {}
    for fmt in ("memmap", "parquet", "tfrecord", "hdf5"):
        made[f"{fmt} fixed"] = str(d / f"x_{fmt}")
        lc.convert([str(d / "x.npy")], made[f"{fmt} fixed"], to=fmt, progress=False)
        made[f"{fmt} text"] = str(d / f"t_{fmt}")
        lc.convert([str(d / "lines.txt")], made[f"{fmt} text"], to=fmt, progress=False)
    made["parquet table, 3 shards"] = str(d / "csv_parquet")
    lc.shard([str(d / "t.csv")], made["parquet table, 3 shards"], to="parquet", num_shards=3, workers=1, progress=False)
    made["tfrecord gzip"] = str(d / "gz_tfrecord")
    lc.convert([str(d / "t.csv")], made["tfrecord gzip"], to="tfrecord", compression="gzip", progress=False)
    made["megatron tokens"] = str(d / "tok_megatron")
    lc.convert([str(d / "lines.txt")], made["megatron tokens"], to="megatron", tokenizer="bytes", progress=False)
    made["buckets padded"] = str(d / "b_padded")
    lc.bucket([str(d / "lines.txt")], made["buckets padded"], to="memmap", num_buckets=3, workers=1, progress=False)
    made["buckets tfrecord"] = str(d / "b_tfrecord")
    lc.bucket([str(d / "lines.txt")], made["buckets tfrecord"], to="tfrecord", num_buckets=2, workers=1, progress=False)
    made["packed"] = str(d / "b_packed")
    lc.bucket([str(d / "lines.txt")], made["packed"], to="parquet", layout="packed", seq_len=16, workers=1,
              progress=False)  # fmt: skip
    return made


def _paths(v, at=()) -> list[tuple]:
    """Every place in a JSON value (its keys and list items, depth first)."""
    out = [at]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, (*at, k))
    elif isinstance(v, list):
        for i, x in enumerate(v[:4]):  # the first items stand for the rest
            out += _paths(x, (*at, i))
    return out


def _get(v, at):
    for k in at:
        v = v[k]
    return v


EDITS = ["delete", "null", "string", "list", "object", "true", "huge", "negative", "fraction", "nest", "unnest"]


def _edited(m: dict, at: tuple, edit: str) -> dict | None:
    """``m`` with the value at ``at`` edited, or None when the edit does not apply there."""
    m = json.loads(json.dumps(m))
    if not at:
        return None
    parent, key = _get(m, at[:-1]), at[-1]
    old = parent[key]
    new = {
        "null": None,
        "string": "x",
        "list": [],
        "object": {},
        "true": True,
        "huge": 10**12,
        "negative": -1,
        "fraction": 1.5,
        "nest": [old],
    }.get(edit, old)
    if edit == "delete":
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
        return m
    if edit == "unnest":
        if isinstance(old, list) and old:
            new = old[0]
        elif isinstance(old, dict) and old:
            new = next(iter(old.values()))
        else:
            return None
    if new == old and type(new) is type(old):
        return None
    parent[key] = new
    return m


def _run(name: str, call, ok_types=()):
    """``call()``; its LovecraftError as one line. Anything else fails the test."""
    try:
        call()
        return "ok"
    except LovecraftError as e:
        line = e.one_line()
        assert "\n" not in line and line, (name, line)
        return line
    except MemoryError:
        pytest.fail(f"{name}: allocated what the manifest declared (MemoryError)")


def _read_all(ds: str) -> None:
    d = lc.open_dataset(ds)
    for shuffle in (False, True):
        for b in d.batches(64, shuffle=shuffle, seed=1):
            assert len(b)
    if d.random_access and not d.bucketed:
        d.take(np.array([0, len(d) - 1]))


def readers(ds: str, out: str, text: bool, bucketed: bool = False) -> dict[str, str]:
    """What every reader of dataset ``ds`` says of it (``out``: where the rewriting ones write; a
    bucketed dataset is not re-read by them, by design)."""
    said = {
        "verify": _run("verify", lambda: lc.verify(ds)),
        "inspect": _run("inspect", lambda: lc.inspect(ds)),
        "open_dataset": _run("open_dataset", lambda: _read_all(ds)),
        "convert": _run("convert", lambda: lc.convert([ds], f"{out}/c", to="parquet", progress=False)),
    }
    if not bucketed:
        said["shard"] = _run(
            "shard", lambda: lc.shard([ds], f"{out}/s", to="memmap", num_shards=2, workers=1, progress=False)
        )
    if text:
        said["bucket"] = _run(
            "bucket", lambda: lc.bucket([ds], f"{out}/b", to="memmap", num_buckets=2, workers=1, progress=False)
        )
    return said


@pytest.fixture
def capped():
    """The address space capped at 1 GiB above what the process maps now, for the test's duration."""
    with open("/proc/self/status") as f:
        vm = int(re.search(r"VmSize:\s+(\d+) kB", f.read()).group(1)) * 1024
    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + HEADROOM, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def test_every_reader_reads_the_unedited_datasets(datasets, tmp_path):
    for name, ds in datasets.items():
        said = readers(ds, str(tmp_path / name.replace(" ", "_")), " text" in name, "buckets" in name)
        if "buckets" in name:
            assert said.pop("convert").endswith("convert or shard the input it was bucketed from")
        assert set(said.values()) == {"ok"}, (name, said)
        assert lc.verify(ds).ok


def _edit_and_read(datasets, tmp_path, data) -> None:
    name = data.draw(st.sampled_from(sorted(datasets)), label="dataset")
    ds = datasets[name]
    mpath = os.path.join(ds, "_manifest.json")
    with open(mpath) as f:
        original = f.read()
    m = json.loads(original)
    at = data.draw(st.sampled_from(_paths(m)), label="where")
    edit = data.draw(st.sampled_from(EDITS), label="edit")
    edited = _edited(m, at, edit)
    if edited is None:
        return
    out = tmp_path / "out"
    try:
        with open(mpath, "w") as f:
            json.dump(edited, f)
        readers(ds, str(out), " text" in name, "buckets" in name)
    finally:
        with open(mpath, "w") as f:
            f.write(original)
        shutil.rmtree(out, ignore_errors=True)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_an_edited_manifest_is_a_report_or_one_line_of_ours(datasets, tmp_path, capped, data):
    _edit_and_read(datasets, tmp_path, data)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_many_edited_manifests_are_a_report_or_one_line_of_ours(datasets, tmp_path, capped, data):
    """The same, at length (``make test-slow``): 1,500 edits (4 minutes here)."""
    _edit_and_read(datasets, tmp_path, data)


def _edited_copy(src: str, tmp_path, edit) -> str:
    ds = str(tmp_path / "ds")
    shutil.copytree(src, ds)
    mpath = os.path.join(ds, "_manifest.json")
    with open(mpath) as f:
        m = json.load(f)
    edit(m)
    with open(mpath, "w") as f:
        json.dump(m, f)
    return ds


def _rename(m: dict) -> None:
    m["schema"][0]["name"] = "y"
    m["stats"]["y"] = m["stats"].pop("x")
    for s in m["shards"]:
        s["stats"]["y"] = s["stats"].pop("x")


NAMED = {
    "a null schema shape": (
        "parquet fixed",
        lambda m: m["schema"][0].update(shape=None),
        "{m}: schema[0].shape is null, not a list of counts; " + EDITED,
        "{m}: schema[0].shape is null, not a list of counts",
    ),
    "a renamed Parquet column": (
        "parquet fixed",
        _rename,
        "{ds}/data.parquet: holds no column 'y' (it holds x); the schema lists it; " + EDITED,
        "{ds}/data.parquet: holds columns ['x'], the schema says ['y']",
    ),
    "a wrong Parquet shape": (
        "parquet fixed",
        lambda m: m["schema"][0].update(shape=[3]),
        "{ds}/data.parquet: column 'x' is fixed_size_list<element: float>[2], the schema says "
        "fixed_size_list<item: float>[3]; " + EDITED,
        "{ds}/data.parquet: column 'x' is fixed_size_list<element: float>[2], the schema says "
        "fixed_size_list<item: float>[3]",
    ),
    "a wrong memmap shape": (
        "memmap fixed",
        lambda m: m["schema"][0].update(shape=[1]),
        "{ds}/x.npy: holds float32[2] rows, the manifest's schema says column 'x' is float32[1]; " + EDITED,
        None,
    ),
    "a memmap shape its file cannot hold": (
        "memmap fixed",
        lambda m: m["schema"][0].update(shape=[3]),
        "{m}: shard 0 declares 300 rows; its files (2528 bytes) hold at most 210; " + EDITED,
        None,
    ),
    "a wrong HDF5 shape": (
        "hdf5 fixed",
        lambda m: m["schema"][0].update(shape=[3]),
        "{ds}/data.h5: column 'x' holds rows of shape [2], the schema says [3]; " + EDITED,
        None,
    ),
    "an empty list of buckets": (  # found by the slow mutation test on CI: it was a KeyError
        "buckets padded",
        lambda m: m.update(buckets=[]),
        "{ds}: the buckets hold 0 rows, the manifest says 300; the manifest is damaged; re-create the dataset",
        None,
    ),
    "a duplicated shard index": (
        "parquet table, 3 shards",
        lambda m: m["shards"][1].update(index=0),
        None,
        None,
    ),
}


@pytest.mark.parametrize("what", sorted(NAMED))
def test_each_reader_says_what_is_wrong_in_one_line(datasets, tmp_path, what):
    """The cases of the trial, each reader's exact line: ``open_dataset`` (and ``convert``, which
    reads through it, exit 1) and ``verify`` (its report; exit 1)."""
    from tests.conftest import lovecraft

    name, edit, said, verified = NAMED[what]
    ds = _edited_copy(datasets[name], tmp_path, edit)
    m = f"{ds}/_manifest.json"
    if said is None:  # nothing wrong for a reader: the same rows as the original, in the same order
        got = [b["a"] for b in lc.open_dataset(ds).batches(50)]
        want = [b["a"] for b in lc.open_dataset(datasets[name]).batches(50)]
        np.testing.assert_array_equal(np.concatenate(got), np.concatenate(want))
        return
    said = said.format(m=m, ds=ds)
    with pytest.raises(LovecraftError) as e:
        _read_all(ds)
    assert e.value.one_line() == said
    r = lovecraft("convert", ds, "-o", str(tmp_path / "out"), "--to", "memmap", "-q")
    assert (r.exit_code, r.stderr) == (1, f"Error: {said}\n")
    if verified is not None:
        r = lovecraft("verify", ds)
        assert (r.exit_code, r.stdout) == (1, verified.format(m=m, ds=ds) + "\n")
