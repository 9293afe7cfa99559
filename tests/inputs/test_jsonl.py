"""JSON Lines input: what becomes what, checked against values this test parses with ``json`` and
reads back with pyarrow, polars, h5py, np.load and tf.data; every decision the README states
(NaN/Infinity, duplicate keys, integers beyond int64, nulls, non-object lines, invalid UTF-8,
broken lines); widening over the whole input; ``--column-type`` and ``--columns``; both parsers
giving the same columns (hypothesis)."""

from __future__ import annotations

import json
import math
import os
import struct

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import leftovers, lovecraft, write
from tests.readback import manifest, read_back

# --------------------------------------------------------------------------------------------
# the rules, as this test understands them, applied to records parsed with json
# --------------------------------------------------------------------------------------------


def _flatten(obj: dict, prefix: str = "", out: dict | None = None) -> dict:
    out = {} if out is None else out
    for k, v in obj.items():
        if isinstance(v, dict):
            _flatten(v, prefix + k + ".", out)
        else:
            out[prefix + k] = v
    return out


def expected(records: list[dict]) -> dict[str, tuple[str, list]]:
    """column -> (kind, values) for records whose keys each hold one kind of value (or null)."""
    flat = [_flatten(r) for r in records]
    names: dict[str, None] = {}
    for f in flat:
        names.update(dict.fromkeys(f))
    for name in list(names):  # a null where other records hold an object: its keys are null
        if any(other.startswith(name + ".") for other in names):
            del names[name]
    out = {}
    for name in names:
        vals = [f.get(name) for f in flat]
        present = [v for v in vals if v is not None]
        if any(isinstance(v, list) for v in present):
            elems = [e for v in present for e in v]
            if any(isinstance(e, str) for e in elems):
                out[name] = ("list<string>", [[e if e is not None else "" for e in v or []] for v in vals])
            elif elems and all(isinstance(e, bool) for e in elems):
                out[name] = ("sequence<bool>", [v or [] for v in vals])
            elif elems and all(type(e) is int and -(2**63) <= e < 2**63 for e in elems):
                out[name] = ("sequence<int64>", [v or [] for v in vals])
            else:
                out[name] = (
                    "sequence<float64>",
                    [[float(e) if e is not None else math.nan for e in v or []] for v in vals],
                )
        elif present and all(isinstance(v, str) for v in present):
            out[name] = ("string", [v if v is not None else "" for v in vals])
        elif present and all(isinstance(v, bool) for v in present):
            if len(present) == len(vals):
                out[name] = ("bool", vals)
            else:
                out[name] = ("float64", [float(v) if v is not None else math.nan for v in vals])
        elif present and all(type(v) is int for v in present) and any(not -(2**63) <= v < 2**63 for v in present):
            out[name] = ("string", [str(v) if v is not None else "" for v in vals])  # beyond int64: the digits
        elif present and all(isinstance(v, int) for v in present) and len(present) == len(vals):
            out[name] = ("int64", vals)
        else:
            out[name] = ("float64", [float(v) if v is not None else math.nan for v in vals])
    return out


def _same(a, b) -> bool:
    """Equal values, NaN equal to NaN, -0.0 told from 0.0."""
    if isinstance(a, list) or isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return True
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b and type(a) is type(b)


def _pylist(col) -> list:
    return [v.tolist() if hasattr(v, "tolist") else v for v in (col.tolist() if hasattr(col, "tolist") else col)]


def check_parquet(out: str, want: dict[str, tuple[str, list]]) -> None:
    import pyarrow.parquet as pq

    m = manifest(out)
    assert {f["name"]: _describe(f) for f in m["schema"]} == {k: v[0] for k, v in want.items()}
    t = pq.read_table(out)
    for name, (_, values) in want.items():
        got = t.column(name).to_pylist()
        assert len(got) == len(values), name
        for i, (g, w) in enumerate(zip(got, values, strict=True)):
            assert _same(g, w), (name, i, g, w)


