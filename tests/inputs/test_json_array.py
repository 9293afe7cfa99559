"""JSON array input (a ``.json`` file holding ``[{...}, {...}]``, like ``vega_datasets``' cars.json):
read element by element in bounded memory, checked against ``json.load`` of the same file and
read back with pyarrow; what is not one array is refused in one line naming the element or byte."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lovecraft_convert.errors import InputError
from lovecraft_convert.inputs.jsonarray import ArrayLines
from tests.conftest import lovecraft, write

CARS = [
    {"Name": "chevrolet chevelle malibu", "Miles_per_Gallon": 18, "Cylinders": 8, "Horsepower": 130,
     "Year": "1970-01-01", "Origin": "USA"},
    {"Name": "citroen ds-21 pallas", "Miles_per_Gallon": None, "Cylinders": 4, "Horsepower": 115,
     "Year": "1970-01-01", "Origin": "Europe"},
    {"Name": "toyota \"corona\" mark ii [x], {y}\\", "Miles_per_Gallon": 24, "Cylinders": 4, "Horsepower": 95,
     "Year": "1970-01-01", "Origin": "Japan"},
]  # fmt: skip


class Pieces(io.RawIOBase):
    """A stream that hands out its bytes in the piece sizes given (as a decompressor might)."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.sizes, self.pos = data, sizes or [7], 0

    def read(self, n: int = -1) -> bytes:
        k = self.sizes[self.pos % len(self.sizes)] if self.pos < len(self.data) else 0
        out = self.data[self.pos : self.pos + min(n, max(1, k))]
        self.pos += len(out)
        return out

    def raw_count(self) -> int:
        return self.pos


def _lines(data: bytes, sizes: list[int]) -> list:
    out = ArrayLines(Pieces(data, sizes), "t.json")
    text = b"".join(iter(lambda: out.read(5), b""))
    return [json.loads(line) for line in text.split(b"\n") if line.strip()]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    elements=st.lists(json_values, max_size=6),
    indent=st.sampled_from([None, 1, 4]),
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    ascii_only=st.booleans(),
)
def test_array_lines_give_each_element(elements, indent, sizes, ascii_only):
    """Whatever the elements (strings with quotes, backslashes, brackets, commas), the layout and
    the piece sizes, each element comes out on a line of its own, equal to itself."""
    data = json.dumps(elements, indent=indent, ensure_ascii=ascii_only).encode()
    assert _lines(data, sizes) == elements


@settings(max_examples=300, deadline=None)
@given(
    elements=st.lists(
        st.dictionaries(st.text('\\"[]{},: a\n', max_size=3), st.text('\\"[]{},: a\n\t', max_size=12), max_size=3),
        max_size=5,
    ),
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=3),
)
def test_escapes_and_brackets_inside_strings_split_anywhere(elements, sizes):
    """Runs of backslashes, escaped quotes and brackets in keys and values, cut between any two bytes."""
    data = json.dumps(elements).encode()
    assert _lines(data, sizes) == elements


def test_cars_json_converts_as_json_load_reads_it(tmp_path):
    src = write(tmp_path / "cars.json", json.dumps(CARS * 50, indent=2).encode())
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr
    rows = pq.read_table(out).to_pylist()
    want = json.loads(Path(src).read_text())
    assert len(rows) == len(want) == 150
    for got, w in zip(rows, want, strict=True):
        for k, v in w.items():
            assert got[k] == v or (v is None and math.isnan(got[k]))
    m = json.loads(Path(out, "_manifest.json").read_text())
    assert m["sources"][0]["format"] == "json"
    r = lovecraft("verify", out, "--against", src)
    assert r.exit_code == 0, r.stdout + r.stderr


@pytest.mark.parametrize("name", ["cars.json.gz", "cars", "cars.data"])
def test_compressed_and_by_content(tmp_path, name):
    data = b"\xef\xbb\xbf  \n" + json.dumps(CARS, indent=1).encode()
    src = write(tmp_path / name, data, "gz" if name.endswith(".gz") else None)
    out = str(tmp_path / "out")
    r = lovecraft("shard", src, "-o", out, "--to", "parquet", "--num-shards", "2", "--workers", "2", "-q")
    assert r.exit_code == 0, r.stderr
    assert [x["Name"] for x in pq.read_table(out).to_pylist()] == [c["Name"] for c in CARS]


