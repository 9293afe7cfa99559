"""nst/JSONTestSuite (../shared/vectors/json-test-suite, read SOURCE.txt there), each text as a
one-line JSON Lines input.

* y_ texts (valid JSON) without a raw newline convert, with the values ``json`` reads, except the
  shapes no column holds (refused with one line, as the README says): lists of lists, lists of
  objects, lists mixing kinds, and a record with no key. A text that is not an object is the
  column ``value`` (an input where no line holds an object). The two y_ texts with raw newlines
  are one value over several lines, not JSON Lines: refused at line 1.
* n_ texts (invalid JSON) are refused with one line naming line 1, except three that hold no
  record at all and are refused as empty inputs: the empty text, a lone space, and a lone UTF-8
  BOM (a BOM at the start of a file is skipped). The n_ texts with raw newlines
  (n_array_newlines_unclosed, n_array_unclosed_with_new_lines, n_string_unescaped_newline) are
  refused at line 1 too: their first line is already invalid.
* i_ texts (implementation-defined) never crash: they convert, or are refused with one line
  (numbers beyond the float64 range, lone surrogate escapes, invalid UTF-8 are refused).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import VECTORS, leftovers, lovecraft
from tests.inputs.test_jsonl import check_parquet, expected

SUITE = os.path.join(VECTORS, "json-test-suite", "test_parsing")
FILES = sorted(os.listdir(SUITE)) if os.path.isdir(SUITE) else []

SHAPES = {  # y_ texts that are valid JSON but no column holds them
    "y_array_arraysWithSpaces.json": "key 'value': a list of lists: only lists of numbers, of strings or of booleans become columns; leave the key out with --columns",
    "y_array_heterogeneous.json": "key 'value': a list of objects: only lists of numbers, of strings or of booleans become columns; leave the key out with --columns",
    "y_object_long_strings.json": "key 'x': a list of objects: only lists of numbers, of strings or of booleans become columns; leave the key out with --columns",
}  # fmt: skip
NO_RECORD = {"n_single_space.json", "n_structure_UTF8_BOM_no_data.json", "n_structure_no_data.json"}


def _line(name: str) -> bytes:
    with open(os.path.join(SUITE, name), "rb") as f:
        data = f.read()
    return data if data.endswith(b"\n") else data + b"\n"


def _run(tmp_path, name: str):
    src = str(tmp_path / (name + "l"))
    with open(src, "wb") as f:
        f.write(_line(name))
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "--input-format", "jsonl", "-q")
    return r, src, out


@pytest.fixture(autouse=True)
def _suite():
    if not FILES:
        pytest.skip(f"../shared/vectors/json-test-suite not found at {SUITE}")


@pytest.mark.parametrize("name", [n for n in FILES if n.startswith("y_")] or ["none"])
def test_valid_texts(tmp_path, name):
    text = _line(name)
    r, src, out = _run(tmp_path, name)
    if b"\n" in text[:-1]:  # one value over several lines: not a JSON Lines input
        assert r.exit_code == 1 and r.stderr.startswith(f"Error: {src}, line 1: not valid JSON (")
        return
    if name in SHAPES:
        assert (r.exit_code, r.stderr) == (1, f"Error: {src}, line 1, {SHAPES[name]}\n")
        return
    value = json.loads(text)
    if value == {}:
        assert (r.exit_code, r.stderr) == (
            1,
            f"Error: {src}: no record has a key (every line is {{}}); there is nothing to convert\n",
        )
        return
    assert r.exit_code == 0, r.stderr
    check_parquet(out, expected([value if isinstance(value, dict) else {"value": value}]))


@pytest.mark.parametrize("name", [n for n in FILES if n.startswith("n_")] or ["none"])
def test_invalid_texts(tmp_path, name):
    r, src, out = _run(tmp_path, name)
    assert r.exit_code == 1 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    if name in NO_RECORD:
        assert r.stderr == f"Error: {src}: empty input (no records); check the file\n"
    else:
        assert r.stderr.startswith(f"Error: {src}, line 1"), r.stderr
    assert not os.path.exists(out) and leftovers(tmp_path) == []


@pytest.mark.parametrize("name", [n for n in FILES if n.startswith("i_")] or ["none"])
def test_implementation_defined_texts(tmp_path, name):
    r, src, out = _run(tmp_path, name)
    assert r.exit_code in (0, 1)
    if r.exit_code:
        assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"Error: {src}"), r.stderr
        assert not os.path.exists(out)
    assert leftovers(tmp_path) == []