def _describe(f: dict) -> str:
    if f["kind"] == "fixed":
        return {"<i8": "int64", "<f8": "float64", "|b1": "bool"}[f["dtype"]]
    if f["kind"] == "sequence":
        return {"<i8": "sequence<int64>", "<f8": "sequence<float64>", "|b1": "sequence<bool>"}[f["dtype"]]
    return {"string": "string", "string_list": "list<string>"}[f["kind"]]


def lines(records) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def convert(tmp_path, data: bytes, *extra, name="d.jsonl", to="parquet", kind=None):
    src = write(tmp_path / name, data, kind)
    out = str(tmp_path / f"out{len(os.listdir(tmp_path))}")  # a new output each time
    r = lovecraft("convert", src, "-o", out, "--to", to, "-q", "--overwrite", *extra)
    return r, out, src


def converted(tmp_path, data: bytes, *extra, **kw) -> str:
    r, out, _ = convert(tmp_path, data, *extra, **kw)
    assert r.exit_code == 0, r.stderr
    return out


def refused(tmp_path, data: bytes, *extra, code=1, **kw) -> str:
    """The one line a refused input gives ({src}: the input's path); nothing is left behind."""
    r, out, src = convert(tmp_path, data, *extra, **kw)
    assert r.exit_code == code and r.stdout == "", (r.exit_code, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: ")
    assert not os.path.exists(out) and leftovers(tmp_path) == []
    return r.stderr.rstrip("\n").replace(src, "{src}")


# --------------------------------------------------------------------------------------------
# what becomes what
# --------------------------------------------------------------------------------------------

RECORDS = [
    {"text": "héllo \"quoted\" \\ tab\t", "meta": {"lang": "en", "score": 0.5}, "n": 1, "ok": True, "ids": [1, 2], "tags": ["a"]},
    {"text": "😀 東京", "meta": {"lang": "de", "score": 2}, "n": 2, "ok": False, "ids": [], "tags": []},
    {"text": "", "meta": {"lang": None}, "n": 3, "ok": True, "ids": [3], "tags": ["b", "c"]},
    {"text": "x\ny", "n": 4, "ok": False, "ids": None, "tags": None, "extra": 1.5},
]  # fmt: skip


def test_records_become_columns(tmp_path):
    out = converted(tmp_path, lines(RECORDS))
    want = expected(RECORDS)
    assert list(want) == ["text", "meta.lang", "meta.score", "n", "ok", "ids", "tags", "extra"]
    assert want["meta.score"] == ("float64", [0.5, 2.0, math.nan, math.nan])
    check_parquet(out, want)
    assert [f["name"] for f in manifest(out)["schema"]] == list(want)  # first-appearance order


def test_read_back_by_independent_readers(tmp_path):
    """The same records in every format, read with np.load, h5py, pyarrow, polars and tf.data."""
    import polars as pl

    records = [{k: v for k, v in r.items() if k != "tags"} for r in RECORDS]  # lists of strings: Parquet only
    want = expected(records)
    for to in ("memmap", "hdf5", "parquet", "tfrecord"):
        if to == "memmap":  # memmap holds fixed-width numbers here (no text, no sequences)
            recs = [{k: v for k, v in r.items() if k in ("n", "ok", "extra")} for r in records]
        else:
            recs = records
        w = expected(recs)
        out = converted(tmp_path, lines(recs), to=to)
        got = read_back(out, to)
        for name, (kind, values) in w.items():
            col = got[name]
            vals = _pylist(col)
            if kind.startswith("sequence"):
                vals = [list(v) for v in vals]
            for i, (g, x) in enumerate(zip(vals, values, strict=True)):
                if kind == "bool":
                    g = bool(g)
                if kind == "int64":
                    g = int(g)
                assert _same(g, x), (to, name, i, g, x)
    out = converted(tmp_path, lines(records))
    df = pl.read_parquet(os.path.join(out, "*.parquet"))
    assert df["text"].to_list() == want["text"][1]
    assert df["n"].to_list() == want["n"][1]
    assert df["ids"].to_list() == want["ids"][1]


def test_lists_of_strings_in_parquet_only(tmp_path):
    out = converted(tmp_path, lines(RECORDS))
    assert next(f for f in manifest(out)["schema"] if f["name"] == "tags")["kind"] == "string_list"
    for to in ("memmap", "hdf5", "tfrecord"):
        msg = refused(tmp_path, lines(RECORDS), to=to)
        assert msg == (
            f"Error: {{src}}, column 'tags': {to} cannot hold list<string> columns; leave the column out with "
            "--columns, or write a format that holds it"
        )
    out = converted(tmp_path, lines(RECORDS), "--columns", "text,n", to="hdf5")
    assert [f["name"] for f in manifest(out)["schema"]] == ["text", "n"]


def test_input_where_no_line_is_an_object_is_one_column(tmp_path):
    out = converted(tmp_path, b"[1, 2, 3]\n[]\n[4]\n")
    check_parquet(out, {"value": ("sequence<int64>", [[1, 2, 3], [], [4]])})
    out = converted(tmp_path, b'"a"\n"b"\n')
    check_parquet(out, {"value": ("string", ["a", "b"])})
    assert refused(tmp_path, b"[1]\n{}\n") == (
        "Error: {src}, line 2: an object, where the first line holds a value that is not one; every line holds an "
        "object, or none does"
    )


def test_blank_lines_crlf_and_bom(tmp_path):
    data = b'\xef\xbb\xbf{"a": 1}\r\n\r\n  \t\n{"a": 2}\r\n   {"a": 3}  \n\n'
    out = converted(tmp_path, data)
    check_parquet(out, {"a": ("int64", [1, 2, 3])})


def test_detected_by_name_and_content(tmp_path):
    for name in ("d.ndjson", "d.jsonl", "data"):
        out = converted(tmp_path, lines(RECORDS[:2]), name=name)
        assert manifest(out)["sources"][0]["format"] == "jsonl"
    for kind in ("gz", "bz2", "xz", "zst"):
        out = converted(tmp_path, lines(RECORDS), name="c.jsonl", kind=kind)
        check_parquet(out, expected(RECORDS))
    out = converted(tmp_path, lines(RECORDS[:2]), "--input-format", "jsonl", name="d.txt")
    assert manifest(out)["sources"][0]["format"] == "jsonl"


def test_stdin(tmp_path):
    out = str(tmp_path / "out")
    r = lovecraft("convert", "-", "-o", out, "--to", "parquet", "--input-format", "jsonl", "-q", input=lines(RECORDS))
    assert r.exit_code == 0, r.stderr
    check_parquet(out, expected(RECORDS))


# --------------------------------------------------------------------------------------------
# the decisions
# --------------------------------------------------------------------------------------------

RFC = "RFC 8259 has no NaN or Infinity"


def test_nan_and_infinity_are_refused(tmp_path):
    for lit in ("NaN", "Infinity", "-Infinity"):
        msg = refused(tmp_path, b'{"a": 1.5}\n{"a": ' + lit.encode() + b"}\n")
        assert msg == f"Error: {{src}}, line 2, key 'a': {lit} is not JSON ({RFC}); write null for a missing value"
    # in a key --columns leaves out, nothing reads them
    out = converted(tmp_path, b'{"a": 1.5, "b": NaN}\n', "--columns", "a")
    check_parquet(out, {"a": ("float64", [1.5])})


def test_number_beyond_float64_is_refused(tmp_path):
    assert refused(tmp_path, b'{"a": 1.5}\n{"a": 1e400}\n') == (
        "Error: {src}, line 2, key 'a': 1e400 is beyond the float64 range; pass --column-type a=string to keep its text"
    )
    out = converted(tmp_path, b'{"a": 1.5}\n{"a": 1e400}\n', "--column-type", "a=string")
    check_parquet(out, {"a": ("string", ["1.5", "1e400"])})


def test_duplicate_keys_last_wins(tmp_path):
    out = converted(tmp_path, b'{"a": 1, "b": "x", "a": 2}\n{"a": 3, "b": "y"}\n')
    check_parquet(out, {"a": ("int64", [2, 3]), "b": ("string", ["x", "y"])})
    assert json.loads('{"a": 1, "a": 2}') == {"a": 2}  # as Python's json (and JavaScript's JSON.parse)


def test_integers_beyond_int64(tmp_path):
    big = 2**64 + 1
    # with integers only: the column is text, every integer's digits kept exactly
    out = converted(tmp_path, f'{{"id": 1}}\n{{"id": {big}}}\n{{"id": -{big}}}\n'.encode())
    check_parquet(out, {"id": ("string", ["1", str(big), f"-{big}"])})
    # with fractions: float64, the integer rounded as float64 rounds it
    out = converted(tmp_path, f'{{"x": 0.5}}\n{{"x": {big}}}\n'.encode())
    check_parquet(out, {"x": ("float64", [0.5, float(big)])})
    # chosen: uint64 holds it when it fits
    out = converted(tmp_path, f'{{"id": 1}}\n{{"id": {2**64 - 1}}}\n'.encode(), "--column-type", "id=uint64")
    assert manifest(out)["schema"][0]["dtype"] == "<u8"
    # int64's limits are int64
    out = converted(tmp_path, f'{{"id": {2**63 - 1}}}\n{{"id": {-(2**63)}}}\n'.encode())
    check_parquet(out, {"id": ("int64", [2**63 - 1, -(2**63)])})


BIG_NULL = (
    "integers beyond +-2**53 and null values (or missing keys): float64, which would hold the nulls as NaN, "
    "cannot hold those integers exactly; pass --column-type id=string to keep them as text"
)


def test_nulls_in_an_integer_column(tmp_path):
    out = converted(tmp_path, b'{"n": 1}\n{"n": null}\n{}\n{"n": 4}\n')
    check_parquet(out, {"n": ("float64", [1.0, math.nan, math.nan, 4.0])})
    assert (
        refused(tmp_path, b'{"id": 9007199254740993}\n{"id": null}\n')
        == f"Error: {{src}}, line 2, key 'id': {BIG_NULL}"
    )
    assert refused(tmp_path, b'{"id": 9007199254740993}\n{"x": 1}\n') == f"Error: {{src}}, line 2, key 'id': {BIG_NULL}"
    out = converted(tmp_path, b'{"id": 9007199254740993}\n{"id": null}\n', "--column-type", "id=string")
    check_parquet(out, {"id": ("string", ["9007199254740993", ""])})
    # 2**53 itself is exact
    out = converted(tmp_path, b'{"id": 9007199254740992}\n{"id": null}\n')
    check_parquet(out, {"id": ("float64", [2.0**53, math.nan])})


def test_nulls_in_other_columns(tmp_path):
    data = lines([{"b": True, "s": "x", "l": [1], "t": ["x"]}, {"b": None, "s": None, "l": None, "t": None}, {}])
    out = converted(tmp_path, data)
    check_parquet(
        out,
        {
            "b": ("float64", [1.0, math.nan, math.nan]),
            "s": ("string", ["x", "", ""]),
            "l": ("sequence<int64>", [[1], [], []]),
            "t": ("list<string>", [["x"], [], []]),
        },
    )
    out = converted(tmp_path, b'{"l": [1, null, 2]}\n{"l": [null]}\n{"k": null}\n')
    check_parquet(
        out, {"l": ("sequence<float64>", [[1.0, math.nan, 2.0], [math.nan], []]), "k": ("float64", [math.nan] * 3)}
    )


def test_mixed_kinds_widen_as_csv_does(tmp_path):
    out = converted(tmp_path, b'{"a": 1, "b": true}\n{"a": 2.5, "b": 1}\n{"a": "x", "b": null}\n{"a": 1.50}\n')
    check_parquet(out, {"a": ("string", ["1", "2.5", "x", "1.50"]), "b": ("string", ["true", "1", "", ""])})


def test_shapes_that_are_refused(tmp_path):
    cases = {
        b'{"a": [{"b": 1}]}\n': "line 1, key 'a': a list of objects: only lists of numbers, of strings or of booleans become columns; leave the key out with --columns",
        b'{"a": [[1], [2]]}\n': "line 1, key 'a': a list of lists: only lists of numbers, of strings or of booleans become columns; leave the key out with --columns",
        b'{"a": [1, "x"]}\n': "line 1, key 'a': lists mixing strings and numbers or booleans; leave the key out with --columns",
        b'{"a": [1]}\n{"a": [true]}\n': "line 2, key 'a': lists mixing booleans and numbers; leave the key out with --columns",
        b'{"a": {"b": 1}}\n{"a": 5}\n': "line 2, key 'a': a number, where earlier lines hold an object; give the key one shape, or leave it out with --columns",
        b'{"a": 5}\n{"a": {"b": 1}}\n': "line 2, key 'a': an object, where earlier lines hold numbers; give the key one shape, or leave it out with --columns",
        b'{"a": 5}\n{"a": [1]}\n': "line 2, key 'a': an array, where earlier lines hold numbers; give the key one kind of value, or leave it out with --columns",
        b'{"a.b": 1, "a": {"b": 2}}\n': "line 1, key 'a.b': two keys make this column name (a key holding dots, and nested keys); rename one of them, or leave it out with --columns",
    }  # fmt: skip
    for data, msg in cases.items():
        assert refused(tmp_path, data) == f"Error: {{src}}, {msg}", data
    # leaving the key out
    out = converted(tmp_path, b'{"a": [{"b": 1}], "c": 1}\n', "--columns", "c")
    check_parquet(out, {"c": ("int64", [1])})


def test_lines_that_are_refused(tmp_path):
    cases = {
        b'{"a": 1}\n{"a": \n{"a": 3}\n': "line 2: not valid JSON (Expecting value at character 7); fix the line",
        b'{"a": 1}{"a": 2}\n': "line 1: not valid JSON (Extra data at character 9); fix the line",
        b'{"a": 1}\n[1]\n': "line 2: an array, not an object: each line of a JSON Lines input holds one object; fix the line (an input where no line holds an object is read as one column 'value')",
        b'{"a": 1}\n5\n': "line 2: a number, not an object: each line of a JSON Lines input holds one object; fix the line (an input where no line holds an object is read as one column 'value')",
        b'{"a": "x"}\n{"a": "b\xffd"}\n': "line 2: invalid UTF-8 (invalid start byte at byte 9 of the line); fix the file or pass --errors replace",
        b'{"a": "x"}\n{"a": "\\ud800"}\n': "line 2, key 'a': a \\u escape names a lone surrogate (half of a character), which is not text; fix the file or pass --errors replace",
        b'[\n  {"a": 1}\n]\n': "line 1: not valid JSON (Expecting value at character 2); this looks like a JSON array, not JSON Lines: pass --input-format json (or name the file .json)",
        b'{\n  "a": 1\n}\n': "line 1: not valid JSON (Expecting property name enclosed in double quotes at character 2); this looks like one JSON document over many lines, not JSON Lines: write one object per line (e.g. jq -c '.[]')",
        b'{"a": 1, }\n': "line 1: not valid JSON (Expecting property name enclosed in double quotes at character 10); fix the line",
    }  # fmt: skip
    for data, msg in cases.items():
        assert refused(tmp_path, data) == f"Error: {{src}}, {msg}", data


def test_errors_replace(tmp_path):
    out = converted(tmp_path, b'{"a": "x"}\n{"a": "b\xffd"}\n{"a": "\\ud800z"}\n', "--errors", "replace")
    check_parquet(out, {"a": ("string", ["x", "b\ufffdd", "\ufffdz"])})


def test_empty_inputs(tmp_path):
    assert refused(tmp_path, b"") == "Error: {src}: empty input (no records); check the file"
    assert refused(tmp_path, b"\n \n\r\n") == "Error: {src}: empty input (no records); check the file"
    assert (
        refused(tmp_path, b"{}\n{}\n")
        == "Error: {src}: no record has a key (every line is {}); there is nothing to convert"
    )


def test_long_line_refused_within_the_budget(tmp_path):
    data = b'{"a": "x"}\n{"a": "' + b"y" * (3 << 20) + b'"}\n'
    assert refused(tmp_path, data, "--max-memory", "16MiB") == (
        "Error: {src}, line 2: a line longer than 1048576 bytes; raise --max-memory (a line must fit in 1/32 of it)"
    )
    out = converted(tmp_path, data, "--max-memory", "256MiB")
    check_parquet(out, {"a": ("string", ["x", "y" * (3 << 20)])})


# --------------------------------------------------------------------------------------------
# types over the whole input; --column-type; --columns
# --------------------------------------------------------------------------------------------


def _big(n: int, late: dict, at: int) -> bytes:
    recs = [{"a": i, "s": f"s{i}", "m": {"k": i % 3}} for i in range(n)]
    recs[at].update(late)
    return lines(recs)


def test_widened_after_the_first_megabytes(tmp_path):
    n = 120_000  # ~5 MB: several pieces, the changes far past the first records
    data = _big(n, {"a": 2.5, "late": ["x"], "m": {"k": None}, "s": 7}, 100_000)
    out = converted(tmp_path, data)
    recs = [json.loads(x) for x in data.splitlines()]
    want = expected([{k: v for k, v in r.items() if k != "s"} for r in recs])
    check_parquet(out, {"a": want["a"], "s": ("string", [str(r["s"]) for r in recs])} | want)


def test_column_types(tmp_path):
    data = b'{"a": 1, "b": 2, "c": true, "d": 1.50, "e": 7}\n{"a": 2, "b": 3.5, "c": false, "d": "x", "e": null}\n'
    out = converted(
        tmp_path, data, "--column-type", "a=int8", "--column-type", "b=float32", "--column-type", "c=bool",
        "--column-type", "d=string", "--column-type", "e=float64", to="hdf5",
    )  # fmt: skip
    got = read_back(out, "hdf5")
    assert got["a"].dtype == np.int8 and got["a"].tolist() == [1, 2]
    assert got["b"].dtype == np.float32 and got["b"].tolist() == [2.0, 3.5]
    assert got["c"].tolist() == [True, False] and got["d"] == ["1.50", "x"]
    assert got["e"][0] == 7 and np.isnan(got["e"][1])
    cases = {
        ("a=int8", b'{"a": 1}\n{"a": 300}\n'): "line 2, key 'a': 300 does not fit int8; fix the value or choose another --column-type",
        ("a=int32", b'{"a": 1}\n{"a": 1.5}\n'): "line 2, key 'a': 1.5 is not a valid int32; fix the value or choose another --column-type",
        ("a=int32", b'{"a": 1}\n{"a": null}\n'): "line 2, key 'a': null (or a missing key) where --column-type says int32; give it a value, or pass --column-type a=float64 to read nulls as NaN",
        ("a=bool", b'{"a": true}\n{"a": "yes"}\n'): 'line 2, key \'a\': "yes" is not a valid bool; fix the value or choose another --column-type',
        ("a=float32", b'{"a": 1}\n{"a": 1e300}\n'): "line 2, key 'a': 1e300 does not fit float32; choose --column-type float64",
    }  # fmt: skip
    for (ct, data), msg in cases.items():
        assert refused(tmp_path, data, "--column-type", ct) == f"Error: {{src}}, {msg}", ct
    # a 300 met by the fast parser (after the first records) is placed on its line
    data = lines([{"a": i % 100} for i in range(20_000)] + [{"a": 300}])
    assert refused(tmp_path, data, "--column-type", "a=int8") == (
        "Error: {src}, line 20001, key 'a': 300 does not fit int8; fix the value or choose another --column-type"
    )


def test_columns_reads_only_those_keys(tmp_path):
    data = lines([{"text": "a", "meta": {"lang": "en", "x": [{"deep": 1}]}, "junk": NAN_FREE}] * 3)
    out = converted(tmp_path, data, "--columns", "meta.lang,text")
    check_parquet(out, {"meta.lang": ("string", ["en"] * 3), "text": ("string", ["a"] * 3)})
    assert [f["name"] for f in manifest(out)["schema"]] == ["meta.lang", "text"]
    assert refused(tmp_path, data, "--columns", "txt", code=2) == (
        "Error: --columns: no column 'txt' in {src}; columns in the first records are text, meta, junk"
    )
    # a key the first records do not hold is found further on
    recs = [{"a": i} for i in range(10_000)] + [{"a": 1, "rare": "here"}]
    out = converted(tmp_path, lines(recs), "--columns", "a,rare")
    check_parquet(out, {"a": ("int64", [r["a"] for r in recs]), "rare": ("string", [""] * 10_000 + ["here"])})
    # a top-level key holding a dot
    out = converted(tmp_path, b'{"a.b": 1, "c": 2}\n', "--columns", "a.b")
    check_parquet(out, {"a.b": ("int64", [1])})


NAN_FREE = [1, "mixed", {"not": "read"}]


# --------------------------------------------------------------------------------------------
# both parsers give the same columns
# --------------------------------------------------------------------------------------------

INT64 = st.integers(-(2**63), 2**63 - 1)
SAFE = st.integers(-(2**53), 2**53)
FLOATS = st.floats(allow_nan=False, allow_infinity=False) | st.just(-0.0) | st.just(5e-324)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)