def test_scalars_and_lists_are_one_column(tmp_path):
    src = write(tmp_path / "v.json", b"[1, 2.5,\n 3]")
    out = str(tmp_path / "out")
    assert lovecraft("convert", src, "-o", out, "--to", "parquet", "-q").exit_code == 0
    assert pq.read_table(out).to_pylist() == [{"value": 1.0}, {"value": 2.5}, {"value": 3.0}]


def test_a_json_file_of_lines_is_read_as_json_lines(tmp_path):
    src = write(tmp_path / "l.json", b'{"a": 1}\n{"a": 2}\n')
    out = str(tmp_path / "out")
    assert lovecraft("convert", src, "-o", out, "--to", "parquet", "-q").exit_code == 0
    assert pq.read_table(out).to_pylist() == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize(
    "data, message",
    [
        (b"[1, 2,]", "{src}, element 3: empty (a comma with no value before it); remove the stray comma"),
        (b"[,1]", "{src}, element 1: empty (a comma with no value before it); remove the stray comma"),
        (b"[1,,2]", "{src}, element 2: empty (a comma with no value before it); remove the stray comma"),
        (b"[1, 2] [3]", "{src}, byte 8: data after the end of the JSON array; a .json input holds one array; "
                        "for one value per line pass --input-format jsonl"),
        (b'[{"a": 1},\n {"a": 2', "{src}: the JSON array is not closed (it ends inside element 2); "
                                 "the file is truncated; re-create it"),
        (b'"just a string"', "{src}: not a JSON array (it starts with '\"just a string\"'); a JSON array starts "
                             "with '['; for one value per line pass --input-format jsonl"),
        (b'[{"a": "two\nlines"}]', "{src}, element 1: a line break inside a string (not valid JSON); write it as \\n"),
        (b'[{"a": 1}, {"a": }]', "{src}, element 2: not valid JSON (Expecting value at character 8); fix the line"),
        (b"[]", "{src}: empty input (no records); check the file"),
    ],
)  # fmt: skip
def test_broken_arrays_are_refused_in_one_line(tmp_path, data, message):
    src = write(tmp_path / "bad.json", data)
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet")
    assert r.exit_code == 1
    assert r.stderr == "Error: " + message.format(src=src) + "\n"
    assert not (tmp_path / "out").exists()


def test_an_element_longer_than_the_limit_is_refused_as_it_arrives(tmp_path):
    big = json.dumps([{"a": 1}, {"text": "x" * (3 << 20)}]).encode()
    src = write(tmp_path / "big.json", big)
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet", "--max-memory", "32MiB")
    assert r.exit_code == 1
    assert r.stderr == (
        f"Error: {src}, element 2: an element longer than 1048576 bytes; "
        "raise --max-memory (an element must fit in 1/32 of it)\n"
    )


def test_json_lines_asked_for_an_array_says_what_it_is(tmp_path):
    src = write(tmp_path / "cars.json", json.dumps(CARS, indent=2).encode())
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet", "--input-format", "jsonl")
    assert r.exit_code == 1
    assert r.stderr == (
        f"Error: {src}, line 1: not valid JSON (Expecting value at character 2); this looks like a JSON array, "
        "not JSON Lines: pass --input-format json (or name the file .json)\n"
    )


def test_direct_errors_of_the_converter():
    with pytest.raises(InputError) as e:
        _lines(b"   ", [3])
    assert str(e.value) == "t.json: not a JSON array (no '['); pass --input-format jsonl or csv"


def test_bucket_takes_the_text_of_a_json_array(tmp_path):
    docs = [{"id": i, "text": "w" * (1 + i % 40)} for i in range(300)]
    src = write(tmp_path / "docs.json", json.dumps(docs, indent=1).encode())
    out = str(tmp_path / "b")
    r = lovecraft("bucket", src, "-o", out, "--to", "parquet", "--num-buckets", "3", "-q")
    assert r.exit_code == 0, r.stderr
    t = pq.read_table(out)
    got = sorted(
        bytes(x[:n]).decode()
        for x, n in zip(t.column("tokens").to_pylist(), t.column("length").to_pylist(), strict=True)
    )
    assert got == sorted(d["text"] for d in docs)


def test_long_arrays_of_numbers():
    """Many elements without a quote or bracket in one chunk (counted at once, not one by one)."""
    values = [i * 0.5 for i in range(5000)] + [True, None, -7]
    assert _lines(json.dumps(values).encode(), [1 << 20]) == values
    with pytest.raises(InputError) as e:
        _lines(b"[1, 2," + b" 3," * 100 + b" ,4]", [1 << 20])
    assert str(e.value) == "t.json, element 103: empty (a comma with no value before it); remove the stray comma"
