"""``--dedup exact``: the row digests (length-framed, so column boundaries count), and ``convert
--dedup`` against polars' ``unique(subset=..., maintain_order=True, keep="first")`` on values
parsed from the source (JSON Lines read by polars, NPY by np.load), including a hypothesis
round trip; entries enough for several runs and decisions (a small --max-memory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lovecraft_convert as lc
from lovecraft_convert import convert
from lovecraft_convert.schema import Batch, Field, Schema, VarColumn
from lovecraft_convert.transforms.dedup import first_in_batch, row_digests
from tests.conftest import SUBPROCESS_ENV, lovecraft
from tests.readback import manifest

pl = pytest.importorskip("polars")


def _strings(*cols: list[str]) -> tuple[Batch, Schema]:
    names = [f"c{i}" for i in range(len(cols))]
    batch = Batch({n: VarColumn.from_pylist(list(c), np.uint8) for n, c in zip(names, cols, strict=True)})
    return batch, Schema(tuple(Field(n, "string", "|u1") for n in names))


def test_column_boundaries_are_framed():
    batch, schema = _strings(["ab", "a", "ab"], ["c", "bc", "c"])
    d = row_digests(batch, schema, ("c0", "c1"))
    assert (d[0] != d[1]).any()  # ('ab', 'c') != ('a', 'bc')
    assert (d[0] == d[2]).all()


def test_digest_is_xxh3_128_of_framed_bytes():
    from xxhash import xxh3_128_digest

    batch, schema = _strings(["héllo", ""], ["a", "bc"])
    d = row_digests(batch, schema, ("c0",))
    want = xxh3_128_digest(len("héllo".encode()).to_bytes(8, "little") + "héllo".encode())
    assert d[0].astype("<u8").tobytes() == want
    assert d[1].astype("<u8").tobytes() == xxh3_128_digest(bytes(8))
    two = row_digests(batch, schema, ("c0", "c1"))  # each column framed by its length, in order
    framed = (6).to_bytes(8, "little") + "héllo".encode() + (1).to_bytes(8, "little") + b"a"
    assert two[0].astype("<u8").tobytes() == xxh3_128_digest(framed)
    assert two[1].astype("<u8").tobytes() == xxh3_128_digest(bytes(8) + (2).to_bytes(8, "little") + b"bc")


def test_fixed_and_sequence_columns():
    batch = Batch(
        {
            "v": np.array([[1, 2], [1, 2], [2, 1]], dtype=np.int32),
            "s": VarColumn(np.array([1, 2, 1, 2, 3], dtype=np.int64), np.array([0, 2, 4, 5])),
        }
    )
    schema = Schema((Field("v", "fixed", "<i4", (2,)), Field("s", "sequence", "<i8")))
    d = row_digests(batch, schema, ("v", "s"))
    assert (d[0] == d[1]).all() and (d[0] != d[2]).any()
    assert first_in_batch(d).tolist() == [0, 0, 2]


def _write_jsonl(path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _expected(path: str, subset: list[str]):
    return pl.read_ndjson(path).unique(subset=subset, maintain_order=True, keep="first")


@pytest.fixture(scope="module")
def dup_jsonl(tmp_path_factory) -> str:
    rng = np.random.default_rng(3)
    words = ["a", "b", "ab", "ba", "é", ""]
    rows = []
    for i in range(60_000):
        n = int(rng.integers(0, 4))
        rows.append({"id": i, "text": "".join(rng.choice(words, size=n)), "label": int(rng.integers(0, 3))})
    p = tmp_path_factory.mktemp("dedup") / "dups.jsonl"
    _write_jsonl(p, rows)
    return str(p)


@pytest.mark.parametrize("subset", [["text"], ["text", "label"]])
def test_convert_equals_polars_unique(tmp_path, dup_jsonl, subset):
    out = str(tmp_path / "out")
    report = str(tmp_path / "report.jsonl")
    convert(dup_jsonl, out, to="parquet", dedup="exact", dedup_columns=subset, dedup_report=report, max_memory="16MiB")
    want = _expected(dup_jsonl, subset)
    got = pl.read_parquet(os.path.join(out, "*.parquet"))
    assert got["id"].to_list() == want["id"].to_list()
    m = manifest(out)
    dup = m["removed"]["duplicate"]
    assert dup["rows"] == 60_000 - len(want) and dup["columns"] == subset and dup["mode"] == "exact"
    # the report: every dropped row, in input order, with the first row of its key
    src = pl.read_ndjson(dup_jsonl)
    first: dict = {}
    lines = []
    for i, key in enumerate(zip(*(src[c].to_list() for c in subset), strict=True)):
        if key in first:
            lines.append({"row": i, "file": dup_jsonl, "file_row": i, "kept_row": first[key], "kept_file": dup_jsonl,
                          "kept_file_row": first[key]})  # fmt: skip
        else:
            first[key] = i
    with open(report) as f:
        assert [json.loads(line) for line in f] == lines


def test_many_runs_and_groups(tmp_path):
    """Entries enough for several runs per scan and several decisions (groups of fine partitions)."""
    rng = np.random.default_rng(9)
    p = str(tmp_path / "many.jsonl")
    _write_jsonl(p, [{"id": i, "k": f"key {int(k)}"} for i, k in enumerate(rng.integers(0, 100_000, size=150_000))])
    out = str(tmp_path / "out")
    convert(p, out, to="parquet", dedup="exact", dedup_columns=["k"], max_memory="16MiB")
    want = _expected(p, ["k"])
    assert pl.read_parquet(os.path.join(out, "*.parquet"))["id"].to_list() == want["id"].to_list()
    assert manifest(out)["removed"]["duplicate"]["partitions"] > 1


def test_default_columns_are_the_columns_written(tmp_path, dup_jsonl):
    out = str(tmp_path / "out")
    convert(dup_jsonl, out, to="parquet", dedup="exact", columns=["text", "label"])
    want = _expected(dup_jsonl, ["text", "label"])
    got = pl.read_parquet(os.path.join(out, "*.parquet"))
    assert got.to_dicts() == want.select("text", "label").to_dicts()


def test_filter_then_dedup(tmp_path, dup_jsonl):
    """Rows the filter removes are not first occurrences: a row kept is the first one the filter keeps."""
    out = str(tmp_path / "out")
    convert(dup_jsonl, out, to="parquet", dedup="exact", dedup_columns=["text"], filter="label != 0")
    want = (
        pl.read_ndjson(dup_jsonl)
        .filter(pl.col("label") != 0)
        .unique(subset=["text"], maintain_order=True, keep="first")
    )
    got = pl.read_parquet(os.path.join(out, "*.parquet"))
    assert got["id"].to_list() == want["id"].to_list()


def test_inspect_says_what_was_removed_and_the_command_as_typed(tmp_path, dup_jsonl):
    """The dataset's inspect gives the removed counts per reason, and the command that made it quoted
    as a shell reads it (the filter's spaces and quotes kept)."""
    out = str(tmp_path / "out")
    args = ["convert", dup_jsonl, "-o", out, "--to", "parquet", "--filter", 'label != 0 or text == "a b"']
    args += ["--dedup", "exact", "--dedup-columns", "text", "-q"]
    r = subprocess.run(
        [sys.executable, "-m", "lovecraft_convert", *args], env=SUBPROCESS_ENV, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    removed = lc.open_dataset(out).manifest["removed"]
    lines = lovecraft("inspect", out).stdout.splitlines()
    assert lines[1] == (
        f"made by: lovecraft convert {dup_jsonl} -o {out} --to parquet --filter 'label != 0 or text == \"a b\"' "
        "--dedup exact --dedup-columns text -q"
    )
    f, d = removed["filter"]["rows"], removed["duplicate"]["rows"]
    assert f > 0 and d > 0
    assert (
        f"removed: {f + d:,} of {removed['read']:,} rows read: {f:,} by --filter 'label != 0 or text == \"a b\"'; "
        f"{d:,} duplicates (exact on text)"
    ) in lines


def test_npy_rows(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.integers(0, 3, size=(5_000, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = str(tmp_path / "out")
    convert(str(tmp_path / "x.npy"), out, to="memmap", dedup="exact")
    _u, first = np.unique(np.load(tmp_path / "x.npy"), axis=0, return_index=True)
    want = x[np.sort(first)]
    got = np.load(os.path.join(out, "x.npy"))
    assert np.array_equal(got, want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(st.text(alphabet='ab\u00e9\n"', max_size=4), st.integers(-2, 2)), min_size=1, max_size=300),
    subset=st.sampled_from([["s"], ["n"], ["s", "n"]]),
)
def test_round_trip_equals_polars(tmp_path_factory, rows, subset):
    d = tmp_path_factory.mktemp("hyp")
    p = str(d / "in.jsonl")
    _write_jsonl(p, [{"i": i, "s": s, "n": n} for i, (s, n) in enumerate(rows)])
    out = str(d / "out")
    convert(p, out, to="parquet", dedup="exact", dedup_columns=subset, max_memory="16MiB")
    want = _expected(p, subset)
    got = pl.read_parquet(os.path.join(out, "*.parquet"))
    assert got["i"].to_list() == want["i"].to_list()


def test_cli_errors(tmp_path, dup_jsonl):
    o = str(tmp_path / "o")
    r = lovecraft("convert", dup_jsonl, "-o", o, "--to", "parquet", "--dedup", "exact", "--dedup-columns", "txt")
    assert (r.exit_code, r.stderr.strip()) == (
        2,
        "Error: --dedup-columns: no column 'txt'; columns are id, text, label",
    )
    r = lovecraft("convert", dup_jsonl, "-o", o, "--to", "parquet", "--dedup", "exact", "--dedup-columns", "")
    assert (r.exit_code, r.stderr.strip()) == (2, "Error: --dedup-columns '': give column names, e.g. text or a,b")
    r = lovecraft("convert", dup_jsonl, "-o", o, "--to", "parquet", "--dedup-columns", "text")
    assert (r.exit_code, r.stderr.strip()) == (2, "Error: --dedup-columns goes with --dedup; add --dedup exact")
    bad = "/nonexistent/r.jsonl"
    r = lovecraft("convert", dup_jsonl, "-o", o, "--to", "parquet", "--dedup", "exact", "--dedup-report", bad)
    assert (r.exit_code, r.stderr.strip()) == (
        2,
        f"Error: --dedup-report {bad}: no directory /nonexistent; create it, or name another file",
    )
    r = lovecraft("convert", dup_jsonl, "-o", o, "--to", "parquet", "--dedup", "exact", "--dedup-report", str(tmp_path))
    assert (r.exit_code, r.stderr.strip()) == (
        2,
        f"Error: --dedup-report {tmp_path}: is a directory; the report is a file; name a file, e.g. "
        f"{tmp_path / 'dedup-report.jsonl'}",
    )
    r = lovecraft(
        "convert", "-", "-o", o, "--to", "parquet", "--input-format", "jsonl", "--dedup", "exact", input=b'{"a": 1}\n'
    )
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        "Error: --dedup reads the input twice (once to decide, once to write); stdin is read once; write it to a file first"
    )
    assert not os.path.exists(o)


@pytest.mark.parametrize("command", ["convert", "shard"])
def test_a_report_over_an_input_or_inside_the_output_is_refused_first(tmp_path, command):
    """--dedup-report naming an input overwrote that input (the run then read its own report: a
    traceback, or exit 0 with the input gone); inside the output, the report vanished with the old
    directory or broke the commit. Both are refused before any work, exit 2, the input untouched."""
    src = tmp_path / "in.jsonl"
    body = '{"text": "a"}\n{"text": "b"}\n{"text": "a"}\n'
    src.write_text(body)
    out = tmp_path / "o"
    extra = ["--num-shards", "1"] if command == "shard" else []
    r = lovecraft(command, str(src), "-o", str(out), "--to", "parquet", "--dedup", "exact", *extra,
                  "--dedup-report", str(src))  # fmt: skip
    assert (r.exit_code, r.stderr) == (2, f"Error: --dedup-report {src}: is an input of this run; name another file\n")
    assert src.read_text() == body and not out.exists()
    # an output not made yet: inside it, not "no directory; create it" (which led only to this line)
    r = lovecraft(command, str(src), "-o", str(out), "--to", "parquet", "--dedup", "exact", *extra,
                  "--dedup-report", str(out / "r.jsonl"))  # fmt: skip
    assert (r.exit_code, r.stderr) == (
        2,
        f"Error: --dedup-report {out / 'r.jsonl'}: is inside the output {out}, which this run replaces; name a file "
        "outside it\n",
    )
    out.mkdir()
    for inside in (out, out / "r.jsonl"):
        r = lovecraft(command, str(src), "-o", str(out), "--to", "parquet", "--dedup", "exact", *extra,
                      "--overwrite", "--dedup-report", str(inside))  # fmt: skip
        assert (r.exit_code, r.stderr) == (
            2,
            f"Error: --dedup-report {inside}: is inside the output {out}, which this run replaces; name a file "
            "outside it\n",
        )
    assert os.listdir(out) == []


@pytest.mark.parametrize("command", ["convert", "shard"])
def test_a_run_that_fails_leaves_no_report(tmp_path, command):
    """The report was written once the duplicates were decided, before the rows: a run failing
    after it (a float16 overflow here) left a report that looked complete beside no output. It
    now waits under a hidden name and takes its own once the output is committed."""
    src = tmp_path / "ov.jsonl"
    src.write_text('{"text": "a", "x": 1}\n{"text": "a", "x": 1}\n{"text": "b", "x": 1e6}\n')
    report = tmp_path / "r.jsonl"
    extra = ["--num-shards", "1"] if command == "shard" else []
    args = [command, str(src), "-o", str(tmp_path / "o"), "--to", "parquet", "--dedup", "exact", *extra,
            "--dedup-columns", "text", "--dedup-report", str(report)]  # fmt: skip
    r = lovecraft(*args, "--dtype", "float16")
    assert r.exit_code == 1 and "overflows float16" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["ov.jsonl"]
    r = lovecraft(*args)
    assert r.exit_code == 0, r.stderr
    assert [json.loads(x)["row"] for x in report.read_text().splitlines()] == [1]
    assert sorted(os.listdir(tmp_path)) == ["o", "ov.jsonl", "r.jsonl"]


def test_in_memory_data_is_refused():
    from lovecraft_convert.errors import OptionsError

    with pytest.raises(OptionsError, match="data held in memory is read once"):
        convert({"a": np.arange(3)}, "/nonexistent/out", to="memmap", dedup="exact")


def test_a_type_widened_late_decides_again(tmp_path):
    """convert starts over when a JSON Lines key's type widens past the first records: the dedup
    pass too, from a clean scratch directory."""
    p = str(tmp_path / "late.jsonl")
    rows = [{"id": i, "x": i % 300} for i in range(30_000)] + [
        {"id": 30_000 + i, "x": i % 400 + 0.5} for i in range(900)
    ]
    _write_jsonl(p, rows)
    out = str(tmp_path / "out")
    convert(p, out, to="parquet", dedup="exact", dedup_columns=["x"], max_memory="16MiB")
    want = pl.read_ndjson(p, infer_schema_length=None).unique(subset=["x"], maintain_order=True, keep="first")
    assert pl.read_parquet(os.path.join(out, "*.parquet"))["id"].to_list() == want["id"].to_list()


def test_one_duplicate_is_singular(tmp_path):
    """The summary and inspect said '1 duplicates'."""
    src = tmp_path / "t.csv"
    src.write_text("a,b\n1,x\n2,y\n1,x\n", encoding="utf-8")
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", "parquet", "--dedup", "exact")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.splitlines()[1] == "  removed 1 row of 3 read: 1 duplicate"
    r = lovecraft("inspect", out)
    assert "removed: 1 of 3 rows read: 1 duplicate (exact on a, b)" in r.stdout.splitlines()


# -- one pass (convert, the digests in memory) ---------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40)), max_size=400), min_size=1, max_size=8),
)
def test_seen_digests_keep_each_digests_first_occurrence(batches):
    """The in-memory table against a Python set: digests whose low bits collide (the table's slot),
    the all-zero digest (its empty mark), repeats within and across batches, growth from 4,096
    slots; a mask (the filter) whose rows are never first occurrences."""
    from lovecraft_convert.transforms import dedup as dd

    seen = dd.SeenDigests(dd.Dedup("exact", ("k",)), None, 1 << 30)
    ref: set = set()
    for rows in batches:
        keys = np.array([[hi * (1 << 40), lo] for hi, lo in rows], dtype=np.uint64).reshape(-1, 2)
        mask = np.array([lo % 7 != 3 for _, lo in rows], dtype=bool)
        seen_rows = dd.row_digests  # the digests of this batch: the keys themselves
        try:
            dd.row_digests = lambda b, s, c, keys=keys, mask=mask: keys[mask]
            got = seen.first_seen(Batch({"k": np.zeros(len(rows))}, len(rows)), mask)
        finally:
            dd.row_digests = seen_rows
        want = np.zeros(len(rows), dtype=bool)
        for i, (key, m) in enumerate(zip(map(tuple, keys.tolist()), mask.tolist(), strict=True)):
            if m and key not in ref:
                ref.add(key)
                want[i] = True
        assert got.tolist() == want.tolist()
    assert seen.count == len(ref)


def test_one_pass_writes_the_bytes_of_the_two_passes(tmp_path, dup_jsonl):
    """convert --dedup exact decides in the writing pass when the digests fit (the manifest's
    partitions: 0); with --dedup-report it reads twice (the report's positions come from the
    spill). The same bytes, the same counts, with and without a filter."""
    for extra in ({}, {"filter": "label != 0"}):
        one, two = str(tmp_path / "one"), str(tmp_path / "two")
        opts = {"to": "parquet", "dedup": "exact", "dedup_columns": ["text"], **extra}
        convert(dup_jsonl, one, **opts)
        convert(dup_jsonl, two, dedup_report=str(tmp_path / "r.jsonl"), **opts)
        a, b = manifest(one), manifest(two)
        assert a["removed"]["duplicate"]["partitions"] == 0 and b["removed"]["duplicate"]["partitions"] >= 1
        assert {**a["removed"]["duplicate"], "partitions": 0} == {**b["removed"]["duplicate"], "partitions": 0}
        assert a["removed"].get("filter") == b["removed"].get("filter")
        assert [f["blake3"] for f in a["files"]] == [f["blake3"] for f in b["files"]]
        for d in (one, two):
            os.rename(d, d + str(len(extra)))


def test_a_table_that_fills_mid_run_starts_over_in_two_passes(tmp_path, monkeypatch):
    """Long rows first (so the first batch's estimate lets the one pass begin), then more distinct
    short ones than the table of a 16MiB budget holds (49,152): the pass stops when the table is
    full, several batches in, and the two passes write the rows polars keeps."""
    from lovecraft_convert.transforms import dedup as dd

    p = str(tmp_path / "grow.jsonl")
    rows = [{"id": i, "k": "x" * 3000 + str(i % 50)} for i in range(4000)]
    rows += [{"id": 4000 + i, "k": f"key {i % 70_000}"} for i in range(90_000)]
    _write_jsonl(p, rows)
    calls = []
    real = dd.SeenDigests.first_seen
    monkeypatch.setattr(dd.SeenDigests, "first_seen", lambda self, b, m: calls.append(1) or real(self, b, m))
    out = str(tmp_path / "out")
    convert(p, out, to="parquet", dedup="exact", dedup_columns=["k"], max_memory="16MiB")
    assert len(calls) > 2  # batches decided before the table filled
    assert pl.read_parquet(os.path.join(out, "*.parquet"))["id"].to_list() == _expected(p, ["k"])["id"].to_list()
    m = manifest(out)["removed"]
    assert m["read"] == 94_000 and m["duplicate"]["partitions"] >= 1
    assert m["duplicate"]["rows"] == 94_000 - 50 - 70_000