@st.composite
def tables(draw):
    """Records whose keys each hold one kind of value, some null or missing."""
    n = draw(st.integers(1, 12))
    keys = draw(
        st.lists(st.sampled_from(["a", "b", "c d", "é", "n", "long_key_name"]), min_size=1, max_size=4, unique=True)
    )
    cols = {}
    for k in keys:
        kind = draw(st.sampled_from(["int", "float", "text", "bool", "ints", "texts", "nested"]))
        nulls = draw(st.booleans())
        if kind == "int":
            vals = st.lists(SAFE if nulls else INT64, min_size=n, max_size=n)
        elif kind == "float":
            vals = st.lists(FLOATS, min_size=n, max_size=n)
        elif kind == "text":
            vals = st.lists(TEXT, min_size=n, max_size=n)
        elif kind == "bool":
            vals = st.lists(st.booleans(), min_size=n, max_size=n)
        elif kind == "ints":
            vals = st.lists(st.lists(INT64, max_size=4), min_size=n, max_size=n)
        elif kind == "texts":
            vals = st.lists(st.lists(TEXT, max_size=3), min_size=n, max_size=n)
        else:
            vals = st.lists(st.fixed_dictionaries({"x": SAFE, "y": TEXT}), min_size=n, max_size=n)
        col = draw(vals)
        if nulls:
            holes = draw(st.lists(st.sampled_from(["null", "missing", "value"]), min_size=n, max_size=n))
            col = [None if h == "null" else "MISSING" if h == "missing" else v for v, h in zip(col, holes, strict=True)]
        cols[k] = col
    records = [
        {k: cols[k][i] for k in keys if not (isinstance(cols[k][i], str) and cols[k][i] == "MISSING")} for i in range(n)
    ]
    if all(not r for r in records):
        records[0]["zz"] = 1
    return records


def _dup_first_key(line: str) -> str:
    """The same record with its first key written twice (the fast parser refuses that line)."""
    rec = json.loads(line)
    if not rec:
        return line
    k = next(iter(rec))
    return "{" + json.dumps(k) + ": " + json.dumps(rec[k]) + ", " + line[1:]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables())
def test_round_trip_and_both_parsers_agree(tmp_path, records):
    """Generated records round-trip into Parquet as the rules say (read by the fast parser, the
    types inferred by the exact one); written with a duplicated key on every line, which only the
    exact parser reads, they give the same table."""
    import pyarrow.parquet as pq

    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    rows = text.split("\n")[:-1]  # (not splitlines: U+0085 and U+2028 are no line ends in JSON Lines)
    out = converted(tmp_path, text.encode())
    check_parquet(out, expected([json.loads(x) for x in rows]))
    fast = pq.read_table(out)
    out = converted(tmp_path, "".join(_dup_first_key(x) + "\n" for x in rows).encode())
    exact = pq.read_table(out)
    assert fast.schema.equals(exact.schema)
    for name in fast.column_names:
        assert _same(fast.column(name).to_pylist(), exact.column(name).to_pylist()), name
